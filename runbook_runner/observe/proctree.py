"""Parser for the process-owner listing: every process with its place in the process tree
and its cgroup, then which NVIDIA device files each holds.

    ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args; echo '@@ fuser';
    fuser -v /dev/nvidia* 2>&1; echo '@@ end'

``-N --ppid 2`` leaves out the kernel's own threads (children of kthreadd): they hold no
device file and would only fill the output. The cgroup says who started a process, whatever it renamed itself to: a systemd unit
(``/system.slice/sglang.service``), a container (``docker-ID.scope``, ``/kubepods/...``,
``libpod-ID.scope``), a Slurm job (``/job_1234/``), a login session
(``/user.slice/user-1000.slice/session-3.scope``), a user's own unit (its service manager's
subtree, ``/user.slice/user-1000.slice/user@1000.service/app.slice/sglang.service``). cgroup
v1 lists one path per controller (``12:pids:/...,11:memory:/...``); the unified (``0::``),
the systemd and the pids hierarchies are read, in that order.

A system unit is the first ``*.service`` reached from the root through slices only, outside
``user.slice`` (``/system.slice/sglang.service``, a template's
``/system.slice/system-sglang.slice/sglang@a.service``, one given ``Slice=gpu.slice``): a
unit's processes sit in its own cgroup below its slice (systemd.slice(5)). PID 1 starts each
user's own service manager as ``user@UID.service`` under ``user.slice/user-UID.slice``, and
that manager runs "a hierarchy of its own units" below it (user@.service(5),
https://man.archlinux.org/man/user@.service.5): a ``sglang.service`` there is that user's
(``systemd-run --user --unit=sglang``), never the system's. Whatever lies below a unit's own
cgroup is that unit's (delegated to it), however it is named.

Then, for each holder of a /dev/nvidia* file (``fuser`` without ``-v`` prints only PIDs),
what else says whose it is, one ``PID KEY=VALUE`` line each (``@@ proc``): the variables
of its environment that name an owner (``SLURM_JOB_ID``, ``KUBERNETES_SERVICE_HOST``,
``RAY_RAYLET_PID`` ...) and ``CUDA_VISIBLE_DEVICES``, its ``loginuid``
(``/proc/PID/loginuid``: 4294967295 is unset), its executable (``exe``: where
``/proc/PID/exe`` points, which the process cannot rename as it can its command line) and
the root of the files bind-mounted on its
``/etc/hostname`` or ``/etc/hosts`` (``/proc/PID/mountinfo``: a container's, from its
runtime's folder). ``@@ listening`` is ``ss -ltnp`` (which PID listens on which TCP port);
``@@ mps`` the MPS control daemon's servers and their clients (``server SPID``,
``client SPID CPID``). Every one of them is data: a word, a number, never run.

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
_USER_MANAGER = re.compile(r"^user@(?P<uid>\d+)\.service$")
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
    """(kind, name) of the cgroup's owner: 'container', 'slurm-job', 'unit' (a system
    unit), 'user-unit' (a user's own), 'session', or ('', '') when the path names none (the
    root, an unknown layout)."""
    if path is None:
        return "", ""
    for pattern, engine in _CONTAINER:
        match = pattern.search(path)
        if match is not None:
            return "container", f"{engine} {match['id'][:12]}"
    job = _SLURM_JOB.search(path)
    if job is not None:
        return "slurm-job", f"job {job['id']}"
    unit = _unit_of(path)
    if unit:
        return unit
    session = _SESSION.search(path)
    if session is not None:
        return "session", f"{session['scope'].removesuffix('.scope')} of uid {session['uid']}"
    return "", ""


def _unit_of(path: str) -> tuple[str, str] | None:
    """A systemd unit's ('unit', NAME), a user's own unit's ('user-unit', 'NAME of uid N'),
    or None: the first ``*.service`` reached through slices only is the one systemd runs
    (below it is its own subtree); a user's service manager's subtree holds that user's."""
    parts = [p for p in path.split("/") if p]
    for depth, part in enumerate(parts):
        if part.endswith(".slice"):
            continue
        if not part.endswith(".service"):
            return None  # a scope, a container's or a job's folder: not a unit's
        manager = _USER_MANAGER.match(part)
        if manager is not None and parts[0] == "user.slice":
            inner = next((p for p in parts[depth + 1 :] if p.endswith(".service")), part)
            return "user-unit", f"{inner} of uid {manager['uid']}"
        if parts[0] == "user.slice":
            return None  # a service placed in a user's slice: no system unit of ours
        return "unit", part
    return None


_PROC_LINE = re.compile(r"^(?P<pid>\d+) (?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")
_VALUE_MAX = 120
_KUBERNETES = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_PORT")
_RAY = ("RAY_RAYLET_PID", "RAY_JOB_ID", "RAY_ADDRESS", "RAY_NODE_ID")
_LOGIN_UNSET = 4294967295  # (uid_t) -1: no login (a daemon started by init)
_MOUNT_OWNERS = (
    (re.compile(r"/(?:docker/)?containers/(?P<id>[0-9a-f]{12,64})(?:/|$)"), "docker"),
    (re.compile(r"/overlay-containers/(?P<id>[0-9a-f]{12,64})(?:/|$)"), "podman"),
    (re.compile(r"/kubelet/pods/(?P<id>[0-9a-f][0-9a-f-]{7,})(?:/|$)"), "kubernetes pod"),
    (re.compile(r"/sandboxes/(?P<id>[0-9a-f]{12,64})(?:/|$)"), "containerd sandbox"),
)


def container_of_mount(root: str) -> str:
    """Whose container a bind mount on /etc/hostname or /etc/hosts comes from
    ('docker 0123456789ab', 'kubernetes pod 5f1c...'), or '' for a path no runtime names."""
    for pattern, engine in _MOUNT_OWNERS:
        match = pattern.search(root)
        if match is not None:
            return f"{engine} {match['id'][:12]}"
    return ""


def proc_facts(lines: list[str]) -> dict[int, dict[str, object]]:
    """The ``@@ proc`` section: per PID, the fields of :class:`ProcessOwner` it gives."""
    facts: dict[int, dict[str, object]] = {}
    for line in lines:
        match = _PROC_LINE.match(line.rstrip("\r"))
        if match is None:
            continue
        pid, key, value = int(match["pid"]), match["key"], match["value"].strip()[:_VALUE_MAX]
        found = facts.setdefault(pid, {})
        if key == "SLURM_JOB_ID" and value:
            found["slurm_job_id"] = value
        elif key in _KUBERNETES and value:
            found.setdefault("kubernetes", f"{key}={value}")
        elif key in _RAY and value:
            found.setdefault("ray", f"{key}={value}")
        elif key == "CUDA_VISIBLE_DEVICES":
            found["cuda_visible_devices"] = value
        elif key == "loginuid" and value.isdigit() and int(value) != _LOGIN_UNSET:
            found["loginuid"] = int(value)
        elif key == "exe" and value.startswith("/"):
            found["executable"] = value
        elif key == "mount" and container_of_mount(value):
            found.setdefault("container_id", container_of_mount(value))
    return facts


def listening_ports(lines: list[str]) -> dict[int, list[int]]:
    """``ss -ltnp``: per PID, the TCP ports it listens on (lowest first)."""
    ports: dict[int, set[int]] = {}
    for line in lines:
        cells = line.split()
        if len(cells) < 6 or cells[0] != "LISTEN":
            continue
        port = cells[3].rsplit(":", 1)[-1]
        if not port.isdigit() or not 0 < int(port) < 65536:
            continue
        for pid in re.findall(r"pid=(\d+)", " ".join(cells[5:])):
            ports.setdefault(int(pid), set()).add(int(port))
    return {pid: sorted(found) for pid, found in ports.items()}


def mps_clients(lines: list[str]) -> dict[int, int]:
    """The MPS control daemon's answer: each client PID and the server PID it is a client of."""
    clients: dict[int, int] = {}
    for line in lines:
        cells = line.split()
        if len(cells) == 3 and cells[0] == "client" and cells[1].isdigit() and cells[2].isdigit():
            clients.setdefault(int(cells[2]), int(cells[1]))
    return clients


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
    return tuple(_with_evidence(records, sections))


def _with_evidence(
    records: list[ProcessOwner], sections: dict[str, list[str]]
) -> list[ProcessOwner]:
    facts = proc_facts(sections.get("proc", []))
    ports = listening_ports(sections.get("listening", []))
    clients = mps_clients(sections.get("mps", []))
    out: list[ProcessOwner] = []
    for record in records:
        pid = record.pid
        if pid is None:
            out.append(record)
            continue
        more: dict[str, object] = dict(facts.get(pid, {}))
        if pid in ports:
            more["listening"] = ",".join(str(p) for p in ports[pid])
        if pid in clients:
            more["mps_server"] = clients[pid]
        out.append(replace(record, **more) if more else record)  # type: ignore[arg-type]
    return out


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
