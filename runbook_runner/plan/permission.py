"""The engine's last word before a destructive command: which of a step's items it may
touch, from the latest ownership verdicts (plan/ownership.py). Pure.

Only *ours and broken* processes are signalled; no GPU that another owner (or a healthy
server) uses is reset; a subject's unit is stopped only when its server is broken, GPU
services only as units; no node-wide rung runs while another owner is on the node unless
the operator gave the gate; a holder that cannot be attributed blocks what would touch it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan.ownership import INFRASTRUCTURE_UNITS, OURS, Disposition, Owner
from runbook_runner.runbook import Subject


@dataclass(frozen=True)
class Permission:
    """What a destructive step may act on: the items allowed, the ones left alone (with
    why: said, not an error), and what blocks the step (cannot tell, or a gate)."""

    allowed: tuple[Any, ...]
    left_alone: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()


def permitted(
    subject: Subject,
    affects: str | None,
    items: Sequence[Any],
    owners: Sequence[ProcessOwner],
    *,
    allow_node_wide: bool = False,
) -> Permission:
    """Which of a destructive step's items it may act on, from the latest classification.

    process: only PIDs classified ours or orphaned ours and broken ('act');
    gpu: no GPU that a process left alone (another owner's, a healthy server) holds;
    service: a unit of the subject only if its instance is broken, infrastructure units
    (stopped as units, as NVIDIA documents), nothing else;
    node: nothing while another owner's process is on the node, unless the gate is given.
    A holder whose owner or health cannot be told blocks what would touch it.
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
            blocked.append(
                "a node-wide action while processes that are not ours (or that are healthy) "
                "use the node: " + "; ".join(others) + " (rerun with --allow-node-wide to "
                "act anyway, once their owners agree)"
            )
        unknown = _cannot_tell(owners)
        if unknown:
            blocked.append("cannot tell who holds: " + "; ".join(unknown))
        return Permission(tuple(items) if not blocked else (), (), tuple(blocked))
    for item in items:
        if item is None:
            allowed.append(item)
            continue
        if affects in (None, "process") and getattr(item, "pid", None) is not None:
            verdict = _for_pid(item.pid, by_pid)
        elif affects == "gpu" and _minor(item) is not None:
            verdict = _for_gpu(_minor(item), owners)
        elif affects == "service" and _unit(item):
            verdict = _for_unit(subject, _unit(item), owners)
        else:
            verdict = None
        if verdict is None:
            allowed.append(item)
        elif verdict[0] == "leave":
            left.append(verdict[1])
        else:
            blocked.append(verdict[1])
    return Permission(tuple(allowed), tuple(left), tuple(blocked))


def _minor(item: Any) -> int | None:
    minor = getattr(item, "minor_number", None)
    if isinstance(minor, int):
        return minor
    index = getattr(item, "index", None)
    return index if isinstance(index, int) else None


def _unit(item: Any) -> str:
    for name in ("unit", "text"):
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value if value.endswith((".service", ".scope")) else f"{value}.service"
    return ""


def _for_pid(pid: int, by_pid: Mapping[int, list[ProcessOwner]]) -> tuple[str, str] | None:
    rows = by_pid.get(pid)
    if not rows:
        return "cannot", f"PID {pid} is not among the classified processes: not signalled"
    row = rows[0]
    if row.disposition == Disposition.ACT:
        return None
    said = f"PID {pid} ({(row.command or '?')[:60]}): {row.owner}: {row.reason} ({row.evidence})"
    if row.disposition == Disposition.CANNOT_TELL:
        return "cannot", said
    return "leave", said


def _for_gpu(minor: int | None, owners: Sequence[ProcessOwner]) -> tuple[str, str] | None:
    rows = [r for r in owners if r.minor_number == minor]
    cannot = [r for r in rows if r.disposition == Disposition.CANNOT_TELL]
    if cannot:
        r = cannot[0]
        return "cannot", f"GPU /dev/nvidia{minor} is held by PID {r.pid}: {r.reason}"
    kept = [
        r for r in rows if r.disposition == Disposition.LEAVE and r.owner != Owner.INFRASTRUCTURE
    ]
    if kept:
        r = kept[0]
        return "leave", (
            f"GPU /dev/nvidia{minor} is left alone: PID {r.pid} ({(r.command or '?')[:60]}) "
            f"uses it: {r.reason} ({r.evidence})"
        )
    return None


def _for_unit(
    subject: Subject, unit: str, owners: Sequence[ProcessOwner]
) -> tuple[str, str] | None:
    if unit in INFRASTRUCTURE_UNITS or unit.removesuffix(".service") + ".service" in (
        INFRASTRUCTURE_UNITS
    ):
        return None
    if not subject.unit_matches(unit):
        return "leave", f"unit {unit} is not the subject's: left alone"
    rows = [r for r in owners if r.unit == unit]
    if any(r.disposition == Disposition.LEAVE for r in rows):
        r = next(r for r in rows if r.disposition == Disposition.LEAVE)
        return "leave", f"unit {unit} is left alone: {r.reason}"
    if any(r.disposition == Disposition.CANNOT_TELL for r in rows):
        r = next(r for r in rows if r.disposition == Disposition.CANNOT_TELL)
        return "cannot", f"unit {unit}: {r.reason}"
    return None


def _others_on_node(owners: Sequence[ProcessOwner]) -> list[str]:
    seen: dict[int, str] = {}
    for r in owners:
        holds = r.minor_number is not None or bool(r.node_wide)
        if r.pid is None or not holds or r.pid in seen:
            continue
        if r.owner == Owner.ANOTHER_OWNER or (
            r.owner in OURS and r.disposition == Disposition.LEAVE
        ):
            seen[r.pid] = f"PID {r.pid} ({(r.command or '?')[:60]}): {r.reason} ({r.evidence})"
    return list(seen.values())


def _cannot_tell(owners: Sequence[ProcessOwner]) -> list[str]:
    seen: dict[int, str] = {}
    for r in owners:
        if r.pid is not None and r.disposition == Disposition.CANNOT_TELL and r.pid not in seen:
            seen[r.pid] = f"PID {r.pid} ({(r.command or '?')[:60]}): {r.reason}"
    return list(seen.values())
