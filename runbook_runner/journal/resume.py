"""Where a stopped run stands, from its journal: pure logic, no I/O.

The rule is "nothing done twice, nothing lost":

- a step whose end is journalled was decided (ok, skipped, failed, timed out, declined,
  unknown) and is never run again;
- a step whose start is journalled but not its end was *in flight*. If its command may
  have reached the host (a non-destructive step, or a destructive one the operator had
  confirmed), the runner re-observes its expected state before anything else, and sends a
  destructive command again only when the operator confirms it again on a terminal;
- a run that ended (a run-end that is not an interrupt or a pending confirmation), or
  whose last decided step stopped it (declined; failed, timed out or unknown with
  ``on_failure: stop``), is finished: it is not resumed. Start a new run instead: a new run
  observes the host afresh, where a resume would act on a decision already made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.runbook import Runbook
from runbook_runner.status import (
    RESUMABLE,
    STOPPING,
    ConfirmAnswer,
    OnFailure,
    RunOutcome,
    StepStatus,
)


class NotResumable(RunbookRunnerError):
    """The journal says the run must not be continued (finished, or stopped by a decision)."""


@dataclass(frozen=True)
class InFlight:
    step: str
    maybe_sent: bool  # its command may have reached the host


@dataclass(frozen=True)
class ResumePlan:
    run: str  # the run's id (as in its run-start line)
    finished: tuple[str, ...]  # steps whose end is journalled, in runbook order
    in_flight: InFlight | None
    remaining: tuple[str, ...]  # steps still to do, the in-flight one first
    # What the run's steps acted on so far (step id -> each item's fields), for the checks
    # scoped 'within: {changed_by: STEP}': a resumed run puts back what the first part took out.
    changed: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    @property
    def first(self) -> str | None:
        return self.remaining[0] if self.remaining else None


def plan(events: Sequence[Mapping[str, Any]], runbook: Runbook, run_name: str) -> ResumePlan:
    """What a resume of this journal does; raises NotResumable when it must not happen."""
    start = next((e for e in events if e.get("event") == "run-start"), None)
    if start is None:
        raise NotResumable(f"{run_name} has no run-start line: not a run journal")
    if start.get("dry_run"):
        raise NotResumable(f"run {start.get('run', run_name)} was a dry run: nothing to resume")
    run = str(start.get("run") or run_name)
    ends = [i for i, e in enumerate(events) if e.get("event") == "run-end"]
    last_session = max(
        (i for i, e in enumerate(events) if e.get("event") in {"run-start", "resume"}), default=0
    )
    ended_run = events[ends[-1]] if ends else None
    if ended_run is not None and ends[-1] > last_session:
        outcome = ended_run.get("outcome") or (
            RunOutcome.INTERRUPTED if ended_run.get("interrupted") else RunOutcome.FINISHED
        )
        if outcome not in RESUMABLE:
            result = "the goal holds" if ended_run.get("ok") else "the goal was not reached"
            raise NotResumable(
                f"run {run} already finished at {ended_run.get('t', '?')} ({outcome}: {result}); "
                "a finished run is not resumed: start a new run"
            )
    steps = {step.id: step for step in runbook.steps}
    ended: dict[str, str] = {}
    started_at: dict[str, int] = {}
    changed: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for index, event in enumerate(events):
        kind = event.get("event")
        if kind == "step-start":
            started_at[str(event.get("id"))] = index
        elif (
            kind == "step-end" and event.get("status") != StepStatus.PLANNED
        ):  # a dry run decides nothing
            step_id = str(event.get("id"))
            status = str(event.get("status"))
            ended[step_id] = status
            changed[step_id] = changed.get(step_id, ()) + _items(event.get("acted"))
            step = steps.get(step_id)
            stops = status == StepStatus.DECLINED or (
                status in STOPPING and step is not None and step.on_failure is OnFailure.STOP
            )
            if stops:
                raise NotResumable(
                    f"run {run} stopped at step {step_id!r} ({status}): that was decided, so the "
                    "run is finished; see 'runbook runs show', then start a new run"
                )
    in_flight: InFlight | None = None
    for step_id, index in started_at.items():
        if step_id in ended or step_id not in steps:
            continue
        step = steps[step_id]
        confirmed = any(
            e.get("event") == "confirmation"
            and e.get("step") == step_id
            and e.get("answer") == ConfirmAnswer.YES
            for e in events[index + 1 :]
        )
        # A destructive command is sent only after a confirmation is journalled; any other
        # command may have been sent as soon as its step started.
        in_flight = InFlight(step_id, confirmed or not step.destructive)
        if in_flight.maybe_sent:  # what it was about to act on may have been changed
            changed[step_id] = changed.get(step_id, ()) + _items(events[index].get("items"))
    finished = tuple(s.id for s in runbook.steps if s.id in ended)
    remaining = tuple(s.id for s in runbook.steps if s.id not in ended)
    if in_flight is not None and remaining and remaining[0] != in_flight.step:
        # Steps run in order: an in-flight step is the first one not ended.
        in_flight = None
    return ResumePlan(run, finished, in_flight, remaining, {k: v for k, v in changed.items() if v})


def _items(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The items a journal line says a step acted on (nothing, for a line without them)."""
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, dict))
