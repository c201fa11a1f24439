"""Parser for ``systemctl show [-p PROP,...] UNIT``: one ``Key=value`` per line.

Property names become fields (``ActiveState`` -> ``active_state``); ``[not set]``,
``infinity`` on a size and empty values are ``None``. One unit per observation: the
blank line ``systemctl show`` puts between units is refused, as is any line without ``=``.
"""

from __future__ import annotations

import dataclasses

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import UnitProperties, snake

_INTEGERS = {"main_pid", "nrestarts", "exec_main_status", "memory_current_bytes"}
_RENAMED = {"memory_current": "memory_current_bytes"}


def parse_show(text: str) -> UnitProperties:
    declared = {f.name for f in dataclasses.fields(UnitProperties) if not f.metadata.get("hidden")}
    lines = [ln.rstrip("\r") for ln in text.strip("\n").split("\n")]
    if not any(ln.strip() for ln in lines):
        raise ParseError("systemctl show printed nothing")
    values: dict[str, object] = {}
    extra: list[tuple[str, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ParseError("systemctl show printed several units: observe one unit at a time")
        key, equals, raw = line.partition("=")
        if not equals or not key or not key.replace("_", "").isalnum():
            raise ParseError(f"line {number} is not Key=value: {line[:80]!r}")
        name = _RENAMED.get(snake(key), snake(key))
        value = None if raw in ("", "[not set]") else raw
        if name in declared:
            if name in _INTEGERS and value is not None:
                if value == "infinity":
                    value = None
                elif not value.isdigit() or len(value) > 30:
                    raise ParseError(f"{key}: expected a number, got {value[:40]!r}")
                else:
                    values[name] = int(value)
                    continue
            values[name] = value
        elif value is not None:
            extra.append((name, value))
    return UnitProperties(**values, extra=tuple(extra))  # type: ignore[arg-type]
