"""Bounded fan-out: a function on many hosts, at most ``forks`` at once, in threads.

Each host's work opens its own SSH connection and blocks on the network; threads are
enough (paramiko releases the GIL while it waits). Results come back in the order hosts
finish, on the calling thread, so the caller alone prints.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
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
) -> Iterator[R]:
    """Yield ``work(host)`` for each host as it finishes; ``tick`` runs every ``tick_s``
    while waiting (a progress line). ``work`` must not raise: a host's failure is its result.
    Closing the iterator early (Ctrl-C) cancels the hosts not yet started."""
    pool = futures.ThreadPoolExecutor(max_workers=max(1, forks), thread_name_prefix="fleet")
    pending = {pool.submit(work, host) for host in hosts}
    try:
        while pending:
            done, pending = futures.wait(
                pending, timeout=tick_s, return_when=futures.FIRST_COMPLETED
            )
            for future in done:
                yield future.result()
            tick()
    finally:
        pool.shutdown(wait=not pending, cancel_futures=True)


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
) -> Iterator[R]:
    """As :func:`fan_out`, past one core: ``workers`` processes (forked: they share the
    loaded code and the caller's state), each running :func:`fan_out` with its share of
    ``forks`` threads on its share of the hosts, and sending each result back as one line
    (``encode``; ``decode`` on this side). ``signalled()`` is the signal this process got,
    if any: it is passed on to the workers once, so each ends its hosts' commands itself.

    Fork only where no other thread runs yet (the caller's progress and workers start here).
    """
    import os
    import selectors

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
                import gc

                gc.freeze()  # the collector then leaves the pages shared with the parent alone
                os.close(read_end)
                with os.fdopen(write_end, "w", encoding="utf-8") as out:
                    for result in fan_out(share, work, each):
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
