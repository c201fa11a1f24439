"""The step loop: observe, check, run, wait, escalate. Emits events; prints nothing.

Data flows one way: the runbook and parameters come in, commands go out through
a transport, their output is parsed into state and checked, and what happened
goes to the ``on_event`` callback (the CLI, the journal) as it happens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from runbook_runner.errors import ConnectionLost, HostKeyChanged, ParseError, TransportError
from runbook_runner.events import (
    Answer,
    ConfirmRequest,
    Event,
    Observed,
    Reconnecting,
    RunReport,
    StepDone,
    StepRecord,
    StepStarting,
    WaitEnd,
    Waiting,
)
from runbook_runner.expect import (
    CheckResult,
    all_ok,
    evaluate_check,
    evaluate_checks,
)
from runbook_runner.format import expr
from runbook_runner.format.template import Template
from runbook_runner.journal.resume import ResumePlan
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import ProcessOwner, Unavailable
from runbook_runner.plan import decide, identity, ownership, saved
from runbook_runner.runbook import Expression, Runbook, Seconds, Step, Subject
from runbook_runner.ssh.batch import BatchCommand
from runbook_runner.status import NOT_EXECUTED, STOPPING, Condition, StepStatus

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


class Transport(Protocol):
    is_root: bool

    def run(
        self, command: str, timeout: float, *, output_limit: int = ..., as_root: bool = False
    ) -> CommandResult: ...

    def alive(self) -> bool: ...

    def reconnect(self) -> object: ...


REBOOT_GOES_DOWN_S = 120.0  # a reboot that has not dropped SSH by then did not happen
REBOOT_COMES_BACK_S = 900.0  # default wait for SSH to answer again
RECONNECT_FOR_S = 120.0  # how long a dropped connection is retried before the run stops
# Observations are parsed: run them in the C locale (as Ansible does), so that `free` prints
# "total used free" and numbers use a dot, whatever the host's or the login's language.
# Inside the command text, so that it holds under `sudo -n sh -c` too (sudo resets the env).
OBSERVE_IN_C_LOCALE = "export LC_ALL=C LANG=C LANGUAGE=C; "


# -- the runner -----------------------------------------------------------------------------


class Runner:
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

    # -- observing and checking -----------------------------------------------------------

    def render(
        self, template: Template, item: Any = None, *, raw: bool = False, masked: bool = False
    ) -> str:
        """A command with its values quoted; ``raw`` leaves values as they are (local text);
        ``masked`` shows secret parameters as '***' (for the terminal and the journal)."""

        def lookup(name: str) -> Any:
            if name.startswith("item."):
                return getattr(item, name[5:])
            return self.params[name]

        if raw:
            return template.fill(lookup)
        secret = {name for name, p in self.runbook.parameters.items() if p.secret}
        return template.render(lookup, mask=(lambda name: name in secret) if masked else None)

    def seconds(self, value: Seconds) -> float:
        """A duration: a number, or an expression over the parameters."""
        if isinstance(value, Expression):
            return float(expr.evaluate(value.tree, self.params.__getitem__))
        return value

    def observe(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        wanted = list(self.runbook.observations) if names is None else list(names)
        remote = [n for n in wanted if self.runbook.observations[n].command is not None]
        run_many = getattr(self.transport, "run_many", None)
        if run_many is None or len(remote) < 2:
            state = {name: self._observe_one(name) for name in wanted}
            return state
        # One round trip for the set: the commands run together on the host.
        commands = {name: self._command_of(name) for name in remote}
        batch = [
            BatchCommand(
                OBSERVE_IN_C_LOCALE + commands[name],
                self.runbook.observations[name].timeout,
                as_root=self.runbook.observations[name].root,
                alone=self.runbook.observations[name].alone,
            )
            for name in remote
        ]
        try:
            results = run_many(batch)
        except ConnectionLost as lost:  # observations only read: sending them again is safe
            self._reconnect(None, lost)
            results = run_many(batch)
        by_name = dict(zip(remote, results, strict=True))
        state = {
            name: self._parsed(name, commands[name], by_name[name])
            if name in by_name
            else self._observe_one(name)
            for name in wanted
        }
        return state

    def _command_of(self, name: str) -> str:
        command = self.runbook.observations[name].command
        assert command is not None
        return self.render(command)

    def _observe_one(self, name: str) -> Any:
        observation = self.runbook.observations[name]
        parser = PARSERS[observation.parser]
        if observation.text is not None:  # a parameter to parse, not a command to run
            text = self.render(observation.text, raw=True)
            try:
                return parser.parse(text, 0, text)
            except ParseError as error:
                return Unavailable(str(error), Condition.UNPARSABLE)
        command = self._command_of(name)
        sent = OBSERVE_IN_C_LOCALE + command
        try:
            result = self.transport.run(sent, observation.timeout, as_root=observation.root)
        except ConnectionLost as lost:  # an observation only reads: sending it again is safe
            self._reconnect(None, lost)
            result = self.transport.run(sent, observation.timeout, as_root=observation.root)
        return self._parsed(name, command, result)

    def _parsed(self, name: str, command: str, result: CommandResult) -> Any:
        """A command's result -> the parsed value, or Unavailable saying why not."""
        observation = self.runbook.observations[name]
        parser = PARSERS[observation.parser]
        if result.timed_out:
            return Unavailable(
                f"{command!r} timed out after {observation.timeout:g}s", Condition.TIMED_OUT
            )
        status = result.exit_status if result.exit_status is not None else -1
        detail = (result.stderr or result.stdout).strip().splitlines()
        if status == 127:
            reason = f"{command!r} exited 127 (command not found)" + (
                f": {detail[-1]}" if detail else ""
            )
            return Unavailable(reason, Condition.NOT_FOUND)
        if status not in observation.ok_exit and parser.tool != "nvidia-smi":
            reason = f"{command!r} exited {status}" + (f": {detail[-1]}" if detail else "")
            return Unavailable(reason)
        try:
            value = parser.parse(result.stdout, status, command)
        except ParseError as error:
            return Unavailable(str(error), getattr(error, "condition", Condition.UNPARSABLE))
        if observation.parser == "process-owners" and self.subject is not None:
            value = self._classify(self.subject, value)
        return value

    def _classify(
        self, subject: Subject, records: tuple[ProcessOwner, ...]
    ) -> tuple[ProcessOwner, ...]:
        """Who owns each process, and whether the subject's instances are broken: their
        health is asked on the host, one request per live instance."""
        results = []
        for probe in ownership.probes(subject, records):
            try:
                answer = self.transport.run(
                    OBSERVE_IN_C_LOCALE + probe.command, subject.health_timeout_s + 10.0
                )
            except ConnectionLost:
                results.append(
                    ownership.ProbeResult(
                        probe.instance,
                        ownership.Health.CANNOT_TELL,
                        "the connection dropped while asking",
                    )
                )
                continue
            status = None if answer.timed_out else answer.exit_status
            results.append(ownership.judge_probe(probe, status, answer.stdout, answer.stderr))
        restarts: dict[str, int] = {}
        for unit_probe in ownership.unit_probes(subject, records):
            try:
                answer = self.transport.run(OBSERVE_IN_C_LOCALE + unit_probe.command, 30.0)
            except ConnectionLost:
                continue
            count = ownership.judge_unit(answer.exit_status, answer.stdout)
            if count is not None:
                restarts[unit_probe.unit] = count
        return ownership.classify(subject, records, results, restarts)

    def observations_for(self, check_names: Iterable[str]) -> list[str]:
        return self.runbook.observations_of(check_names)

    def check(self, check_names: Sequence[str]) -> tuple[dict[str, Any], list[CheckResult]]:
        state = self.observe(self.observations_for(check_names))
        results = evaluate_checks(check_names, self.runbook, state, self.params, self.changed)
        # Journalled as a "poll": the run's picture over time (a postmortem's chart) is drawn
        # from these, between the "before" and "after" of the goal.
        self.on_event(Observed("poll", state, tuple(results)))
        return state, results

    def check_goal(self, label: str) -> Observed:
        state = self.observe()
        results = evaluate_checks(self.runbook.goal, self.runbook, state, self.params, self.changed)
        observed = Observed(label, state, tuple(results))
        self.on_event(observed)
        return observed

    # -- running ------------------------------------------------------------------------------

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
        acted = tuple(_fields(item) for item in items if item is not None)
        self.on_event(StepStarting(step, number, total, commands, acted))
        if dry_run:
            return record(
                StepStatus.PLANNED, "dry run: not executed", commands=commands, targets=targets
            )
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

    # -- deciding whether a step runs ---------------------------------------------------------

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

    def _reboot(
        self,
        step: Step,
        sent: tuple[str, ...],
        commands: tuple[str, ...],
        record: Callable[..., StepRecord],
    ) -> StepRecord:
        """Send the reboot, see the host go down, reconnect when it is back, then wait as told."""
        for command in sent:
            with contextlib.suppress(ConnectionLost):  # the host went down under it: expected
                self.transport.run(command, self.seconds(step.timeout), as_root=step.root)
        went_down = self.clock() + REBOOT_GOES_DOWN_S
        while self.transport.alive():
            if self.clock() > went_down:
                return record(
                    StepStatus.FAILED,
                    f"the host did not go down within {REBOOT_GOES_DOWN_S:g}s of the reboot",
                    commands=commands,
                )
            self.sleep(1.0)
        limit = self.seconds(step.wait.timeout) if step.wait else REBOOT_COMES_BACK_S
        back = self.clock() + limit
        while True:
            self.on_event(Reconnecting(step, self.clock() - (back - limit), limit))
            try:
                self.transport.reconnect()
                break
            except TransportError as error:
                if isinstance(error, HostKeyChanged) or self.clock() > back:
                    return record(
                        StepStatus.FAILED, f"the host did not come back: {error}", commands=commands
                    )
                self.sleep(min(5.0, max(0.0, back - self.clock())))
        if step.wait is not None:
            ended = self._wait(step)
            if not ended.reached:
                return record(
                    StepStatus.FAILED,
                    f"back, but wait ended: {ended.reason}",
                    commands=commands,
                    wait=ended,
                )
        return record(StepStatus.OK, "the host rebooted and is back", commands=commands)

    def _reconnect(self, step: Step | None, lost: ConnectionLost) -> None:
        """Reconnect with a bounded backoff; give up (raising ``lost``) after RECONNECT_FOR_S."""
        start = self.clock()
        delay = 1.0
        while True:
            self.on_event(Reconnecting(step, self.clock() - start, RECONNECT_FOR_S))
            try:
                self.transport.reconnect()
                return
            except HostKeyChanged:
                raise
            except TransportError:
                if self.clock() - start + delay > RECONNECT_FOR_S:
                    raise lost from None
                self.sleep(delay)
                delay = min(delay * 2, 15.0)

    def _outcome_unknown(
        self,
        step: Step,
        commands: tuple[str, ...],
        results: tuple[CommandResult, ...],
        record: Callable[..., StepRecord],
    ) -> StepRecord:
        """The connection dropped mid-command: judge the step by its expected state, re-observed."""
        lost = "the connection dropped while it ran; outcome unknown, not sent again"
        if step.wait is None:
            return record(StepStatus.UNKNOWN, lost, commands=commands, results=results)
        ended = self._wait(step)
        if ended.reached:
            return record(
                StepStatus.OK,
                f"{lost}; its expected state was re-observed and holds",
                commands=commands,
                results=results,
                wait=ended,
            )
        message = f"{lost}; wait ended: {ended.reason}"
        return record(StepStatus.UNKNOWN, message, commands=commands, results=results, wait=ended)

    def _wait(self, step: Step) -> WaitEnd:
        """Poll the step's wait condition until it holds, its deadline passes, or waiting
        cannot help: the failing figures have not moved for ``settle`` seconds and every
        ``nothing_left`` check holds (nothing alive could still release them)."""
        wait = step.wait
        assert wait is not None
        start = self.clock()
        timeout, interval = self.seconds(wait.timeout), self.seconds(wait.interval)
        settle = self.seconds(wait.settle) if wait.settle is not None else None
        deadline = start + timeout
        last: tuple[str, ...] | None = None
        since = start
        while True:
            names = list(dict.fromkeys([*wait.until, *wait.nothing_left]))
            _, results = self.check(names)
            by_name = dict(zip(names, results, strict=True))
            failing = tuple(by_name[n] for n in wait.until if not by_name[n].ok)
            now = self.clock()
            if not failing:
                return WaitEnd("reached", f"reached after {now - start:.0f} s", now - start)
            figures = tuple(r.message for r in failing)
            if figures != last:
                last, since = figures, now
            self.on_event(Waiting(step, failing, now - start, timeout, now - since))
            if settle is not None and now - since >= settle:
                left = [by_name[n] for n in wait.nothing_left]
                if all_ok(left):
                    nothing = (
                        ", nothing left (" + ", ".join(wait.nothing_left) + " hold)" if left else ""
                    )
                    return WaitEnd(
                        "no-progress",
                        f"no progress for {now - since:.0f} s{nothing}: " + "; ".join(figures),
                        now - start,
                        figures,
                    )
            if now >= deadline:
                return WaitEnd(
                    "deadline",
                    f"deadline ({timeout:g} s), still: " + "; ".join(figures),
                    now - start,
                    figures,
                )
            self.sleep(min(interval, deadline - now))


def _failure_message(result: CommandResult, step: Step) -> str:
    tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
    message = f"exit status {result.exit_status}"
    if any("a password is required" in line or "sudo:" in line for line in tail):
        message += " (needs root: sudo -n was refused; log in as root or allow this user sudo without a password)"
    if tail:
        message += ": " + " | ".join(line.strip() for line in tail)
    return message


def _fields(item: Any) -> dict[str, Any]:
    """An item's plain fields (what a journal line can hold and a resume can match on)."""
    if not dataclasses.is_dataclass(item):
        return {}
    return {
        field.name: value
        for field in dataclasses.fields(item)
        if isinstance(value := getattr(item, field.name), str | int | float | bool)
    }
