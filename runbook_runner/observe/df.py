"""Parser for ``df``: GNU ``--output=...`` (with ``-B1``), POSIX ``-P``, the default, ``-h``.

Columns are read by their header, never by position; the size columns' header names
the block size (``1B-blocks``, ``1K-blocks``, ``1024-blocks``, ``512-blocks``), so every
size comes out in bytes whatever the flags. ``-h``/``-H`` sizes (``252G``) are read
with their suffix, binary unless the command says ``-H``/``--si``: prefer ``-B1``,
which is exact. The last column takes the rest of the line (a mount point with spaces). A header in
another language is refused: run ``LC_ALL=C df ...``.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal, InvalidOperation

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import Filesystem

# header word -> field (GNU --output names, POSIX -P, BusyBox, BSD)
_COLUMNS = {
    "Filesystem": "filesystem",
    "Type": "fstype",
    "Inodes": "inodes",
    "IUsed": "inodes_used",
    "iused": "inodes_used",
    "IFree": "inodes_free",
    "ifree": "inodes_free",
    "IUse%": "inodes_use_pct",
    "%iused": "inodes_use_pct",
    "Size": "size_bytes",
    "Used": "used_bytes",
    "Avail": "available_bytes",
    "Available": "available_bytes",
    "Use%": "use_pct",
    "Capacity": "use_pct",
    "File": "file",
    "Mounted on": "mounted_on",
}
_BLOCKS = re.compile(r"^(?P<n>\d+)(?P<unit>[KMGTPE]?)(?P<i>i?B?)-blocks$")
_HUMAN = re.compile(r"^(?P<num>\d+(?:[.,]\d+)?)(?P<prefix>[BKMGTPE]?)$")
_POWERS = {"": 0, "B": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_SIZES = {"size_bytes", "used_bytes", "available_bytes"}
_COUNTS = {"inodes", "inodes_used", "inodes_free"}
_PERCENT = {"use_pct", "inodes_use_pct"}


def _block_size(word: str) -> int | None:
    match = _BLOCKS.match(word)
    if match is None:
        return None
    base = 1000 if match["i"] == "B" and match["unit"] else 1024  # "1kB-blocks" is SI
    return int(match["n"]) * int(base ** _POWERS[match["unit"]])


def _header(line: str) -> tuple[list[str], int | None]:
    """Field names of the header, and the block size its size column names."""
    words = line.replace("Mounted on", "Mounted\0on").split()
    fields, block = [], None
    for word in (w.replace("\0", " ") for w in words):
        size = _block_size(word)
        if size is not None:
            fields.append("size_bytes")
            block = size
        elif word in _COLUMNS:
            fields.append(_COLUMNS[word])
        else:
            raise ParseError(
                f"unexpected df column {word[:40]!r}; use df -B1 --output=... or df -P "
                "(in another language? run LC_ALL=C df)"
            )
    if len(set(fields)) != len(fields):
        raise ParseError(f"df's header repeats a column: {line[:80]!r}")
    return fields, block


def _si(command: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return "-H" in words or "--si" in words


def _size(token: str, block: int | None, si: bool, what: str) -> int | None:
    if token == "-":  # noqa: S105 (no value: a dash, not a password)
        return None
    if token.isdigit() and len(token) <= 30:
        return int(token) * (block or 1) if block is not None else int(token)
    match = _HUMAN.match(token)
    if match is None or len(token) > 30 or block is not None:
        raise ParseError(f"df {what}: {token[:40]!r} is not a size")
    try:
        value = Decimal(match["num"].replace(",", "."))
    except InvalidOperation:
        raise ParseError(f"df {what}: {token[:40]!r} is not a size") from None
    return int(value * (1000 if si else 1024) ** _POWERS[match["prefix"]])


def _count(token: str, what: str) -> int | None:
    if token == "-":  # noqa: S105 (no value: a dash, not a password)
        return None
    if not token.isdigit() or len(token) > 30:
        raise ParseError(f"df {what}: {token[:40]!r} is not a count")
    return int(token)


def _percent(token: str, what: str) -> int | None:
    if token == "-":  # noqa: S105 (no value: a dash, not a password)
        return None
    if not token.endswith("%") or not token[:-1].isdigit() or len(token) > 5:
        raise ParseError(f"df {what}: {token[:40]!r} is not a percentage")
    return int(token[:-1])


def parse_df(text: str, command: str = "df") -> tuple[Filesystem, ...]:
    """One :class:`Filesystem` per line of ``df`` output, sizes in bytes."""
    lines = [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParseError("df printed nothing (not even its header)")
    fields, block = _header(lines[0])
    human = "size_bytes" in fields and block is None
    si = human and _si(command)
    rows: list[str] = []
    for line in lines[1:]:
        # Old df wraps a long device name onto a line of its own: join it to the next.
        if rows and len(rows[-1].split()) == 1 and fields[0] == "filesystem":
            rows[-1] = rows[-1] + " " + line.strip()
        else:
            rows.append(line)
    result = []
    for line in rows:
        cells = line.split(None, len(fields) - 1)
        if len(cells) != len(fields):
            raise ParseError(
                f"df line has {len(cells)} values for {len(fields)} columns: {line[:80]!r}"
            )
        values: dict[str, object] = {}
        for name, cell in zip(fields, cells, strict=True):
            label = name.removesuffix("_bytes")
            if name in _SIZES:
                values[name] = _size(cell, block, si, label)
            elif name in _COUNTS:
                values[name] = _count(cell, label)
            elif name in _PERCENT:
                values[name] = _percent(cell, label)
            else:
                values[name] = cell
        result.append(Filesystem(**values))  # type: ignore[arg-type]
    return tuple(result)
