"""Parser for the process-owner listing: every process with its place in the process tree
and its cgroup, then which NVIDIA device files each holds.

    ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args; echo '@@ fuser';
    fuser -v /dev/nvidia* 2>&1; echo '@@ end'

``-N --ppid 2`` leaves out the kernel's own threads (children of kthreadd): they hold no
device file and would only fill the output. The cgroup says who started a process, whatever it renamed itself to: a systemd unit
(``/system.slice/sglang.service``), a container (``docker-ID.scope``, ``/kubepods/...``,
``libpod-ID.scope``), a Slurm job (``/job_1234/``), a login session
(``/user.slice/user-1000.slice/session-3.scope``). cgroup v1 lists one path per
controller (``12:pids:/...,11:memory:/...``); the unified (``0::``), the systemd and the
pids hierarchies are read, in that order.

One record per process and GPU it holds (``/dev/nvidiaN``); a process that holds only
node-wide files (``/dev/nvidiactl``) has one record with ``node_wide``; one that holds none
has one record with neither. A PID that fuser lists and ps does not (another PID
namespace, or it exited in between) is kept, with no cgroup: nothing is known of its owner.
The records are not yet classified: see plan/ownership.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

from runbook_runner.errors import ParseError
from runbook_runner.observe import fuser
from runbook_runner.observe.state import ProcessOwner

_COLUMNS = ("PID", "PPID", "PGID", "SID", "USER", "ELAPSED", "STAT", "CGROUP", "COMMAND")
_SECTION = re.compile(r"^@@ (?P<name>[a-z]+)\s*$")
_CONTAINER = (
    (re.compile(r"docker-(?P<id>[0-9a-f]{12,64})\.scope"), "docker"),
    (re.compile(r"/docker/(?P<id>[0-9a-f]{12,64})"), "docker"),
    (re.compile(r"cri-containerd-(?P<id>[0-9a-f]{12,64})\.scope"), "containerd"),
    (re.compile(r"crio-(?P<id>[0-9a-f]{12,64})\.scope"), "cri-o"),
    (re.compile(r"libpod-(?P<id>[0-9a-f]{12,64})\.scope"), "podman"),
    (re.compile(r"/kubepods[^,;]*?/pod(?P<id>[0-9a-f_-]{8,})"), "kubernetes pod"),
)
_SLURM_JOB = re.compile(r"/job_(?P<id>\d+)(?:/|$)")
_UNIT = re.compile(r"(?:^|/)(?P<unit>[^/]+\.service)(?:/|$)")
_SESSION = re.compile(r"/user-(?P<uid>\d+)\.slice/(?:[^/]+/)*(?P<scope>session-[^/]+\.scope)")


def cgroup_path(value: str) -> str | None:
    """The one path of a ps cgroup value that names the owner, or None (kernel threads: '-')."""
    if value in {"", "-"}:
        return None
    entries = [e for e in re.split(r"[,;]", value) if e]
    paths: dict[str, str] = {}
    for entry in entries:
        parts = entry.split(":", 2)
        if len(parts) == 3:
            paths.setdefault(parts[1], parts[2])
        elif entry.startswith("/"):
            paths.setdefault("", entry)
    for controller in ("", "name=systemd", "pids", "memory", "cpu,cpuacct"):
        if controller in paths:
            return paths[controller]
    return next(iter(paths.values()), None)


def owner_of_cgroup(path: str | None) -> tuple[str, str]:
    """(kind, name) of the cgroup's owner: 'container', 'slurm-job', 'unit', 'session',
    or ('', '') when the path names none (the root, an unknown layout)."""
    if path is None:
        return "", ""
    for pattern, engine in _CONTAINER:
        match = pattern.search(path)
        if match is not None:
            return "container", f"{engine} {match['id'][:12]}"
    job = _SLURM_JOB.search(path)
    if job is not None:
        return "slurm-job", f"job {job['id']}"
    units = _UNIT.findall(path)
    if units:
        return "unit", units[-1]  # the innermost service: a unit's own sub-cgroups
    session = _SESSION.search(path)
    if session is not None:
        return "session", f"{session['scope'].removesuffix('.scope')} of uid {session['uid']}"
    return "", ""


def parse_owners(text: str) -> tuple[ProcessOwner, ...]:
    sections: dict[str, list[str]] = {"ps": []}
    current = "ps"
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        marker = _SECTION.match(line)
        if marker is not None:
            current = marker["name"]
            sections.setdefault(current, [])
            continue
        sections.setdefault(current, []).append(line)
    if "end" not in sections:
        raise ParseError("the process-owner listing was cut short (no '@@ end' line)")
    rows = [line for line in sections["ps"] if line.strip()]
    if not rows:
        raise ParseError("ps printed nothing (not even its header)")
    header = tuple(rows[0].split())
    if header != _COLUMNS:
        raise ParseError(
            f"unexpected ps columns {' '.join(header)[:120]!r}: this ps cannot report "
            "pid,ppid,pgid,sid,user,etimes,stat,cgroup,args (procps-ng 3.3 or later can)"
        )
    holders = fuser.parse_fuser("\n".join(sections.get("fuser", [])))
    held: dict[int, list[tuple[int | None, str]]] = {}
    for holder in holders:
        assert holder.pid is not None
        held.setdefault(holder.pid, []).append((holder.minor_number, holder.device or ""))
    records: list[ProcessOwner] = []
    seen: set[int] = set()
    for line in rows[1:]:
        cells = line.split(None, len(_COLUMNS) - 1)
        if len(cells) < len(_COLUMNS) - 1:
            raise ParseError(f"ps line has too few columns: {line[:80]!r}")
        if len(cells) == len(_COLUMNS) - 1:
            cells.append("")
        pid_t, ppid_t, pgid_t, sid_t, user, elapsed, stat, cgroup, command = cells
        numbers = (pid_t, ppid_t, pgid_t, sid_t, elapsed)
        if not all(n.isdigit() for n in numbers[:4]) or not (elapsed.isdigit() or elapsed == "-"):
            raise ParseError(f"ps line with a field that is not a number: {line[:80]!r}")
        pid = int(pid_t)
        seen.add(pid)
        path = cgroup_path(cgroup)
        kind, name = owner_of_cgroup(path)
        base = ProcessOwner(
            pid=pid,
            ppid=int(ppid_t),
            pgid=int(pgid_t),
            sid=int(sid_t),
            user=user,
            age_s=int(elapsed) if elapsed.isdigit() else None,
            stat=stat,
            state=stat[:1],
            cgroup=path,
            owner_kind=kind,
            owner_name=name,
            unit=name if kind == "unit" else "",
            command=command.strip(),
        )
        records += _per_device(base, held.get(pid, []))
    for pid, files in held.items():
        if pid in seen:
            continue
        first = next(h for h in holders if h.pid == pid)
        base = ProcessOwner(
            pid=pid, user=first.user, command=first.command, owner_kind="", owner_name=""
        )
        records += _per_device(base, files, listed=False)
    return tuple(records)


def _per_device(
    base: ProcessOwner, files: list[tuple[int | None, str]], listed: bool = True
) -> list[ProcessOwner]:
    minors = sorted({m for m, _ in files if m is not None})
    node_wide = any(m is None for m, _ in files)
    if minors:
        return [
            replace(
                base,
                minor_number=m,
                device=f"/dev/nvidia{m}",
                node_wide=node_wide,
                holds_gpu=True,
                in_ps=listed,
            )
            for m in minors
        ]
    device = next((d for m, d in files if m is None), None)
    return [replace(base, device=device, node_wide=node_wide, holds_gpu=False, in_ps=listed)]
