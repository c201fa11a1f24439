"""A fleet's stop: a signal seen once by the main thread, acted on by every host's worker.

The main thread's signal handler only records the signal (:meth:`Stop.set`); each host's
work asks its :class:`HostStop` at the points where it may wait (a command's output, a
poll's sleep) and raises :class:`Interrupted` there, once. The transport's own handling of
an interrupt then ends the remote command's process group, and the host's session journals
the interrupt and releases the lock, as on one host. Pure threading; no I/O.
"""

from __future__ import annotations

import threading
import time

from runbook_runner.errors import Interrupted


class Stop:
    """Set once, by the first SIGINT, SIGTERM or SIGHUP; later signals change nothing."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None
        self.raise_here = False  # the main thread asks a question: the signal raises there

    def set(self, signum: int) -> bool:
        """Record the signal; True when it is the first."""
        if self.signum is not None:
            return False
        self.signum = signum
        self._event.set()
        return True

    @property
    def stopped(self) -> bool:
        return self.signum is not None

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    def for_host(self) -> HostStop:
        return HostStop(self)


class HostStop:
    """One host's view of the stop: :meth:`check` raises Interrupted the first time only, so
    the cleanup it starts (ending the remote command, releasing the lock) runs to its end."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.raised = False

    def check(self) -> None:
        signum = self.stop.signum
        if signum is not None and not self.raised:
            self.raised = True
            raise Interrupted(signum)

    def sleep(self, seconds: float) -> None:
        """A poll's sleep that ends early, with Interrupted, when the fleet is stopped."""
        if self.raised:  # already stopping: a cleanup's own wait is a plain wait
            time.sleep(max(0.0, seconds))
            return
        self.stop.wait(max(0.0, seconds))
        self.check()
