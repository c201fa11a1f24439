"""One table from what happened to the exit code, for one host and for each host of a fleet.

Pure: a goal check's results, a run's report or an exception in; an :class:`ExitCode` (and
for an exception, the one-line message) out. ``runbook check``/``run`` on one host and every
host of a fleet decide through these functions, so an injected internal error is 70 on one
host and on a fleet, and a run stopped by a timeout is 8 on both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runbook_runner.exitcodes import ExitCode
from runbook_runner.plan import ledger
from runbook_runner.status import STOPPING, StepStatus

if TYPE_CHECKING:
    from runbook_runner.events import RunReport
    from runbook_runner.expect import CheckResult


def check_code(results: Iterable[CheckResult]) -> ExitCode:
    """0 when every check holds; 1 when one fails; 6 when none fails but one cannot be told."""
    listed = list(results)
    if all(r.ok for r in listed):
        return ExitCode.OK
    if any(not r.ok and not r.cannot_tell for r in listed):
        return ExitCode.GOAL_NOT_MET
    return ExitCode.CANNOT_TELL


def run_code(report: RunReport, *, dry_run: bool, reboot_blocked: bool) -> ExitCode:
    """A finished run's exit code. A step whose command ran out of time and left the goal
    unmet is 8 (timed out); a reboot not allowed leaves the goal unmet (1); a "no" is 4; a
    run whose checks hold while a GPU of the subject is neither free nor serving is 9 (6
    when its holder cannot be told): the ledger's word (plan/ledger.py)."""
    if report.blocked is not None:
        return ExitCode.CANNOT_TELL  # a dry run whose plan is blocked is not fine either
    if report.declined:
        return ExitCode.GOAL_NOT_MET if reboot_blocked else ExitCode.DECLINED
    if dry_run:
        return ExitCode.OK
    if report.ok:
        # The goal's checks hold; a GPU of the subject neither free nor serving is not
        # "goal holds": 9, or 6 when whose it is cannot be told (plan/ledger.py).
        return ledger.exit_code(report.verdict.ledger, ExitCode.OK)
    stopped = [r for r in report.steps if r.status in STOPPING]
    if stopped and stopped[-1].status == StepStatus.TIMED_OUT:
        return ExitCode.TIMED_OUT
    if report.after is not None and not stopped:
        # As `check` says it: the goal cannot be told (6) unless a check of it fails (1).
        return check_code(report.after.results)
    return ExitCode.GOAL_NOT_MET


@dataclass(frozen=True)
class Failure:
    """An exception as the command reports it: its exit code and its lines (no "runbook: ")."""

    code: ExitCode
    lines: tuple[str, ...]


def failure(error: BaseException) -> Failure | None:
    """The exit code and message for an error raised on purpose; None for a bug (exit 70).

    The modules whose errors these are load here, on failure, so that a command that works
    never imports them."""
    from runbook_runner import journal
    from runbook_runner.errors import (
        NeedsConfirmation,
        SshSetupError,
        StateFileInvalid,
        TransportError,
    )
    from runbook_runner.format.catalog import UnknownRunbook
    from runbook_runner.format.expr import EvalError
    from runbook_runner.format.parameters import ParameterError
    from runbook_runner.plan.saved import NotApproved, PlanInvalid
    from runbook_runner.runbook import RunbookInvalid
    from runbook_runner.ssh.hostlock import HostLocked, LockUnavailable

    def one(code: ExitCode, line: str) -> Failure:
        return Failure(code, (line,))

    if isinstance(error, RunbookInvalid):
        return Failure(ExitCode.BAD_INPUT, tuple(error.lines))
    if isinstance(error, HostLocked):
        return one(
            ExitCode.LOCKED,
            f"{error}; wait for it to finish (the lock of a run that died is freed "
            "with its connection; on a host without flock, re-run with --break-lock)",
        )
    if isinstance(error, journal.JournalWriteError):
        return one(
            ExitCode.JOURNAL,
            f"{error}; the run stopped (free space, or give --journal FILE elsewhere)",
        )
    if isinstance(error, LockUnavailable):
        return one(ExitCode.LOCKED, str(error))
    if isinstance(error, journal.UnknownRun):
        return one(ExitCode.BAD_INPUT, str(error))
    if isinstance(error, journal.JournalError):
        return one(ExitCode.JOURNAL, str(error))
    if isinstance(error, NeedsConfirmation):
        return one(ExitCode.DECLINED, f"stopped: {error}")
    if isinstance(error, PlanInvalid):
        return one(ExitCode.BAD_INPUT, str(error))
    if isinstance(error, NotApproved):
        return one(ExitCode.NOT_APPROVED, f"stopped before sending: {error}")
    if isinstance(error, UnknownRunbook | ParameterError | StateFileInvalid):
        return one(ExitCode.BAD_INPUT, str(error))
    if isinstance(error, SshSetupError):
        return one(ExitCode.BAD_INPUT, f"{error}" + (f"; {error.hint}" if error.hint else ""))
    if isinstance(error, EvalError):  # a duration computed from --set values that cannot be
        return one(ExitCode.BAD_INPUT, f"cannot compute a value of the runbook: {error}")
    if isinstance(error, TransportError):
        return one(
            ExitCode.HOST_UNREACHABLE, f"{error}" + (f"; {error.hint}" if error.hint else "")
        )
    if isinstance(error, OSError) and not isinstance(error, BrokenPipeError):
        # a local file named on the command line: missing, unreadable, ...
        where = f"{str(error.filename)[:200]}: " if error.filename else ""
        return one(ExitCode.BAD_INPUT, f"{where}{error.strerror or error}")
    return None


def internal(error: BaseException) -> str:
    """The one line for a bug (exit 70)."""
    return (
        f"internal error: {type(error).__name__}: {str(error)[:300]} "
        "(a bug: please report it; RUNBOOK_DEBUG=1 shows the traceback)"
    )
