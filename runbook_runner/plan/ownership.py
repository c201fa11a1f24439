"""Ownership: which processes are the runbook's subject's, and which of them are broken.

Kubernetes acts on an object only through the controller named in its owner reference;
systemd knows a unit's processes by its cgroup, whatever they renamed themselves to;
Slurm knows a job's by the job's cgroup. Here a process is classified from the same
records, read from the host (``observe/proctree.py``):

- **ours**: in a unit the subject names, or its command line is the subject's launcher
  or worker, or it descends from such a process (workers that renamed themselves);
- **orphaned ours**: a subject's worker whose launcher is gone (reparented to PID 1 or a
  subreaper): the remains of a dead instance;
- **infrastructure**: nvidia-persistenced, the DCGM host engine and exporter, Fabric
  Manager, MPS (by unit and by executable): never signalled, stopped only as a unit;
- **another owner's**: anything else whose cgroup names an owner (another unit, a
  container, a Slurm job, another login session);
- **unknown**: a holder nothing names an owner for (fuser lists it and ps does not, or
  its cgroup says nothing).

Each verdict carries its evidence. A subject's instance is *broken* on evidence only:
its health endpoint fails or times out (probed on the port its own command line gives,
else the kind's default), one of its processes is in D or Z state, or its launcher is
gone. A healthy instance is left alone; one whose health cannot be told is not acted on.

plan/permission.py turns these verdicts into what a destructive step may touch.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan.health import (
    Health,
    Probe,
    ProbeResult,
    UnitProbe,
    judge_probe,
    judge_unit,
    unit_probes,
)
from runbook_runner.runbook import Subject
from runbook_runner.status import Word

__all__ = [
    "Disposition",
    "Health",
    "Owner",
    "Probe",
    "ProbeResult",
    "UnitProbe",
    "Word",
    "classify",
    "judge_probe",
    "judge_unit",
    "probes",
    "unit_probes",
]


class Owner(Word):
    OURS = "ours"
    ORPHANED_OURS = "orphaned-ours"
    ANOTHER_OWNER = "another-owner"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"


class Disposition(Word):
    ACT = "act"  # ours and broken: the runbook may act on it
    LEAVE = "leave"  # not ours, infrastructure, or a healthy server: left alone, said so
    CANNOT_TELL = "cannot-tell"  # stops a step that would touch it


OURS = frozenset({Owner.OURS, Owner.ORPHANED_OURS})

# NVIDIA's GPU services keep /dev/nvidia* open on every node. NVIDIA's reset documentation
# says to stop them (as services) before a reset, and start them again after.
INFRASTRUCTURE_UNITS = frozenset(
    {
        "nvidia-persistenced.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "dcgm-exporter.service",
        "nvidia-dcgm-exporter.service",
        "nvidia-fabricmanager.service",
        "nvidia-mps.service",
        "nvidia-gpu-exporter.service",
    }
)
INFRASTRUCTURE_EXECUTABLES = frozenset(
    {
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "nv-fabricmanager",
        "nvidia-fabricmanager",
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
        "nvidia_gpu_exporter",
        "nvidia-smi",
    }
)
RESTART_LOOP = 3  # automatic restarts (systemd's NRestarts) that make a crash loop
# A launcher whose port is closed may still be loading its model for this long (the
# subject's startup_grace, a runbook parameter, overrides it). Loading is slow: vLLM's
# 163-shard checkpoint took over 10 minutes (https://github.com/vllm-project/vllm/issues/35547,
# past vLLM's own 600 s engine timeout, https://github.com/vllm-project/vllm-ascend/pull/7098),
# and a 120B model's start exceeded a 1,200 s health wait
# (https://github.com/tenstorrent/tt-inference-server/issues/3657): 30 minutes by default.
STARTUP_GRACE_S = 1800
# SGLang starts its scheduler processes (sglang/srt/entrypoints/engine.py,
# _launch_subprocesses) and vLLM its engine core and workers before either loads a weight:
# a launcher this old with none of its workers alive is not loading anything.
WORKERS_START_S = 60
_ANCESTRY_LIMIT = 64  # parent chains longer than this are cut (a loop in a hostile listing)


def executable(command: str) -> str:
    first = command.split(None, 1)[0] if command.strip() else ""
    return first.rsplit("/", 1)[-1].rstrip(":")


@dataclass
class _Process:
    facts: ProcessOwner
    owner: Owner = Owner.UNKNOWN
    evidence: str = ""
    member: bool = False  # matches the subject itself (not only through an ancestor)
    instance: int | None = None


def _processes(records: Iterable[ProcessOwner]) -> dict[int, _Process]:
    table: dict[int, _Process] = {}
    for record in records:
        if record.pid is not None and record.pid not in table:
            table[record.pid] = _Process(record)
    return table


def _membership(subject: Subject, facts: ProcessOwner) -> str:
    """Why a process is itself the subject's, or ''."""
    command, unit = facts.command or "", facts.unit or ""
    if subject.unit_matches(unit):
        return f"in the subject's unit {unit} (its cgroup)"
    if subject.launcher_matches(command):
        return "the subject's launcher (command line)"
    if subject.worker_matches(command):
        return "a worker of the subject (command line)"
    return ""


def _ancestor(table: Mapping[int, _Process], pid: int) -> list[int]:
    """The parent chain above ``pid`` (nearest first), as far as the listing shows it."""
    chain: list[int] = []
    seen = {pid}
    current = table[pid].facts.ppid
    while current is not None and current not in seen and current in table:
        chain.append(current)
        seen.add(current)
        if len(chain) >= _ANCESTRY_LIMIT:
            break
        current = table[current].facts.ppid
    return chain


def _describe_owner(facts: ProcessOwner) -> str:
    kind, name = facts.owner_kind or "", facts.owner_name or ""
    if kind == "unit":
        return f"unit {name}"
    if kind == "container":
        return f"container {name}"
    if kind == "slurm-job":
        return f"Slurm {name}"
    if kind == "session":
        return f"login {name}, user {facts.user}"
    return ""


def _first_pass(subject: Subject, table: dict[int, _Process]) -> None:
    """Owner classes from the records alone (health comes later)."""
    for process in table.values():
        facts = process.facts
        unit, command = facts.unit or "", facts.command or ""
        why = _membership(subject, facts)
        if why:
            process.owner, process.evidence, process.member = Owner.OURS, why, True
            continue
        if unit in INFRASTRUCTURE_UNITS:
            process.owner, process.evidence = Owner.INFRASTRUCTURE, f"GPU service unit {unit}"
            continue
        if executable(command) in INFRASTRUCTURE_EXECUTABLES:
            process.owner = Owner.INFRASTRUCTURE
            process.evidence = f"GPU infrastructure executable {executable(command)}"
    for pid, process in table.items():
        if process.member or process.owner is Owner.INFRASTRUCTURE:
            continue
        facts = process.facts
        chain = _ancestor(table, pid)
        parent = next((p for p in chain if table[p].member), None)
        same_owner = parent is not None and (
            not facts.owner_name or facts.owner_name == table[parent].facts.owner_name
        )
        if parent is not None and same_owner:
            process.owner = Owner.OURS
            process.evidence = f"a child of the subject's PID {parent} (parent chain)"
        elif _ray(table, pid, chain):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = _ray(table, pid, chain)
        elif not facts.in_ps and facts.in_ps is not None:
            process.owner = Owner.UNKNOWN
            process.evidence = (
                "fuser lists it and ps does not (another PID namespace, or it just exited): "
                "its owner cannot be told"
            )
        elif _describe_owner(facts):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = f"another owner's: {_describe_owner(facts)}"
        elif _told_otherwise(table, pid, chain):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = f"another owner's: {_told_otherwise(table, pid, chain)}"
        else:
            process.owner = Owner.UNKNOWN
            process.evidence = (
                f"no unit, container, job or session in its cgroup ({facts.cgroup or 'none'}): "
                "its owner cannot be told"
            )
    # Instances: the topmost subject process of each parent chain.
    for pid, process in table.items():
        if process.owner is not Owner.OURS:
            continue
        root = pid
        for ancestor in _ancestor(table, pid):
            if table[ancestor].owner is Owner.OURS:
                root = ancestor
            else:
                break
        process.instance = root
    # A unit is one instance, whatever its parent chains show (systemd may be every
    # process's parent): keyed by its launcher, else by its lowest PID.
    units: dict[str, list[_Process]] = {}
    for process in table.values():
        unit = process.facts.unit or ""
        if process.owner is Owner.OURS and subject.unit_matches(unit):
            units.setdefault(unit, []).append(process)
    for members in units.values():
        launchers = [
            p.facts.pid
            for p in members
            if p.facts.pid is not None and subject.launcher_matches(p.facts.command or "")
        ]
        key = min(launchers) if launchers else min(p.facts.pid or 0 for p in members)
        for member in members:
            member.instance = key
    _other_users_servers(subject, table)
    for process in table.values():
        server = process.facts.mps_server
        if server is not None and process.owner is not Owner.INFRASTRUCTURE:
            process.evidence += (
                f"; a client of MPS server PID {server} (nvidia-cuda-mps-control "
                "get_client_list): ended by the control daemon's terminate_client, never "
                "by a signal first"
            )
    for process in table.values():
        if process.owner is not Owner.OURS or process.instance is None:
            continue
        top = table[process.instance].facts
        in_unit = subject.unit_matches(top.unit or "")
        if not in_unit and not subject.launcher_matches(top.command or ""):
            process.owner = Owner.ORPHANED_OURS
            process.evidence += (
                f"; its launcher is gone (the instance's top process has parent PID {top.ppid})"
            )


RAY_DAEMONS = frozenset({"raylet", "gcs_server"})
# sshd names a login's session process "sshd: USER@pts/N" (or "USER@notty"): what descends
# from one was started from that login.
_SSHD_LOGIN = re.compile(r"^sshd: (?P<user>[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31})@(?P<tty>\S+)")


def _told_otherwise(table: Mapping[int, _Process], pid: int, chain: Sequence[int]) -> str:
    """Where a cgroup names no owner, what else does, with where it was read, or ''.

    Each only ever proves a process *another* owner's (never the subject's: the subject's
    own processes are told by its launcher, workers and their descendants): a Slurm job's
    (SLURM_JOB_ID in its environment), a container's (its /etc/hostname bind-mounted from
    a container runtime's folder), a Kubernetes pod's (KUBERNETES_* in its environment),
    an SSH login's (a ``sshd: USER@TTY`` ancestor), a login's (its loginuid is set: the
    kernel's audit record of the login it was started from, kept through su, sudo and
    nohup).
    """
    facts = table[pid].facts
    if facts.slurm_job_id:
        return f"Slurm job {facts.slurm_job_id} (SLURM_JOB_ID in /proc/{pid}/environ)"
    if facts.container_id:
        return (
            f"container {facts.container_id} (its /etc/hostname comes from the runtime's "
            f"folder: /proc/{pid}/mountinfo)"
        )
    if facts.kubernetes:
        return f"a Kubernetes pod ({facts.kubernetes} in /proc/{pid}/environ)"
    for ancestor in chain:
        login = _SSHD_LOGIN.match(table[ancestor].facts.command or "")
        if login is not None:
            return (
                f"started from {login['user']}'s SSH login ({login['tty']}, sshd PID "
                f"{ancestor}: parent chain)"
            )
    if facts.loginuid is not None:
        return (
            f"started from the login of uid {facts.loginuid} (/proc/{pid}/loginuid), "
            f"running as {facts.user or '?'}"
        )
    return ""


def _ray(table: Mapping[int, _Process], pid: int, chain: Sequence[int]) -> str:
    """Why a process is a Ray cluster's, or '': a ``ray::`` worker (Ray names its worker
    processes ``ray::Actor.method``) or a descendant of a raylet. Ray restarts the actors it
    loses (max_restarts), as systemd restarts a unit: a signal to one is not a stop; the
    cluster is stopped by its owner (``ray stop``, or its job)."""
    command = table[pid].facts.command or ""
    raylet = next(
        (p for p in chain if executable(table[p].facts.command or "") in RAY_DAEMONS), None
    )
    if raylet is not None:
        return (
            f"a Ray cluster's: under raylet PID {raylet} (parent chain); Ray restarts its "
            "actors, so only the cluster's owner stops it (ray stop)"
        )
    if command.startswith("ray::") or executable(command) in RAY_DAEMONS:
        return (
            f"a Ray cluster's: {executable(command)[:40]}; Ray restarts its "
            "actors, so only the cluster's owner stops it (ray stop)"
        )
    if table[pid].facts.ray:
        return (
            f"a Ray cluster's: {table[pid].facts.ray} in /proc/{pid}/environ; Ray restarts "
            "its actors, so only the cluster's owner stops it (ray stop)"
        )
    return ""


def _other_users_servers(subject: Subject, table: dict[int, _Process]) -> None:
    """Where the subject runs in its units, a server of the same kind that another user
    started outside them (a login session, a container, a job) is that user's: the
    command line says its kind, not its owner."""
    ours = [p for p in table.values() if p.owner is Owner.OURS]
    unit_users = {
        p.facts.user for p in ours if subject.unit_matches(p.facts.unit or "") and p.facts.user
    }
    if not unit_users:
        return
    units = sorted({p.facts.unit or "" for p in ours if subject.unit_matches(p.facts.unit or "")})
    for process in ours:
        top = table[process.instance].facts if process.instance in table else process.facts
        if subject.unit_matches(top.unit or "") or top.user in unit_users:
            continue
        process.owner = Owner.ANOTHER_OWNER
        where = _describe_owner(top) or f"user {top.user}"
        process.evidence = (
            f"a server of the same kind run by user {top.user} ({where}), not the subject's: "
            f"the subject runs in {', '.join(str(u) for u in units)} as "
            f"{', '.join(sorted(str(u) for u in unit_users))}"
        )


def health_port(
    subject: Subject, table: Mapping[int, _Process], instance: int
) -> tuple[int | None, str]:
    """The port to ask an instance's health on, and how it was told: the ``--port`` of its
    command lines; else the one port its launcher listens on (``ss -ltnp``: a port set in
    a config file is not on the command line); else, of several, the kind's default if it
    is one of them; else the kind's default (a launcher that listens on nothing yet is
    loading). Several ports, none the default: (None, why)."""
    members = [p for p in table.values() if p.instance == instance]
    flag_only = dataclasses.replace(subject, ports=())
    for member in members:
        flagged = flag_only.port_of(member.facts.command or "")
        if flagged is not None:
            return flagged, "its --port"
    root = table[instance].facts
    default = next(
        (d for d in (subject.port_of(m.facts.command or "") for m in members) if d is not None),
        None,
    )
    listening = [int(p) for p in (root.listening or "").split(",") if p.isdigit()]
    if len(listening) == 1:
        return listening[0], "the one port its launcher listens on (ss -ltnp)"
    if listening and default in listening:
        return default, "its kind's default, one of the ports its launcher listens on (ss -ltnp)"
    if listening:
        ports = ", ".join(str(p) for p in listening)
        return None, (
            f"its launcher listens on ports {ports} (ss -ltnp), no --port says which serves "
            "its health, and none is its kind's default"
        )
    return default, "its kind's default" if default is not None else ""


def probes(subject: Subject, records: Sequence[ProcessOwner]) -> list[Probe]:
    """The health requests to make: one per live instance of the subject with a launcher."""
    if not subject.health_path:
        return []
    table = _processes(records)
    _first_pass(subject, table)
    wanted: list[Probe] = []
    for pid, process in sorted(table.items()):
        if process.owner is not Owner.OURS or process.instance != pid:
            continue
        port, _ = health_port(subject, table, pid)
        if port is None:
            continue
        url = f"http://127.0.0.1:{port}{subject.health_path}"
        seconds = f"{subject.health_timeout_s:g}"
        command = (
            f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time {seconds} {shlex.quote(url)}"
        )
        wanted.append(Probe(pid, port, url, command))
    return wanted


def classify(
    subject: Subject,
    records: Sequence[ProcessOwner],
    results: Iterable[ProbeResult] = (),
    restarts: Mapping[str, int] | None = None,
) -> tuple[ProcessOwner, ...]:
    """Every record of interest (it holds an NVIDIA device file, or it is the subject's)
    with its owner class, evidence, instance, health and disposition."""
    table = _processes(records)
    _first_pass(subject, table)
    health = {r.instance: r for r in results}
    asked = {p.instance for p in probes(subject, records)}
    verdicts: dict[int, tuple[Disposition, str, str, int | None]] = {}
    for pid, process in table.items():
        verdicts[pid] = _disposition(subject, table, process, health, asked, restarts or {})
    held: dict[int, set[int]] = {}
    for record in records:
        if record.pid is not None and record.minor_number is not None:
            held.setdefault(record.pid, set()).add(record.minor_number)
    out: list[ProcessOwner] = []
    for record in records:
        if record.pid is None:
            continue
        process = table[record.pid]
        interesting = (
            record.minor_number is not None or bool(record.node_wide) or process.owner in OURS
        )
        if not interesting:
            continue
        disposition, reason, state, port = verdicts[record.pid]
        evidence = process.evidence + _visible_devices(record, held.get(record.pid, ()))
        if process.owner in OURS and port is not None and process.instance is not None:
            how = health_port(subject, table, process.instance)[1]
            evidence += f"; its health port {port}: {how}" if how else ""
        healthy = len(
            {
                p.instance
                for p in table.values()
                if p.owner in OURS and verdicts[p.facts.pid or 0][2] == "healthy"
            }
        )
        out.append(
            dataclasses.replace(
                record,
                owner=str(process.owner),
                evidence=evidence,
                subject=process.owner in OURS,
                instance=process.instance,
                port=port,
                health=state,
                disposition=str(disposition),
                reason=reason,
                healthy_servers=healthy,
                crash_loop=reason.startswith("broken: crash-looping"),
            )
        )
    return tuple(out)


def _visible_devices(record: ProcessOwner, minors: Iterable[int]) -> str:
    """What its CUDA_VISIBLE_DEVICES says beside the device files it holds: a note for the
    record, never a verdict (CUDA numbers the GPUs it is shown in its own order, not by
    minor number). A process that holds more GPUs' files than it was shown took GPUs it
    was not given (someone set CUDA_VISIBLE_DEVICES by hand, or a child reset it)."""
    visible = record.cuda_visible_devices
    if visible is None or record.pid is None:
        return ""
    held = sorted(minors)
    shown = [v for v in visible.split(",") if v.strip()]
    files = ", ".join(f"/dev/nvidia{m}" for m in held) or "no GPU's device file"
    note = (
        f"; its CUDA_VISIBLE_DEVICES={visible[:40]} (/proc/{record.pid}/environ), it holds {files}"
    )
    if len(held) > len(shown):
        note += f": more GPUs than the {len(shown)} it was shown"
    return note


def _starting(
    subject: Subject,
    root: ProcessOwner,
    members: Sequence[_Process],
    probe: ProbeResult,
    port: int | None,
) -> tuple[Disposition, str, str, int | None]:
    """A live launcher whose port is closed: starting, or broken on evidence.

    Starting is not for ever: past the startup grace its closed port is broken; sooner,
    a launcher whose workers are all gone (older than the seconds a kind takes to start
    them) is loading nothing: broken too. Otherwise it is left to load.
    """
    age = root.age_s
    workers = [m for m in members if m.facts.pid != root.pid and m.facts.state not in {"Z", "X"}]
    grace = subject.startup_grace_s
    if age is None:
        return (
            Disposition.ACT,
            f"broken: {probe.detail}, and how long its launcher has run is not reported",
            str(Health.FAILING),
            port,
        )
    if age >= grace:
        return (
            Disposition.ACT,
            f"broken: {probe.detail}, still after {age} s: past the startup grace "
            f"of {grace:g} s (startup_grace_s)",
            str(Health.FAILING),
            port,
        )
    if not workers and age >= WORKERS_START_S:
        return (
            Disposition.ACT,
            f"broken: {probe.detail}, and none of its workers lives (up {age} s; a "
            f"launcher starts its workers within {WORKERS_START_S} s, before loading)",
            str(Health.FAILING),
            port,
        )
    live = f", {len(workers)} of its workers live" if workers else ""
    return (
        Disposition.LEAVE,
        f"starting: up {age} s, its port {port} is not open yet{live} (judged broken past "
        f"the startup grace of {grace:g} s)",
        "starting",
        port,
    )


def _disposition(
    subject: Subject,
    table: Mapping[int, _Process],
    process: _Process,
    health: Mapping[int, ProbeResult],
    asked: set[int],
    restarts: Mapping[str, int],
) -> tuple[Disposition, str, str, int | None]:
    if process.owner is Owner.INFRASTRUCTURE:
        return (
            Disposition.LEAVE,
            "GPU infrastructure: never signalled; stopped only as a unit, and started again",
            "",
            None,
        )
    if process.owner is Owner.ANOTHER_OWNER:
        return Disposition.LEAVE, "not the subject's", "", None
    if process.owner is Owner.UNKNOWN:
        return Disposition.CANNOT_TELL, process.evidence, "", None
    assert process.instance is not None
    members = [p for p in table.values() if p.instance == process.instance]
    root = table[process.instance].facts
    port, port_note = health_port(subject, table, process.instance)
    stuck = [p.facts.pid for p in members if (p.facts.state or "") in {"D", "Z"}]
    probe = health.get(process.instance)
    if probe is not None and probe.health is Health.HEALTHY:
        return (
            Disposition.LEAVE,
            f"the server is healthy: {probe.detail}",
            str(Health.HEALTHY),
            port,
        )
    if process.owner is Owner.ORPHANED_OURS:
        return (
            Disposition.ACT,
            f"broken: its launcher is gone (parent PID {root.ppid})",
            str(Health.NOT_CHECKED),
            port,
        )
    if probe is not None and probe.health is Health.FAILING and not probe.refused:
        return Disposition.ACT, f"broken: {probe.detail}", str(Health.FAILING), port
    if stuck:
        state = table[stuck[0]].facts.state if stuck[0] is not None else "D"
        return (
            Disposition.ACT,
            f"broken: PID {stuck[0]} of the instance is in {state} state",
            str(Health.NOT_CHECKED),
            port,
        )
    looping = max((restarts.get(p.facts.unit or "", 0) for p in members), default=0)
    if looping >= RESTART_LOOP:
        unit = next(p.facts.unit for p in members if restarts.get(p.facts.unit or "", 0) == looping)
        return (
            Disposition.ACT,
            f"broken: crash-looping: systemd restarted {unit} {looping} times by itself",
            str(Health.FAILING),
            port,
        )
    launcher_alive = subject.launcher_matches(root.command or "")
    if probe is not None and probe.health is Health.FAILING:
        if launcher_alive and probe.refused:
            return _starting(subject, root, members, probe, port)
        return Disposition.ACT, f"broken: {probe.detail}", str(Health.FAILING), port
    if probe is not None:
        return (
            Disposition.CANNOT_TELL,
            f"whether the server is broken cannot be told: {probe.detail}",
            str(Health.CANNOT_TELL),
            port,
        )
    if process.instance in asked:
        return (
            Disposition.CANNOT_TELL,
            "whether the server is broken cannot be told: its health was not asked",
            str(Health.CANNOT_TELL),
            port,
        )
    if not subject.health_path:
        return Disposition.ACT, "the subject declares no health check", "", port
    why = port_note or "no --port on its command line, and no default for its kind"
    return (
        Disposition.CANNOT_TELL,
        f"whether the server is broken cannot be told: no port to ask its health on ({why})",
        str(Health.CANNOT_TELL),
        port,
    )
