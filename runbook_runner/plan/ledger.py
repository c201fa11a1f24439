"""The ledger of a run's end: one entry per GPU, and the run's exit code from it. Pure.

A run may end with every check of its goal holding and the incident still there: a
holder it could not attribute, a server that answers ``/health`` while it makes no
progress, a launcher it judged "starting". Its checks speak only of what the run
attributed to the subject; the ledger speaks of every GPU the host reports, from the
final look, so nothing drops out of the count. Each GPU gets exactly one status:

- ``free``: at most ``idle_mib`` used and no process of the subject on it;
- ``serving``: the subject's current instance holds it and is healthy;
- ``started``: an instance of the subject that was not there at the run's first look (the
  run started its unit again) holds it, loading within its startup grace;
- ``another owner's``: only processes with positive evidence of another owner (a unit, a
  container, a Slurm job, a pod, another user's session) or GPU infrastructure hold it,
  and its memory is theirs;
- ``held by ours``: a process of the subject that is broken, starting, or whose health
  cannot be told still holds it (with why);
- ``orphaned``: more than ``idle_mib`` used, and no process but GPU infrastructure holds it;
- ``cannot tell``: a holder whose owner cannot be told, a GPU that does not answer, or
  memory that was not reported (with the command a person runs to look).

Which GPUs are the subject's (the question the run answers) is known before the run acts:
those in its scope (the runbook's ``first_gpu``..``last_gpu``, by default every GPU), less
those positively another owner's; and when the first look showed processes of the subject
holding GPUs, a GPU whose holder cannot be told is the subject's only if the subject held
it then (a stranger nobody can attribute, on a GPU the server never used, is named, not
judged). When the first look showed none, every such GPU is in question. A run exits 0
only when every GPU of the subject is free, serving, or started again (:func:`exit_code`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runbook_runner.exitcodes import ExitCode
from runbook_runner.observe.state import Gpu, ProcessOwner
from runbook_runner.plan.health import Health
from runbook_runner.plan.ownership import Disposition, Owner
from runbook_runner.status import Word

IDLE_MIB = 1024  # what a GPU may still report and count as released, when a runbook says nothing


class GpuStatus(Word):
    FREE = "free"
    SERVING = "serving"
    STARTED = "started"  # an instance this run started again, loading within its grace
    ANOTHER_OWNER = "another-owner"
    HELD_BY_OURS = "held-by-ours"
    ORPHANED = "orphaned"
    CANNOT_TELL = "cannot-tell"


ACCOUNTED = frozenset({GpuStatus.FREE, GpuStatus.SERVING, GpuStatus.STARTED})
SAID = {
    GpuStatus.FREE: "free",
    GpuStatus.SERVING: "serving",
    GpuStatus.STARTED: "started again by this run, loading",
    GpuStatus.ANOTHER_OWNER: "another owner's",
    GpuStatus.HELD_BY_OURS: "still held by the server",
    GpuStatus.ORPHANED: "orphaned memory",
    GpuStatus.CANNOT_TELL: "cannot tell",
}


@dataclass(frozen=True)
class Entry:
    """One GPU at the end of a run."""

    index: int | None
    minor: int | None  # N of /dev/nvidiaN
    status: GpuStatus
    used_mib: int | None
    subjects: bool  # the subject's: the run is judged on it
    why: str = ""  # its holders and what was judged of them
    look: str = ""  # the command a person runs to look at it
    stays: bool = False  # no rung acts on what holds it: a plan foresees it unchanged

    @property
    def accounted(self) -> bool:
        return not self.subjects or self.status in ACCOUNTED

    def said(self) -> str:
        used = f"{self.used_mib:,} MiB" if self.used_mib is not None else "memory not reported"
        why = f": {self.why}" if self.why else ""
        look = f" (look: {self.look})" if self.look else ""
        name = self.index if self.index is not None else f"/dev/nvidia{self.minor}"
        return f"GPU {name}: {SAID[self.status]}, {used}{why}{look}"

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.index if self.index is not None else self.minor,
            "status": str(self.status),
            "used_mib": self.used_mib,
            "subjects": self.subjects,
            "why": self.why,
            "look": self.look,
        }


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Entry, ...] = ()

    @property
    def unaccounted(self) -> tuple[Entry, ...]:
        """The subject's GPUs that are neither free nor serving."""
        return tuple(e for e in self.entries if not e.accounted)

    def foreseen(self) -> Ledger:
        """What a plan made on this look foresees at the run's end: the entries no rung
        acts on (a holder nobody can attribute, a server left starting), the rest
        assumed put right by the rungs that address them."""
        return Ledger(tuple(e for e in self.entries if e.stays))

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]


def _look(pid: int | None, index: int | None) -> str:
    if pid is not None:
        return f"ps -o pid,ppid,user,etimes,args -p {pid}; cat /proc/{pid}/cgroup"
    return f"nvidia-smi -q -d MEMORY,PIDS -i {index}" if index is not None else "nvidia-smi"


def _holder(row: ProcessOwner) -> str:
    return f"PID {row.pid} {(row.command or '?')[:60]}"


def entry_of(
    gpu: Gpu,
    holders: Iterable[ProcessOwner],
    idle_mib: int,
    in_scope: bool,
    earlier: frozenset[int] | None = None,
) -> Entry:
    """One GPU's status from its report and the classified processes holding its device file.
    ``earlier``: the subject's instances at the run's first look (None: not known), to tell
    an instance the run started again from one that was there before."""
    index, used = gpu.index, gpu.memory_used_mib
    minor = gpu.minor_number if gpu.minor_number is not None else index

    def entry(
        status: GpuStatus,
        why: str = "",
        look: str = "",
        subjects: bool = in_scope,
        stays: bool = False,
    ) -> Entry:
        return Entry(index, minor, status, used, subjects, why, look, stays)

    rows = list({row.pid: row for row in holders}.values())
    ours = [r for r in rows if r.subject]
    unknown = [r for r in rows if not r.subject and r.disposition == Disposition.CANNOT_TELL]
    strangers = [r for r in rows if not r.subject and r.owner == Owner.ANOTHER_OWNER]
    if gpu.fault:
        return entry(
            GpuStatus.CANNOT_TELL,
            f"it answers {gpu.fault!r}",
            f"nvidia-smi -q -i {index if index is not None else minor}; dmesg | grep -i xid",
        )
    started = earlier is not None and all(
        r.health == "starting" and r.instance not in earlier for r in ours
    )
    stuck = [r for r in ours if r.health != Health.HEALTHY]
    if stuck and started:
        why = "; ".join(f"{_holder(r)} ({r.reason})" for r in stuck)
        return entry(GpuStatus.STARTED, why)
    if stuck:
        why = "; ".join(f"{_holder(r)} ({r.reason or r.health or r.disposition})" for r in stuck)
        left = all(r.disposition != Disposition.ACT for r in stuck)
        return entry(GpuStatus.HELD_BY_OURS, why, _look(stuck[0].pid, index), stays=left)
    if unknown:
        why = "; ".join(
            f"{_holder(r)}, whose owner cannot be told ({r.evidence or r.reason})" for r in unknown
        )
        return entry(GpuStatus.CANNOT_TELL, why, _look(unknown[0].pid, index), stays=True)
    if ours:
        return entry(GpuStatus.SERVING, "; ".join(f"{_holder(r)} ({r.reason})" for r in ours))
    if strangers:
        why = "; ".join(f"{_holder(r)} ({r.evidence or r.owner})" for r in strangers)
        return entry(GpuStatus.ANOTHER_OWNER, why, subjects=False)
    if used is None:
        return entry(GpuStatus.CANNOT_TELL, "its memory is not reported", _look(None, index))
    if used <= idle_mib:
        return entry(GpuStatus.FREE)
    daemons = ", ".join(_holder(r) for r in rows if r.owner == Owner.INFRASTRUCTURE)
    held = f"held only by GPU infrastructure ({daemons})" if daemons else "no process holds it"
    return entry(
        GpuStatus.ORPHANED,
        f"{used:,} MiB used, over {idle_mib:,} MiB, and {held}",
        _look(None, index),
    )


def _records(state: Mapping[str, Any] | None) -> list[Any]:
    return [
        row for records in (state or {}).values() if isinstance(records, tuple) for row in records
    ]


def ledger_of(
    state: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
) -> Ledger:
    """Every GPU of the final look, each with one status (see the module's docstring): the
    GPUs the host reports, and any device file a process holds that no report names.
    ``params``: the run's parameters (``idle_mib``, ``first_gpu``, ``last_gpu`` where the
    runbook has them); ``before``: the run's first look."""
    params = params or {}
    idle = params.get("idle_mib")
    idle_mib = idle if isinstance(idle, int) and not isinstance(idle, bool) else IDLE_MIB
    first, last = params.get("first_gpu"), params.get("last_gpu")
    gpus: dict[int, Gpu] = {}
    holders: dict[int, list[ProcessOwner]] = {}
    for row in _records(state):
        if isinstance(row, Gpu):
            minor = row.minor_number if row.minor_number is not None else row.index
            if minor is not None:
                gpus.setdefault(minor, row)
        elif isinstance(row, ProcessOwner) and row.minor_number is not None and row.pid:
            holders.setdefault(row.minor_number, []).append(row)
    first_look = [r for r in _records(before) if isinstance(r, ProcessOwner) and r.subject]
    earlier = frozenset(r.instance for r in first_look if r.instance is not None)
    used_by_subject = {r.minor_number for r in first_look if r.minor_number is not None}
    for minor in holders.keys() - gpus.keys():  # held, and not in any report
        gpus[minor] = Gpu(minor_number=minor)

    def in_scope(index: int | None) -> bool:
        return index is None or (
            (not isinstance(first, int) or index >= first)
            and (not isinstance(last, int) or index <= last)
        )

    entries = []
    for minor in sorted(gpus):
        entry = entry_of(
            gpus[minor],
            holders.get(minor, ()),
            idle_mib,
            in_scope(gpus[minor].index),
            earlier if before is not None else None,
        )
        if entry.status is GpuStatus.CANNOT_TELL and used_by_subject and not gpus[minor].fault:
            # the first look named the subject's GPUs: a stranger elsewhere is not its
            entry = replace(entry, subjects=entry.subjects and minor in used_by_subject)
        entries.append(entry)
    return Ledger(tuple(entries))


def exit_code(ledger: Ledger, code: ExitCode) -> ExitCode:
    """The run's exit code once its ledger is read: ``code`` is what its steps and checks
    say; a run whose checks hold (0) while a GPU of the subject is not free nor serving is
    9 (held: by ours, or orphaned memory), or 6 when all such GPUs cannot be told."""
    if code is not ExitCode.OK or not ledger.unaccounted:
        return code
    if all(e.status is GpuStatus.CANNOT_TELL for e in ledger.unaccounted):
        return ExitCode.CANNOT_TELL
    return ExitCode.SUBJECT_HELD
