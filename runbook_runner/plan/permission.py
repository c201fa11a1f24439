"""The engine's last word before a destructive command: which of a step's items it may
touch, from the latest ownership verdicts (plan/ownership.py). Pure.

Only *ours and broken* processes are signalled; no GPU that another owner (or a healthy
server) uses is reset; a subject's unit is stopped only when its server is broken, GPU
services only as units; no node-wide rung runs while another owner is on the node unless
the operator gave the gate.

"Cannot tell" holds back only what it could reach: a holder whose owner or health cannot
be told keeps every action that could reach it from running (a signal to it, a reset of a
GPU it holds, and every node-wide rung: a driver reload, stopping the GPU services, a
reboot) and nothing else. A per-GPU reset of a GPU it does not hold, and a signal to a
process proven the subject's, go ahead; what was held back is named, whose it is, why,
and the command a person runs to look at it (:class:`LeftAlone`). A node-wide rung cannot
be scoped: the step is blocked, and the run stops before it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe.state import GpuProcess, ProcessOwner
from runbook_runner.plan.fabric import Reach, item_minor
from runbook_runner.plan.ownership import INFRASTRUCTURE_UNITS, OURS, Disposition, Owner
from runbook_runner.runbook import Subject


@dataclass(frozen=True)
class LeftAlone:
    """One thing a step kept its hands off: what, whose, why, and how a person looks at it."""

    what: str  # "PID 7001 (python3 train.py)", "GPU /dev/nvidia5"
    whose: str  # its owner class and the evidence for it
    why: str  # why it was left alone (not ours, healthy, cannot tell ...)
    look: str = ""  # the command a person runs to look at it
    cannot_tell: bool = False  # left alone because its owner or health cannot be told

    def said(self) -> str:
        look = f" (look: {self.look})" if self.look else ""
        return f"{self.what}: {self.whose}: {self.why}{look}"


def look_command(pid: int | None) -> str:
    """What a person runs to see who a process is: its user, start and command, its cgroup."""
    if pid is None:
        return ""
    return f"ps -o pid,user,lstart,args -p {pid}; cat /proc/{pid}/cgroup"


@dataclass(frozen=True)
class Permission:
    """What a destructive step may act on: the items allowed, the ones left alone (with
    why: said, not an error), and what blocks the step (a node-wide rung that cannot be
    scoped past a holder nobody can attribute, or a gate)."""

    allowed: tuple[Any, ...]
    left_alone: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    held_back: tuple[LeftAlone, ...] = ()  # left_alone, as records (left_alone is their said())


def permitted(
    subject: Subject,
    affects: str | None,
    items: Sequence[Any],
    owners: Sequence[ProcessOwner],
    *,
    allow_node_wide: bool = False,
    stops: bool = True,
    reach: Callable[[int], Reach] | None = None,
) -> Permission:
    """Which of a destructive step's items it may act on, from the latest classification.

    process: only PIDs classified ours or orphaned ours and broken ('act');
    gpu: no GPU that a process left alone (another owner's, a healthy server, one whose
    owner cannot be told) holds;
    service: a unit of the subject only if its instance is broken, infrastructure units
    (stopped as units, as NVIDIA documents) unless a holder nobody can attribute is on
    the node (``stops``: the step stops them; starting them again is never held back),
    nothing else;
    node: nothing while another owner's process is on the node, unless the gate is given,
    and nothing while a holder nobody can attribute is on it, whatever the gate.
    A holder whose owner or health cannot be told holds back only what would reach it.
    ``reach`` (a GPU reset's step): what a reset of a GPU reaches (plan/fabric.py): a GPU
    whose reset reaches one that is left alone is left alone too, and named with it.
    """
    by_pid: dict[int, list[ProcessOwner]] = {}
    for row in owners:
        if row.pid is not None:
            by_pid.setdefault(row.pid, []).append(row)
    allowed: list[Any] = []
    left: list[str] = []
    blocked: list[str] = []
    if affects == "node":
        others = _others_on_node(owners)
        if others and not allow_node_wide:
            left += others  # what held the rung back is left alone, and said so
            blocked.append(
                "a node-wide action while processes that are not ours (or that are healthy) "
                "use the node: " + "; ".join(others) + " (rerun with --allow-node-wide to "
                "act anyway, once their owners agree)"
            )
        unknown = _cannot_tell(owners)
        if unknown:
            blocked.append("cannot tell who holds: " + "; ".join(unknown))
        return Permission(tuple(items) if not blocked else (), tuple(left), tuple(blocked))
    held: list[LeftAlone] = []
    reaching: list[_ReachesEveryGpu] = []
    for item in items:
        if item is None:
            allowed.append(item)
            continue
        verdict: LeftAlone | _ReachesEveryGpu | str | None
        if affects in (None, "process") and getattr(item, "pid", None) is not None:
            verdict = _for_pid(item.pid, by_pid)
        elif affects == "gpu" and item_minor(item) is not None:
            verdict = _for_gpu(item_minor(item), owners)
            if verdict is None and reach is not None:
                verdict = _for_reach(item_minor(item), reach, owners)
        elif affects == "service" and _unit(item):
            verdict = _for_unit(subject, _unit(item), owners, stops)
        else:
            verdict = None
        if verdict is None:
            allowed.append(item)
        elif isinstance(verdict, LeftAlone):
            held.append(verdict)
            left.append(verdict.said())
        elif isinstance(verdict, _ReachesEveryGpu):
            reaching.append(verdict)
        else:
            blocked.append(verdict)
    if reaching:
        units = ", ".join(r.unit for r in reaching)
        holders = dict.fromkeys(u for r in reaching for u in r.unknown)  # each said once
        blocked.append(
            f"stopping {units} reaches every GPU; cannot tell who holds: " + "; ".join(holders)
        )
    return Permission(tuple(allowed), tuple(left), tuple(blocked), tuple(held))


def _row_said(row: ProcessOwner) -> str:
    return f"PID {row.pid} ({(row.command or '?')[:60]})"


def _whose(row: ProcessOwner) -> str:
    return f"{row.owner or 'unclassified'}: {row.evidence or 'no evidence'}"


def _unit(item: Any) -> str:
    for name in ("unit", "text"):
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value if value.endswith((".service", ".scope")) else f"{value}.service"
    return ""


def _for_pid(pid: int, by_pid: Mapping[int, list[ProcessOwner]]) -> LeftAlone | None:
    rows = by_pid.get(pid)
    if not rows:
        return LeftAlone(
            f"PID {pid}",
            "not among the classified processes",
            "not signalled: its owner cannot be told",
            look_command(pid),
            cannot_tell=True,
        )
    row = rows[0]
    if row.disposition == Disposition.ACT:
        return None
    cannot = row.disposition == Disposition.CANNOT_TELL
    return LeftAlone(
        _row_said(row),
        _whose(row),
        f"not signalled: {row.reason}",
        look_command(pid),
        cannot_tell=cannot,
    )


def _for_gpu(minor: int | None, owners: Sequence[ProcessOwner]) -> LeftAlone | None:
    rows = [r for r in owners if r.minor_number == minor]
    cannot = [r for r in rows if r.disposition == Disposition.CANNOT_TELL]
    if cannot:
        r = cannot[0]
        return LeftAlone(
            f"GPU /dev/nvidia{minor}",
            f"held by {_row_said(r)}, {_whose(r)}",
            f"not reset: {r.reason}",
            look_command(r.pid),
            cannot_tell=True,
        )
    kept = [
        r for r in rows if r.disposition == Disposition.LEAVE and r.owner != Owner.INFRASTRUCTURE
    ]
    if kept:
        r = kept[0]
        return LeftAlone(
            f"GPU /dev/nvidia{minor}",
            f"used by {_row_said(r)}, {_whose(r)}",
            f"left alone: {r.reason}",
            look_command(r.pid),
        )
    return None


def _for_reach(
    minor: int | None, reach: Callable[[int], Reach], owners: Sequence[ProcessOwner]
) -> LeftAlone | None:
    """A reset of this GPU that also resets others (a fabric-wide reset, or one nobody can
    scope: every GPU of the node) is held back for any GPU it reaches that is left alone."""
    if minor is None:
        return None
    reached = reach(minor)
    held = {r.minor_number for r in owners if r.minor_number is not None}
    others = sorted((held if reached.gpus is None else reached.gpus) - {minor})
    for other in others:
        verdict = _for_gpu(other, owners)
        if verdict is not None:
            return LeftAlone(
                f"GPU /dev/nvidia{minor}",
                f"its reset also resets {verdict.what}, {verdict.whose}",
                f"not reset: {reached.why}",
                verdict.look,
                cannot_tell=verdict.cannot_tell,
            )
    return None


@dataclass(frozen=True)
class _ReachesEveryGpu:
    """A GPU service whose stop reaches every GPU, beside holders nobody can attribute: the
    step is blocked (the units of one step share one reason, said once)."""

    unit: str
    unknown: tuple[str, ...]


def _for_unit(
    subject: Subject, unit: str, owners: Sequence[ProcessOwner], stops: bool
) -> LeftAlone | _ReachesEveryGpu | str | None:
    """None: allowed; a LeftAlone: this unit is kept; otherwise the step is blocked."""
    if unit in INFRASTRUCTURE_UNITS or unit.removesuffix(".service") + ".service" in (
        INFRASTRUCTURE_UNITS
    ):
        unknown = _cannot_tell(owners) if stops else []
        if unknown:
            # Stopping a GPU service reaches every GPU of the node (persistence, monitoring,
            # the fabric): a node-wide rung, which cannot be scoped past such a holder.
            return _ReachesEveryGpu(unit, tuple(unknown))
        return None
    if not subject.unit_matches(unit):
        return LeftAlone(
            f"unit {unit}", "not the subject's", "left alone", f"systemctl status {unit}"
        )
    rows = [r for r in owners if r.unit == unit]
    if any(r.disposition == Disposition.LEAVE for r in rows):
        r = next(r for r in rows if r.disposition == Disposition.LEAVE)
        return LeftAlone(
            f"unit {unit}", _whose(r), f"left alone: {r.reason}", f"systemctl status {unit}"
        )
    if any(r.disposition == Disposition.CANNOT_TELL for r in rows):
        r = next(r for r in rows if r.disposition == Disposition.CANNOT_TELL)
        return LeftAlone(
            f"unit {unit}",
            _whose(r),
            f"not stopped: {r.reason}",
            f"systemctl status {unit}",
            cannot_tell=True,
        )
    return None


def _others_on_node(owners: Sequence[ProcessOwner]) -> list[str]:
    """Each holder a node-wide rung would reach but may not; the processes left alone for
    one same reason (a healthy server's eight workers) in one entry."""
    seen: set[int] = set()
    groups: dict[tuple[str, str], list[ProcessOwner]] = {}
    for r in owners:
        holds = r.minor_number is not None or bool(r.node_wide)
        if r.pid is None or not holds or r.pid in seen:
            continue
        if r.owner == Owner.ANOTHER_OWNER or (
            r.owner in OURS and r.disposition == Disposition.LEAVE
        ):
            seen.add(r.pid)
            groups.setdefault((r.reason or "", r.evidence or ""), []).append(r)
    said = []
    for (reason, evidence), rows in groups.items():
        first = (rows[0].command or "?")[:60]
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        pids = ", ".join(str(r.pid) for r in rows)
        said.append(f"PID{'s' if more else ''} {pids} ({first}{more}): {reason} ({evidence})")
    return said


def _cannot_tell(owners: Sequence[ProcessOwner]) -> list[str]:
    seen: dict[int, str] = {}
    for r in owners:
        if r.pid is not None and r.disposition == Disposition.CANNOT_TELL and r.pid not in seen:
            seen[r.pid] = (
                f"PID {r.pid} ({(r.command or '?')[:60]}): {r.reason} (look: {look_command(r.pid)})"
            )
    return list(seen.values())


def unseen_instance_users(
    processes: Sequence[GpuProcess], owners: Sequence[ProcessOwner]
) -> list[str]:
    """The processes nvidia-smi lists in a MIG instance that no holder record is: whose they
    are cannot be told, and a node-wide rung would reach them (NVIDIA's reset needs the GPU
    idle, and its GPU and compute instances do not survive it: nvidia-smi(1) -r, the MIG
    user guide)."""
    known = {r.pid for r in owners if r.pid is not None}
    seen: dict[int, str] = {}
    for p in processes:
        if p.pid is None or p.pid in known or p.pid in seen:
            continue
        seen[p.pid] = (
            f"PID {p.pid} ({(p.process_name or '?')[:60]}) in GPU instance "
            f"{p.gpu_instance_id} of GPU {p.gpu_bus_id or '?'} (look: nvidia-smi -q -d PIDS; "
            f"{look_command(p.pid)})"
        )
    return list(seen.values())


def held_back(owners: Sequence[ProcessOwner]) -> tuple[LeftAlone, ...]:
    """Every holder no step may touch, once each: another owner's, a healthy server's, one
    whose owner or health cannot be told (GPU infrastructure is not listed: it is stopped
    as a unit when a rung needs it). For a run's verdict: what was left alone, whose, why,
    and how to look at it."""
    seen: dict[int, LeftAlone] = {}
    for r in owners:
        if r.pid is None or r.pid in seen or r.owner == Owner.INFRASTRUCTURE:
            continue
        if r.disposition not in (Disposition.LEAVE, Disposition.CANNOT_TELL):
            continue
        gpus = sorted(
            {x.minor_number for x in owners if x.pid == r.pid and x.minor_number is not None}
        )
        on = f" on GPU {', '.join(f'/dev/nvidia{g}' for g in gpus)}" if gpus else ""
        seen[r.pid] = LeftAlone(
            _row_said(r) + on,
            _whose(r),
            r.reason or "",
            look_command(r.pid),
            cannot_tell=r.disposition == Disposition.CANNOT_TELL,
        )
    return tuple(seen.values())
