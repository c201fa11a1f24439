"""The exit codes of the ``runbook`` command, in one place."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success; the goal holds
    GOAL_NOT_MET = 1  # the goal is not reached, or a check failed
    BAD_INPUT = 2  # usage error, invalid runbook, unknown runbook or parameter
    HOST_UNREACHABLE = 3  # cannot connect, authentication or host-key failure
    DECLINED = 4  # the operator declined a confirmation (or none could be asked)
    LOCKED = 5  # another destructive run holds the host, or the lock cannot be taken
    CANNOT_TELL = 6  # an observation a step or check depends on could not be made
    JOURNAL = 7  # the run journal cannot be written or read, or the run cannot be resumed
    TIMED_OUT = 8  # a command or wait ran out of time and the run stopped because of it
    SUBJECT_HELD = 9  # the goal's checks hold, but a GPU of the subject is not free nor serving
    NOT_APPROVED = 10  # run --plan: the run would send a command the approved plan does not have
    BREAKER = 11  # run on many hosts: --max-fail hosts failed; the rollout stopped there
    NO_SANDBOX = 12  # compare, test, drill, sim: no namespaces here for the practice host
    INTERNAL = 70  # a bug in runbook-runner (EX_SOFTWARE): one line, never a traceback
    INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGHUP exits 129 and SIGTERM 143 (128 + the signal)


EXPLANATIONS = {
    ExitCode.OK: "success: the goal holds",
    ExitCode.GOAL_NOT_MET: "the goal is not reached, or a check failed",
    ExitCode.BAD_INPUT: "bad input: usage, invalid runbook, unknown runbook or parameter",
    ExitCode.HOST_UNREACHABLE: "host unreachable, authentication or host-key failure",
    ExitCode.DECLINED: "stopped by the operator (a confirmation was declined or not possible)",
    ExitCode.LOCKED: "the host lock: another run holds it (see --break-lock), or it cannot be taken",
    ExitCode.CANNOT_TELL: "cannot tell: what a step depends on could not be observed; nothing was done on it",
    ExitCode.JOURNAL: "the run journal cannot be written or read, or the run cannot be resumed",
    ExitCode.TIMED_OUT: "a command or wait ran out of time and the run stopped there",
    ExitCode.SUBJECT_HELD: "the goal's checks hold, but a GPU of the subject is neither free nor serving (the verdict's ledger names it, its holder and why)",
    ExitCode.NOT_APPROVED: "run --plan: the run would send a command the approved plan does not have; not sent",
    ExitCode.BREAKER: "run on many hosts: --max-fail hosts failed, the breaker tripped; no further host started",
    ExitCode.NO_SANDBOX: "compare, test, drill, sim: no sandbox for the practice host here; nothing was run",
    ExitCode.INTERNAL: "internal error: a bug in runbook-runner (RUNBOOK_DEBUG=1 shows where)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); 129 for SIGHUP, 143 for SIGTERM; the command running on the host is ended",
}


SHORT = {  # the last two share a line of --help (it fits a screen)
    ExitCode.NO_SANDBOX: "compare, test, drill, sim: no sandbox for the practice host here; nothing was run",
    ExitCode.INTERNAL: "internal error (a bug; RUNBOOK_DEBUG=1 shows where)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); 129 SIGHUP, 143 SIGTERM",
}


def describe() -> str:
    """The table printed at the end of ``runbook --help``."""
    lines = [
        f"  {int(code):>3}  {text}" for code, text in EXPLANATIONS.items() if code not in SHORT
    ]
    lines.append("; ".join(f"  {int(code):>3}  {text}" for code, text in SHORT.items()))
    return "\n".join(lines)
