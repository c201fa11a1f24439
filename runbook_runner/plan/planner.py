"""The plan a reviewer approves: what a run would do on one observed state.

Pure: (runbook, parameters, observed state, the operator's gates) in, a :class:`Plan` out.
Every step is decided as the engine would decide it (plan/decide.py) on the same state:

- the actions the run takes **first**, in order, up to and including the first one that
  changes the host (exact commands and targets: these are what the run will do);
- every later rung with the **condition** under which it would still run ("only if
  gpu-memory-released still fails after reset-gpus"), since what it finds then depends on
  what the earlier ones did;
- each **restoring** step paired with the step whose change it puts back;
- rungs behind a **gate** (``--allow-reboot``, ``--allow-node-wide``) named with the gate;
- the rungs that cannot run on this state, folded into one list with why.

The plan also says how the run would end if the host does not change in between (its
:class:`Ending` and exit code): the same table ``run`` and ``check`` use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runbook_runner.exitcodes import ExitCode
from runbook_runner.expect import CheckResult, evaluate_checks
from runbook_runner.format import expr
from runbook_runner.format.template import Template
from runbook_runner.plan import decide
from runbook_runner.plan.identity import Target, named_by, target
from runbook_runner.plan.ownership import Word
from runbook_runner.runbook import Runbook, Step, Subject


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
        return ENDING_CODE[self.ending]


Render = Callable[[Template, Any], str]  # a step's command for one item, secrets masked


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


def addressed(step: Step) -> set[str]:
    """The checks a step is for: what it fixes, acts on, or waits for."""
    names = {*step.fixes}
    if step.for_each_failing:
        names.add(step.for_each_failing)
    if step.wait is not None:
        names |= set(step.wait.until)
    return names


def make_plan(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    render: Render,
    *,
    subject: Subject | None = None,
    allow_reboot: bool = False,
    allow_node_wide: bool = False,
) -> Plan:
    """The plan of a run of ``runbook`` on ``state``; ``render`` gives a command's text."""
    goal = tuple(evaluate_checks(runbook.goal, runbook, state, params, {}))
    restoring = {s.id: restored_steps(runbook, s) for s in runbook.steps}
    decisions = {
        s.id: decide.decide(
            runbook, params, state, {}, s, subject=subject, allow_node_wide=allow_node_wide
        )
        for s in runbook.steps
    }
    actions: list[Action] = []
    not_applicable: list[tuple[str, str]] = []
    not_reached: list[str] = []
    left_alone: list[str] = []
    changed_by: list[str] = []  # the actions before this point that change the host
    stopped: Ending | None = None
    stop_gate: str | None = None
    planned: set[str] = set()
    items_of: dict[str, tuple[Any, ...]] = {}

    for step in runbook.steps:
        if stopped is not None:
            not_reached.append(step.id)
            continue
        decision = decisions[step.id]
        for said in decision.left_alone:
            if said not in left_alone:
                left_alone.append(said)
        after = f" after {', '.join(changed_by)}" if changed_by else ""
        base = Action(
            step=step.id,
            title=step.title,
            timing=Timing.FIRST,
            destructive=step.destructive,
            affects=step.affects or ("node" if step.reboots else "host"),
            left_alone=decision.left_alone,
            waits=_waits(step, params),
        )
        restores = [r for r in restoring[step.id] if r in planned]
        if decision.verdict is decide.Verdict.RUN:
            commands, targets = _commands(step, decision.items, render)
            items_of[step.id] = decision.items
            gate = _gate(step, allow_reboot)
            if gate is not None:
                timing = Timing.GATED
                condition = f"needs {gate}" + (
                    f"; only if {_trigger(step, runbook.goal)}{after}" if changed_by else ""
                )
                if not changed_by:
                    stopped, stop_gate = Ending.NEEDS_GATE, gate
            elif not changed_by:
                timing, condition = Timing.FIRST, ""
            else:
                timing, condition = (
                    Timing.IF_STILL,
                    f"only if {_trigger(step, runbook.goal)}{after}",
                )
            actions.append(
                replace(
                    base,
                    timing=timing,
                    commands=commands,
                    targets=targets,
                    condition=condition,
                    gate=gate,
                )
            )
            planned.add(step.id)
            if (timing is Timing.FIRST and _changes_host(step)) or (
                timing is Timing.IF_STILL and _changes_host(step)
            ):
                changed_by.append(step.id)
            continue
        if decision.verdict is decide.Verdict.BLOCKED:
            gate = NODE_GATE if NODE_GATE in decision.message else None
            if not step.destructive:
                not_applicable.append((step.id, decision.message))
                continue
            if gate is not None:
                timing = Timing.GATED
                condition = f"needs {gate}" + (
                    f"; only if {_trigger(step, runbook.goal)}{after}" if changed_by else ""
                )
            else:
                timing = Timing.STOPS_IF_REACHED if changed_by else Timing.STOPS
                condition = f"if reached{after}: the run stops here" if changed_by else ""
            actions.append(
                replace(
                    base, timing=timing, condition=condition, gate=gate, reason=decision.message
                )
            )
            if not changed_by:
                stopped = Ending.NEEDS_GATE if gate is not None else Ending.CANNOT_TELL
                stop_gate = gate
            continue
        # Skipped on this state. A restoring step runs after the step it pairs with.
        if restores:
            paired_items = tuple(i for r in restores for i in items_of.get(r, ()))
            commands, _ = _commands(step, paired_items, render, fallback=True)
            paired = [t for r in restores for a in actions if a.step == r for t in a.targets]
            actions.append(
                replace(
                    base,
                    timing=Timing.RESTORES,
                    commands=commands,
                    targets=tuple(paired),
                    condition=f"only if {', '.join(restores)} acted: puts back what "
                    f"{'they' if len(restores) > 1 else 'it'} changed, on the same targets",
                    restores=restores[0],
                )
            )
            planned.add(step.id)
            continue
        not_applicable.append((step.id, decision.message))

    actions = _pair_restores(actions)
    ending, gate, unfixable = _ending(runbook, params, state, goal, actions, stopped, stop_gate)
    return Plan(
        runbook.name,
        goal,
        tuple(actions),
        tuple(not_applicable),
        tuple(not_reached),
        tuple(left_alone),
        unfixable,
        ending,
        gate,
    )


def _ending(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    goal: tuple[CheckResult, ...],
    actions: Sequence[Action],
    stopped: Ending | None,
    stop_gate: str | None,
) -> tuple[Ending, str | None, tuple[str, ...]]:
    """How the run would end, walking the plan in order with what still fails.

    Each action that runs is taken to fix what it is for, except where this state
    already says it cannot: a wait with nothing being torn down (its ``nothing_left``
    holds, no process is unpinning in D state, nothing before it changed the host); a
    signal to processes the kernel reports hung (``task ...:PID blocked for more than``),
    which ignore it; a restoring step whose own ``fixes`` hold (it will not run, and what it
    would put back stays as the earlier step left it). A gated rung reached while what it
    is for still fails is where the run stops."""
    all_checks = evaluate_checks(list(runbook.checks), runbook, state, params, {})
    still = {r.name for r in all_checks if r.is_failing}
    goal_failing = {r.name for r in goal if r.is_failing}
    if stopped is not None:
        return stopped, stop_gate, ()
    hung = _hung_tasks(state)
    unpinning = any(pid not in hung for pid in _in_d_state(state))
    ran: set[str] = set()
    changed = False
    for action in actions:
        step = runbook_step(runbook, action.step)
        if action.timing is Timing.RESTORES:
            if action.restores not in ran:
                continue
            if _holds(runbook, params, state, _own_fixes(step)):
                if step.for_each_failing:
                    still.add(step.for_each_failing)  # left as the earlier step made it
                continue
            still -= addressed(step)
            ran.add(step.id)
            continue
        if action.timing not in {Timing.FIRST, Timing.IF_STILL, Timing.GATED}:
            continue
        if action.timing is not Timing.FIRST and not _triggered(step, still, runbook.goal):
            continue
        if action.timing is Timing.GATED:
            unmet = sorted(goal_failing & still) or [str(step.id)]
            return Ending.NEEDS_GATE, action.gate, tuple(unmet)
        ran.add(step.id)
        if step.wait is not None and not step.destructive and not changed and not unpinning:
            left = step.wait.nothing_left
            if left and _holds(runbook, params, state, left):
                continue  # nothing is being torn down: waiting cannot help
        if (
            step.affects == "process"
            and action.targets
            and all(t.fields.get("pid") in hung for t in action.targets)
        ):
            continue  # hung in the kernel: a signal waits until the kernel lets it go
        still -= addressed(step)
        changed = changed or _changes_host(step)
    unfixable = tuple(name for name in runbook.goal if name in still)
    if unfixable:
        return Ending.GOAL_OUT_OF_REACH, None, unfixable
    acting = [a for a in actions if a.destructive or runbook_step(runbook, a.step).wait]
    unknown = [r for r in goal if r.cannot_tell]
    if unknown and not acting:
        return Ending.CANNOT_TELL, None, ()  # the goal cannot be told, and nothing would act
    if all(r.ok for r in goal) and not any(a.timing is Timing.FIRST for a in acting):
        return Ending.NOTHING_TO_DO, None, ()
    return Ending.WOULD_ACT, None, ()


def _triggered(step: Step, still: set[str], goal: Sequence[str]) -> bool:
    """Whether ``step`` would still run once what is no longer in ``still`` was fixed."""
    if step.skip_if and not set(step.skip_if) & still:
        return False
    if step.fixes and not set(step.fixes) & still:
        return False
    return not (step.for_each_failing and step.for_each_failing not in still)


_HUNG = re.compile(r"task .{0,64}?:(\d+) blocked for more than \d+ seconds")


def _hung_tasks(state: Mapping[str, Any]) -> set[int]:
    """PIDs the kernel's hung-task detector reported (``INFO: task NAME:PID blocked for more
    than N seconds``): stuck in the kernel, not merely busy unpinning."""
    found: set[int] = set()
    for records in state.values():
        for record in records if isinstance(records, tuple) else ():
            text = getattr(record, "text", None) or getattr(record, "message", None)
            if isinstance(text, str):
                found |= {int(m) for m in _HUNG.findall(text)}
    return found


def _in_d_state(state: Mapping[str, Any]) -> set[int]:
    found: set[int] = set()
    for records in state.values():
        for record in records if isinstance(records, tuple) else ():
            pid = getattr(record, "pid", None)
            if isinstance(pid, int) and getattr(record, "state", None) == "D":
                found.add(pid)
    return found


def _own_fixes(step: Step) -> tuple[str, ...]:
    return tuple(f for f in step.fixes if f != step.for_each_failing)


def _holds(
    runbook: Runbook, params: Mapping[str, Any], state: Mapping[str, Any], checks: Sequence[str]
) -> bool:
    if not checks:
        return False
    return all(r.ok for r in evaluate_checks(checks, runbook, state, params, {}))


def runbook_step(runbook: Runbook, step_id: str) -> Step:
    return next(s for s in runbook.steps if s.id == step_id)


def _pair_restores(actions: Sequence[Action]) -> list[Action]:
    by_restored: dict[str, list[str]] = {}
    for action in actions:
        if action.restores is not None:
            by_restored.setdefault(action.restores, []).append(action.step)
    return [replace(a, restored_by=tuple(by_restored.get(a.step, ()))) for a in actions]


def _waits(step: Step, params: Mapping[str, Any]) -> str:
    if step.wait is None:
        return ""
    timeout = step.wait.timeout
    if isinstance(timeout, int | float):
        limit = f"{timeout:g} s"
    else:
        try:
            limit = (
                f"{float(expr.evaluate(timeout.tree, params.__getitem__)):g} s ({timeout.source})"
            )
        except (expr.EvalError, KeyError, TypeError, ValueError):
            limit = timeout.source
    return f"until {', '.join(step.wait.until)} hold, at most {limit}"


def _gate(step: Step, allow_reboot: bool) -> str | None:
    return REBOOT_GATE if step.reboots and not allow_reboot else None


def _changes_host(step: Step) -> bool:
    """After this step the host may look different: later decisions depend on it."""
    return step.destructive or step.wait is not None or step.reboots


def _trigger(step: Step, goal: Sequence[str]) -> str:
    """What must still fail for ``step`` to run, in words."""
    checks = [step.for_each_failing] if step.for_each_failing else list(step.fixes)
    if set(checks) == set(goal):
        checks = ["the goal"]
    verb = "fails" if len(checks) <= 1 else "fail"
    text = f"{' or '.join(checks)} still {verb}" if checks else "its condition still holds"
    if step.skip_if and checks != ["the goal"]:
        held = "the goal" if set(step.skip_if) == set(goal) else " and ".join(step.skip_if)
        text += f" and {held} does not hold yet"
    return text


def _commands(
    step: Step, items: tuple[Any, ...], render: Render, *, fallback: bool = False
) -> tuple[tuple[str, ...], tuple[Target, ...]]:
    """The step's commands and targets, as the engine would send them (one command per
    distinct text: one PID on two GPUs is one target). ``fallback``: items of another
    step (a restoring step's), shown as the template where a field is not theirs."""
    named = named_by(step)
    if step.run is None:
        return (), tuple(target(item, named) for item in items)
    commands: dict[str, Any] = {}
    for item in items or (None,):
        try:
            commands.setdefault(render(step.run, item), item)
        except (AttributeError, KeyError, TypeError):
            if not fallback:
                raise
            return (step.run.source,), tuple(target(i, named) for i in items)
    return tuple(commands), tuple(target(i, named) for i in commands.values() if i is not None)
