"""The escalation ladder: what a run does next, as data. One pure function, three users.

:func:`next_move` is (runbook, parameters, observed state, history) -> the next move with
its reason, as controller-runtime's ``Reconcile`` returns its result: :class:`Act` (send
the step's commands on these items), :class:`Wait` (a rung that only waits), :class:`Skip`
(not needed, or not possible for a read-only rung), :class:`Stop` (the run ends here: a
destructive rung that cannot be told, a "no", a failure under ``on_failure: stop``, a
saved plan whose host moved) or :class:`Done` (no rung left). The engine observes what
:func:`needs` names, asks :func:`next_move`, confirms, acts and records (:meth:`History.then`);
``runbook plan`` walks the same function over the observed state for the first rung and
over stated assumptions (what a rung that acted is for no longer fails: :func:`still_needed`) for
the later ones. Nothing here observes or acts:
every rule of the loop is tested with no host, as ansible's PlayIterator is.

The rules, each in one place here:

- the order: the runbook's steps, from ``--from`` on, less a resumed run's finished ones;
- the in-flight rule: a resumed run's step that may have been sent is judged by its
  expected state first (its wait, else its skip_if, else its for_each_failing, else the
  goal); when that holds nothing is sent again; otherwise a destructive one is asked again;
- when the run stops: a destructive rung blocked, a "no", a stopping status under
  ``on_failure: stop``;
- the wait's verdict: a wait that reached its condition, or that ended as designed (no
  change for ``settle`` with nothing left that could release it), is not a failure;
- "reached by": the rung after which the goal held;
- the gates: a reboot needs ``--allow-reboot``; a saved plan lets a rung act only on its
  targets;
- restore pairing, for the plan: a restoring rung runs only if the rung it pairs with acted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runbook_runner.expect import all_ok, evaluate_checks
from runbook_runner.plan import decide, identity
from runbook_runner.plan.actions import NODE_GATE, REBOOT_GATE, changes_host, restored_steps
from runbook_runner.runbook import Runbook, Step, Subject
from runbook_runner.status import NOT_EXECUTED, STOPPING, StepStatus, Word

IN_FLIGHT = "in flight when the run stopped (whether its command reached the host is unknown)"


class Approved(Protocol):
    """What a saved plan (plan/saved.py's SavedPlan) lets a run do."""

    def steps(self) -> set[str]: ...

    def targets_of(self, step: str) -> set[tuple[str, str]]: ...


@dataclass(frozen=True)
class Gates:
    """What the operator allowed: the gates, and a saved plan's steps and targets."""

    allow_reboot: bool = False
    allow_node_wide: bool = False
    approved: Approved | None = None


# -- what the run has done ------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    """One rung as it ended: enough for the loop's rules (not the whole record)."""

    step: str
    status: StepStatus
    holds: bool = False  # skipped because its skip_if held
    wait: str | None = None  # how its wait ended: reached, no-progress, deadline


@dataclass(frozen=True)
class History:
    """The steps this run walks, in order, and how those it reached ended."""

    order: tuple[str, ...]
    rungs: tuple[Rung, ...] = ()
    changed: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    in_flight: str | None = None  # a resumed run's step whose command may have been sent
    moved: tuple[str, ...] = ()  # a saved plan's targets that moved since it was made
    halted: Stop | None = None  # why the run stopped; only put-back rungs are left to walk
    halted_at: int = -1  # how many rungs had ended when it stopped

    @classmethod
    def start(
        cls,
        runbook: Runbook,
        *,
        from_step: str | None = None,
        remaining: Sequence[str] | None = None,
        in_flight: str | None = None,
        changed: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        moved: Sequence[str] = (),
    ) -> History:
        """A run's history before its first rung: ``remaining`` (a resume's) or ``from_step``
        narrow the ladder."""
        order = [s.id for s in runbook.steps]
        if remaining is not None:
            order = [s for s in order if s in set(remaining)]
        elif from_step is not None:
            order = order[order.index(from_step) :]
        return cls(tuple(order), (), dict(changed or {}), in_flight, tuple(moved))

    def then(self, rung: Rung, acted: Sequence[Mapping[str, Any]] = ()) -> History:
        """The history once ``rung`` ended; ``acted``: the items its commands went to."""
        changed = dict(self.changed)
        if acted and rung.status in {
            StepStatus.OK,
            StepStatus.FAILED,
            StepStatus.TIMED_OUT,
            StepStatus.UNKNOWN,
        }:
            changed[rung.step] = [*changed.get(rung.step, ()), *acted]
        return replace(self, rungs=(*self.rungs, rung), changed=changed)

    def halt(self, runbook: Runbook, stop: Stop) -> History:
        """The history once the run stopped (a rung blocked, a "no", a failure under
        ``on_failure: stop``): what is left to walk is only the rungs that put back what
        this run changed (restored_steps: a unit it stopped, a GPU it took out of
        persistence), whatever the end. The first stop is the run's reason."""
        done = len(self.rungs)
        rest = self.order[done:]
        if stop.step is not None and rest and rest[0] == stop.step.id:
            rest = rest[1:]
        acted = {name for name, items in self.changed.items() if items}
        back = tuple(
            name for name in rest if set(restored_steps(runbook, step_of(runbook, name))) & acted
        )
        return replace(
            self,
            order=(*self.order[:done], *back),
            halted=self.halted or stop,
            halted_at=done,
        )

    @property
    def next_step(self) -> str | None:
        done = len(self.rungs)
        return self.order[done] if done < len(self.order) else None


# -- the moves ------------------------------------------------------------------------------


class Kind(Word):
    ACT = "act"
    WAIT = "wait"
    SKIP = "skip"
    STOP = "stop"
    DONE = "done"


@dataclass(frozen=True)
class Act:
    """Send the step's commands, on ``items`` (empty: once)."""

    step: Step
    items: tuple[Any, ...] = ()
    left_alone: tuple[str, ...] = ()
    confirm: bool = False  # a destructive rung with commands: asked first (or --yes)
    resend: str = ""  # a resumed in-flight rung: why it is asked again (even with --yes)
    gate: str | None = None  # the gate it needs (the run's confirmation decides)
    kind: Kind = Kind.ACT

    @property
    def reason(self) -> str:
        return self.resend or ""


@dataclass(frozen=True)
class Wait:
    """A rung with no command: it only waits for its condition."""

    step: Step
    left_alone: tuple[str, ...] = ()
    kind: Kind = Kind.WAIT
    reason: str = ""


@dataclass(frozen=True)
class Skip:
    """Not needed here, or a read-only rung that cannot be told (``status`` says which)."""

    step: Step
    reason: str
    status: StepStatus = StepStatus.SKIPPED
    holds: bool = False  # its skip_if holds
    left_alone: tuple[str, ...] = ()
    kind: Kind = Kind.SKIP


@dataclass(frozen=True)
class Stop:
    """The run ends here. ``step``: the rung it stops before (recorded as blocked), or None
    when the last rung ended it."""

    reason: str
    step: Step | None = None
    gate: str | None = None
    left_alone: tuple[str, ...] = ()
    kind: Kind = Kind.STOP


@dataclass(frozen=True)
class Done:
    reason: str = "no rung left"
    kind: Kind = Kind.DONE


Move = Act | Wait | Skip | Stop | Done


def step_of(runbook: Runbook, step_id: str) -> Step:
    return next(s for s in runbook.steps if s.id == step_id)


def expected(runbook: Runbook, step: Step) -> tuple[str, ...]:
    """What holds once ``step`` did its work: its wait, else skip_if, else
    for_each_failing, else the goal (the in-flight rule reads it)."""
    if step.wait is not None:
        return tuple(step.wait.until)
    if step.skip_if:
        return tuple(step.skip_if)
    if step.for_each_failing:
        return (step.for_each_failing,)
    return tuple(runbook.goal)


def needs(runbook: Runbook, history: History) -> list[str]:
    """The observations :func:`next_move` reads for the next rung (none when the run ends)."""
    if _ended(runbook, history) is not None or history.moved:
        return []
    name = history.next_step
    if name is None:
        return []
    step = step_of(runbook, name)
    wanted = set(decide.observations_needed(runbook, step))
    if history.in_flight == step.id:
        wanted |= set(runbook.observations_of(expected(runbook, step)))
    return [n for n in runbook.observations if n in wanted]


def _ended(runbook: Runbook, history: History) -> Stop | None:
    """Whether the last rung ended the run (a "no", a failure under on_failure: stop)."""
    if not history.rungs or len(history.rungs) == history.halted_at:
        return None
    last = history.rungs[-1]
    step = step_of(runbook, last.step)
    if last.status == StepStatus.DECLINED:
        return Stop(f"step {last.step!r} was not confirmed")
    if last.status in STOPPING and step.on_failure == "stop":
        return Stop(f"step {last.step!r} ended {last.status} (on_failure: stop)")
    return None


def next_move(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    history: History,
    *,
    subject: Subject | None = None,
    gates: Gates = Gates(),
) -> Move:
    """The run's next move on ``state`` (what :func:`needs` names), with its reason."""
    if history.moved:
        return Stop(
            "blocked: cannot tell: the host changed since the plan was made: "
            + "; ".join(history.moved)
            + " (make the plan again and have it approved again)"
        )
    stopped = _ended(runbook, history)
    if stopped is not None:
        return stopped
    name = history.next_step
    if name is None:
        return Done(history.halted.reason) if history.halted is not None else Done()
    step = step_of(runbook, name)
    if history.in_flight == step.id:
        wanted = expected(runbook, step)
        results = evaluate_checks(wanted, runbook, state, params, history.changed)
        if all_ok(results):
            return Skip(
                step,
                f"{IN_FLIGHT}; its expected state holds: {', '.join(wanted)}; not sent again",
                StepStatus.OK,
            )
        if step.destructive:
            failing = "; ".join(r.message for r in results if not r.ok)
            resend = (
                f"step {step.id!r} was {IN_FLIGHT}, and its expected state does not hold "
                f"({failing})"
            )
            return _move(runbook, params, state, history, step, subject, gates, resend)
    return _move(runbook, params, state, history, step, subject, gates, "")


def _move(
    runbook: Runbook,
    params: Mapping[str, Any],
    state: Mapping[str, Any],
    history: History,
    step: Step,
    subject: Subject | None,
    gates: Gates,
    resend: str,
) -> Move:
    decision = decide.decide(
        runbook,
        params,
        state,
        history.changed,
        step,
        subject=subject,
        allow_node_wide=gates.allow_node_wide,
    )
    if gates.approved is not None:
        decision = as_approved(step, decision, gates.approved)
    if decision.verdict is decide.Verdict.BLOCKED:
        if step.destructive:
            gate = NODE_GATE if NODE_GATE in decision.message else None
            return Stop(decision.message, step, gate, decision.left_alone)
        return Skip(step, decision.message, StepStatus.BLOCKED, left_alone=decision.left_alone)
    if decision.verdict is decide.Verdict.SKIP:
        return Skip(step, decision.message, holds=decision.holds, left_alone=decision.left_alone)
    if step.run is None and not step.reboots:
        return Wait(step, decision.left_alone)
    return Act(
        step,
        decision.items,
        decision.left_alone,
        confirm=step.destructive and step.run is not None,
        resend=resend,
        gate=REBOOT_GATE if step.reboots and not gates.allow_reboot else None,
    )


def as_approved(step: Step, decision: decide.Decision, approved: Approved) -> decide.Decision:
    """Under a saved plan a rung runs only if the plan has it, and only on its targets:
    what it would act on beyond them is left alone, and said so."""
    if decision.verdict is not decide.Verdict.RUN:
        return decision
    if step.id not in approved.steps():
        return decide.Decision(decide.Verdict.SKIP, "not in the approved plan")
    allowed = approved.targets_of(step.id)
    if not decision.items:
        return decision
    named_by = identity.named_by(step)
    kept: list[Any] = []
    beyond: list[Any] = []
    for item in decision.items:
        named = identity.target(item, named_by)
        (kept if (named.kind, named.key) in allowed else beyond).append(item)
    left = tuple(f"{identity.target(i, named_by).text}: not in the approved plan" for i in beyond)
    if not kept:
        return decide.Decision(
            decide.Verdict.SKIP,
            "left alone: " + "; ".join(left),
            left_alone=decision.left_alone + left,
        )
    return decide.Decision(
        decide.Verdict.RUN, items=tuple(kept), left_alone=decision.left_alone + left
    )


# -- how a rung and the run end -------------------------------------------------------------


def wait_verdict(ended: str, reason: str) -> tuple[StepStatus, str]:
    """A step's status from how its wait ended. Reached: ok. No change for ``settle`` with
    nothing left that could release it: ok too, the wait did its job (it showed waiting
    cannot help): on to the next rung. Only a deadline is a failure."""
    if ended == "reached":
        return StepStatus.OK, f"wait ended: {reason}"
    if ended == "no-progress":
        said = reason.replace("no progress for", "no change for", 1)
        head, _, figures = said.partition("): ") if "): " in said else said.partition(": ")
        head += ")" if "): " in said else ""
        still = f"; still: {figures}" if figures else ""
        return StepStatus.OK, f"{head}: waiting cannot help, on to the next rung{still}"
    return StepStatus.FAILED, f"wait ended: {reason}"


def reached_by(runbook: Runbook, history: History, goal_holds: bool) -> str | None:
    """The rung after which the goal held: one whose wait for the goal was reached; else
    the last rung that executed before one skipped because the goal held; else, when the
    goal holds at the end, the last rung that executed (None: nothing needed doing). A
    rung that cannot change the host (a look: not destructive, no wait) reaches nothing,
    nor does one that puts back what an earlier rung changed (restore-persistence)."""
    goal = set(runbook.goal)
    last: str | None = None
    for rung in history.rungs:
        step = step_of(runbook, rung.step)
        if (
            rung.status == StepStatus.OK
            and step.wait is not None
            and rung.wait != "no-progress"
            and goal <= set(step.wait.until)
        ):
            return rung.step
        if rung.holds and goal <= set(step.skip_if) and last is not None:
            return last
        if (
            rung.status not in NOT_EXECUTED
            and changes_host(step)
            and not restored_steps(runbook, step)
        ):
            last = rung.step
    return last if goal_holds else None


# -- the plan's assumptions -----------------------------------------------------------------


def still_needed(step: Step, still: set[str]) -> bool:
    """Whether ``step`` would still run once what is no longer in ``still`` was fixed."""
    if step.skip_if and not set(step.skip_if) & still:
        return False
    if step.fixes and not set(step.fixes) & still:
        return False
    return not (step.for_each_failing and step.for_each_failing not in still)
