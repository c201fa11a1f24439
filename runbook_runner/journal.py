"""The durable record of a run: one JSON object per line, written and fsynced as it happens.

A runner killed at any moment (SIGKILL included) leaves every line before that moment
readable; a last line cut short is reported as such, not fatal. Secret parameters never
reach it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runbook_runner.errors import RunbookRunnerError

TAIL_BYTES = 4096  # of each command's stdout and stderr


class JournalError(RunbookRunnerError):
    pass


def default_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "runbook-runner" / "runs"


def new_run_id(runbook: str, host: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    safe_host = re.sub(r"[^A-Za-z0-9.-]+", "_", host)[:40]
    return f"{stamp}-{runbook}-{safe_host}-{secrets.token_hex(2)}"


def utc(now: float | None = None) -> str:
    moment = time.time() if now is None else now
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{int(moment % 1 * 1000):03d}Z"
    )


class Journal:
    """Appends events to a file, each flushed and fsynced before the call returns."""

    def __init__(self, path: Path, clock: Callable[[], float] | None = None) -> None:
        """``clock``: the time stamped on each line (a drill's simulated time); default now."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.clock = clock
        self._file: IO[bytes] = path.open("ab")

    def write(self, event: str, **fields: Any) -> None:
        record = {"t": utc(self.clock() if self.clock else None), "event": event, **fields}
        line = json.dumps(record, default=str, ensure_ascii=False) + "\n"
        self._file.write(line.encode("utf-8", "replace"))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


@dataclass
class JournalRead:
    events: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)

    def first(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == event), None)

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e.get("event") == event), None)

    def first_unfinished(self, step_ids: list[str]) -> str | None:
        """Where a resumed run starts: the first step that did not end ok or skipped."""
        finished = {
            e.get("id")
            for e in self.events
            if e.get("event") == "step-end" and e.get("status") in {"ok", "skipped"}
        }
        return next((step_id for step_id in step_ids if step_id not in finished), None)


def read(path: Path) -> JournalRead:
    """Every complete event; a damaged line is reported and skipped, never fatal."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise JournalError(f"cannot read the journal {path}: {error.strerror}") from None
    events, problems = [], []
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line.decode("utf-8", "replace"))
            if not isinstance(event, dict):
                raise ValueError("not an object")
            events.append(event)
        except ValueError:
            last = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
            what = "was cut short (the runner stopped while writing it)" if last else "is not JSON"
            problems.append(f"{path}:{number}: line {what}; skipped")
    return JournalRead(events, problems)


def find(run: str, folder: Path) -> Path:
    """A run by its id (or a unique prefix of it), or a path to its journal."""
    candidate = Path(run)
    if candidate.suffix == ".jsonl" and candidate.is_file():
        return candidate
    matches = sorted(folder.glob(f"{run}*.jsonl")) if folder.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise JournalError(f"no run {run!r} in {folder}; see 'runbook runs'")
    raise JournalError(f"{run!r} matches {len(matches)} runs; give more of the id")


def summary(path: Path) -> dict[str, Any]:
    journal = read(path)
    start = journal.first("run-start") or {}
    end = journal.last("run-end")
    return {
        "run": path.stem,
        "started": start.get("t", "?"),
        "runbook": start.get("runbook", "?"),
        "host": start.get("host", "?"),
        "operator": start.get("operator", "?"),
        "result": _result(end) if end else "did not finish",
        "drill": start.get("drill"),
    }


def _result(end: dict[str, Any]) -> str:
    """A run's outcome in words: a run the operator stopped is 'stopped', not 'goal not reached'."""
    if end.get("ok"):
        return "ok"
    if end.get("blocked"):
        return "stopped: cannot tell"
    if end.get("stopped_by") == "operator" or (end.get("declined") and not end.get("stopped_by")):
        return "stopped by the operator"
    if end.get("declined"):
        return f"stopped: {end.get('stopped_by')}"
    return "goal not reached"


def timeline(journal: JournalRead) -> list[tuple[str, str, str]]:
    """(UTC time, step, what happened) rows, for a postmortem's timeline table."""
    rows: list[tuple[str, str, str]] = []
    for event in journal.events:
        kind, t = event.get("event"), str(event.get("t", ""))
        if kind == "run-start":
            rows.append(
                (
                    t,
                    "-",
                    f"run of {event.get('runbook')} on {event.get('host')} by {event.get('operator')} started"
                    + (
                        f" (drill: scenario {event['drill']}, simulated time)"
                        if event.get("drill")
                        else ""
                    ),
                )
            )
        elif kind == "observed" and event.get("label") in {"before", "after"}:
            failing = [c for c in event.get("checks", []) if not c.get("ok")]
            figures = "; ".join(f"{c['name']}: {c.get('message', '')}" for c in failing)
            rows.append((t, "-", f"state {event.get('label')}: {figures or 'goal holds'}"))
        elif kind == "confirmation":
            rows.append(
                (
                    t,
                    str(event.get("step")),
                    f"{event.get('operator')} answered {event.get('answer')}"
                    if event.get("answer") != "not asked"
                    else f"not asked: {event.get('reason')}",
                )
            )
        elif kind == "step-end":
            message = event.get("message") or ""
            rows.append(
                (
                    t,
                    str(event.get("id")),
                    f"{event.get('status')}" + (f": {message}" if message else ""),
                )
            )
        elif kind == "resume":
            rows.append((t, str(event.get("from_step")), "run resumed"))
        elif kind == "run-end":
            reached = event.get("reached_by")
            result = f"goal holds (reached by {reached})" if event.get("ok") else _result(event)
            rows.append((t, "-", f"run ended: {result}"))
        elif kind == "drill-end":
            actions = ", ".join(event.get("actions") or []) or "none"
            verdict = "as the expert would" if event.get("ok") else "not as the expert would"
            rows.append(
                (
                    t,
                    "-",
                    f"drill {event.get('scenario')}: {verdict}; actions: {actions}; "
                    f"{event.get('recovery_s')} s (ideal {event.get('ideal_s')} s)",
                )
            )
    return rows
