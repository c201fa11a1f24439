"""One command on one paramiko channel: both output streams read to the end or a deadline,
the process-group mark a command announces on stderr, and the script that ends a group.

Reading both streams in one loop keeps a chatty command from filling one window while we
wait on the other (see :func:`drain`).
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable

import paramiko

from runbook_runner.commandresult import TailBuffer
from runbook_runner.ssh.batch import ANNOUNCE_PGID, PGID_MARK

EXIT_GRACE_S = 0.5  # after the exit status, how long output may still come


def announcing_pgid(command: str) -> str:
    """``command``, after a first line on stderr naming its process group."""
    return f"{ANNOUNCE_PGID}; {command}"


def pgid_mark(head: bytes) -> tuple[str | None, int]:
    """The process group announced on stderr's first line, and that line's size."""
    first, newline, _ = head.partition(b"\n")
    if newline and first.startswith(PGID_MARK.encode()):
        pgid = first[len(PGID_MARK) :].decode("ascii", "replace").strip()
        return (pgid if pgid.isdigit() else None), len(first) + 1
    return None, 0


def wait_for_pgid(channel: paramiko.Channel, err: TailBuffer) -> str | None:
    """The interrupted command's process group, or None if it never started: the mark is
    the first thing the remote shell prints, so it gets a moment to come."""
    pgid, _ = pgid_mark(err.head)
    deadline = time.monotonic() + 2.0
    while pgid is None and not channel.closed and time.monotonic() < deadline:
        if channel.recv_stderr_ready():
            err.add(channel.recv_stderr(65536))
            pgid, _ = pgid_mark(err.head)
        else:
            select.select([channel], [], [], 0.05)
            while channel.recv_ready():
                channel.recv(65536)
    return pgid


def final_status(channel: paramiko.Channel, timed_out: bool, what: str) -> int | None:
    """The exit status once :func:`drain` returned (None: it timed out). paramiko reports
    -1 when the connection died before the status came: that is an :class:`EOFError`."""
    exit_status = None if timed_out else channel.recv_exit_status()
    if exit_status == -1 and not channel.get_transport().is_active():
        raise EOFError(f"the connection closed before {what} ended")
    return exit_status


def wait_ready(
    channel: paramiko.Channel, marker: bytes, deadline: float, out: TailBuffer, err: TailBuffer
) -> tuple[str, int | None]:
    """Read both streams until stdout holds ``marker`` (``"ready"``), the command ends
    (``"ended"``, with its exit status) or the deadline passes (``"timed out"``)."""
    while True:
        while channel.recv_ready():
            out.add(channel.recv(65536))
        while channel.recv_stderr_ready():
            err.add(channel.recv_stderr(65536))
        if marker in out.bytes():
            return "ready", None
        ended = channel.closed or (channel.eof_received and channel.exit_status_ready())
        if ended and not channel.recv_ready() and not channel.recv_stderr_ready():
            return "ended", channel.recv_exit_status()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timed out", None
        if channel.eof_received:
            channel.status_event.wait(min(remaining, 0.2))
        else:
            select.select([channel], [], [], min(remaining, 0.2))


def end_group_script(pgid: str, session: bool = False) -> str:
    """The script that ends a command's process group; ``session``: every group of its
    session too (a batch runs each command under ``timeout``, which gives it a group of its
    own). A short grace after TERM, then KILL: the caller's timeout is kept within a second."""
    leader = int(pgid)
    if leader <= 1:
        return "true"  # never "kill -1" (every process the login may signal) or group 0
    # "kill -SIG -PGID": the one spelling dash, bash and BusyBox sh all accept. The groups
    # come from the system's own ps (command -p: the default PATH, not a shim on the
    # login's), and only numbers above 1 are ever signalled: a ps that printed anything
    # else ("1", a header, "-") must not turn this into "kill -TERM -1".
    groups = (
        f"g=$(command -p ps -o pgid= -s {leader} 2>/dev/null | sort -u); "
        f"g=$(for p in $g {leader}; do case $p in *[!0-9]*|0|1) ;; *) echo $p;; esac; done"
        " | sort -u); "
        if session
        else f"g={leader}; "
    )
    return (
        groups + "for p in $g; do kill -TERM -$p 2>/dev/null; done; i=0; "
        "while [ $i -lt 5 ]; do a=; for p in $g; do kill -0 -$p 2>/dev/null && a=1; done; "
        '[ -n "$a" ] || break; sleep 0.1; i=$((i+1)); done; '
        "for p in $g; do kill -KILL -$p 2>/dev/null; done; true"
    )


def close_quietly(channel: paramiko.Channel) -> None:
    """Closing a channel writes to the socket, which may be gone already (a reboot)."""
    with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
        channel.close()


def no_check() -> None:
    pass


def drain(
    channel: paramiko.Channel,
    deadline: float,
    out: TailBuffer,
    err: TailBuffer,
    check: Callable[[], None] = no_check,
) -> bool:
    """Read stdout and stderr together until the command ends or the deadline passes;
    True when it timed out. ``check`` is asked at least every half second (it may raise).

    Reading both streams in one loop is what keeps a chatty command from
    filling one window while we wait on the other (paramiko's recv_exit_status
    warns about exactly that hang). The exit status is the end: a background child
    that keeps stdout open gets a short grace for its output, then is left behind.
    """
    exited_at: float | None = None
    while True:
        check()
        progressed = False
        while channel.recv_ready():
            out.add(channel.recv(65536))
            progressed = True
        while channel.recv_stderr_ready():
            err.add(channel.recv_stderr(65536))
            progressed = True
        # sshd may report the exit status before the last of the output: the end is
        # EOF (after all data on both streams) plus the status, with nothing left to read.
        finished = channel.closed or (channel.eof_received and channel.exit_status_ready())
        if finished and not channel.recv_ready() and not channel.recv_stderr_ready():
            return False
        now = time.monotonic()
        if channel.exit_status_ready():
            exited_at = now if exited_at is None else exited_at
            if now - exited_at >= EXIT_GRACE_S:
                return False
        remaining = deadline - now
        if remaining <= 0:
            return True
        if channel.eof_received and not channel.exit_status_ready():
            # All output is in; only the exit status is still on its way. The channel's
            # pipe stays readable after EOF, so selecting on it would spin: wait for the status.
            channel.status_event.wait(min(remaining, 0.5))
        elif not progressed:
            wait = min(remaining, 0.5 if exited_at is None else EXIT_GRACE_S / 3)
            select.select([channel], [], [], wait)
