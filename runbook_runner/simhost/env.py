"""The environment a simulated command runs in: the host, its output, the process table
signals reach; and how a command reads its options.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from runbook_runner.simhost.model import SimHost


class ProcessTable(Protocol):
    def alive(self, pid: int) -> bool: ...

    def cmdline(self, pid: int) -> str: ...

    def signal(self, pid: int, signum: int) -> bool: ...

    def state(self, pid: int) -> str: ...

    def wchan(self, pid: int) -> str: ...


@dataclass
class Env:
    host: SimHost
    procs: ProcessTable
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    on_reboot: Callable[[], None] = lambda: None
    user: str = field(default_factory=lambda: os.environ.get("USER", "root"))
    # The GPU services' processes exist only in the drill's process table; the tests'
    # stand-ins run beside real processes, where their simulated PIDs would be someone's.
    daemons_hold_devices: bool = True
    lc_all: str | None = None  # the caller's LC_ALL; None: this process's environment

    def out(self, text: str) -> None:
        self.stdout.append(text)

    def err(self, text: str) -> None:
        self.stderr.append(text)


Command = Callable[[Env, list[str]], int]


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None
