"""The simulated host's own stand-ins besides the simulator's commands (commands.py).

``sleep`` moves the simulated clock instead of waiting, ``kill`` signals the simulated
process table (a PID outside it is "No such process", never a process of the machine),
and ``cat`` prints /proc/meminfo and the files a state file gives; ``rm`` and ``stat``
answer for /dev/shm (commands.py). The shell itself is
a real one (hostshell.py); these answer one call each.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

from runbook_runner.simhost import render
from runbook_runner.simhost.commands import COMMANDS, Env, rm
from runbook_runner.simhost.model import CONTAINER_FILES

Command = Callable[[Env, list[str]], int]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def sleep(env: Env, args: list[str]) -> int:
    """sleep NUMBER[smhd]...: the simulated clock moves on by their sum."""
    total = 0.0
    for arg in args:
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", arg)
        if match is None:
            env.err(f"sleep: invalid time interval '{arg}'\n")
            return 1
        total += float(match[1]) * _UNITS[match[2]]
    if not args:
        env.err("sleep: missing operand\n")
        return 1
    clock = getattr(env.procs, "clock", None)
    if clock is not None:
        clock.sleep(total)
    return 0


def _signal(name: str) -> int | None:
    if name.isdigit():
        return int(name)
    upper = name.upper()
    found = getattr(signal, upper if upper.startswith("SIG") else "SIG" + upper, None)
    return int(found) if isinstance(found, signal.Signals) else None


def kill(env: Env, args: list[str]) -> int:
    """kill [-SIGNAL | -s SIGNAL] PID...: to the simulated processes only."""
    signum: int | None = int(signal.SIGTERM)
    targets: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in {"-s", "-n"} and rest and not targets:
            signum = _signal(rest.pop(0))
        elif arg == "--":
            targets += rest
            break
        elif re.fullmatch(r"-[A-Za-z]+\d*|-\d+", arg) and not targets:
            signum = _signal(arg[1:])
        else:
            targets.append(arg)
    if signum is None:
        env.err(f"kill: {args[0].lstrip('-')}: invalid signal specification\n")
        return 1
    if not targets:
        env.err("kill: usage: kill [-s sigspec | -n signum | -sigspec] pid ...\n")
        return 2
    status = 0
    for target in targets:
        if not re.fullmatch(r"-?\d+", target):
            env.err(f"kill: {target}: arguments must be process or job IDs\n")
            status = 1
        elif int(target) <= 0 or not env.procs.signal(int(target), signum):
            env.err(f"kill: ({target}) - No such process\n")
            status = 1
    return status


_PROC_FILE = re.compile(r"/proc/(\d+)/(environ|cgroup|cmdline|loginuid|mountinfo)")


def cat(env: Env, args: list[str]) -> int:
    """cat FILE...: /proc/meminfo from the model, a simulated process's /proc/PID/environ,
    cgroup, cmdline, loginuid and mountinfo, and the files a state file gives."""
    status = 0
    for path in [a for a in args if a != "--"]:
        if path == "/proc/meminfo":
            env.out(render.meminfo(env.host))
        elif path in env.host.files:
            env.out(env.host.files[path])
        elif path in CONTAINER_FILES:  # a host not in a container, with no cgroup limit
            env.err(f"cat: {path}: No such file or directory\n")
            status = 1
        elif (match := _PROC_FILE.fullmatch(path)) is not None:
            process = next((p for p in env.host.processes if p.pid == int(match[1])), None)
            if process is None or not env.procs.alive(process.pid):
                env.err(f"cat: {path}: No such file or directory\n")
                status = 1
            elif match[2] == "environ":
                env.out("".join(f"{k}={v}\0" for k, v in process.environ.items()))
            elif match[2] == "loginuid":
                env.out(str(4294967295 if process.loginuid is None else process.loginuid))
            elif match[2] == "mountinfo":
                env.out(process.mountinfo)
            elif match[2] == "cgroup":
                env.out(f"0::{process.cgroup_path()}\n")
            else:
                env.out(process.cmdline.replace(" ", "\0") + "\0")
        else:
            env.err(f"cat: {path}: No such file or directory\n")
            status = 1
    return status


def readlink(env: Env, args: list[str]) -> int:
    """readlink /proc/PID/exe: a simulated process's program (a GPU service's is its
    command's first word), as the kernel names it; nothing for any other PID."""
    status = 0
    for path in [a for a in args if not a.startswith("-")]:
        match = re.fullmatch(r"/proc/(\d+)/exe", path)
        pid = int(match[1]) if match is not None else None
        process = next((p for p in env.host.processes if p.pid == pid), None)
        daemon = next((d for d in env.host.daemons() if d[0] == pid), None)
        if process is not None and env.procs.alive(process.pid):
            first = process.cmdline.split(" ", 1)[0]
            env.out(
                (process.exe or (first if first.startswith("/") else "/usr/bin/python3")) + "\n"
            )
        elif daemon is not None:
            env.out(daemon[1].split(" ", 1)[0] + "\n")
        else:
            status = 1
    return status


SERVED: dict[str, Command] = {
    **COMMANDS,
    "sleep": sleep,
    "kill": kill,
    "cat": cat,
    "rm": rm,
    "readlink": readlink,
}
