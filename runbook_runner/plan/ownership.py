"""Ownership: which processes are the runbook's subject's, and which of them are broken.

Kubernetes acts on an object only through the controller named in its owner reference;
systemd knows a unit's processes by its cgroup, whatever they renamed themselves to;
Slurm knows a job's by the job's cgroup. Here a process is classified from the same
records, read from the host (``observe/proctree.py``):

- **ours**: in a system unit the subject names, or its command line is the subject's
  launcher or worker (a name, outranked by a Slurm job's, a pod's or a user's own unit's
  cgroup), or it descends from such a process (workers that renamed themselves);
- **orphaned ours**: a subject's worker whose launcher is gone (reparented to PID 1 or a
  subreaper): the remains of a dead instance;
- **infrastructure**: NVIDIA's GPU services, by their system unit or installed program,
  never by a name (plan/evidence.py): never signalled, stopped only as a unit;
- **another owner's**: anything else whose cgroup names an owner (another unit, a
  container, a Slurm job, another login session or a user's own unit), or what else does
  (plan/evidence.py);
- **unknown**: a holder nothing names an owner for (fuser lists it and ps does not, or
  its cgroup says nothing).

Each verdict carries its evidence. A subject's instance is *broken* on evidence only:
its health endpoint fails or times out (probed on the port its own command line gives,
else the kind's default), its own metrics show requests waiting and no token generated
over the window (livelocked behind a 200), one of its processes is in D or Z state, or its
launcher is gone. A healthy instance is left alone; one whose health cannot be told, or an
MPS client whose daemon cannot be asked, is not acted on. plan/permission.py turns these
verdicts into what a destructive step may touch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan.evidence import (
    INFRASTRUCTURE_UNITS,
    another_owner,
    describe_owner,
    doomed,
    infrastructure,
    mps_client,
    mps_unasked,
    ray,
    told_otherwise,
    visible_devices,
)
from runbook_runner.plan.health import (
    Health,
    Probe,
    ProbeResult,
    UnitProbe,
    judge_metrics,
    judge_probe,
    judge_unit,
    launcher_port,
    probe_of,
    unit_probes,
)
from runbook_runner.runbook import Subject
from runbook_runner.status import Word

__all__ = [
    "INFRASTRUCTURE_UNITS",
    "Disposition",
    "Health",
    "Owner",
    "Probe",
    "ProbeResult",
    "UnitProbe",
    "Word",
    "classify",
    "judge_metrics",
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


def _first_pass(subject: Subject, table: dict[int, _Process]) -> None:
    """Owner classes from the records alone (health comes later)."""
    for process in table.values():
        facts = process.facts
        why, other = _membership(subject, facts), another_owner(facts)
        if why and other:
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = f"another owner's: {other}, which outranks its name ({why})"
        elif why:
            process.owner, process.evidence, process.member = Owner.OURS, why, True
        elif infrastructure(facts):
            process.owner, process.evidence = Owner.INFRASTRUCTURE, infrastructure(facts)
    listed = {pid: process.facts for pid, process in table.items()}
    for pid, process in table.items():
        if process.owner is not Owner.UNKNOWN:  # told above
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
        elif ray(listed, pid, chain):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = ray(listed, pid, chain)
        elif not facts.in_ps and facts.in_ps is not None:
            process.owner = Owner.UNKNOWN
            process.evidence = (
                "fuser lists it and ps does not (another PID namespace, or it just exited): "
                "its owner cannot be told"
            )
        elif describe_owner(facts):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = f"another owner's: {describe_owner(facts)}"
        elif told_otherwise(listed, pid, chain):
            process.owner = Owner.ANOTHER_OWNER
            process.evidence = f"another owner's: {told_otherwise(listed, pid, chain)}"
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
    # process's parent): its members are told by the unit's own cgroup path, and it is
    # keyed by its launcher, else by its lowest PID.
    units: dict[str, list[_Process]] = {}
    for process in table.values():
        unit, path = process.facts.unit or "", process.facts.cgroup or ""
        if process.owner is Owner.OURS and subject.unit_matches(unit):
            units.setdefault(path[: path.find(f"/{unit}") + len(unit) + 1], []).append(process)
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
        if process.owner is not Owner.INFRASTRUCTURE:
            process.evidence += mps_client(process.facts)
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
        where = describe_owner(top) or f"user {top.user}"
        process.evidence = (
            f"a server of the same kind run by user {top.user} ({where}), not the subject's: "
            f"the subject runs in {', '.join(str(u) for u in units)} as "
            f"{', '.join(sorted(str(u) for u in unit_users))}"
        )


def health_port(
    subject: Subject, table: Mapping[int, _Process], instance: int
) -> tuple[int | None, str]:
    """The port to ask an instance's health on, and how it was told, from its launcher only
    (the instance's top process, else its lowest-PID launcher): see health.launcher_port."""
    members = sorted(
        (p for p in table.values() if p.instance == instance),
        key=lambda p: (p.facts.pid != instance, p.facts.pid or 0),
    )
    launchers = [p for p in members if subject.launcher_matches(p.facts.command or "")]
    return launcher_port(subject, (launchers[0] if launchers else table[instance]).facts)


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
        if port is not None:
            wanted.append(probe_of(subject, pid, port))
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
        verdict = _disposition(subject, table, process, health, asked, restarts or {})
        unasked = mps_unasked(process.facts) if verdict[0] is Disposition.ACT else ""
        verdicts[pid] = (Disposition.CANNOT_TELL, unasked, *verdict[2:]) if unasked else verdict
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
        evidence = process.evidence + visible_devices(record, held.get(record.pid, ()))
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


def _starting(
    subject: Subject,
    root: ProcessOwner,
    members: Sequence[_Process],
    probe: ProbeResult,
    port: int | None,
) -> tuple[Disposition, str, str, int | None]:
    """A live launcher whose port is closed: starting, or broken on evidence.

    Starting is not for ever: past the startup grace its closed port is broken; sooner,
    a launch whose own sizing cannot fit the host is doomed (evidence.doomed), and a
    launcher whose workers are all gone (older than the seconds a kind takes to start
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
    doom = doomed(root.command or "", root.host_memory_bytes)
    if doom:
        return Disposition.ACT, f"broken: {probe.detail}, {doom}", str(Health.FAILING), port
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
