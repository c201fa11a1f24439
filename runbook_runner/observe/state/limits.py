"""The memory a container may use, as its cgroup and its /dev/shm say (not ``free``)."""

from __future__ import annotations

from dataclasses import dataclass

from runbook_runner.observe.state.fields import reported


@dataclass(frozen=True)
class MemoryLimit:
    """A cgroup's memory limit and /dev/shm's size, in bytes. ``available_bytes`` is what
    the limit leaves (limit less usage); ``None`` where no limit is set (a host, or a
    container without one): then ``free``'s figure is the limit."""

    limit_bytes: int | None = reported("the cgroup's memory limit", "bytes")
    usage_bytes: int | None = reported("the cgroup's memory usage", "bytes")
    available_bytes: int | None = reported("what the cgroup's limit leaves", "bytes")
    source: str | None = reported("where the limit was read")
    in_container: bool | None = reported("inside a container")
    shm_size_bytes: int | None = reported("/dev/shm size", "bytes")  # noqa: S108
    shm_available_bytes: int | None = reported("/dev/shm available", "bytes")  # noqa: S108

    def describe(self) -> str:
        return "the memory limit"
