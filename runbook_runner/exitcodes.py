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
    NO_SANDBOX = 12  # compare, test, drill, sim: no sandbox for the practice host; nothing run
    INTERNAL = 70  # a bug in runbook-runner (EX_SOFTWARE): one line, never a traceback
    INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGHUP exits 129 and SIGTERM 143 (128 + the signal)


# What each code means, in the words every listing uses: `runbook --help` (describe), and
# the README, the site's home page and each runbook page (sentence); tests/test_front_door.py
# checks that they say exactly this. docs/manual/exit-codes.md says more about each.
WORDS = {
    ExitCode.OK: "the goal holds",
    ExitCode.GOAL_NOT_MET: "it does not (a check failed)",
    ExitCode.BAD_INPUT: "bad input (usage, runbook, parameter, plan file)",
    ExitCode.HOST_UNREACHABLE: "the host cannot be reached, or its key or the login is refused",
    ExitCode.DECLINED: "a destructive step was declined (or no terminal to ask)",
    ExitCode.LOCKED: "another run holds the host's lock (or it cannot be taken)",
    ExitCode.CANNOT_TELL: "cannot tell: it stopped before acting on what it could not see",
    ExitCode.JOURNAL: "the journal cannot be written or read, or the run cannot be resumed",
    ExitCode.TIMED_OUT: "a command or wait ran out of time",
    ExitCode.SUBJECT_HELD: "the checks hold, but a GPU of the server is neither free nor serving",
    ExitCode.NOT_APPROVED: "run --plan: a command the approved plan does not have (not sent)",
    ExitCode.BREAKER: "many hosts: --max-fail hosts failed, the rollout stopped there",
    ExitCode.NO_SANDBOX: "no sandbox for the practice host here (compare, test, drill, sim)",
    ExitCode.INTERNAL: "a bug in runbook-runner (RUNBOOK_DEBUG=1 shows where)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C; 129 SIGHUP, 143 SIGTERM)",
}

_SHARED_LINE = (ExitCode.INTERNAL, ExitCode.INTERRUPTED)  # one line of --help: it fits a screen


def describe() -> str:
    """The table printed at the end of ``runbook --help``."""
    lines = [
        f"  {int(code):>3}  {text}" for code, text in WORDS.items() if code not in _SHARED_LINE
    ]
    lines.append("; ".join(f"  {int(code):>3}  {WORDS[code]}" for code in _SHARED_LINE))
    return "\n".join(lines)


def sentence() -> str:
    """Every code in one sentence, as the README, the home page and the runbook pages say it."""
    return "Exit codes: " + "; ".join(f"{int(code)} {text}" for code, text in WORDS.items()) + "."
