"""One run of a runbook on one host: journal, lock, consent, run, release, outcome.

``runbook run`` on one host, each host of a fleet, ``drill`` and ``test`` all run through
:func:`run` (as ansible-core's TaskExecutor is the one per-host lifecycle its strategies fan
out). The CLI turns its arguments into a :class:`RunRequest`, prints the events it is handed
and the :class:`RunOutcome` it gets back, and picks the exit code (cli/outcomes.py keeps the
one table from what happened to an exit code).

Nothing here prints or asks: consent is a :class:`Consent` the caller gives (a terminal's
questions, a fleet's batch answer); every exception ends in the outcome, never between
the lock and its release: the lock is released and the run's end journalled whatever
happened (an error, a signal), and the journal says what it was.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runbook_runner import __version__
from runbook_runner import journal as journal_module
from runbook_runner.errors import Interrupted, NeedsConfirmation, TransportError
from runbook_runner.journal import lines as journal_lines
from runbook_runner.runbook import Runbook
from runbook_runner.status import RunOutcome as Ended

if TYPE_CHECKING:
    from runbook_runner.events import Answer, ConfirmRequest, Event, RunReport
    from runbook_runner.journal.resume import ResumePlan
    from runbook_runner.plan.saved import SavedPlan
    from runbook_runner.transport import SshTransport


class Consent(Protocol):
    """Says whether a destructive step may run (asking someone, or not), and who answered."""

    def __call__(self, request: ConfirmRequest) -> Answer: ...

    def answered_by(self, request: ConfirmRequest, answer: Answer) -> str:
        """The operator as the journal names them: ``alice (--yes)``."""
        ...


@dataclass(frozen=True)
class JournalOpened:
    """The session's first event: where its journal is (printed before any step)."""

    path: Path
    run: str


if TYPE_CHECKING:
    SessionEvent = Event | JournalOpened  # what the caller's on_event is handed


@dataclass(frozen=True)
class ResumePoint:
    """A stopped run to continue: its journal and what the journal says is left to do."""

    path: Path
    plan: ResumePlan


@dataclass(frozen=True)
class JournalPolicy:
    """Where the run's journal goes: ``path``, else a new file in ``folder`` named by the
    run's id; or, with ``resume``, the stopped run's own journal, continued."""

    folder: Path
    path: Path | None = None
    resume: ResumePoint | None = None
    clock: Callable[[], float] | None = None  # a drill's simulated wall clock
    drill: str | None = None  # a drill's scenario: its lines carry simulated time
    plan: Mapping[str, Any] | None = None  # the saved plan the run applies (file, sha256, by)


@dataclass(frozen=True)
class LockPolicy:
    """Whether a destructive run takes the host's lock (a drill's simulated host takes
    none), and whether it may first break a stale one."""

    take: bool = True
    break_stale: bool = False


@dataclass(frozen=True)
class HostNames:
    """How the run names its host: ``label`` in the journal, ``short`` in the run's id,
    ``lock`` in the lock's messages. One host is named by its target (``10.1.2.3:2222``), a
    fleet's host as its inventory or node set names it (``gpu07``)."""

    label: str
    short: str
    lock: str

    @classmethod
    def of(cls, target: Any) -> HostNames:
        return cls(target.label, target.host, target.label)


@dataclass(frozen=True)
class RunRequest:
    """One run on one host, as the CLI was asked for it."""

    runbook: Runbook
    parameters: Mapping[str, Any]
    transport: SshTransport  # connected; the caller closes it
    consent: Consent
    journal: JournalPolicy
    operator: str
    names: HostNames | None = None  # default: the transport's target
    lock: LockPolicy = LockPolicy()
    dry_run: bool = False
    from_step: str | None = None
    allow_node_wide: bool = False
    approved: SavedPlan | None = None  # run --plan: only its steps, on only its targets
    on_event: Callable[[SessionEvent], None] = lambda event: None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class RunOutcome:
    """What one session did: the runner's report (None when it never ended), how it
    ended, the exception that ended it (for cli/outcomes.py's table), and its journal."""

    ended: Ended
    report: RunReport | None
    error: BaseException | None = None
    journal: Path | None = None
    run: str | None = None
    lock_release_failed: str | None = None

    @property
    def stopped_by(self) -> str | None:
        return journal_lines.stopped_by(self.report)


def run(request: RunRequest) -> RunOutcome:
    """Open the journal, take the lock, run, release the lock, journal the end: always
    in that order, whatever is raised on the way (returned in the outcome, not raised)."""
    names = request.names or HostNames.of(request.transport.target)
    try:
        journal, run_id = _open_journal(request, names)
    except (Exception, KeyboardInterrupt) as error:
        return RunOutcome(Ended.ERROR, None, error)
    from runbook_runner.journal.recording import Recorder

    recorder = Recorder(journal, request.runbook, dict(request.parameters))
    report: RunReport | None = None
    ended: Ended = Ended.ERROR
    failure: BaseException | None = None
    extra: dict[str, Any] = {}
    released: str | None = None
    lock = None
    try:
        request.on_event(JournalOpened(journal.path, run_id))
        runner = _runner(request, recorder)
        if request.runbook.destructive and not request.dry_run and request.lock.take:
            from runbook_runner.ssh.hostlock import HostLock

            lock = HostLock(request.transport, names.lock, _lock_owner(request, run_id))
            previous = lock.acquire(break_stale=request.lock.break_stale)
            journal.append(journal_lines.lock(taken_over_from=previous))
        if request.dry_run:  # the plan is planview's: here one look, nothing sent
            report = runner.look()
        else:
            report = runner.run(
                from_step=request.from_step,
                resume=request.journal.resume.plan if request.journal.resume else None,
            )
        ended = Ended.DECLINED if report.declined else Ended.FINISHED
    except Interrupted as interrupt:
        ended, failure = Ended.INTERRUPTED, interrupt
        extra = {"signum": interrupt.signum, "ended_on_host": interrupt.ended_on_host}
    except NeedsConfirmation as error:
        ended, failure = Ended.NEEDS_CONFIRMATION, error
    except (Exception, KeyboardInterrupt) as error:
        from runbook_runner.ssh.hostlock import HostLocked, LockUnavailable

        ended, failure = Ended.ERROR, error
        extra = {"error": str(error) or type(error).__name__}
        if isinstance(error, HostLocked | LockUnavailable):
            extra["locked"] = True
    finally:
        # Cleanup never hides why the run stopped: its own failures are recorded, not raised.
        if lock is not None:
            try:
                lock.release()
            except (TransportError, KeyboardInterrupt) as error:
                released = str(error)
                extra["lock_release_failed"] = released
        try:
            journal.append(journal_lines.run_end(ended, report, **extra))
        finally:
            journal.close()
    return RunOutcome(ended, report, failure, journal.path, run_id, released)


def _runner(request: RunRequest, recorder: Any) -> Any:
    from runbook_runner.engine import Runner

    consent = request.consent

    def on_event(event: Event) -> None:
        recorder.on_event(event)
        request.on_event(event)

    def confirm(asked: ConfirmRequest) -> Answer:
        answer = consent(asked)
        recorder.confirmation(
            asked,
            answer.yes,
            consent.answered_by(asked, answer),
            reason=answer.reason,
            asked=answer.asked,
        )
        return answer

    resume = request.journal.resume
    return Runner(
        request.runbook,
        request.parameters,
        request.transport,
        on_event=on_event,
        confirm=confirm,
        clock=request.clock,
        sleep=request.sleep,
        changed=resume.plan.changed if resume is not None else None,
        allow_node_wide=request.allow_node_wide,
        approved=request.approved,
    )


def secret_free(runbook: Runbook, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters as they may be shown and journalled: a secret's value is ``***``."""
    return {k: ("***" if runbook.parameters[k].secret else v) for k, v in params.items()}


def _lock_owner(request: RunRequest, run_id: str) -> dict[str, Any]:
    import socket

    return {
        "operator": request.operator,
        "run": run_id,
        "client": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _open_journal(request: RunRequest, names: HostNames) -> tuple[journal_module.Journal, str]:
    policy = request.journal
    if policy.resume is not None:
        plan = policy.resume.plan
        journal = journal_module.Journal(policy.resume.path)
        partial = journal.drop_cut_short_tail()
        journal.append(
            journal_lines.resume(
                from_step=plan.first,
                operator=request.operator,
                skipped_as_finished=list(plan.finished),
                in_flight=plan.in_flight,
                dropped_cut_short_line=partial,
            )
        )
        return journal, plan.run
    from runbook_runner.transport import fingerprint

    runbook, transport = request.runbook, request.transport
    run_id = journal_module.new_run_id(runbook.name, names.short)
    path = policy.path if policy.path is not None else policy.folder / f"{run_id}.jsonl"
    journal = journal_module.Journal(path, policy.clock)
    journal.append(
        journal_lines.run_start(
            run=run_id,
            runbook=runbook,
            parameters=secret_free(runbook, request.parameters),
            operator=request.operator,
            host=names.label,
            login=transport.login_user,
            host_key=fingerprint(transport.host_key) if transport.host_key else None,
            tool_version=__version__,
            dry_run=request.dry_run,
            drill=policy.drill,
            plan=policy.plan,
        )
    )
    return journal, run_id


def record_not_started(
    runbook: Runbook,
    parameters: Mapping[str, Any],
    host: str,
    folder: Path,
    *,
    operator: str,
    dry_run: bool,
    signum: int,
) -> Path:
    """A journal for a host a signal reached before its run began: its run-start, then a
    run-end saying so (interrupted, not started)."""
    run_id = journal_module.new_run_id(runbook.name, host)
    journal = journal_module.Journal(folder / f"{run_id}.jsonl")
    try:
        journal.append(
            journal_lines.run_start(
                run=run_id,
                runbook=runbook,
                parameters=secret_free(runbook, parameters),
                operator=operator,
                host=host,
                tool_version=__version__,
                dry_run=dry_run,
            )
        )
        journal.append(journal_lines.run_end(Ended.INTERRUPTED, signum=signum, not_started=True))
    finally:
        journal.close()
    return journal.path


# -- signals --------------------------------------------------------------------------------


@contextlib.contextmanager
def signals_raise_interrupted() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted (once: a second signal during the
    cleanup it starts is ignored, so the remote command is ended and the lock released)."""
    raised: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if raised:
            return
        raised.append(signum)
        raise Interrupted(signum)

    with stop_signals_handled_by(handler):
        yield


@contextlib.contextmanager
def stop_signals_handled_by(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP go to ``handler`` for the block (main thread only: a
    worker thread cannot take signals), and back to what they were after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, handler) for signum in wanted}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
