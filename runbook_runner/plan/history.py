"""Memory across runs (issue 47, item 1): the journals' records -> each attempt a run made
on a GPU, with its outcome -> whether a run may make one more. Pure: journal events (the
dicts of each line) in, decisions out; finding and reading the files is the caller's.

The rules, each in one place here:

- **An attempt** is a step the caller counts (``steps``: the rungs that reset or reboot)
  that was started on GPUs: its ``step-start`` items (its ``step-end``'s ``acted`` when
  there is one). A GPU is named by its UUID (its serial when no UUID was read): an index
  changes across reboots and a PCI address across slots, a UUID does not. A dry run's
  journal has no attempts.
- **Its outcome** (:class:`Outcome`), one per attempt: ``succeeded`` (the step ended ok and
  the run ended with its goal reached); ``did-not-help`` (the step failed or timed out, or
  the run ended without its goal); ``unknown`` (the step's end is unknown, or the journal
  stops between its start and its end, or after it without the run's end: a crash or a
  lost connection while the command may have run); ``cancelled`` (declined or blocked:
  nothing was sent).
- **An incident** is one run's attempts on one GPU: a ladder that resets, then resets
  again out of persistence mode, is one incident.
- **The decision** (:func:`decide`): a GPU with an attempt whose outcome is unknown in the
  window is not acted on again automatically, whatever the budget; a GPU with
  ``budget.incidents`` incidents in the window (cancelled attempts do not count) is handed to
  a person, with its history. Otherwise the run may act.

The defaults (:class:`Budget`): two incidents in seven days, so never a third automatic
reset inside a week. They follow the anchors issue 47 names: NVIDIA NVSentinel hands a node
to a person after more than one remediation in 7 days; leptonai/gpud sends a GPU to
hardware inspection after 2 reboots that did not cure it (the figures as the issue quotes
them; not yet checked against those projects' sources).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from runbook_runner.status import Word

DAY_S = 86_400.0


class Outcome(Word):
    SUCCEEDED = "succeeded"
    DID_NOT_HELP = "did-not-help"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"


class Verdict(Word):
    MAY_ACT = "may-act"
    OUTCOME_UNKNOWN = "outcome-unknown"  # an earlier attempt's result is not known: a person
    BUDGET_SPENT = "budget-spent"  # budget.incidents incidents in the window: a person


@dataclass(frozen=True)
class Attempt:
    gpu: str  # its UUID (or serial)
    host: str
    run: str
    step: str
    at: datetime  # the step's start
    outcome: Outcome


@dataclass(frozen=True)
class Budget:
    incidents: int = 2  # incidents on one GPU in the window; the next goes to a person
    window_s: float = 7 * DAY_S


@dataclass(frozen=True)
class Decision:
    gpu: str
    verdict: Verdict
    history: tuple[Attempt, ...]  # its attempts in the window, oldest first
    budget: Budget

    @property
    def may_act(self) -> bool:
        return self.verdict is Verdict.MAY_ACT

    @property
    def incidents(self) -> int:
        return len(_incidents(self.history))


_ENDED = {
    "ok": None,  # decided by the run's end
    "failed": Outcome.DID_NOT_HELP,
    "timed_out": Outcome.DID_NOT_HELP,
    "unknown": Outcome.UNKNOWN,
    "declined": Outcome.CANCELLED,
    "blocked": Outcome.CANCELLED,
}


def attempts(journal: Iterable[Mapping[str, Any]], steps: Iterable[str]) -> tuple[Attempt, ...]:
    """One journal's attempts on GPUs, in the order they were started."""
    counted = frozenset(steps)
    host = run = ""
    dry = False
    started: dict[str, tuple[datetime, tuple[str, ...]]] = {}  # step -> when, GPUs
    ended: list[tuple[str, datetime, tuple[str, ...], Outcome | None]] = []
    run_ok: bool | None = None
    for event in journal:
        kind = event.get("event")
        if kind == "run-start":
            host, run = str(event.get("host", "")), str(event.get("run", ""))
            dry = bool(event.get("dry_run"))
        elif kind == "step-start" and event.get("id") in counted:
            gpus = _gpus(event.get("items"))
            if gpus:
                started[str(event["id"])] = (_when(event), gpus)
        elif kind == "step-end" and event.get("id") in started:
            step = str(event["id"])
            at, gpus = started.pop(step)
            status = str(event.get("status"))
            if status not in _ENDED:  # skipped, planned: nothing was sent
                continue
            ended.append((step, at, _gpus(event.get("acted")) or gpus, _ENDED[status]))
        elif kind == "run-end":
            run_ok = bool(event.get("ok"))
    if dry:
        return ()
    # A step that ended ok is judged by the run's end: no end, no judgement.
    settled = {
        None: Outcome.UNKNOWN,
        True: Outcome.SUCCEEDED,
        False: Outcome.DID_NOT_HELP,
    }[run_ok]
    made = [
        Attempt(gpu, host, run, step, at, outcome or settled)
        for step, at, gpus, outcome in ended
        for gpu in gpus
    ]
    made += [  # started, never ended: the command may have run
        Attempt(gpu, host, run, step, at, Outcome.UNKNOWN)
        for step, (at, gpus) in started.items()
        for gpu in gpus
    ]
    return tuple(sorted(made, key=lambda a: a.at))


def decide(
    history: Iterable[Attempt], gpu: str, now: datetime, budget: Budget = Budget()
) -> Decision:
    """May a run act on ``gpu`` now, given every attempt the journals hold?"""
    recent = tuple(
        sorted(
            (
                a
                for a in history
                if a.gpu == gpu and 0 <= (now - a.at).total_seconds() <= budget.window_s
            ),
            key=lambda a: a.at,
        )
    )
    if any(a.outcome is Outcome.UNKNOWN for a in recent):
        verdict = Verdict.OUTCOME_UNKNOWN
    elif len(_incidents(recent)) >= budget.incidents:
        verdict = Verdict.BUDGET_SPENT
    else:
        verdict = Verdict.MAY_ACT
    return Decision(gpu, verdict, recent, budget)


def _incidents(history: Sequence[Attempt]) -> list[tuple[str, Outcome]]:
    """(run, its outcome on the GPU: the last attempt's) for each run that sent something."""
    last: dict[str, Outcome] = {}
    for attempt in history:
        if attempt.outcome is not Outcome.CANCELLED:
            last[attempt.run] = attempt.outcome
    return list(last.items())


def describe(decision: Decision) -> str:
    """The decision for a person, rendered from its fields: ``3rd incident on GPU-5a1e... since
    2026-11-28: reset-gpus twice, both succeeded; it came back within 2 days``."""
    incidents = _incidents(decision.history)
    if decision.may_act:
        return f"{decision.gpu}: {len(incidents)} incident(s) in the window, within the budget"
    first = decision.history[0]
    since = first.at.date().isoformat()
    if decision.verdict is Verdict.OUTCOME_UNKNOWN:
        unknown = next(a for a in decision.history if a.outcome is Outcome.UNKNOWN)
        return (
            f"{decision.gpu}: {unknown.step} on {unknown.at.date().isoformat()} (run "
            f"{unknown.run}) has no known outcome: a person looks before any automatic retry"
        )
    steps = sorted({a.step for a in decision.history if a.outcome is not Outcome.CANCELLED})
    outcomes = sorted({str(outcome) for _, outcome in incidents})
    said = "all " + outcomes[0] if len(outcomes) == 1 else ", ".join(outcomes)
    line = (
        f"{_ordinal(len(incidents) + 1)} incident on {decision.gpu} since {since}: "
        f"{'/'.join(steps)} in {len(incidents)} runs, {said}"
    )
    gaps = _returns(decision.history)
    if gaps:
        line += f"; it came back within {_days(max(gaps))}"
    return line + " — handed to a person"


def _returns(history: Sequence[Attempt]) -> list[float]:
    """Seconds from each run that succeeded to the next run's first attempt."""
    starts: dict[str, datetime] = {}
    success: dict[str, datetime] = {}
    for attempt in history:
        starts.setdefault(attempt.run, attempt.at)
        if attempt.outcome is Outcome.SUCCEEDED:
            success[attempt.run] = attempt.at
    ordered = sorted(starts.items(), key=lambda item: item[1])
    return [
        (later - success[run]).total_seconds()
        for (run, _), (_, later) in pairwise(ordered)
        if run in success
    ]


def _days(seconds: float) -> str:
    days = max(1, -(-int(seconds) // int(DAY_S)))
    return "1 day" if days == 1 else f"{days} days"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _gpus(items: Any) -> tuple[str, ...]:
    if not isinstance(items, list):
        return ()
    named = [str(i.get("uuid") or i.get("serial") or "") for i in items if isinstance(i, dict)]
    return tuple(dict.fromkeys(name for name in named if name))


def _when(event: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["t"]).replace("Z", "+00:00"))
