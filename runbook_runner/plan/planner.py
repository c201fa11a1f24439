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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runbook_runner.expect import evaluate_checks
from runbook_runner.format import expr
from runbook_runner.format.template import Template
from runbook_runner.plan import decide, ladder
from runbook_runner.plan.actions import (
    ENDING_CODE,
    NODE_GATE,
    REBOOT_GATE,
    Action,
    Ending,
    Plan,
    Timing,
    addressed,
    changes_host,
    restored_steps,
)
from runbook_runner.plan.ending import ending
from runbook_runner.plan.identity import Target, named_by, target
from runbook_runner.plan.ledger import Ledger, ledger_of
from runbook_runner.runbook import Runbook, Step, Subject
from runbook_runner.status import StepStatus

__all__ = [
    "ENDING_CODE",
    "NODE_GATE",
    "REBOOT_GATE",
    "Action",
    "Ending",
    "Plan",
    "Target",
    "Timing",
    "addressed",
    "make_plan",
    "restored_steps",
]

Render = Callable[[Template, Any], str]  # a step's command for one item, secrets masked


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
    decisions = _walk(
        runbook,
        params,
        state,
        subject,
        ladder.Gates(allow_reboot=allow_reboot, allow_node_wide=allow_node_wide),
    )
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
            if (timing is Timing.FIRST and changes_host(step)) or (
                timing is Timing.IF_STILL and changes_host(step)
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
    finish, gate, unfixable = ending(runbook, params, state, goal, actions, stopped, stop_gate)
    return Plan(
        runbook.name,
        goal,
        tuple(actions),
        tuple(not_applicable),
        tuple(not_reached),
        tuple(left_alone),
        unfixable,
        finish,
        gate,
        ledger_of(state, params, state).foreseen() if runbook.subject is not None else Ledger(),
    )


def _walk(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    subject: Subject | None,
    gates: ladder.Gates,
) -> dict[str, decide.Decision]:
    """Each rung's move as the run's ladder (plan/ladder.py) makes it on ``state``: the
    first rung's is the run's own; a later one's holds on the stated assumption that the
    host looks as it does now, and is shown with the condition it needs then."""
    history = ladder.History.start(runbook)
    found: dict[str, decide.Decision] = {}
    while True:
        move = ladder.next_move(runbook, params, state, history, subject=subject, gates=gates)
        if isinstance(move, ladder.Done) or (isinstance(move, ladder.Stop) and move.step is None):
            return found
        assert not isinstance(move, ladder.Done)
        step = move.step
        assert step is not None
        if isinstance(move, ladder.Act):
            found[step.id] = decide.Decision(
                decide.Verdict.RUN, items=move.items, left_alone=move.left_alone
            )
            assumed = ladder.Rung(step.id, StepStatus.OK)
        elif isinstance(move, ladder.Wait):
            found[step.id] = decide.Decision(decide.Verdict.RUN, left_alone=move.left_alone)
            assumed = ladder.Rung(step.id, StepStatus.OK)
        elif isinstance(move, ladder.Stop) or move.status == StepStatus.BLOCKED:
            found[step.id] = decide.Decision(
                decide.Verdict.BLOCKED, move.reason, left_alone=move.left_alone
            )
            assumed = ladder.Rung(step.id, StepStatus.BLOCKED)
        else:
            found[step.id] = decide.Decision(
                decide.Verdict.SKIP, move.reason, holds=move.holds, left_alone=move.left_alone
            )
            assumed = ladder.Rung(step.id, StepStatus.SKIPPED, move.holds)
        history = history.then(assumed)


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
