"""Parser for ``free`` output: procps-ng 4.x and 3.3.x, old procps, BusyBox.

The numbers ``free`` prints carry no unit: the unit comes from the flags the
command was run with, so :func:`units_from_command` reads them and
:func:`parse_free` takes the result. Everything comes out in bytes.

Columns are read by header name, never by position, and the "used" column is
taken as the host printed it (its meaning changed between versions), except on
old procps/BusyBox where the ``-/+ buffers/cache`` line gives used and
available without the page cache.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from decimal import Decimal

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import Memory

KIB = 1024


@dataclass(frozen=True)
class FreeUnits:
    """How to read the numbers: a multiplier, and whether -h suffixes are SI."""

    multiplier: int = KIB
    human: bool = False
    si: bool = False


_BINARY_FLAGS = {
    "-b": 1,
    "--bytes": 1,
    "-k": KIB,
    "--kibi": KIB,
    "-m": KIB**2,
    "--mebi": KIB**2,
    "-g": KIB**3,
    "--gibi": KIB**3,
    "--tebi": KIB**4,
    "--pebi": KIB**5,
}
_SI_FLAGS = {"--kilo": 10**3, "--mega": 10**6, "--giga": 10**9, "--tera": 10**12, "--peta": 10**15}
# procps-ng: with --si, -k/-m/-g count in powers of 1000.
_SI_EQUIVALENT = {"-k": 10**3, "-m": 10**6, "-g": 10**9}
_TAKES_VALUE = {"-s", "-c", "--seconds", "--count"}


def units_from_command(command: str) -> FreeUnits:
    """The units a ``free`` invocation prints, from its flags (default KiB)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if "free" in words:
        words = words[words.index("free") + 1 :]
    flags: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in {"|", "||", "&&", ";"}:
            break
        elif word.startswith("--"):
            flags.append(word.split("=", 1)[0])
            skip = word in _TAKES_VALUE
        elif word.startswith("-") and len(word) > 1:
            for letter in word[1:]:
                flags.append("-" + letter)
                if "-" + letter in _TAKES_VALUE:
                    skip = word.endswith(letter)  # "-c2" carries its value, "-c" does not
                    break
    si = "--si" in flags
    multiplier = KIB
    for flag in flags:
        if flag in _BINARY_FLAGS:
            multiplier = (
                _SI_EQUIVALENT[flag] if si and flag in _SI_EQUIVALENT else (_BINARY_FLAGS[flag])
            )
        elif flag in _SI_FLAGS:
            multiplier = _SI_FLAGS[flag]
    if si and not any(f in _BINARY_FLAGS or f in _SI_FLAGS for f in flags):
        multiplier = 1000
    return FreeUnits(multiplier, human="-h" in flags or "--human" in flags, si=si)


_HUMAN = re.compile(r"^(?P<num>\d+(?:[.,]\d+)?)(?P<prefix>[BKMGTPE]?)(?P<i>i?)$")
_POWERS = {"": 0, "B": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def _to_bytes(token: str, units: FreeUnits, where: str) -> int:
    if len(token) > 30:
        raise ParseError(f"{where}: {token[:40]!r}... is not a size free(1) prints")
    if token.lstrip("-").isascii() and token.lstrip("-").isdigit() and not units.human:
        return int(token) * units.multiplier
    match = _HUMAN.match(token)
    if match is None:
        raise ParseError(f"{where}: {token[:40]!r} is not a size free(1) prints")
    base = 1024 if match["i"] or not units.si else 1000
    # Decimal, not float: a corrupt 400-digit value must not become infinity.
    value = Decimal(match["num"].replace(",", "."))
    if match["prefix"] == "" and not units.human:
        return int(value * units.multiplier)
    return int(value * base ** _POWERS[match["prefix"]])


# Every column and row name procps-ng (3.3, 4.x), old procps and BusyBox print in the C
# locale. Anything else is most likely a translation (de: "gesamt benutzt frei",
# "Speicher:"; fr: "utilisé libre disponible"), whose columns would be read as missing.
_COLUMNS = {
    "total",
    "used",
    "free",
    "shared",
    "buff/cache",
    "buffers",
    "cache",
    "cached",
    "available",
}
_ROWS = {"Mem", "Swap", "Low", "High", "Total", "Comm", "-/+ buffers/cache", "-/+ buffers"}
LOCALE_HINT = (
    "the host printed it in another language: its locale (LANG/LC_ALL) is probably not "
    "English; run it with LC_ALL=C"
)


def _last_report(lines: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The columns and rows of the last report (``free -c N`` prints several)."""
    header_at = [i for i, line in enumerate(lines) if line.split()[:1] == ["total"]]
    if not header_at:
        raise ParseError(
            f"free output has no header line (total used free ...): {lines[0][:80]!r}; "
            + LOCALE_HINT
        )
    start = header_at[-1]
    columns = lines[start].split()
    unknown = [c for c in columns if c not in _COLUMNS]
    if unknown:
        raise ParseError(
            f"free printed columns it does not print in English ({' '.join(unknown)}); "
            + LOCALE_HINT
        )
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        label, colon, values = line.partition(":")
        if not colon:
            raise ParseError(f"unexpected line in free output: {line[:80]!r}")
        if label.strip() not in _ROWS:
            raise ParseError(f"free printed a line {label.strip()[:40]!r}:; " + LOCALE_HINT)
        rows[label.strip()] = values.split()
    return columns, rows


def parse_free(text: str, units: FreeUnits | None = None) -> Memory:
    """Parse what ``free`` printed into :class:`Memory` (bytes)."""
    units = units or FreeUnits()
    lines = [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParseError("free printed nothing")
    columns, rows = _last_report(lines)
    if "Mem" not in rows:
        raise ParseError("free output has no 'Mem:' line")
    if len(rows["Mem"]) != len(columns):
        raise ParseError(
            f"'Mem:' line has {len(rows['Mem'])} values for {len(columns)} columns "
            f"({' '.join(columns)})"
        )
    mem = {c: _to_bytes(v, units, f"Mem {c}") for c, v in zip(columns, rows["Mem"], strict=True)}
    buff_cache = mem.get("buff/cache")
    if buff_cache is None:
        # "free -w" and old layouts split buffers from cache; old BusyBox has no cache.
        parts = [mem[c] for c in ("buffers", "cache", "cached") if c in mem]
        buff_cache = sum(parts) if parts else None
    used, available = mem.get("used"), mem.get("available")
    adjusted = rows.get("-/+ buffers/cache", rows.get("-/+ buffers"))
    if adjusted is not None:
        # Old procps and BusyBox count the page cache as used; this line does not.
        if len(adjusted) != 2:
            raise ParseError("the '-/+ buffers' line should hold two values (used, free)")
        used = _to_bytes(adjusted[0], units, "-/+ used")
        if available is None:
            available = _to_bytes(adjusted[1], units, "-/+ free")
    swap = rows.get("Swap", [])
    if swap and len(swap) != 3:
        raise ParseError(f"'Swap:' line has {len(swap)} values, expected 3")
    swap_bytes: list[int | None] = [_to_bytes(v, units, "Swap") for v in swap] or [None] * 3
    return Memory(
        total_bytes=mem.get("total"),
        used_bytes=used,
        free_bytes=mem.get("free"),
        shared_bytes=mem.get("shared"),
        buff_cache_bytes=buff_cache,
        available_bytes=available,
        swap_total_bytes=swap_bytes[0],
        swap_used_bytes=swap_bytes[1],
        swap_free_bytes=swap_bytes[2],
    )
