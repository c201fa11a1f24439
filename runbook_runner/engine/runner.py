"""The step loop: observe, check, run, wait, escalate. Emits events; prints nothing.

Data flows one way: the runbook and parameters come in, commands go out through
a transport, their output is parsed into state and checked, and what happened
goes to the ``on_event`` callback (the CLI, the journal) as it happens. Looking at the
host is engine/observing.py's; waiting, engine/waiting.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runbook_runner.engine.observing import Transport
from runbook_runner.engine.waiting import Waits
from runbook_runner.errors import ConnectionLost
from runbook_runner.events import (
    Answer,
    ConfirmRequest,
    Event,
    RunReport,
    StepDone,
    StepRecord,
    StepStarting,
)
from runbook_runner.expect import (
    all_ok,
    evaluate_check,
)
from runbook_runner.format.template import ValueRefused
from runbook_runner.journal.resume import ResumePlan
from runbook_runner.plan import decide, identity, saved
from runbook_runner.runbook import Runbook, Step
from runbook_runner.status import NOT_EXECUTED, STOPPING, StepStatus

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


class Runner(Waits):
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
        self.allow_node_wide = allow_node_wide
        self.approved = approved  # a saved plan: only its steps, on only its targets
        self.subject = (
            runbook.subject.with_parameters(self.params) if runbook.subject is not None else None
        )
        self._left_alone: tuple[str, ...] = ()  # the last decision's, for its record
        # What this run's steps acted on (a resumed run starts from its journal's record).
        self.changed: dict[str, list[Mapping[str, Any]]] = {
            step: list(items) for step, items in (changed or {}).items()
        }

    def run(
        self,
        *,
        from_step: str | None = None,
        dry_run: bool = False,
        resume: ResumePlan | None = None,
    ) -> RunReport:
        """Run the steps; ``resume`` (a stopped run's plan) leaves out every step whose end
        is journalled and re-observes an in-flight step before sending anything again."""
        report = RunReport(self.runbook)
        report.before = self.check_goal("before")
        if self.approved is not None and not dry_run and resume is None:
            # (a resumed run's own earlier steps changed the host: its targets stay bound
            # to the plan below, but what moved was judged when the run began)
            moved = saved.what_moved(self.approved, report.before.state)
            if moved:
                # The plan was approved on another picture of the host: act on none of it.
                report.blocked = StepRecord(
                    "approved-plan",
                    StepStatus.BLOCKED,
                    self.wall_clock(),
                    0.0,
                    message="blocked: cannot tell: the host changed since the plan was made: "
                    + "; ".join(moved)
                    + " (make the plan again and have it approved again)",
                )
                report.steps.append(report.blocked)
                report.after = report.before
                return report
        steps = list(self.runbook.steps)
        if resume is not None:
            steps = [s for s in steps if s.id in resume.remaining]
        elif from_step is not None:
            steps = steps[[s.id for s in steps].index(from_step) :]
        in_flight = resume.in_flight if resume is not None else None
        last_executed: str | None = None
        for number, step in enumerate(steps, start=1):
            if in_flight is not None and in_flight.step == step.id and in_flight.maybe_sent:
                record = self._in_flight(step, number, len(steps), dry_run)
            else:
                record = self._step(step, number, len(steps), dry_run)
            report.steps.append(record)
            self.on_event(StepDone(step, record))
            if record.status == StepStatus.DECLINED:
                report.declined = True
                break
            if record.status == StepStatus.BLOCKED and step.destructive:
                report.blocked = report.blocked or record
                if not dry_run:
                    break  # cannot tell never escalates: stop before the step
            goal = set(self.runbook.goal)
            waited_for_goal = (
                record.status == StepStatus.OK and step.wait and goal <= set(step.wait.until)
            )
            skipped_for_goal = record.skipped_because_holds and goal <= set(step.skip_if)
            if report.reached_by is None and waited_for_goal:
                report.reached_by = step.id
            elif report.reached_by is None and skipped_for_goal and last_executed:
                # A rung skipped because the goal holds: the rung before it did the work.
                report.reached_by = last_executed
            if record.status not in NOT_EXECUTED:
                last_executed = step.id
            if record.status in STOPPING and step.on_failure == "stop":
                break
        report.after = self.check_goal("after")
        if report.ok and report.reached_by is None:
            report.reached_by = last_executed
        return report

    def _in_flight(self, step: Step, number: int, total: int, dry_run: bool) -> StepRecord:
        """A resumed run's step that was in flight: its command may have reached the host.

        Its expected state (wait condition, else skip_if, else for_each_failing, else the
        goal) is observed first; when it holds, nothing is sent. Otherwise a destructive
        step is asked again, even with --yes; other steps run as usual.
        """
        started, t0 = self.wall_clock(), self.clock()
        if step.wait is not None:
            expected: Sequence[str] = step.wait.until
        elif step.skip_if:
            expected = step.skip_if
        elif step.for_each_failing:
            expected = (step.for_each_failing,)
        else:
            expected = self.runbook.goal
        _, results = self.check(expected)
        lost = "in flight when the run stopped (whether its command reached the host is unknown)"
        if all_ok(results):
            holds = "; its expected state holds: " + ", ".join(expected) + "; not sent again"
            return StepRecord(
                step.id, StepStatus.OK, started, self.clock() - t0, message=lost + holds
            )
        if dry_run or not step.destructive:
            return self._step(step, number, total, dry_run)
        failing = "; ".join(r.message for r in results if not r.ok)
        reason = f"step {step.id!r} was {lost}, and its expected state does not hold ({failing})"
        commands = self._commands_for(step)
        if not self.confirm(ConfirmRequest(step, commands, resend=reason)):
            return StepRecord(
                step.id,
                StepStatus.DECLINED,
                started,
                self.clock() - t0,
                message="the operator declined sending it again",
                commands=commands,
            )
        return self._step(step, number, total, dry_run, confirmed=True)

    def _commands_for(self, step: Step) -> tuple[str, ...]:
        """The step's commands as shown (secrets masked), for a confirmation."""
        if not step.run:
            return ()
        if not step.for_each_failing:
            return (self.render(step.run, None, masked=True),)
        state = self.observe(self.observations_for([step.for_each_failing]))
        verdict = evaluate_check(
            self.runbook.checks[step.for_each_failing],
            self.runbook,
            state,
            self.params,
            self.changed,
        )
        return tuple(self.render(step.run, item, masked=True) for item in verdict.failing)

    def _step(
        self, step: Step, number: int, total: int, dry_run: bool, *, confirmed: bool = False
    ) -> StepRecord:
        started, t0 = self.wall_clock(), self.clock()

        acted: tuple[dict[str, Any], ...] = ()
        left_alone: tuple[str, ...] = ()

        def record(status: StepStatus, message: str = "", **extra: Any) -> StepRecord:
            done = StepRecord(
                step.id,
                status,
                started,
                self.clock() - t0,
                message=message,
                acted=acted,
                left_alone=left_alone,
                **extra,
            )
            if done.sent and acted:
                self.changed.setdefault(step.id, []).extend(acted)
            return done

        trigger = self.trigger(step)
        left_alone = self._left_alone
        if isinstance(trigger, StepRecord):
            return record(
                trigger.status,
                trigger.message,
                skipped_because_holds=trigger.skipped_because_holds,
            )
        items: list[Any] = list(trigger) or [None]
        try:  # a value that would be an option of the command: the step fails, unsent
            _ = [self.render(step.run, item) for item in items if step.run is not None]
        except ValueRefused as refused:
            return record(StepStatus.FAILED, str(refused))
        if step.run is not None and len(items) > 1:
            # Items that give the same command (one PID on two GPUs) are one target.
            first: dict[str, Any] = {}
            for item in items:
                first.setdefault(self.render(step.run, item), item)
            items = list(first.values())
        # As the plan names them: a unit the command stops is the target, not its process.
        named_by = identity.named_by(step)
        targets = tuple(identity.target(i, named_by).text for i in items if i is not None)
        # What is sent, and what is shown and recorded: secret parameters appear as '***'.
        # Items that give the same command (one PID holding two GPUs) send it once.
        pairs = (
            {
                self.render(step.run, item): self.render(step.run, item, masked=True)
                for item in items
            }
            if step.run
            else {}
        )
        sent, commands = tuple(pairs), tuple(pairs.values())
        acted = tuple(identity.plain_fields(item) for item in items if item is not None)
        self.on_event(StepStarting(step, number, total, commands, acted))
        if dry_run:
            return record(
                StepStatus.PLANNED, "dry run: not executed", commands=commands, targets=targets
            )
        if self.approved is not None and step.destructive and step.run is not None:
            # run --plan: each command is the plan's for this step and target, else stop here
            shown = [
                (identity.target(i, named_by) if i is not None else None, c)
                for i, c in zip(items, commands, strict=False)
            ]
            saved.check_sent(self.approved, step.id, shown)
        if step.destructive and commands and not confirmed:
            answer = self.confirm(ConfirmRequest(step, commands, targets))
            if isinstance(answer, bool):
                answer = Answer(answer, "" if answer else "declined by the operator")
            if not answer.yes:
                return record(
                    StepStatus.DECLINED, answer.reason, commands=commands, targets=targets
                )
        if step.reboots:
            return self._reboot(step, sent, commands, record)
        results: list[CommandResult] = []
        for command in sent:
            try:
                result = self.transport.run(command, self.seconds(step.timeout), as_root=step.root)
            except ConnectionLost as lost:
                # The command may or may not have done its work: never send it blindly again.
                self._reconnect(step, lost)
                return self._outcome_unknown(step, commands, tuple(results), record)
            results.append(result)
            if result.timed_out:
                return record(
                    StepStatus.TIMED_OUT,
                    f"timed out after {self.seconds(step.timeout):g}s and was ended on the host",
                    commands=commands,
                    results=tuple(results),
                )
            if result.exit_status not in step.ok_exit:
                return record(
                    StepStatus.FAILED,
                    _failure_message(result, step),
                    exit_status=result.exit_status,
                    commands=commands,
                    results=tuple(results),
                )
        exit_status = results[-1].exit_status if results else None
        if step.wait is not None:
            ended = self._wait(step)
            return record(
                StepStatus.OK if ended.reached else StepStatus.FAILED,
                f"wait ended: {ended.reason}",
                exit_status=exit_status,
                commands=commands,
                results=tuple(results),
                wait=ended,
                targets=targets,
            )
        return record(
            StepStatus.OK,
            exit_status=exit_status,
            commands=commands,
            results=tuple(results),
            targets=targets,
        )

    def trigger(self, step: Step) -> StepRecord | tuple[Any, ...]:
        """The items a step acts on (empty: it runs once), or why it does not run: one look
        at the host, then the pure decision (plan/decide.py)."""
        state = self.observe(decide.observations_needed(self.runbook, step))
        decision = decide.decide(
            self.runbook,
            self.params,
            state,
            self.changed,
            step,
            subject=self.subject,
            allow_node_wide=self.allow_node_wide,
        )
        self._left_alone = decision.left_alone
        if self.approved is not None:
            decision = self._as_approved(step, decision)
            self._left_alone = decision.left_alone
        if decision.verdict is decide.Verdict.RUN:
            return decision.items
        status = (
            StepStatus.BLOCKED if decision.verdict is decide.Verdict.BLOCKED else StepStatus.SKIPPED
        )
        return StepRecord(
            step.id,
            status,
            0.0,
            0.0,
            message=decision.message,
            skipped_because_holds=decision.holds,
        )

    def _as_approved(self, step: Step, decision: decide.Decision) -> decide.Decision:
        """Under a saved plan, a step runs only if the plan has it, and only on its targets:
        what it would act on beyond them is left alone, and said so."""
        assert self.approved is not None
        if decision.verdict is not decide.Verdict.RUN:
            return decision
        if step.id not in self.approved.steps():
            return decide.Decision(decide.Verdict.SKIP, "not in the approved plan")
        allowed = self.approved.targets_of(step.id)
        if not decision.items:
            return decision
        named_by = identity.named_by(step)
        kept: list[Any] = []
        beyond: list[Any] = []
        for item in decision.items:
            named = identity.target(item, named_by)
            (kept if (named.kind, named.key) in allowed else beyond).append(item)
        left = tuple(
            f"{identity.target(i, named_by).text}: not in the approved plan" for i in beyond
        )
        if not kept:
            return decide.Decision(
                decide.Verdict.SKIP,
                "left alone: " + "; ".join(left),
                left_alone=decision.left_alone + left,
            )
        return decide.Decision(
            decide.Verdict.RUN, items=tuple(kept), left_alone=decision.left_alone + left
        )


def _failure_message(result: CommandResult, step: Step) -> str:
    tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
    message = f"exit status {result.exit_status}"
    if any("a password is required" in line or "sudo:" in line for line in tail):
        message += " (needs root: sudo -n was refused; log in as root or allow this user sudo without a password)"
    if tail:
        message += ": " + " | ".join(line.strip() for line in tail)
    return message
