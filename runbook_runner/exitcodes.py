"""The exit codes of the ``runbook`` command, in one place."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success; the goal holds
    GOAL_NOT_MET = 1  # the goal is not reached, or a check failed
    BAD_INPUT = 2  # usage error, invalid runbook, unknown runbook or parameter
    HOST_UNREACHABLE = 3  # cannot connect, authentication or host-key failure
    DECLINED = 4  # the operator declined a confirmation (or none could be asked)
    LOCKED = 5  # another destructive run holds the host
    INTERRUPTED = 130  # Ctrl-C


EXPLANATIONS = {
    ExitCode.OK: "success: the goal holds",
    ExitCode.GOAL_NOT_MET: "the goal is not reached, or a check failed",
    ExitCode.BAD_INPUT: "bad input: usage, invalid runbook, unknown runbook or parameter",
    ExitCode.HOST_UNREACHABLE: "host unreachable, authentication or host-key failure",
    ExitCode.DECLINED: "stopped by the operator (a confirmation was declined or not possible)",
    ExitCode.LOCKED: "another destructive run holds the host (see --break-lock)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def describe() -> str:
    """The table printed at the end of ``runbook --help``."""
    return "\n".join(f"  {int(code):>3}  {text}" for code, text in EXPLANATIONS.items())
