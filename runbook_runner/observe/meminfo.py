"""Parser for ``/proc/meminfo`` and other ``Key: value [unit]`` files (``/proc/PID/status``).

Each line is a key, a colon, and a value with an optional unit. Sizes (``kB``, which
the kernel means as KiB, and ``B``/``KiB``/``MiB``/``GiB``) come out in bytes under the
key's field name plus ``_bytes``; other whole numbers stay numbers; anything else
(``State: S (sleeping)``) is kept as text. A line without a colon is refused.
"""

from __future__ import annotations

import dataclasses
import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import MemInfo, snake

_UNITS = {
    "B": 1,
    "kB": 1024,
    "KiB": 1024,
    "KB": 1024,
    "MiB": 1024**2,
    "mB": 1024**2,
    "GiB": 1024**3,
}
_VALUE = re.compile(r"^(?P<num>\d{1,30})(?:\s+(?P<unit>[A-Za-z]+))?$")


def parse_meminfo(text: str) -> MemInfo:
    """The keys of one ``Key: value`` file as a :class:`MemInfo`."""
    declared = {f.name for f in dataclasses.fields(MemInfo) if not f.metadata.get("hidden")}
    values: dict[str, int | str] = {}
    extra: list[tuple[str, int | str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        key, colon, raw = line.partition(":")
        key = key.strip()
        if not colon or not key or " " in key or len(key) > 60:
            raise ParseError(f"line {number} is not 'Key: value': {line[:80]!r}")
        raw = raw.strip()
        match = _VALUE.match(raw)
        name = snake(key)
        value: int | str
        if match is None:
            value = raw
        elif match["unit"] is None:
            # "Umask: 0022" is octal text, not the number 22.
            value = raw if len(raw) > 1 and raw.startswith("0") else int(match["num"])
        elif match["unit"] in _UNITS:
            name, value = f"{name}_bytes", int(match["num"]) * _UNITS[match["unit"]]
        else:
            value = raw
        if isinstance(value, str) and f"{name}_bytes" in declared:
            raise ParseError(f"{key}: expected a size, got {raw[:40]!r}")
        if name in values:
            continue  # the first of a repeated key wins
        if name in declared:
            if not isinstance(value, int):
                raise ParseError(f"{key}: expected a number, got {raw[:40]!r}")
            values[name] = value
        else:
            extra.append((name, value))
        values.setdefault(name, value)
    if not values:
        raise ParseError("the file is empty: no 'Key: value' lines")
    declared_values = {k: v for k, v in values.items() if k in declared}
    return MemInfo(**declared_values, extra=tuple(extra))  # type: ignore[arg-type]
