"""Parser for ``ps -eo pid,stat,args`` (any order; COMMAND may hold spaces)."""

from __future__ import annotations

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import HostProcess

_COLUMNS = {"PID": "pid", "STAT": "stat", "S": "stat", "COMMAND": "command", "CMD": "command"}


def parse_ps(text: str) -> tuple[HostProcess, ...]:
    """One :class:`HostProcess` per line; the command column must come last."""
    lines = [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParseError("ps printed nothing (not even its header)")
    header = lines[0].split()
    try:
        attrs = [_COLUMNS[name] for name in header]
    except KeyError as error:
        raise ParseError(
            f"unexpected ps column {error.args[0]!r}; use ps -eo pid,stat,args"
        ) from None
    if "command" in attrs and attrs[-1] != "command":
        raise ParseError("the command column must come last: ps -eo pid,stat,args")
    processes = []
    for line in lines[1:]:
        cells = line.split(None, len(attrs) - 1)
        if len(cells) < len(attrs) - ("command" in attrs):
            raise ParseError(f"ps line has too few columns: {line[:80]!r}")
        values = dict(zip(attrs, cells, strict=False))
        pid = values.get("pid")
        if pid is not None and not pid.isdigit():
            raise ParseError(f"ps PID is not a number: {pid[:20]!r}")
        processes.append(
            HostProcess(
                pid=int(pid) if pid is not None else None,
                state=values["stat"][:1] if "stat" in values else None,
                stat=values.get("stat"),
                command=values.get("command"),
            )
        )
    return tuple(processes)
