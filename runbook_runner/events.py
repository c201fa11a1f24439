"""What a run reports as it goes, and its outcome: plain data for the CLI and the journal."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runbook_runner.expect import CheckResult, State, all_ok
from runbook_runner.plan.ledger import Ledger, ledger_of
from runbook_runner.runbook import Runbook, Step
from runbook_runner.status import RUNNER_CONDITIONS, SENT, Condition, StepStatus

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


@dataclass(frozen=True)
class Observed:
    label: str  # "before", "after", or a step id
    state: State
    results: tuple[CheckResult, ...]


@dataclass(frozen=True)
class StepStarting:
    step: Step
    number: int
    total: int
    commands: tuple[str, ...]
    acted: tuple[dict[str, Any], ...] = ()  # the fields of each item it is about to act on


@dataclass(frozen=True)
class Waiting:
    step: Step
    failing: tuple[CheckResult, ...]
    elapsed_s: float
    timeout_s: float
    unchanged_s: float = 0.0  # how long the failing figures have not moved


@dataclass(frozen=True)
class WaitEnd:
    """Why a wait ended: 'reached', 'no-progress' (waiting cannot help) or 'deadline'."""

    ended: str
    reason: str  # one line: "reached after 12 s", "no progress for 30 s, nothing left: ..."
    elapsed_s: float
    figures: tuple[str, ...] = ()  # the last failing figures

    @property
    def reached(self) -> bool:
        return self.ended == "reached"

    def to_json(self) -> dict[str, Any]:
        return {
            "ended": self.ended,
            "reason": self.reason,
            "elapsed_s": round(self.elapsed_s, 3),
            "figures": list(self.figures),
        }


@dataclass(frozen=True)
class Reconnecting:
    step: Step | None  # None: while observing
    elapsed_s: float
    timeout_s: float


@dataclass(frozen=True)
class StepRecord:
    id: str
    status: StepStatus
    started: float  # Unix time
    duration_s: float
    exit_status: int | None = None
    message: str = ""
    commands: tuple[str, ...] = ()
    results: tuple[CommandResult, ...] = ()
    skipped_because_holds: bool = False  # skip_if held (not merely nothing to act on)
    wait: WaitEnd | None = None  # how the step's wait ended, if it waited
    targets: tuple[str, ...] = ()  # the observed items it acted on (PIDs, GPUs)
    acted: tuple[dict[str, Any], ...] = ()  # their fields, for a later within: {changed_by}
    left_alone: tuple[str, ...] = ()  # what ownership kept it from acting on, and why

    @property
    def sent(self) -> bool:
        """Its commands reached the host, or may have."""
        return self.status in SENT

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "exit_status": self.exit_status,
            "message": self.message,
        }
        if self.commands:
            document["commands"] = list(self.commands)  # as shown: secrets masked
        if self.wait is not None:
            document["wait"] = self.wait.to_json()
        if self.targets:
            document["targets"] = list(self.targets)
        if self.acted and self.sent:
            document["acted"] = list(self.acted)
        if self.left_alone:
            document["left_alone"] = list(self.left_alone)
        return document


@dataclass(frozen=True)
class StepDone:
    step: Step
    record: StepRecord


Event = Observed | StepStarting | Waiting | Reconnecting | StepDone


@dataclass(frozen=True)
class ConfirmRequest:
    step: Step
    commands: tuple[str, ...]
    targets: tuple[str, ...] = ()  # exact PIDs / GPUs / files from the observed state
    # A resumed run's in-flight step whose command may have reached the host already and
    # whose expected state does not hold: asked on a terminal even with --yes.
    resend: str = ""  # why it is asked again ("" for an ordinary confirmation)


@dataclass(frozen=True)
class Answer:
    """A confirmer's answer; ``reason`` says truthfully why a step does not run."""

    yes: bool
    reason: str = (
        ""  # "declined by alice", "needs --allow-reboot", "no terminal to ask (use --yes)"
    )
    asked: bool = True  # False: nobody was asked (no terminal, or --allow-reboot missing)


VERDICT_LINE = 160  # one line of a verdict, as the terminal shows it (--json has it whole)


@dataclass(frozen=True)
class Verdict:
    """How a run ended, in four parts a person reads last: what it did (each action with
    its targets), what it left alone (what, whose, why), what is still wrong (each failing
    check), and what a person does next (from the runbook: its checks' hints, its
    ``next``). ``ledger``: every GPU at the end, one entry each (plan/ledger.py);
    ``held``: its entries for the subject's GPUs that are neither free nor serving (a run
    that leaves one is not "goal holds", whatever its checks say)."""

    done: tuple[str, ...] = ()
    left_alone: tuple[str, ...] = ()
    still_wrong: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    next: tuple[str, ...] = ()
    ledger: Ledger = field(default_factory=Ledger)

    def to_json(self) -> dict[str, Any]:
        return {
            "done": list(self.done),
            "left_alone": list(self.left_alone),
            "still_wrong": list(self.still_wrong),
            "held": list(self.held),
            "next": list(self.next),
            "ledger": self.ledger.to_json(),
        }


def held_back(state: State | None, said: Sequence[str] = ()) -> tuple[str, ...]:
    """What no step may touch at the end, from a look at the host (plan/permission.py's
    ``held_back``: another owner's, one whose owner or health cannot be told), each with
    whose it is, why, and the command a person runs to look at it; a process a rung's
    own "left alone" (``said``) already names is not named twice, nor the subject's
    server while it is healthy or starting (the GPU table shows it)."""
    from runbook_runner.observe.state import ProcessOwner
    from runbook_runner.plan import permission

    rows: dict[tuple[int | None, int | None], ProcessOwner] = {}
    for records in (state or {}).values():
        for row in records if isinstance(records, tuple) else ():
            if isinstance(row, ProcessOwner) and row.owner:
                if row.subject and row.health in ("healthy", "starting"):
                    continue
                rows.setdefault((row.pid, row.minor_number), row)
    named = " ".join(said)
    return tuple(
        item.said()
        for item in permission.held_back(tuple(rows.values()))
        if not re.search(rf"\bPID {re.escape(item.what.split(' ')[1])}\b", named)
    )


def held_back_next(runbook: Runbook, blocked: StepRecord | None) -> tuple[str, set[str]]:
    """What a person does about the rung the run stopped before, when something it would
    reach held it back; and the checks it was to fix, whose hints say what that rung would
    have done (a reset a stranger's GPU shares is not advice): they give way to this."""
    from runbook_runner.plan.actions import NODE_GATE

    if blocked is None:
        return "", set()
    reason = blocked.message.removeprefix("blocked: ")
    step = next((s for s in runbook.steps if s.id == blocked.id), None)
    if step is None or reason.startswith("cannot tell:"):
        return "", set()  # what could not be observed says its own next step
    fixes = {*step.fixes, *([step.for_each_failing] if step.for_each_failing else [])}
    gate = f", or rerun with {NODE_GATE} once their owners agree" if NODE_GATE in reason else ""
    said = (
        f"{blocked.id} was held back ({reason.split(': ')[0]}): look at what holds it back "
        f"(named above), and run this runbook again once that is gone{gate}"
    )
    return said, fixes


def unobservable(
    runbook: Runbook, check: str, state: State | None, judged: AbstractSet[str] = frozenset()
) -> list[str]:
    """What a person does about a check that cannot be told: make what it reads observable
    (its hint is about fixing the state it checks, which nobody saw)."""
    from runbook_runner.observe.state import Unavailable

    if check not in runbook.checks:
        return []
    said = []
    for name in runbook.observations_of([check]):
        value = (state or {}).get(name)
        if not isinstance(value, Unavailable) or name in judged:
            continue
        if value.condition == Condition.NOT_FOUND:
            fix = "install the command it runs, or put it on the login's PATH"
        elif value.condition in RUNNER_CONDITIONS:
            fix = "make its command work on the host"
        else:
            fix = f"the host reports {value.condition!r}: fix that"
        said.append(
            f"make {name!r} observable: {fix} ({value.reason}); then look again "
            f"(runbook check {runbook.name} --host HOST) and run this runbook again"
        )
    return said


def verdict_of(report: RunReport) -> Verdict:
    """The run's verdict from its report (pure)."""
    runbook = report.runbook
    destructive = {s.id for s in runbook.steps if s.destructive}
    state = report.after.state if report.after is not None else None
    done: list[str] = []
    left: list[str] = []
    for record in report.steps:
        if record.sent and record.id in destructive and (record.targets or record.commands):
            what = ", ".join(record.targets) if record.targets else "; ".join(record.commands)
            why = f": {record.message}" if record.message else ""  # what a person reads
            tail = "" if record.status == StepStatus.OK else f" ({record.status}{why})"
            done.append(f"{record.id}: {what}{tail}")
        for said in record.left_alone:
            if said not in left:
                left.append(said)
    for said in held_back(state, left):
        left.append(said)
    results = report.after.results if report.after is not None else ()
    still = [f"{r.name}: {r.message}" for r in results if not r.ok]
    if report.blocked is not None:
        still.append(f"stopped before {report.blocked.id}: {report.blocked.message}")
    first = report.before.state if report.before is not None else None
    ledger = ledger_of(state, report.params, first) if runbook.subject is not None else Ledger()
    held = tuple(entry.said() for entry in ledger.unaccounted)
    following: list[str] = []
    # An observation whose condition a failing check already judges (nvidia-smi's
    # driver/library mismatch) is that check's finding, with its own hint.
    judged = set(runbook.observations_of([r.name for r in results if r.is_failing]))
    unblock, replaced = held_back_next(runbook, report.blocked)
    if unblock:
        following.append(unblock)
    failing_now = {r.name for r in results if r.is_failing}
    for record in report.steps:  # a rung that left all its targets alone: its hint gives way
        step = next((s for s in runbook.steps if s.id == record.id), None)
        if step is None or not record.left_alone or record.status != StepStatus.SKIPPED:
            continue
        fixes = {*step.fixes, *([step.for_each_failing] if step.for_each_failing else [])}
        if step.destructive and step.run is not None and fixes & failing_now:
            replaced |= fixes
            following.append(
                f"{record.id} left its targets alone (named above, with why): look at them, "
                "and run this runbook again once they are gone or their owners agree"
            )
    for result in results:
        if result.cannot_tell:
            following += unobservable(runbook, result.name, state, judged)
            continue
        hint = runbook.checks[result.name].hint if result.name in runbook.checks else ""
        if not result.ok and hint and result.name not in replaced:
            following.append(" ".join(hint.split()))
    if held:
        following.append(
            "a GPU of the server is not free: look at it (the command beside it above; "
            "the server's log), then run this runbook again"
        )
    if report.ok and not held:
        following += runbook.next
    return Verdict(
        tuple(done), tuple(left), tuple(still), held, tuple(dict.fromkeys(following)), ledger
    )


@dataclass
class RunReport:
    runbook: Runbook
    before: Observed | None = None
    after: Observed | None = None
    steps: list[StepRecord] = field(default_factory=list)
    reached_by: str | None = None  # the step after which the goal held
    declined: bool = False
    blocked: StepRecord | None = None  # the first step not run because its trigger cannot be told
    params: Mapping[str, Any] = field(default_factory=dict)  # the run's parameters

    @property
    def ok(self) -> bool:
        return (
            self.after is not None
            and all_ok(self.after.results)
            and not self.declined
            and self.blocked is None
        )

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self)

    @property
    def failing(self) -> tuple[CheckResult, ...]:
        results = self.after.results if self.after else ()
        return tuple(r for r in results if not r.ok)
