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
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from runbook_runner import localfile
from runbook_runner.errors import RunbookRunnerError
from runbook_runner.safetext import json_escaped
from runbook_runner.status import ConfirmAnswer, RunOutcome

if TYPE_CHECKING:
    from runbook_runner.journal.lines import Line


class JournalError(RunbookRunnerError):
    pass


class UnknownRun(JournalError):
    """A run id, prefix or path that names no single journal: bad input, not a bad journal."""


class JournalWriteError(JournalError):
    """The journal cannot be written (disk full, read-only, gone): the run must stop."""


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
    """Appends events to a file, each flushed and (unless told) fsynced before the call returns."""

    def __init__(self, path: Path, clock: Callable[[], float] | None = None) -> None:
        """``clock``: the time stamped on each line (a drill's simulated time); default now."""
        self.path = path
        self.clock = clock
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_NONBLOCK: a FIFO with no reader is an error, not a wait; then a regular file only
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
            try:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise localfile.NotRegular(path, localfile.kind(mode))
                os.set_blocking(fd, True)
            except OSError:
                os.close(fd)
                raise
            self._file: IO[bytes] = os.fdopen(fd, "ab")
        except OSError as error:
            raise JournalWriteError(
                f"cannot open the run journal {path}: {error.strerror or error}"
            ) from None

    def drop_cut_short_tail(self) -> str | None:
        """Before appending to a journal whose runner died mid-line: remove that partial
        line (returned, for the record), so that the next event starts a line of its own."""
        raw = localfile.read_bytes(self.path, localfile.JOURNAL_LIMIT)
        if not raw or raw.endswith(b"\n"):
            return None
        keep = raw.rfind(b"\n") + 1
        os.truncate(self.path, keep)
        return raw[keep:].decode("utf-8", "replace")

    def append(self, line: Line) -> None:
        """Append one line (built by journal.lines). A line with ``sync=False`` is flushed
        to the OS (it survives this process dying) and fsynced by the next synced line or
        :meth:`close`: for lines whose loss in a power cut costs at most repeating read-only
        work (an fsync is 1-10 ms a line)."""
        event = line.event
        record = {"t": utc(self.clock() if self.clock else None), "event": event, **line.fields}
        text = json_escaped(json.dumps(record, default=str, ensure_ascii=False)) + "\n"
        try:
            self._file.write(text.encode("utf-8", "replace"))
            self._file.flush()
            if line.sync:
                os.fsync(self._file.fileno())
        except OSError as error:
            raise JournalWriteError(
                f"cannot write the run journal {self.path} ({event}): {error.strerror or error}"
            ) from None

    def close(self) -> None:
        try:
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as error:
            raise JournalWriteError(
                f"cannot write the run journal {self.path}: {error.strerror or error}"
            ) from None


def check_target(path: Path) -> None:
    """Refuse a ``--journal FILE`` a new run must not append to: a symbolic link, what is not
    a regular file (a FIFO would keep the run waiting), or a file that is not a run journal
    (its first line no ``run-start``). No file there, or an empty one, is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise JournalError(f"cannot open the run journal {path}: {error.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UnknownRun(f"{path}: a symbolic link: not written (give the file itself)")
    localfile.require_regular(path)
    if info.st_size == 0:
        return
    with open(path, "rb") as handle:
        first = handle.read(_FIRST_LINE).split(b"\n", 1)[0]
    try:
        event = json.loads(first)
    except ValueError:
        event = None
    if not isinstance(event, dict) or event.get("event") != "run-start":
        raise UnknownRun(f"{path}: not a run journal (its first line is no run-start): not written")


_FIRST_LINE = 1024 * 1024  # a run-start line holds the runbook's parameters: far less


@dataclass
class JournalRead:
    events: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)  # line numbers that are not whole JSON
    cut_short: int | None = None  # the last line, cut short by a runner that died writing it

    def first(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == event), None)

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e.get("event") == event), None)


def read(path: Path) -> JournalRead:
    """Every complete event; a damaged line is reported and skipped, never fatal."""
    try:
        raw = localfile.read_bytes(path, localfile.JOURNAL_LIMIT)
    except OSError as error:
        raise JournalError(f"cannot read the journal {path}: {error.strerror}") from None
    events, problems, damaged = [], [], []
    cut_short: int | None = None
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line.decode("utf-8", "replace"))
            if not isinstance(event, dict):
                raise ValueError("not an object")
            events.append(event)
        except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
            last = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
            what = "was cut short (the runner stopped while writing it)" if last else "is not JSON"
            problems.append(f"{path}:{number}: line {what}; skipped")
            if last and not raw.endswith(b"\n"):
                cut_short = number
            else:
                damaged.append(number)
    return JournalRead(events, problems, damaged, cut_short)


def find(run: str, folder: Path) -> Path:
    """A run by its id (or a unique prefix of it), or a path to its journal (--journal FILE)."""
    candidate = Path(run)
    if candidate.is_file():
        return candidate
    if "/" in run or candidate.suffix == ".jsonl":
        raise UnknownRun(f"no journal file {run}")
    matches = sorted(folder.glob(f"{run}*.jsonl")) if folder.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownRun(f"no run {run!r} in {folder}; see 'runbook runs'")
    raise UnknownRun(f"{run!r} matches {len(matches)} runs; give more of the id")


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
    """A run-end in words: a run the operator stopped is 'stopped', not 'goal not reached'."""
    outcome = end.get("outcome")
    if outcome == RunOutcome.INTERRUPTED or (outcome is None and end.get("interrupted")):
        return f"interrupted ({end['signal']})" if end.get("signal") else "interrupted"
    if outcome == RunOutcome.NEEDS_CONFIRMATION:
        return "stopped: needs a confirmation on a terminal"
    if outcome == RunOutcome.ERROR:
        return f"stopped: {end.get('error', 'error')}"
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
                    if event.get("answer") != ConfirmAnswer.NOT_ASKED
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
