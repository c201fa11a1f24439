"""What a run reports as it goes, and its outcome: plain data for the CLI and the journal."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runbook_runner.expect import CheckResult, State, all_ok
from runbook_runner.runbook import Runbook, Step
from runbook_runner.status import SENT, StepStatus

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


@dataclass
class RunReport:
    runbook: Runbook
    before: Observed | None = None
    after: Observed | None = None
    steps: list[StepRecord] = field(default_factory=list)
    reached_by: str | None = None  # the step after which the goal held
    declined: bool = False
    blocked: StepRecord | None = None  # the first step not run because its trigger cannot be told

    @property
    def ok(self) -> bool:
        return (
            self.after is not None
            and all_ok(self.after.results)
            and not self.declined
            and self.blocked is None
        )

    @property
    def failing(self) -> tuple[CheckResult, ...]:
        results = self.after.results if self.after else ()
        return tuple(r for r in results if not r.ok)
