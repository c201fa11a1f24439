"""How a run would end on the state a plan was made on (plan/planner.py's last word).

Pure. The plan's actions are walked in order with what still fails: each action that runs
is taken to fix what it is for, except where the state already says it cannot. A gated
rung reached while what it is for still fails is where the run stops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from runbook_runner.expect import CheckResult, evaluate_checks
from runbook_runner.plan.actions import Action, Ending, Timing, addressed, changes_host, step_of
from runbook_runner.plan.ladder import still_needed
from runbook_runner.runbook import Runbook, Step


def ending(
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
    is for still fails is where the run stops, and so is a blocked one."""
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
        step = step_of(runbook, action.step)
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
        if action.timing is Timing.STOPS_IF_REACHED and still_needed(step, still):
            return Ending.CANNOT_TELL, None, ()  # blocked, and reached: the run stops there
        if action.timing not in {Timing.FIRST, Timing.IF_STILL, Timing.GATED}:
            continue
        if action.timing is not Timing.FIRST and not still_needed(step, still):
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
        changed = changed or changes_host(step)
    unfixable = tuple(name for name in runbook.goal if name in still)
    if unfixable:
        return Ending.GOAL_OUT_OF_REACH, None, unfixable
    acting = [a for a in actions if a.destructive or step_of(runbook, a.step).wait]
    unknown = [r for r in goal if r.cannot_tell]
    if unknown and not acting:
        return Ending.CANNOT_TELL, None, ()  # the goal cannot be told, and nothing would act
    if all(r.ok for r in goal) and not any(a.timing is Timing.FIRST for a in acting):
        return Ending.NOTHING_TO_DO, None, ()
    return Ending.WOULD_ACT, None, ()


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
