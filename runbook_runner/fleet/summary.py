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

# The worst outcome over hosts decides the fleet's exit code, in this order (least bad first):
# a host that was reached and answered beats one that was not; an operator's stop and an
# interrupted run are worst, because then the fleet was not even fully tried.
SEVERITY: tuple[ExitCode, ...] = (
    ExitCode.OK,
    ExitCode.GOAL_NOT_MET,
    ExitCode.TIMED_OUT,
    ExitCode.CANNOT_TELL,
    ExitCode.HOST_UNREACHABLE,
    ExitCode.LOCKED,
    ExitCode.JOURNAL,
    ExitCode.DECLINED,
    ExitCode.INTERNAL,
    ExitCode.INTERRUPTED,
)

# Outcome kinds, as the summary and the JSON records name them.
OK = "ok"
FAILING = "failing"  # reached; a check of the goal fails (or cannot be told)
UNREACHABLE = "unreachable"  # connection refused, timed out, DNS, no SSH server
REFUSED = "refused"  # authentication or host key refused
NOT_STARTED = "not started"  # a rollout stopped before this host (--max-fail, a "no")
DECLINED = "declined"
LOCKED = "locked"
ERROR = "error"

PROGRESS_KINDS = (FAILING, UNREACHABLE, REFUSED, DECLINED, LOCKED, ERROR, NOT_STARTED)


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
    return "; ".join(f"{name} failing — {message}" for name, message in failing)


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
    """(folded hosts, code, line) for each distinct outcome: OK first, the worst last."""
    groups: dict[tuple[ExitCode, str], list[str]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.code, outcome.line), []).append(outcome.host)
    rank = {code: index for index, code in enumerate(SEVERITY)}
    keys = sorted(groups, key=lambda k: (rank.get(k[0], len(SEVERITY)), -len(groups[k]), k[1]))
    return [(fold(groups[key]), key[0], key[1]) for key in keys]


def totals(outcomes: Sequence[HostOutcome]) -> str:
    """``128 hosts: 125 ok, 2 failing, 1 unreachable``."""
    counts = counts_by_kind(outcomes)
    parts = [f"{counts[kind]} {kind}" for kind in (OK, *PROGRESS_KINDS) if counts.get(kind)]
    return f"{len(outcomes)} hosts: " + ", ".join(parts)
