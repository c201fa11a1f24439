"""A rollout's plan: hosts in batches of --serial, stopped after --max-fail failures. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def batches(hosts: Sequence[T], serial: int) -> list[list[T]]:
    """``serial`` hosts at a time, in order; the last batch may be smaller."""
    if serial < 1:
        raise ValueError("serial must be at least 1")
    return [list(hosts[i : i + serial]) for i in range(0, len(hosts), serial)]


def may_continue(failures: int, max_fail: int | None) -> bool:
    """Start the next batch? Not once ``max_fail`` hosts failed (None: never stop)."""
    return max_fail is None or failures < max_fail
