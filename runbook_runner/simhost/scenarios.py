"""Drill scenarios: the state a simulated 8-GPU server starts in, each named for what it teaches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runbook_runner.simhost.model import GIB, SimHost, SimProcess, SimService, eight_gpu_server

LAUNCH = (
    "python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --trust-remote-code "
    "--tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300"
)


@dataclass(frozen=True)
class Scenario:
    name: str
    teaches: str
    build: Callable[[], SimHost]


def _server(
    orphaned: tuple[int, ...] = (), teardown_s: float = 20.0, **flags: object
) -> list[SimProcess]:
    """SGLang at TP 8: the launcher and one scheduler per GPU, each pinning its host pool."""
    processes = [SimProcess(pid=4101, cmdline=LAUNCH, teardown_s=1.0)]
    for rank in range(8):
        processes.append(
            SimProcess(
                pid=4120 + rank,
                cmdline=f"sglang::scheduler_TP{rank}",
                gpu_mib={str(rank): 96_410 if rank in orphaned else 90_112},
                host_bytes=38 * GIB,
                orphan_gpu_memory=rank in orphaned,
                teardown_s=teardown_s,
                **flags,  # type: ignore[arg-type]
            )
        )
    return processes


def oom_crash() -> SimHost:
    host = eight_gpu_server()
    host.processes = _server(orphaned=(0, 2))
    host.kernel_messages = [
        "[Mon Nov 30 14:02:11 2026] Out of memory: Killed process 4127 (sglang::schedul) "
        "total-vm:412000000kB, anon-rss:39845888kB",
    ]
    return host


def slow_teardown() -> SimHost:
    host = eight_gpu_server()
    host.processes = _server(teardown_s=60.0)
    return host


def persistence_blocks_reset() -> SimHost:
    host = eight_gpu_server()
    host.services.append(SimService("dcgm-exporter"))
    host.gpu(1).orphaned_mib = 96_402
    host.gpu(5).orphaned_mib = 96_398
    return host


def stuck_d_state() -> SimHost:
    host = eight_gpu_server()
    stuck = SimProcess(
        pid=4123,
        cmdline="sglang::scheduler_TP3",
        gpu_mib={"3": 95_870},
        host_bytes=38 * GIB,
        stuck=True,
    )
    host.processes = [stuck]
    host.kernel_messages = [
        "[Mon Nov 30 14:07:40 2026] INFO: task sglang::schedul:4123 blocked for more than 122 seconds.",
        "[Mon Nov 30 14:07:41 2026] NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.",
    ]
    return host


def host_ram_leak() -> SimHost:
    host = eight_gpu_server()
    host.leaked_host_bytes = 120 * GIB  # leaked /dev/shm segments; every GPU is clean
    return host


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "oom-crash",
            "the incident: after the server dies, GPUs 0 and 2 keep their memory; "
            "waiting does not help, a reset of just those two does",
            oom_crash,
        ),
        Scenario(
            "slow-teardown",
            "pinned host memory takes a minute to be released after the kill: "
            "waiting is the fix, killing harder is not",
            slow_teardown,
        ),
        Scenario(
            "persistence-blocks-reset",
            "a GPU reset is refused while nvidia-persistenced and the "
            "exporter hold the GPUs; stop them first, start them after",
            persistence_blocks_reset,
        ),
        Scenario(
            "stuck-d-state",
            "a process stuck in D state ignores every signal and blocks reset and "
            "driver unload: only a reboot helps",
            stuck_d_state,
        ),
        Scenario(
            "host-ram-leak",
            "120 GiB of host RAM held by leaked /dev/shm segments while every GPU is clean: "
            "no GPU rung may run for a host-memory problem",
            host_ram_leak,
        ),
    ]
}
