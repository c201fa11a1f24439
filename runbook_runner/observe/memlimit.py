"""Parser for a container's memory limit: cgroup v2 and v1 files, container markers, and
``df`` of /dev/shm, as the preflights print them::

    /sys/fs/cgroup/memory.max=68719476736
    /sys/fs/cgroup/memory.current=1073741824
    /sys/fs/cgroup/memory/memory.limit_in_bytes=-
    /sys/fs/cgroup/memory/memory.usage_in_bytes=-
    /.dockerenv=present
    /run/.containerenv=-
    Mounted on      1B-blocks        Avail
    /dev/shm      68719476736  68719476736

``PATH=-`` is a file that could not be read; ``present`` an empty one. cgroup v2's
``memory.max`` of ``max`` and v1's ``memory.limit_in_bytes`` at or above 2^62 (the
kernel's "no limit", 9223372036854771712 on 4 KiB pages) are no limit; where both are
set, the smaller wins. Inside a container (``/.dockerenv`` or ``/run/.containerenv``)
whose limit cannot be read at all, the limit cannot be told: a parse error, so a check
over it says "cannot tell" rather than trusting ``free``, which shows the host's memory.

The files are those of the cgroup the reading shell runs in (``/sys/fs/cgroup`` as that
shell's mount namespace shows it), not necessarily the server's: a server in another
container, or in a systemd unit with its own ``MemoryMax=``, has a limit this does not see.
The preflights say so in their messages; run them inside the server's container.
"""

from __future__ import annotations

from runbook_runner.errors import ParseError
from runbook_runner.observe import df
from runbook_runner.observe.state.limits import MemoryLimit

V2_MAX = "/sys/fs/cgroup/memory.max"
V2_CURRENT = "/sys/fs/cgroup/memory.current"
V1_LIMIT = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
V1_USAGE = "/sys/fs/cgroup/memory/memory.usage_in_bytes"
MARKERS = ("/.dockerenv", "/run/.containerenv")
FILES = (V2_MAX, V2_CURRENT, V1_LIMIT, V1_USAGE, *MARKERS)
UNLIMITED_V1 = 2**62


def _bytes(path: str, value: str | None) -> int | None:
    if value is None or value in {"-", "max"}:
        return None
    if not value.isdigit():
        raise ParseError(f"{path}: expected a number of bytes or 'max', got {value[:40]!r}")
    number = int(value)
    return None if path == V1_LIMIT and number >= UNLIMITED_V1 else number


def parse_limits(text: str) -> MemoryLimit:
    values: dict[str, str] = {}
    rest: list[str] = []
    for line in text.splitlines():
        path, equals, value = line.partition("=")
        if equals and path in FILES:
            values[path] = value.strip()
        elif line.strip():
            rest.append(line)
    if V2_MAX not in values and V1_LIMIT not in values:
        raise ParseError("no cgroup memory file was listed (expected PATH=VALUE lines)")
    in_container = any(values.get(marker, "-") != "-" for marker in MARKERS)
    limits = [
        (limit, usage, name)
        for limit, usage, name in (
            (_bytes(V2_MAX, values.get(V2_MAX)), values.get(V2_CURRENT), "cgroup v2 memory.max"),
            (
                _bytes(V1_LIMIT, values.get(V1_LIMIT)),
                values.get(V1_USAGE),
                "cgroup v1 memory.limit_in_bytes",
            ),
        )
        if limit is not None
    ]
    readable = any(values.get(path, "-") != "-" for path in (V2_MAX, V1_LIMIT))
    if in_container and not readable:
        raise ParseError(
            "inside a container whose memory limit cannot be read (neither memory.max nor "
            "memory.limit_in_bytes): the limit cannot be told"
        )
    shm_size = shm_available = None
    if rest:
        mounts = df.parse_df("\n".join(rest), "df -B1")
        shm = next((m for m in mounts if m.mounted_on == "/dev/shm"), None)  # noqa: S108
        if shm is not None:
            shm_size, shm_available = shm.size_bytes, shm.available_bytes
    if not limits:
        return MemoryLimit(
            source="no cgroup limit",
            in_container=in_container,
            shm_size_bytes=shm_size,
            shm_available_bytes=shm_available,
        )
    limit, usage_text, source = min(limits, key=lambda entry: entry[0])
    usage = _bytes(V2_CURRENT, usage_text) or 0
    return MemoryLimit(
        limit_bytes=limit,
        usage_bytes=usage,
        available_bytes=max(0, limit - usage),
        source=source,
        in_container=in_container,
        shm_size_bytes=shm_size,
        shm_available_bytes=shm_available,
    )
