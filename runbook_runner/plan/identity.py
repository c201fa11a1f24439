"""What an approved plan's target *is*, so that a later look can tell whether it moved.

Pure. A PID is the same process only while its command line, its user and its age agree
(a PID handed to a new process is younger than the old one was); a GPU is the same GPU
while its UUID and bus id agree and nobody new holds it; a file is the same file while
its size and owner agree and it is not younger than it was. Anything else is a move, and
an approved plan stops before acting on a target that moved (terraform's "the world
changed since the plan").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook_runner.observe.state import Gpu, ProcessOwner, ShmSegment
from runbook_runner.plan.fabric import GpuGroup
from runbook_runner.runbook import Step
from runbook_runner.safetext import visible

AGE_SLACK_S = 5  # ages are whole seconds read at different moments


@dataclass(frozen=True)
class Target:
    """One thing an action acts on: what it is, how it is named, and what identifies it."""

    kind: str  # process, gpu, gpus (reset together), file, unit, item
    key: str  # the PID, index, path or name
    text: str  # as a confirmation names it (host text escaped)
    record: str = ""  # the observed record's type (ProcessOwner, Gpu, ShmSegment, ...)
    fields: Mapping[str, Any] = field(default_factory=dict)  # its plain observed fields


def plain_fields(item: Any) -> dict[str, Any]:
    """An item's plain fields (what a journal line can hold, a resume can match on and a
    saved plan identifies a target by)."""
    if not dataclasses.is_dataclass(item) or isinstance(item, type):
        return {}
    return {
        f.name: value
        for f in dataclasses.fields(item)
        if isinstance(value := getattr(item, f.name), str | int | float | bool)
    }


def _text(item: Any) -> str:
    named = getattr(item, "target", None)
    text = str(named()) if callable(named) else str(getattr(item, "describe", lambda: item)())
    return visible(text, lines=False, tabs=False)


UNIT_FIELDS = ("unit", "id")


def named_by(step: Step) -> str | None:
    """The item field a step's command names (``{{ item.unit }}`` -> 'unit'): what the
    step acts on is that, whatever record the item is."""
    if step.run is None:
        return None
    fields = [p.name[5:] for p in step.run.placeholders if p.name.startswith("item.")]
    return fields[0] if fields else None


def target(item: Any, named: str | None = None) -> Target:
    """The plan's name for ``item`` and the fields that identify it; ``named``: the field
    the step's command names, when it is a unit (a process's unit is stopped, not it)."""
    fields = plain_fields(item)
    if named in UNIT_FIELDS and fields.get(named):
        unit = str(fields[named])
        text = visible(f"unit {unit} (for {_text(item)})", lines=False, tabs=False)
        return Target("unit", unit, text, type(item).__name__, fields)
    if isinstance(item, Gpu):
        key, kind = str(item.index), "gpu"
    elif isinstance(item, GpuGroup):  # GPUs one reset command names together
        key, kind = item.index, "gpus"
    elif isinstance(item, ShmSegment):
        key, kind = str(item.path), "file"
    elif getattr(item, "pid", None) is not None:
        key, kind = str(item.pid), "process"
    elif fields.get("unit") or fields.get("id"):
        key, kind = str(fields.get("unit") or fields.get("id")), "unit"
    else:
        key, kind = _text(item), "item"
    return Target(kind, key, _text(item), type(item).__name__, fields)


def fingerprint(tgt: Target, holders: Mapping[int, Sequence[str]]) -> dict[str, Any]:
    """What must still agree for ``tgt`` to be the same thing: saved with the plan."""
    f = tgt.fields
    if tgt.kind == "process":
        return _some(f, "command", "process_name", "user", "age_s")
    if tgt.kind == "gpu":
        found = _some(f, "uuid", "pci_bus_id")
        minor = f.get("minor_number", f.get("index"))
        found["holders"] = sorted(holders.get(int(minor), ())) if minor is not None else []
        return found
    if tgt.kind == "gpus":
        minors = [int(m) for m in str(f.get("minor_numbers", "")).split(",") if m.isdigit()]
        return {"holders": sorted({h for m in minors for h in holders.get(m, ())})}
    if tgt.kind == "file":
        return _some(f, "size_bytes", "owner", "age_s")
    return {}


def _some(fields: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {n: fields[n] for n in names if fields.get(n) is not None}


def gpu_holders(records: Iterable[ProcessOwner]) -> dict[int, list[str]]:
    """Per GPU (its minor number), who holds it: 'PID command (owner)', infrastructure left
    out (a GPU daemon holds every GPU, and restarting it moves nothing)."""
    found: dict[int, set[str]] = {}
    for row in records:
        if row.minor_number is None or row.owner == "infrastructure":
            continue
        said = f"{row.pid} {(row.command or '?')[:80]} ({row.owner or 'unclassified'})"
        found.setdefault(row.minor_number, set()).add(visible(said, lines=False, tabs=False))
    return {minor: sorted(names) for minor, names in found.items()}


def moved(kind: str, key: str, was: Mapping[str, Any], now: Mapping[str, Any] | None) -> str | None:
    """Why a saved target is no longer what was approved; None when it still is.

    ``now`` is the target's fingerprint on the new look, None when it is not there (a
    process that is gone, a file removed: nothing is done to it, which moves nothing)."""
    if now is None:
        return None
    name = {"process": "PID", "gpu": "GPU", "gpus": "GPUs", "file": "file", "unit": "unit"}.get(
        kind, kind
    )
    for field_name in (
        "command",
        "process_name",
        "user",
        "uuid",
        "pci_bus_id",
        "owner",
        "size_bytes",
    ):
        if field_name in was and now.get(field_name) != was[field_name]:
            return (
                f"{name} {key}: {field_name.replace('_', ' ')} was {was[field_name]!r}, "
                f"now {now.get(field_name)!r}"
            )
    age = now.get("age_s")
    if "age_s" in was and isinstance(age, int | float) and age + AGE_SLACK_S < was["age_s"]:
        what = "another process" if kind == "process" else "a new file"
        return f"{name} {key} is now {what} (younger than the one in the plan)"
    if kind in ("gpu", "gpus"):
        new = sorted(set(now.get("holders", ())) - set(was.get("holders", ())))
        if new:
            return f"GPU {key} is now also held by " + "; ".join(new)
    return None
