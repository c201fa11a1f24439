"""Bounded fan-out: a function on many hosts, at most ``forks`` at once, in threads.

Each host's work opens its own SSH connection and blocks on the network; threads are
enough (paramiko releases the GIL while it waits). Results come back in the order hosts
finish, on the calling thread, so the caller alone prints.
"""

from __future__ import annotations

import concurrent.futures as futures
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
