"""The words a run is told in: a step's status, a run's outcome, a check's status.

Each is spelled once, here, as the journal and ``--json`` publish it (a step ``timed_out``,
a check ``cannot-tell``); the sets the engine, the resume and the CLI decide by (which
statuses stop a run, which mean a command went out) are named once too. Pure: imports
nothing of the package, so every room may use it.

An observation's ``condition`` (``timed-out``, ``not-found``, ...) is another vocabulary,
:class:`Condition`: runbooks compare with it (``NAME.condition == 'timed-out'``), so it keeps
its own spelling, as a step's ``timed_out`` keeps the journal's.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """An enum whose members are the words the journal and --json spell (``str(m)`` is the
    word, and a member equals its word, so a journal's plain strings compare with it)."""

    def __str__(self) -> str:
        return str(self.value)


class StepStatus(Word):
    """How one step ended."""

    OK = "ok"
    FAILED = "failed"
    TIMED_OUT = "timed_out"  # its command ran out of time
    UNKNOWN = "unknown"  # the connection dropped while it ran: it may or may not have acted
    SKIPPED = "skipped"  # its skip_if holds, or nothing to act on
    PLANNED = "planned"  # a dry run: would run
    DECLINED = "declined"  # not confirmed (by the operator, or no terminal, or a flag missing)
    BLOCKED = "blocked"  # its trigger cannot be told: not run


# A command went out, or may have.
SENT = frozenset({StepStatus.OK, StepStatus.FAILED, StepStatus.TIMED_OUT, StepStatus.UNKNOWN})
# With ``on_failure: stop``, these end the run (and a resume does not continue past them).
STOPPING = frozenset({StepStatus.FAILED, StepStatus.TIMED_OUT, StepStatus.UNKNOWN})
# Nothing was sent: the step did not execute.
NOT_EXECUTED = frozenset({StepStatus.SKIPPED, StepStatus.PLANNED, StepStatus.BLOCKED})
# The step did not run because something refused it: its message says what.
REFUSED = frozenset({StepStatus.DECLINED, StepStatus.BLOCKED})
# Statuses whose message a summary prints beside them.
EXPLAINED = frozenset(
    {StepStatus.FAILED, StepStatus.TIMED_OUT, StepStatus.DECLINED, StepStatus.BLOCKED}
)


class RunOutcome(Word):
    """How a run ended, as its journal's ``run-end`` line says."""

    FINISHED = "finished"  # it ran to its end (the goal may or may not hold)
    DECLINED = "declined"  # a destructive step was not confirmed
    INTERRUPTED = "interrupted"  # a signal (or a fleet's stop) ended it
    NEEDS_CONFIRMATION = "needs-confirmation"  # a resend needs a terminal
    ERROR = "error"  # an error ended it


# A run that ended so may be resumed (--resume); any other is finished.
RESUMABLE = frozenset({RunOutcome.INTERRUPTED, RunOutcome.NEEDS_CONFIRMATION, RunOutcome.ERROR})


class CheckStatus(Word):
    """One check's result."""

    OK = "ok"
    FAILING = "failing"
    CANNOT_TELL = "cannot-tell"  # what it needs could not be observed


class Condition(Word):
    """Why an observation produced no state, as ``NAME.condition`` reads it in a runbook
    (besides these, nvidia-smi's own failures: observe/nvidia_smi.py)."""

    OK = "ok"  # it was made
    FAILED = "failed"  # its command exited with a status the observation does not accept
    NOT_FOUND = "not-found"  # exit 127: the command is not installed
    TIMED_OUT = "timed-out"  # its command ran out of time
    UNPARSABLE = "unparsable"  # the parser refused the output


# Conditions the runner tells (not the tool's own words): its state cannot be known.
RUNNER_CONDITIONS = frozenset({Condition.FAILED, Condition.TIMED_OUT, Condition.UNPARSABLE})


class OnFailure(Word):
    """What a step's failure does to the run (its ``on_failure``, spelled as in the YAML)."""

    STOP = "stop"  # the run ends (a ladder's rung: only when it says so)
    CONTINUE = "continue"  # the next step is tried


class ConfirmAnswer(Word):
    """A confirmation's answer, as journalled."""

    YES = "yes"
    NO = "no"
    NOT_ASKED = "not asked"
