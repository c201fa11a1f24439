"""A rollout's plan and its breaker: hosts in batches of ``--serial``, and a breaker that
trips once ``--max-fail`` hosts have failed. Pure: hosts and outcomes in, decisions out.

Both options take a number of hosts or a percentage of the rollout's hosts (``3``, ``10%``):

- ``--serial P%`` is P% of the hosts, rounded down, at least 1, as Ansible's ``serial``
  (``pct_to_int`` in ansible/ansible lib/ansible/utils/helpers.py at 931ab68cd0f3).
- ``--max-fail P%`` trips once P% of the hosts, rounded up and at least 1, have failed: the
  breaker trips when the count is *reached*, as NVSentinel's fault-quarantine circuit breaker
  does ("50% or more", NVIDIA/NVSentinel docs/configuration/fault-quarantine.md at
  00b7ca12fbf9), where Ansible's ``max_fail_percentage`` must be exceeded.

A host counts as failed when it acted (its inventory mode is ``act``) and ended in a failure,
cannot tell, or an unexpected end (:data:`COUNTED`); a host that only observed or planned, a
host held by another run's lock, one declined or stopped by a signal, does not count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from runbook_runner.exitcodes import ExitCode
from runbook_runner.status import Word

T = TypeVar("T")


class Mode(Word):
    """What a host of an inventory group may do in a rollout (``runbook_mode``)."""

    OBSERVE = "observe"  # check the goal, read-only, as ``runbook check``
    PLAN = "plan"  # observe and say what a run would do, as ``runbook run --dry-run``
    ACT = "act"  # run the runbook (the default)


# The ends of a host that trip the breaker: the goal not met, a command out of time, a fact
# that cannot be told, the host lost during its run, a journal that cannot be written, a bug.
COUNTED = frozenset(
    {
        ExitCode.GOAL_NOT_MET,
        ExitCode.TIMED_OUT,
        ExitCode.CANNOT_TELL,
        ExitCode.HOST_UNREACHABLE,
        ExitCode.JOURNAL,
        ExitCode.INTERNAL,
    }
)

_SHARE = re.compile(r"([0-9]{1,9})(%?)")


@dataclass(frozen=True)
class Share:
    """A number of hosts, or a percentage of a rollout's hosts."""

    number: int
    percent: bool = False

    def __str__(self) -> str:
        return f"{self.number}%" if self.percent else str(self.number)

    def to_json(self) -> str | int:
        return str(self) if self.percent else self.number


def share(text: str) -> Share:
    """``3`` or ``10%``; ValueError says what is wrong."""
    found = _SHARE.fullmatch(text.strip())
    if found is None:
        raise ValueError("a number of hosts (1 or more) or a percentage (1% to 100%)")
    number, percent = int(found.group(1)), bool(found.group(2))
    if number < 1 or (percent and number > 100):
        raise ValueError("a number of hosts (1 or more) or a percentage (1% to 100%)")
    return Share(number, percent)


def batch_size(serial: Share, total: int) -> int:
    """Hosts in a batch: N, or P% of ``total`` rounded down and at least 1 (Ansible's way)."""
    if not serial.percent:
        return serial.number
    return max(1, total * serial.number // 100)


def threshold(max_fail: Share, total: int) -> int:
    """Failed hosts that trip the breaker: N, or P% of ``total`` rounded up, at least 1."""
    if not max_fail.percent:
        return max_fail.number
    return max(1, -(-total * max_fail.number // 100))


def batches(hosts: Sequence[T], serial: int) -> list[list[T]]:
    """``serial`` hosts at a time, in order; the last batch may be smaller."""
    if serial < 1:
        raise ValueError("serial must be at least 1")
    return [list(hosts[i : i + serial]) for i in range(0, len(hosts), serial)]


@dataclass(frozen=True)
class Breaker:
    """A rollout's breaker: the hosts that failed so far, in the order they ended, and how
    many trip it. Once tripped it stays tripped (a person looks, then runs again)."""

    limit: Share
    trips_at: int
    hosts: int  # in the rollout
    failed: tuple[str, ...] = ()

    @classmethod
    def of(cls, max_fail: Share, hosts: int) -> Breaker:
        return cls(max_fail, threshold(max_fail, hosts), hosts)

    def then(self, host: str, code: ExitCode, mode: Mode = Mode.ACT) -> Breaker:
        """The breaker after ``host`` ended with ``code``."""
        if mode is not Mode.ACT or code not in COUNTED:
            return self
        return Breaker(self.limit, self.trips_at, self.hosts, (*self.failed, host))

    @property
    def tripped(self) -> bool:
        return len(self.failed) >= self.trips_at

    def to_json(self) -> dict[str, Any]:
        return {
            "tripped": self.tripped,
            "max_fail": self.limit.to_json(),
            "trips_at": self.trips_at,
            "failed": list(self.failed),
        }
