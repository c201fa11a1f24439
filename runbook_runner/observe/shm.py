"""Parser for the /dev/shm listing the recovery runbook prints: size, owner, age, holders.

The command prints the host's time first, then one line per file::

    1796001000
    42949672960 root 1796000100 free /dev/shm/sglang_hicache_0
    2147483648 postgres 1795914600 held /dev/shm/PostgreSQL.2131

``held``/``free`` come from ``fuser -s FILE`` (does a live process have it open or
mapped?), not from the name. A glob that matched nothing (``/dev/shm/*`` itself, with
stat failing) is no file. A name may hold spaces (the path is the rest of the line).
Anything else is a parse error: the list would not be complete.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import ShmSegment

_ROW = re.compile(
    r"^(?P<size>\d+) (?P<owner>\S+) (?P<mtime>\d+) (?P<held>held|free) (?P<path>/dev/shm/.+)$"
)


def parse_shm(text: str) -> tuple[ShmSegment, ...]:
    lines = [line.rstrip("\r") for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].strip().isdigit():
        raise ParseError("the /dev/shm listing does not start with the host's time (date +%s)")
    now = int(lines[0].strip())
    segments = []
    for line in lines[1:]:
        match = _ROW.match(line)
        if match is None:
            raise ParseError(f"not a line of the /dev/shm listing: {line[:100]!r}")
        segments.append(
            ShmSegment(
                path=match["path"],
                size_bytes=int(match["size"]),
                owner=match["owner"],
                age_s=max(0, now - int(match["mtime"])),
                held=match["held"] == "held",
            )
        )
    return tuple(segments)
