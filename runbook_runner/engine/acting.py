"""Acting on the host: one rung's commands sent, its wait or reboot, its record.

Part of the engine (engine/runner.py's Runner is built on it); prints nothing. What to do
is the ladder's (plan/ladder.py): this module only carries a move out. A destructive
step's commands reach the host in one place, :meth:`Acting._send`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runbook_runner.engine.waiting import Waits
from runbook_runner.errors import ConnectionLost
from runbook_runner.events import Answer, ConfirmRequest, StepRecord, StepStarting
from runbook_runner.format.template import ValueRefused
from runbook_runner.plan import identity, ladder, saved
from runbook_runner.runbook import Step
from runbook_runner.status import StepStatus

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


class Acting(Waits):
    """Carries out an :class:`~runbook_runner.plan.ladder.Act` or a ladder ``Wait``."""

    approved: saved.SavedPlan | None  # run --plan: only its commands are sent

    def act(self, move: ladder.Act | ladder.Wait, number: int, total: int) -> StepRecord:
        step = move.step
        started, t0 = self.wall_clock(), self.clock()
        items: list[Any] = list(move.items if isinstance(move, ladder.Act) else ()) or [None]
        try:  # a value that would be an option of the command: the step fails, unsent
            _ = [self.render(step.run, item) for item in items if step.run is not None]
        except ValueRefused as refused:
            return StepRecord(
                step.id,
                StepStatus.FAILED,
                started,
                self.clock() - t0,
                message=str(refused),
                left_alone=move.left_alone,
            )
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

        def record(status: StepStatus, message: str = "", **extra: Any) -> StepRecord:
            return StepRecord(
                step.id,
                status,
                started,
                self.clock() - t0,
                message=message,
                acted=acted,
                left_alone=move.left_alone,
                **extra,
            )

        self.on_event(StepStarting(step, number, total, commands, acted))
        if sent:
            # run --plan: every command is the plan's for this step and target, checked
            # before any is asked about or sent (saved.NotApproved stops the run here)
            self._approve(step, [i for i in items if i is not None] or [None], commands)
        if isinstance(move, ladder.Act) and (move.confirm or move.resend) and commands:
            answer = self.confirm(ConfirmRequest(step, commands, targets, resend=move.resend))
            if isinstance(answer, bool):
                answer = Answer(answer, "" if answer else "declined by the operator")
            if not answer.yes:
                reason = "the operator declined sending it again" if move.resend else answer.reason
                return record(StepStatus.DECLINED, reason, commands=commands, targets=targets)
        if sent or step.reboots:
            self.forget()  # the host may look different from now on
        if step.reboots:
            return self._reboot(step, sent, commands, record)
        results: list[CommandResult] = []
        for command in sent:
            try:
                result = self._send(step, command)
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
                    targets=targets,
                )
            if result.exit_status not in step.ok_exit:
                return record(
                    StepStatus.FAILED,
                    _failure_message(result),
                    exit_status=result.exit_status,
                    commands=commands,
                    results=tuple(results),
                    targets=targets,
                )
        exit_status = results[-1].exit_status if results else None
        if step.wait is not None:
            ended = self._wait(step)
            status, message = ladder.wait_verdict(ended.ended, ended.reason)
            return record(
                status,
                message,
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

    def _approve(self, step: Step, items: list[Any], commands: tuple[str, ...]) -> None:
        """Under a saved plan (run --plan), a destructive step's commands, as shown, must be
        the plan's for that step and target: the one check every send of this run passes
        (the commands below, a reboot's) before it is confirmed or sent."""
        if self.approved is None or not step.destructive:
            return
        named_by = identity.named_by(step)
        shown = [
            (identity.target(i, named_by) if i is not None else None, c)
            for i, c in zip(items, commands, strict=False)
        ]
        saved.check_sent(self.approved, step.id, shown)

    def _send(self, step: Step, command: str) -> CommandResult:
        """The one place a step's command (a destructive one's too) goes to the host: a
        last check before it is sent belongs here."""
        return self.transport.run(command, self.seconds(step.timeout), as_root=step.root)


def _failure_message(result: CommandResult) -> str:
    tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
    message = f"exit status {result.exit_status}"
    if any("a password is required" in line or "sudo:" in line for line in tail):
        message += " (needs root: sudo -n was refused; log in as root or allow this user sudo without a password)"
    if tail:
        message += ": " + " | ".join(line.strip() for line in tail)
    return message
