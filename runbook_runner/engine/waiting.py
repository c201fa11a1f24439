"""Waiting in the engine: for a step's expected state, for a rebooted host to come back,
and what is recorded when a command's outcome cannot be known (its connection dropped).

Part of the engine (engine/runner.py's Runner is built on it); prints nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from runbook_runner.errors import ConnectionLost, HostKeyChanged, TransportError
from runbook_runner.events import (
    Reconnecting,
    StepRecord,
    WaitEnd,
    Waiting,
)
from runbook_runner.expect import (
    all_ok,
)
from runbook_runner.runbook import Step
from runbook_runner.status import StepStatus

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


from runbook_runner.engine.observing import Observing

REBOOT_GOES_DOWN_S = 120.0  # a reboot that has not dropped SSH by then did not happen
REBOOT_COMES_BACK_S = 900.0  # default wait for SSH to answer again


class Waits(Observing):
    """Waits, reboots, and commands whose outcome cannot be known."""

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
