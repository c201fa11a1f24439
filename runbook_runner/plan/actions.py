"""What a plan is made of: its actions with their timing, and how the run would end.

Pure data, shared by the planner (plan/planner.py), the prediction of the run's end
(plan/ending.py) and the saved plan (plan/saved.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runbook_runner.exitcodes import ExitCode
from runbook_runner.expect import CheckResult
from runbook_runner.plan.identity import Target
from runbook_runner.plan.ledger import Ledger, exit_code
from runbook_runner.runbook import Runbook, Step
from runbook_runner.status import Word


class Timing(Word):
    """When a planned action runs."""

    FIRST = "first"  # on this state, before anything changes: exactly these commands
    IF_STILL = "if-still"  # only if its checks still fail once the earlier actions ran
    RESTORES = "restores"  # only if the step it pairs with acted: puts back what it changed
    GATED = "gated"  # would run, but only with a gate the operator did not give
    STOPS = "stops"  # cannot tell: the run stops here, before this step
    STOPS_IF_REACHED = "stops-if-reached"  # cannot tell now: stops here if it is reached


class Ending(Word):
    """How the run would end if the host does not change before it starts."""

    NOTHING_TO_DO = "nothing-to-do"  # the goal holds; nothing would run
    WOULD_ACT = "would-act"  # the first actions run; the goal's failing checks are all addressed
    CANNOT_TELL = "cannot-tell"  # the run would stop before acting: something cannot be told
    NEEDS_GATE = "needs-gate"  # the first action needs a gate the operator did not give
    GOAL_OUT_OF_REACH = "goal-out-of-reach"  # a failing goal check no step can fix: a human's


ENDING_CODE = {
    Ending.NOTHING_TO_DO: ExitCode.OK,
    Ending.WOULD_ACT: ExitCode.OK,
    Ending.CANNOT_TELL: ExitCode.CANNOT_TELL,
    Ending.GOAL_OUT_OF_REACH: ExitCode.GOAL_NOT_MET,
}

REBOOT_GATE = "--allow-reboot"
NODE_GATE = "--allow-node-wide"


@dataclass(frozen=True)
class Action:
    step: str
    title: str
    timing: Timing
    destructive: bool
    affects: str  # blast radius: process, gpu, service, files, node, or 'host' (read-only)
    commands: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    condition: str = ""  # when it runs (for every timing but FIRST)
    gate: str | None = None
    restores: str | None = None  # the step whose change it puts back
    restored_by: tuple[str, ...] = ()
    left_alone: tuple[str, ...] = ()
    reason: str = ""  # why it is blocked (STOPS, STOPS_IF_REACHED)
    waits: str = ""  # what it then waits for, and how long at most


@dataclass(frozen=True)
class Plan:
    runbook: str
    goal: tuple[CheckResult, ...]
    actions: tuple[Action, ...]
    not_applicable: tuple[tuple[str, str], ...]  # (step, why it cannot run on this state)
    not_reached: tuple[str, ...]  # steps after the point where the run would stop
    left_alone: tuple[str, ...]  # what ownership keeps every step from, with why
    unfixable: tuple[str, ...]  # failing goal checks no step of the plan addresses
    ending: Ending
    gate: str | None = None  # the gate the first action needs, for NEEDS_GATE
    ledger: Ledger = field(default_factory=Ledger)  # GPUs no rung would change (foreseen)

    @property
    def first(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.timing is Timing.FIRST)

    @property
    def exit_code(self) -> ExitCode:
        """What the run would end with on this state: the same table as ``run``'s."""
        if self.ending is Ending.NEEDS_GATE:
            # A reboot not allowed leaves the goal unmet (1); a node-wide rung beside
            # another owner stops as "cannot tell" (6), as the run does.
            return ExitCode.GOAL_NOT_MET if self.gate == REBOOT_GATE else ExitCode.CANNOT_TELL
        return exit_code(self.ledger, ENDING_CODE[self.ending])


def addressed(step: Step) -> set[str]:
    """The checks a step is for: what it fixes, acts on, or waits for."""
    names = {*step.fixes}
    if step.for_each_failing:
        names.add(step.for_each_failing)
    if step.wait is not None:
        names |= set(step.wait.until)
    return names


def step_of(runbook: Runbook, step_id: str) -> Step:
    return next(s for s in runbook.steps if s.id == step_id)


def changes_host(step: Step) -> bool:
    """After this step the host may look different: later decisions depend on it."""
    return step.destructive or step.wait is not None or step.reboots


def restored_steps(runbook: Runbook, step: Step) -> tuple[str, ...]:
    """The steps whose change ``step`` puts back: its checks are scoped to the items those
    steps acted on (``within: {changed_by: STEP}``)."""
    if step.for_each_failing:
        names = [step.for_each_failing]
    else:
        names = [] if set(step.fixes) <= set(runbook.goal) else list(step.fixes)
    found: list[str] = []
    for name in names:
        check = runbook.checks.get(name)
        within = check.within if check is not None else None
        if within is not None and within.changed_by and within.changed_by not in found:
            found.append(within.changed_by)
    return tuple(found)
