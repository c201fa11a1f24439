"""What a step does next: a pure function of (runbook, parameters, observed state).

The engine observes once (:func:`observations_needed`), then asks :func:`decide`: run on
these items (those ownership lets it touch), skip (with why), or blocked (cannot tell,
or a gate). Nothing here observes or acts, so every decision can be tested over states
that no host has to produce, as a Kubernetes reconciler's decision is a function of the
desired and the observed state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.expect import (
    Changed,
    CheckResult,
    all_ok,
    evaluate_check,
    evaluate_checks,
    evaluate_when,
    outcome,
)
from runbook_runner.format.actions import ActionKind
from runbook_runner.observe.state import Unavailable
from runbook_runner.plan import fabric, permission
from runbook_runner.runbook import Runbook, Step, Subject
from runbook_runner.status import RUNNER_CONDITIONS, CheckStatus, Condition, Word


class Verdict(Word):
    RUN = "run"
    SKIP = "skip"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    message: str = ""
    holds: bool = False  # skipped because its skip_if holds (not merely nothing to do)
    items: tuple[Any, ...] = ()  # what it acts on (empty: it runs once)
    left_alone: tuple[str, ...] = ()  # what ownership kept it from, with why
    # The same, as records (what, whose, why, the command to look at it): for a run's verdict.
    held_back: tuple[permission.LeftAlone, ...] = ()


# What nvidia-smi says runs in each MIG instance (nvidia-smi -q -d PIDS): a node-wide rung
# reaches every instance, and one in use by a process no holder record is cannot be scoped.
_INSTANCES = "gpu-processes-detail"


def observations_needed(runbook: Runbook, step: Step) -> list[str]:
    """Every observation :func:`decide` reads for this step, in the runbook's order."""
    checks = [*step.skip_if, *step.fixes]
    if step.for_each_failing:
        checks.append(step.for_each_failing)
    names = set(runbook.observations_of(checks))
    if step.when is not None:
        names |= set(runbook.observations_read_by(step.when))
    if step.destructive and runbook.subject is not None:
        names |= {n for n, o in runbook.observations.items() if o.parser == "process-owners"}
        if _resets(step):
            names |= {n for n, o in runbook.observations.items() if o.parser == "gpu-fabric"}
        if step.affects == "node":
            names |= {n for n, o in runbook.observations.items() if o.parser == _INSTANCES}
    return [name for name in runbook.observations if name in names]


def decide(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    changed: Changed,
    step: Step,
    *,
    subject: Subject | None = None,
    allow_node_wide: bool = False,
) -> Decision:
    """Whether ``step`` runs on ``state``, and on what.

    A step runs only on evidence: its ``skip_if`` does not all hold, its ``when`` is true,
    one of the checks it ``fixes`` is failing, and its ``for_each_failing`` check fails
    for some items. Where any of these cannot be told, the step is blocked, never run;
    except a step told its ``for_each_failing`` check holds: it has nothing to act on, so an
    unknown elsewhere holds nothing back here. A destructive step of a runbook with a
    subject then acts only on what ownership allows.
    """

    def blocked(results: Sequence[CheckResult] | None, reason: str = "") -> Decision:
        told = reason or "; ".join(r.message for r in results or () if r.cannot_tell)
        return Decision(
            Verdict.BLOCKED, f"blocked: cannot tell: {told}{how_to_fix(runbook, state)}"
        )

    if step.skip_if:
        holding = evaluate_checks(step.skip_if, runbook, state, params, changed)
        if all_ok(holding):
            return Decision(Verdict.SKIP, "already holds: " + ", ".join(step.skip_if), holds=True)
    if step.when is not None:
        value = evaluate_when(step.when, runbook, state, params)
        if isinstance(value, str):
            return blocked(None, f"when {step.when.source}: {value}")
        if not value:
            return Decision(Verdict.SKIP, f"when is false: {step.when.source}")
    each = (
        evaluate_check(runbook.checks[step.for_each_failing], runbook, state, params, changed)
        if step.for_each_failing
        else None
    )
    if step.fixes:
        fixing = evaluate_checks(step.fixes, runbook, state, params, changed)
        verdict = outcome(fixing)
        if verdict == CheckStatus.OK:
            return Decision(Verdict.SKIP, "nothing to fix: " + ", ".join(step.fixes) + " hold")
        # A rung told it has nothing to act on touches nothing: an unknown it fixes holds
        # nothing back here (it is skipped below as not needed).
        if verdict == CheckStatus.CANNOT_TELL and not (each is not None and each.ok):
            return blocked(fixing)
    items: tuple[Any, ...] = ()
    if each is not None:
        if each.cannot_tell:
            return blocked([each])
        if each.ok:
            return Decision(Verdict.SKIP, f"nothing to act on: {each.name} holds")
        items = tuple(each.failing)
    missing = [m for item in items or (None,) for m in unreported(step, item, params)]
    if missing:
        return blocked(None, "; ".join(missing))
    if not step.destructive or subject is None:
        return Decision(Verdict.RUN, items=items)
    return _owned(runbook, state, step, items, subject, allow_node_wide)


def _owned(
    runbook: Runbook,
    state: Mapping[str, Any],
    step: Step,
    items: tuple[Any, ...],
    subject: Subject,
    allow_node_wide: bool,
) -> Decision:
    """Ownership's last word: only what is the subject's and broken."""
    names = [n for n, o in runbook.observations.items() if o.parser == "process-owners"]
    unavailable = [state[n] for n in names if isinstance(state.get(n), Unavailable)]
    if unavailable or not all(n in state for n in names):
        reason = unavailable[0].reason if unavailable else "the process owners were not observed"
        return Decision(Verdict.BLOCKED, f"blocked: cannot tell who owns what: {reason}")
    owners = tuple(row for n in names for row in state[n])
    if step.affects == "node":
        unseen = permission.unseen_instance_users(_instance_users(runbook, state), owners)
        if unseen:
            return Decision(
                Verdict.BLOCKED,
                "blocked: a node-wide action while a MIG instance is in use by a process no "
                "holder of /dev/nvidia* is (a reset needs the GPU idle, and its instances do "
                "not survive it): " + "; ".join(unseen),
            )
    allowed = permission.permitted(
        subject,
        step.affects,
        list(items) or [None],
        owners,
        allow_node_wide=allow_node_wide,
        stops=step.action.kind is ActionKind.UNIT_STOP,  # the GPU services' stop: node-wide
        reach=_reach(runbook, state) if _resets(step) else None,
    )
    if allowed.blocked:
        return Decision(
            Verdict.BLOCKED,
            "blocked: " + "; ".join(allowed.blocked),
            left_alone=allowed.left_alone,
            held_back=allowed.held_back,
        )
    if not allowed.allowed:
        return Decision(
            Verdict.SKIP,
            "left alone: " + "; ".join(allowed.left_alone),
            left_alone=allowed.left_alone,
            held_back=allowed.held_back,
        )
    items = tuple(item for item in allowed.allowed if item is not None)
    if _resets(step) and step.action.kind is ActionKind.GPU_RESET:
        # Where a reset is fabric-wide, its GPUs are named in one command (plan/fabric.py).
        items = fabric.together(items, _fabric(runbook, state))
    return Decision(
        Verdict.RUN, items=items, left_alone=allowed.left_alone, held_back=allowed.held_back
    )


def _instance_users(runbook: Runbook, state: Mapping[str, Any]) -> tuple[Any, ...]:
    """The processes nvidia-smi lists in MIG instances, where it was asked and answered
    (not asked, or no answer: no evidence of one, as before)."""
    names = [n for n, o in runbook.observations.items() if o.parser == _INSTANCES]
    return tuple(
        row
        for n in names
        if isinstance(state.get(n), tuple)
        for row in state[n]
        if getattr(row, "gpu_instance_id", None) is not None
    )


def _resets(step: Step) -> bool:
    """A step that resets GPUs (what the reset reaches may be more than its GPU), or takes
    a GPU out of persistence mode, which only serves the reset that follows it: where that
    reset is held back, so is this."""
    return step.affects == "gpu" and step.action.kind in _RESETTING


_RESETTING = frozenset({ActionKind.GPU_RESET, ActionKind.PERSISTENCE_OFF})


def _reach(runbook: Runbook, state: Mapping[str, Any]) -> Callable[[int], fabric.Reach] | None:
    """What a GPU reset reaches, from the runbook's ``gpu-fabric`` observations (None: the
    runbook has none, and a reset reaches its GPU as before). Not observed, or not
    answered: cannot tell, which reaches the whole node."""
    names = [n for n, o in runbook.observations.items() if o.parser == "gpu-fabric"]
    if not names:
        return None
    unread = [n for n in names if n not in state or isinstance(state[n], Unavailable)]
    if unread:
        value = state.get(unread[0])
        told = value.reason if isinstance(value, Unavailable) else "not observed"
        return lambda minor: fabric.Reach(None, f"what a reset reaches cannot be told: {told}")
    records = tuple(row for n in names for row in state[n])
    return lambda minor: fabric.reset_reach(minor, records)


def _fabric(runbook: Runbook, state: Mapping[str, Any]) -> tuple[Any, ...]:
    """The runbook's ``gpu-fabric`` records, as observed (none: not observed or not
    answered, and no GPU is grouped with another)."""
    names = [n for n, o in runbook.observations.items() if o.parser == "gpu-fabric"]
    if any(n not in state or isinstance(state[n], Unavailable) for n in names):
        return ()
    return tuple(row for n in names for row in state[n])


def unreported(step: Step, item: Any, params: Mapping[str, Any]) -> list[str]:
    """The values a step's command needs that were not reported (None): never sent as the
    word 'None' (``kill -TERM None``), the step is blocked instead."""
    if step.run is None:
        return []
    missing = []
    for placeholder in step.run.placeholders:
        name = placeholder.name
        if name.startswith("item."):
            if item is not None and getattr(item, name[5:], None) is None:
                describe = getattr(item, "describe", None)
                said = str(describe()) if callable(describe) else "an item"
                missing.append(f"{said}: {name[5:]} was not reported")
        elif params.get(name) is None:
            missing.append(f"parameter {name} has no value (--set {name}=...)")
    return missing


def how_to_fix(runbook: Runbook, state: Mapping[str, Any]) -> str:
    """What to do about the first observation that could not be made, for a blocked step."""
    unavailable = [(n, v) for n, v in state.items() if isinstance(v, Unavailable)]
    if not unavailable:
        return ""
    name, value = unavailable[0]
    if value.condition == Condition.NOT_FOUND:
        return f" (fix: install the command {name} runs, or put it on the login's PATH)"
    if value.condition in RUNNER_CONDITIONS:
        source = runbook.observations[name].source
        return f" (fix: make '{source}' work on the host; 'runbook check' shows what is observed)"
    return (
        f" (fix: the host reports {value.condition!r}; a runbook acts on it only with a step "
        f"'when: {name}.condition == {value.condition!r}')"
    )
