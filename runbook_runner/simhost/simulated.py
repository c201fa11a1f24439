"""Simulated processes and simulated time, for the drill: no real process is ever signalled."""

from __future__ import annotations

import signal
import threading
import time

from runbook_runner.simhost.model import SimHost, SimProcess


class SimClock:
    """Time that passes only when someone waits: a drill's minutes take milliseconds."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    def set(self, now: float) -> None:
        with self._lock:
            self._now = now


class WallClock(SimClock):
    """Simulated time for a practice host (``runbook sim``): it follows the wall clock, as a
    real host's does for a run that waits in real time, and jumps ahead on ``sleep``."""

    def __init__(self, start: float = 1_000.0) -> None:
        super().__init__(start)
        self._started = time.monotonic()

    def now(self) -> float:
        return super().now() + (time.monotonic() - self._started)

    def set(self, now: float) -> None:
        super().set(now)
        self._started = time.monotonic()


class SimProcesses:
    """The host's process table, as the drill's ps, kill, pkill and fuser see it."""

    def __init__(self, host: SimHost, clock: SimClock) -> None:
        self.host, self.clock = host, clock

    def _find(self, pid: int) -> SimProcess | None:
        return next((p for p in self.host.processes if p.pid == pid), None)

    def alive(self, pid: int) -> bool:
        process = self._find(pid)
        if process is not None and process.defunct:  # reaped once its parent is gone
            return process.ppid not in (0, 1, pid) and self.alive(process.ppid)
        return process is not None and (
            process.exits_at is None or self.clock.now() < process.exits_at
        )

    def cmdline(self, pid: int) -> str:
        process = self._find(pid)
        return process.cmdline if process else ""

    def signal(self, pid: int, signum: int) -> bool:
        process = self._find(pid)
        if signum:
            self.host.act(f"{signal.Signals(signum).name} {pid}")
        if process is None or not self.alive(pid):
            return False
        fatal = signum in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP)
        if (
            process.stuck
            or process.defunct
            or not fatal
            or (signum == signal.SIGTERM and process.ignores_term)
        ):
            return True  # delivered; nothing happens (a process in D state ignores even SIGKILL)
        if process.exits_at is None:
            process.exits_at = self.clock.now() + process.teardown_s
        return True

    def state(self, pid: int) -> str:
        process = self._find(pid)
        if process is None:
            return "?"
        if process.defunct:
            return "Zl"
        if process.stuck or (process.exits_at is not None and process.teardown_s > 0):
            return "D"  # uninterruptible: unpinning memory, or stuck in the driver
        return "Sl"

    def wchan(self, pid: int) -> str:
        process = self._find(pid)
        if process is not None and (process.stuck or process.exits_at is not None):
            return "unpin_user_pages" if not process.stuck else "uvm_gpu_wait"
        return "futex_wait_queue"
