"""A fleet's stop: a signal seen once by the main thread, acted on by every host's worker.

The main thread's signal handler only records the signal (:meth:`Stop.set`); each host's
work asks its :class:`HostStop` at the points where it may wait (a command's output, a
poll's sleep) and raises :class:`Interrupted` there, once. The transport's own handling of
an interrupt then ends the remote command's process group, and the host's session journals
the interrupt and releases the lock, as on one host.

A host still connecting asks nothing: it waits in the TCP connect, the banner, the key
exchange or the login, for up to its ConnectTimeout. So while it connects, what it opens
(the socket, paramiko's transport) is *watched* (:meth:`HostStop.opened`): the stop shuts
them, and the handshake fails at once instead (a connection not yet made has nothing to
end on the host). The stop itself only records and shuts; no other I/O.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from runbook_runner.errors import Interrupted


class Stop:
    """Set once, by the first SIGINT, SIGTERM or SIGHUP; later signals change nothing."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None
        self.raise_here = False  # the main thread asks a question: the signal raises there
        self._lock = threading.Lock()
        self._connecting: dict[int, list[Any]] = {}  # id(HostStop) -> what it has opened

    def set(self, signum: int) -> bool:
        """Record the signal and shut every connection still being made; True when it is
        the first."""
        if self.signum is not None:
            return False
        self.signum = signum
        self._event.set()
        with self._lock:
            opened = [thing for things in self._connecting.values() for thing in things]
            self._connecting.clear()
        for thing in opened:
            shut(thing)
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
        self._connecting = False

    @contextlib.contextmanager
    def connecting(self) -> Iterator[None]:
        """While the host's connection is being made: what it opens is shut by the stop
        (:meth:`opened`), and a connection the stop cut short raises Interrupted, not a
        transport error. After it, the connection is the transport's to end."""
        self._connecting = True
        try:
            yield
        except Exception:
            self.check()  # stopped: the handshake failed because the stop shut it
            raise
        finally:
            self._connecting = False
            with self.stop._lock:
                self.stop._connecting.pop(id(self), None)

    def opened(self, thing: Any) -> None:
        """A socket or paramiko transport the connection just opened (ssh/connect.py calls
        this through the target's ``on_open``): shut at once if the fleet is already
        stopped, else when it is."""
        if not self._connecting:
            return  # a reconnect later in the run: its commands are ended the usual way
        with self.stop._lock:
            if self.stop.signum is None:
                self.stop._connecting.setdefault(id(self), []).append(thing)
                return
        shut(thing)

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


def shut(thing: Any) -> None:
    """End a connection being made, from another thread: a socket is shut down (which also
    ends a TCP connect still waiting, on Linux), a paramiko transport closed."""
    with contextlib.suppress(OSError, EOFError, AttributeError):
        if isinstance(thing, socket.socket):
            thing.shutdown(socket.SHUT_RDWR)
        else:
            thing.close()
