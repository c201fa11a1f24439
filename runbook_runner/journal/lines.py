"""Every line a run journal holds, one builder per event: pure, no I/O.

A line is built here and written by :meth:`Journal.append`; nothing else makes one. The
shapes are those of ``schema/journal.schema.json`` (tests validate every journal the suite
writes against it); ``run-start`` names the schema's version (``journal_schema``), and a
journal without it is of version 1's shape before the field existed, which still resumes.

The events, in the order a run writes them: ``run-start`` (or ``resume``), ``lock``,
``observed``, ``step-start``, ``confirmation``, ``wait``, ``command``, ``step-end``,
``run-end``, and for a drill ``drill-end``.

Host text is written as it came, JSON-escaped; a secret parameter's value never is: the
builders that carry host or operator text take ``redact``.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runbook_runner.journal.state import observations_json, state_json
from runbook_runner.status import ConfirmAnswer, RunOutcome, StepStatus

if TYPE_CHECKING:
    from runbook_runner.events import (
        ConfirmRequest,
        Observed,
        RunReport,
        StepRecord,
        StepStarting,
        Waiting,
    )
    from runbook_runner.journal.resume import InFlight
    from runbook_runner.runbook import Runbook
    from runbook_runner.transport import CommandResult

SCHEMA_VERSION = 1
TAIL_BYTES = 4096  # of each command's stdout and stderr

Redact = Callable[[str], str]


def _same(text: str) -> str:
    return text


@dataclass(frozen=True)
class Line:
    """One journal line before it is written: its event, its fields, and whether it is
    fsynced by itself (``sync=False``: flushed, fsynced with the next synced line)."""

    event: str
    fields: Mapping[str, Any]
    sync: bool = True


def run_start(
    *,
    run: str,
    runbook: Runbook,
    parameters: Mapping[str, Any],
    operator: str,
    host: str,
    tool_version: str,
    dry_run: bool,
    login: str | None = None,
    host_key: str | None = None,
    drill: str | None = None,
    plan: Mapping[str, Any] | None = None,
) -> Line:
    """A run begins. ``parameters``: already free of secrets. ``drill``: the scenario of a
    drill's run, whose lines carry simulated time. ``plan``: the saved plan it applies
    (file, sha256, approved_by)."""
    marks: dict[str, Any] = {"drill": drill, "simulated_time": True} if drill else {}
    if plan is not None:
        marks["plan"] = dict(plan)
    return Line(
        "run-start",
        {
            "journal_schema": SCHEMA_VERSION,
            **marks,
            "run": run,
            "runbook": runbook.name,
            "runbook_path": runbook.path,
            "runbook_sha256": runbook.sha256,
            "parameters": dict(parameters),
            "operator": operator,
            "host": host,
            "login": login,
            "host_key": host_key,
            "tool_version": tool_version,
            "dry_run": dry_run,
        },
    )


def resume(
    *,
    from_step: str | None,
    operator: str,
    skipped_as_finished: Sequence[str],
    in_flight: InFlight | None,
    dropped_cut_short_line: str | None = None,
) -> Line:
    """A stopped run continues (``--resume``), from ``from_step``."""
    dropped = (
        {} if dropped_cut_short_line is None else {"dropped_cut_short_line": dropped_cut_short_line}
    )
    return Line(
        "resume",
        {
            "from_step": from_step,
            "operator": operator,
            "skipped_as_finished": list(skipped_as_finished),
            "in_flight": (
                {"step": in_flight.step, "maybe_sent": in_flight.maybe_sent} if in_flight else None
            ),
            **dropped,
        },
    )


def lock(*, taken_over_from: Mapping[str, Any] | None = None) -> Line:
    """The host's run lock is held (``taken_over_from``: the stale lock it replaced)."""
    took = {} if taken_over_from is None else {"taken_over_from": dict(taken_over_from)}
    return Line("lock", {"held": True, **took})


def observed(runbook: Runbook, event: Observed, redact: Redact = _same) -> Line:
    """What an observation found: the ``--json`` summary (``state``), every observation's
    typed state (``observations``) and the checks' results."""
    return Line(
        "observed",
        {
            "label": event.label,
            "state": state_json(runbook, event.state),
            "observations": observations_json(runbook, event.state, redact),
            "checks": [
                {**result.to_json(), "message": redact(result.message)} for result in event.results
            ],
        },
        sync=False,  # read-only work: the next destructive step's line syncs it
    )


def _redacted(items: Sequence[Mapping[str, Any]], redact: Redact) -> list[dict[str, Any]]:
    return [{k: redact(v) if isinstance(v, str) else v for k, v in item.items()} for item in items]


def step_start(event: StepStarting, redact: Redact = _same) -> Line:
    """A step starts: its commands, and the items it is about to act on."""
    items = {"items": _redacted(event.acted, redact)} if event.acted else {}
    return Line(
        "step-start",
        {"id": event.step.id, "commands": list(event.commands), **items},
        sync=event.step.destructive,
    )


def wait(event: Waiting, redact: Redact = _same) -> Line:
    """A step's wait polled: how long, and what still fails."""
    return Line(
        "wait",
        {
            "step": event.step.id,
            "elapsed_s": round(event.elapsed_s, 3),
            "timeout_s": event.timeout_s,
            "unchanged_s": round(event.unchanged_s, 3),
            "failing": [redact(result.message) for result in event.failing],
        },
        sync=False,
    )


def command(step: str, shown: str, result: CommandResult, redact: Redact = _same) -> Line:
    """One command a step ran (``shown``: as printed, secrets masked), with its tails."""
    return Line(
        "command",
        {
            "step": step,
            "command": shown,
            "exit_status": result.exit_status,
            "timed_out": result.timed_out,
            "duration_s": round(result.duration_s, 3),
            "stdout_tail": redact(result.stdout[-TAIL_BYTES:]),
            "stderr_tail": redact(result.stderr[-TAIL_BYTES:]),
            "stdout_bytes": result.stdout_size,
            "stderr_bytes": result.stderr_size,
        },
        sync=False,
    )


def step_end(record: StepRecord, *, destructive: bool, redact: Redact = _same) -> Line:
    """How a step ended (StepRecord.to_json, message and acted items redacted)."""
    document = {**record.to_json(), "message": redact(record.message)}
    if "acted" in document:
        document["acted"] = _redacted(record.acted, redact)
    return Line("step-end", document, sync=destructive)


def confirmation(
    request: ConfirmRequest,
    *,
    answer: bool,
    operator: str,
    reason: str = "",
    asked: bool = True,
) -> Line:
    """An operator's answer, or (``asked`` False) why nobody was asked: the real reason."""
    said = (
        (ConfirmAnswer.YES if answer else ConfirmAnswer.NO)
        if asked or answer
        else ConfirmAnswer.NOT_ASKED
    )
    return Line(
        "confirmation",
        {
            "step": request.step.id,
            "commands": list(request.commands),
            "targets": list(request.targets),
            "answer": said,
            "reason": reason,
            "operator": operator,
        },
    )


def stopped_by(report: RunReport | None) -> str | None:
    """Who or what stopped a run before its end: 'operator', 'needs --allow-reboot', ..."""
    if report is None or not report.declined:
        return None
    declined = next((r for r in report.steps if r.status == StepStatus.DECLINED), None)
    reason = declined.message if declined is not None else ""
    return "operator" if reason.startswith("declined by") else reason or "operator"


def run_end(
    outcome: RunOutcome,
    report: RunReport | None = None,
    *,
    signum: int | None = None,
    ended_on_host: str | None = None,
    error: str | None = None,
    locked: bool = False,
    lock_release_failed: str | None = None,
    not_started: bool = False,
) -> Line:
    """A run ends: the one shape for a host's run, each host of a fleet, a drill, and a
    fleet's host a signal reached before its run began (``not_started``).

    ``report``: the run's, when it got that far. An interrupted run names its signal and
    the process group it ended on the host; a run an error ended, the error."""
    extra: dict[str, Any] = {}
    if outcome is RunOutcome.INTERRUPTED:
        extra["signal"] = signals.Signals(signum).name if signum is not None else None
        extra["ended_on_host"] = f"process group {ended_on_host}" if ended_on_host else None
    if outcome is RunOutcome.ERROR:
        extra["error"] = error or "error"
    if locked:
        extra["locked"] = True
    if lock_release_failed is not None:
        extra["lock_release_failed"] = lock_release_failed
    if not_started:
        extra["not_started"] = True
    if report is not None:
        extra["verdict"] = report.verdict.to_json()
    return Line(
        "run-end",
        {
            "ok": report is not None and report.ok,
            "outcome": outcome,
            "reached_by": report.reached_by if report is not None else None,
            "declined": report.declined if report is not None else None,
            "interrupted": outcome is RunOutcome.INTERRUPTED,
            "stopped_by": stopped_by(report),
            "blocked": report.blocked.message if report is not None and report.blocked else None,
            **extra,
        },
    )


def drill_end(judgement: Mapping[str, Any]) -> Line:
    """A drill's judgement (drills.Judgement.to_json): what the run did against the expert."""
    return Line("drill-end", dict(judgement))
