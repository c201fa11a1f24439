"""Per-host outcomes, the worst exit code over a fleet, and the grouped summary.

Pure: outcomes in, text and numbers out. Hosts with the same outcome are one line,
their names folded as a node set (``gpu[001-120,122-128]: ok``), as ``clush -b`` gathers
identical output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook_runner.exitcodes import ExitCode
from runbook_runner.status import Word

# The worst outcome over hosts decides the fleet's exit code, in this order (least bad first):
# a host that was reached and answered beats one that was not; an operator's stop and an
# interrupted run are worst, because then the fleet was not even fully tried.
SEVERITY: tuple[ExitCode, ...] = (
    ExitCode.OK,
    ExitCode.SUBJECT_HELD,
    ExitCode.GOAL_NOT_MET,
    ExitCode.TIMED_OUT,
    ExitCode.CANNOT_TELL,
    ExitCode.BAD_INPUT,  # this host's own settings (its key file): it could not be tried
    ExitCode.HOST_UNREACHABLE,
    ExitCode.LOCKED,
    ExitCode.JOURNAL,
    ExitCode.DECLINED,
    ExitCode.NOT_APPROVED,  # run --plan (one host only): a command the plan does not have
    ExitCode.BREAKER,  # a rollout's breaker tripped: hosts were left not started
    ExitCode.INTERNAL,
    ExitCode.INTERRUPTED,
)


class HostKind(Word):
    """What one host of a fleet came to, as the summary and the JSON records name it: the
    kinds of one host's exit codes (cli/outcomes.py decides the code), plus "refused"
    (exit 3 too) and "not started". (A fleet's words, with spaces: not a step's status.)"""

    OK = "ok"
    FAILING = "failing"  # reached; a check of the goal fails
    CANNOT_TELL = "cannot tell"  # reached; no check fails, but one (or a trigger) cannot be told
    UNREACHABLE = "unreachable"  # connection refused, timed out, DNS, no SSH server
    REFUSED = "refused"  # authentication or host key refused
    NOT_STARTED = "not started"  # a rollout stopped before this host (--max-fail, a "no", a signal)
    STOPPED = "stopped"  # the rollout's breaker tripped while it ran: no further destructive step
    DECLINED = "declined"
    LOCKED = "locked"
    INTERRUPTED = "interrupted"  # a signal ended the run on this host (the command ended there)
    TIMED_OUT = "timed out"  # a step's command ran out of time and the goal was not reached
    SUBJECT_HELD = "subject held"  # the goal's checks hold; a GPU of the subject is still held
    JOURNAL = "journal error"
    BAD_INPUT = "bad input"  # this host's own settings (a key file that cannot be read, ...)
    ERROR = "internal error"  # a bug in runbook-runner (exit 70)


# The kinds by their short names, as the fleet's modules spell them (summary.OK, ...).
OK = HostKind.OK
FAILING = HostKind.FAILING
CANNOT_TELL = HostKind.CANNOT_TELL
UNREACHABLE = HostKind.UNREACHABLE
REFUSED = HostKind.REFUSED
NOT_STARTED = HostKind.NOT_STARTED
STOPPED = HostKind.STOPPED
DECLINED = HostKind.DECLINED
LOCKED = HostKind.LOCKED
INTERRUPTED = HostKind.INTERRUPTED
TIMED_OUT = HostKind.TIMED_OUT
SUBJECT_HELD = HostKind.SUBJECT_HELD
JOURNAL = HostKind.JOURNAL
BAD_INPUT = HostKind.BAD_INPUT
ERROR = HostKind.ERROR

PROGRESS_KINDS = (
    SUBJECT_HELD,
    FAILING,
    CANNOT_TELL,
    TIMED_OUT,
    UNREACHABLE,
    REFUSED,
    DECLINED,
    LOCKED,
    JOURNAL,
    BAD_INPUT,
    ERROR,
    INTERRUPTED,
    STOPPED,
    NOT_STARTED,
)

# The kind of an outcome decided by its exit code alone.
KIND_OF_CODE: dict[ExitCode, str] = {
    ExitCode.OK: OK,
    ExitCode.GOAL_NOT_MET: FAILING,
    ExitCode.BAD_INPUT: BAD_INPUT,
    ExitCode.HOST_UNREACHABLE: UNREACHABLE,
    ExitCode.DECLINED: DECLINED,
    ExitCode.LOCKED: LOCKED,
    ExitCode.CANNOT_TELL: CANNOT_TELL,
    ExitCode.JOURNAL: JOURNAL,
    ExitCode.TIMED_OUT: TIMED_OUT,
    ExitCode.SUBJECT_HELD: SUBJECT_HELD,
    ExitCode.NOT_APPROVED: BAD_INPUT,
    ExitCode.BREAKER: NOT_STARTED,
    ExitCode.INTERNAL: ERROR,
    ExitCode.INTERRUPTED: INTERRUPTED,
}

LINE_LIMIT = 160  # a summary line's reason; the whole of it is in --json


@dataclass(frozen=True)
class HostOutcome:
    """What one host came to. ``line`` is the same text for hosts with the same outcome."""

    host: str
    kind: str
    code: ExitCode
    line: str
    duration_s: float = 0.0
    record: dict[str, Any] = field(default_factory=dict, compare=False)  # for --json/--jsonl

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "outcome": self.kind,
            "exit_code": int(self.code),
            "summary": self.line,
            "duration_s": round(self.duration_s, 3),
            **self.record,
        }


def worst(codes: Iterable[ExitCode]) -> ExitCode:
    """The fleet's exit code: the worst of its hosts' (OK for none)."""
    rank = {code: index for index, code in enumerate(SEVERITY)}
    return max(codes, key=lambda code: rank.get(code, len(SEVERITY)), default=ExitCode.OK)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A host's text made safe for a terminal: control characters shown, never obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\n", " "))


def failing_line(failing: Sequence[tuple[str, str]]) -> str:
    """``gpu-memory-released failing — GPU 3: memory.used 81,920 MiB ...`` for each failing check."""
    return checks_line([(name, message, False) for name, message in failing])


def checks_line(results: Sequence[tuple[str, str, bool]]) -> str:
    """The checks that do not hold, as (name, message, cannot_tell), in one line: those that
    fail first, then those that cannot be told; checks with the same message share it
    (``7 checks cannot tell (a, b, c, ...) — nvidia-smi: Field ... is not valid``)."""
    parts: list[str] = []
    for cannot in (False, True):
        by_message: dict[str, list[str]] = {}
        for name, message, cannot_tell in results:
            if cannot_tell == cannot:
                by_message.setdefault(message, []).append(name)
        status = CANNOT_TELL if cannot else FAILING
        for message, names in by_message.items():
            if len(names) == 1:
                who = names[0]
            else:
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                who = f"{len(names)} checks ({shown})"
            parts.append(f"{who} {status} — {message}")
    return "; ".join(parts)


def shorten(text: str, limit: int = LINE_LIMIT) -> str:
    """A reason cut to ``limit`` characters for the summary (``...`` marks the cut)."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def without_label(message: str, *labels: str) -> str:
    """A transport error's message without the host it names: the same for every host it hit."""
    for label in labels:
        if label and message.startswith(f"{label}: "):
            return message[len(label) + 2 :]
    return message


def progress(done: int, total: int, outcomes: Sequence[HostOutcome]) -> str:
    """``37/128 hosts, 2 failing, 1 unreachable``."""
    counts = counts_by_kind(outcomes)
    parts = [f"{done}/{total} hosts"] + [
        f"{counts[kind]} {kind}" for kind in PROGRESS_KINDS if counts.get(kind)
    ]
    return ", ".join(parts)


def counts_by_kind(outcomes: Sequence[HostOutcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.kind] = counts.get(outcome.kind, 0) + 1
    return counts


def grouped(
    outcomes: Sequence[HostOutcome], fold: Callable[[Iterable[str]], str]
) -> list[tuple[str, ExitCode, str]]:
    """(folded hosts, code, line) for each distinct outcome and reason: OK first, the worst
    last; the line shortened to LINE_LIMIT (a record's ``summary`` in --json has all of it)."""
    groups: dict[tuple[ExitCode, str], list[str]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.code, outcome.line), []).append(outcome.host)
    rank = {code: index for index, code in enumerate(SEVERITY)}
    keys = sorted(groups, key=lambda k: (rank.get(k[0], len(SEVERITY)), -len(groups[k]), k[1]))
    return [(fold(groups[key]), key[0], shorten(key[1])) for key in keys]


def totals(outcomes: Sequence[HostOutcome]) -> str:
    """``128 hosts: 125 ok, 2 failing, 1 unreachable``."""
    counts = counts_by_kind(outcomes)
    parts = [f"{counts[kind]} {kind}" for kind in (OK, *PROGRESS_KINDS) if counts.get(kind)]
    return f"{len(outcomes)} hosts: " + ", ".join(parts)
