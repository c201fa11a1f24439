"""The run: observe -> next move -> confirm -> act -> record, until the ladder says done.

Data flows one way: the runbook and parameters come in, commands go out through a
transport, their output is parsed into state, and what happened goes to the ``on_event``
callback (the CLI, the journal) as it happens. What to do next is only the ladder's
(plan/ladder.py); looking at the host is engine/observing.py's, acting engine/acting.py's,
waiting engine/waiting.py's. Prints nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runbook_runner.engine.acting import Acting
from runbook_runner.engine.observing import Transport
from runbook_runner.events import (
    Answer,
    ConfirmRequest,
    Event,
    RunReport,
    StepDone,
    StepRecord,
)
from runbook_runner.journal.resume import ResumePlan
from runbook_runner.plan import ladder, saved
from runbook_runner.runbook import Runbook
from runbook_runner.status import StepStatus


class Runner(Acting):
    def __init__(
        self,
        runbook: Runbook,
        params: Mapping[str, Any],
        transport: Transport,
        *,
        on_event: Callable[[Event], None] = lambda event: None,
        confirm: Callable[[ConfirmRequest], bool | Answer] = lambda request: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
        changed: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        allow_node_wide: bool = False,
        allow_reboot: bool = False,
        approved: saved.SavedPlan | None = None,
    ) -> None:
        self.runbook = runbook
        self.params = dict(params)
        self.transport = transport
        self.on_event = on_event
        self.confirm = confirm
        self.clock = clock
        self.sleep = sleep
        self.wall_clock = wall_clock
        self.approved = approved  # a saved plan: only its steps, on only its targets
        self.gates = ladder.Gates(allow_reboot, allow_node_wide, approved)
        self.subject = (
            runbook.subject.with_parameters(self.params) if runbook.subject is not None else None
        )
        self.seen: dict[str, Any] = {}  # this round's observations, until something acts
        # What this run's steps acted on (a resumed run starts from its journal's record).
        self.changed: dict[str, list[Mapping[str, Any]]] = {
            step: list(items) for step, items in (changed or {}).items()
        }

    def run(self, *, from_step: str | None = None, resume: ResumePlan | None = None) -> RunReport:
        """Walk the ladder; ``resume`` (a stopped run's plan) leaves out every step whose end
        is journalled and re-observes an in-flight step before sending anything again."""
        report = RunReport(self.runbook, params=self.params)
        report.before = self.check_goal("before")
        moved: list[str] = []
        if self.approved is not None and resume is None:
            # (a resumed run's own earlier steps changed the host: its targets stay bound
            # to the plan below, but what moved was judged when the run began)
            moved = saved.what_moved(self.approved, report.before.state)
        in_flight = resume.in_flight if resume is not None else None
        history = ladder.History.start(
            self.runbook,
            from_step=from_step,
            remaining=resume.remaining if resume is not None else None,
            in_flight=in_flight.step if in_flight is not None and in_flight.maybe_sent else None,
            changed=self.changed,
            moved=moved,
        )
        total = len(history.order)
        while True:
            state = self.observe(ladder.needs(self.runbook, history), reuse=True)
            move = ladder.next_move(
                self.runbook, self.params, state, history, subject=self.subject, gates=self.gates
            )
            if isinstance(move, ladder.Done):
                break
            number = len(history.rungs) + 1
            if isinstance(move, ladder.Stop):
                if move.step is not None or history.moved:
                    blocked = StepRecord(
                        move.step.id if move.step is not None else "approved-plan",
                        StepStatus.BLOCKED,
                        self.wall_clock(),
                        0.0,
                        message=move.reason,
                        left_alone=move.left_alone,
                    )
                    report.blocked = report.blocked or blocked
                    report.steps.append(blocked)
                    if move.step is not None:
                        self.on_event(StepDone(move.step, blocked))
                if history.moved:
                    report.after = report.before
                    return report
                # Whatever the end, what this run stopped is put back: walk on, only the
                # rungs that restore what it changed (ladder.History.halt).
                history = history.halt(self.runbook, move)
                continue
            if isinstance(move, ladder.Skip):
                record = StepRecord(
                    move.step.id,
                    move.status,
                    self.wall_clock(),
                    0.0,
                    message=move.reason,
                    skipped_because_holds=move.holds,
                    left_alone=move.left_alone,
                )
            else:
                record = self.act(move, number, total)
            report.steps.append(record)
            if record.sent and record.acted:
                self.changed.setdefault(record.id, []).extend(record.acted)
            self.on_event(StepDone(move.step, record))
            if record.status == StepStatus.DECLINED:
                report.declined = True
            history = history.then(
                ladder.Rung(
                    record.id,
                    record.status,
                    record.skipped_because_holds,
                    record.wait.ended if record.wait is not None else None,
                ),
                record.acted if record.sent else (),
            )
        report.after = self.check_goal("after", reuse=True)
        report.reached_by = ladder.reached_by(self.runbook, history, report.ok)
        return report

    def look(self) -> RunReport:
        """One look at the host, nothing sent that changes it (a session's dry run)."""
        report = RunReport(self.runbook, params=self.params)
        report.before = report.after = self.check_goal("before")
        return report
