"""Bounded fan-out: a function on many hosts, at most ``forks`` at once, in threads.

Each host's work opens its own SSH connection and blocks on the network; threads are
enough (paramiko releases the GIL while it waits). Results come back in the order hosts
finish, on the calling thread, so the caller alone prints.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import gc
import os
import selectors
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

H = TypeVar("H")
R = TypeVar("R")


def fan_out(
    hosts: Sequence[H],
    work: Callable[[H], R],
    forks: int,
    *,
    tick: Callable[[], None] = lambda: None,
    tick_s: float = 0.2,
    stopped: Callable[[], bool] = lambda: False,
    skipped: Callable[[H], R] | None = None,
) -> Iterator[R]:
    """Yield ``work(host)`` for each host as it finishes; ``tick`` runs every ``tick_s``
    while waiting (a progress line). ``work`` must not raise: a host's failure is its result.
    Closing the iterator early (Ctrl-C) cancels the hosts not yet started.

    At most ``forks`` hosts are handed to the threads at a time (a window, not all of them
    at once: waiting on the window costs what the window holds, at any fleet size). Once
    ``stopped()`` (a signal), no more are started: each host not started is ``skipped(host)``
    at once, here (without ``skipped``, ``work`` is asked, and says so itself)."""
    width = max(1, forks)
    pool = futures.ThreadPoolExecutor(max_workers=width, thread_name_prefix="fleet")
    waiting = iter(hosts)
    running: set[futures.Future[R]] = set()
    gone = object()

    def start() -> None:
        while len(running) < width:
            host = next(waiting, gone)
            if host is gone:
                return
            running.add(pool.submit(work, host))  # type: ignore[arg-type]

    try:
        start()
        while running:
            done, running = futures.wait(
                running, timeout=tick_s, return_when=futures.FIRST_COMPLETED
            )
            for future in done:
                yield future.result()
            if stopped() and skipped is not None:
                for host in waiting:
                    yield skipped(host)
            else:
                start()
            tick()
    finally:
        pool.shutdown(wait=not running, cancel_futures=True)


def _unsent(host: object) -> None:
    """A host a stopped worker did not start: not sent back (the caller says it)."""
    return None


def fan_out_processes(
    hosts: Sequence[H],
    work: Callable[[H], R],
    workers: int,
    forks: int,
    *,
    encode: Callable[[R], str],
    decode: Callable[[str], R],
    signalled: Callable[[], int | None] = lambda: None,
    tick: Callable[[], None] = lambda: None,
    tick_s: float = 0.2,
    stopped: Callable[[], bool] = lambda: False,
) -> Iterator[R]:
    """As :func:`fan_out`, past one core: ``workers`` processes (forked: they share the
    loaded code and the caller's state), each running :func:`fan_out` with its share of
    ``forks`` threads on its share of the hosts, and sending each result back as one line
    (``encode``; ``decode`` on this side). ``signalled()`` is the signal this process got,
    if any: it is passed on to the workers once, so each ends its hosts' commands itself.

    Once ``stopped()`` (in a worker: its own copy, set by the signal passed on), a worker
    starts no more hosts and sends none of those back: the caller says them, not started.

    Fork only where no other thread runs yet (the caller's progress and workers start here).
    """
    shares = [list(hosts[i::workers]) for i in range(workers)]
    shares = [share for share in shares if share]
    each = max(1, -(-forks // len(shares)))
    children: dict[int, int] = {}  # pid -> read end
    for share in shares:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            code = 0
            try:
                gc.freeze()  # the collector then leaves the pages shared with the parent alone
                os.close(read_end)
                with os.fdopen(write_end, "w", encoding="utf-8") as out:
                    # After a stop, a host not started is not sent back: the caller,
                    # which knows the hosts, says them (a line each would take seconds).
                    for result in fan_out(share, work, each, stopped=stopped, skipped=_unsent):
                        if result is None:
                            continue
                        out.write(encode(result) + "\n")
                        out.flush()
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        os.close(write_end)
        children[pid] = read_end
    forwarded = False
    selector = selectors.DefaultSelector()
    buffers: dict[int, bytes] = {}
    for fd in children.values():
        selector.register(fd, selectors.EVENT_READ)
        buffers[fd] = b""
    try:
        while selector.get_map():
            signum = signalled()
            if signum is not None and not forwarded:
                forwarded = True
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signum)
            for key, _ in selector.select(tick_s):
                fd = int(key.fd)
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fd)
                    os.close(fd)
                    continue
                buffers[fd] += chunk
                *lines, buffers[fd] = buffers[fd].split(b"\n")
                for line in lines:
                    yield decode(line.decode("utf-8"))
            tick()
    finally:
        for key in list(selector.get_map().values()):
            with contextlib.suppress(OSError):
                os.close(int(key.fd))
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
