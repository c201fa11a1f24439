"""The simulated process tools: ps (the simulation's processes only), pkill and pgrep."""

from __future__ import annotations

import re
import signal

from runbook_runner.simhost.env import Env, option
from runbook_runner.simhost.model import (
    SimProcess,
    uid_of,
)


def ps(env: Env, args: list[str]) -> int:
    """ps [-ww] -eo FIELD[:WIDTH][=HEADER],...: the simulated host's process table, as the
    host sees it (a container's processes too), with the GPU services' main processes.
    Only the simulation's processes: no process of the machine is ever listed (or, so,
    signalled) by a runbook under test."""
    fields = ["pid", "tty", "time", "cmd"]
    for i, arg in enumerate(args):
        if arg in ("-o", "-eo") and i + 1 < len(args):
            fields = args[i + 1].split(",")
    table = env.procs
    host = env.host
    rows: list[dict[str, str]] = [
        _row(1, 0, "root", "Ss", "ep_poll", "/sbin/init", "/init.scope"),
        _row(
            812,
            1,
            "root",
            "Ss",
            "do_select",
            "sshd: /usr/sbin/sshd -D",
            "/system.slice/ssh.service",
        ),
    ]
    for pid, command, user, cgroup in host.daemons() if env.daemons_hold_devices else []:
        rows.append(_row(pid, 1, user, "Ss", "do_select", command, cgroup))
    for p in host.processes:
        if table.alive(p.pid):
            state, wchan = table.state(p.pid), table.wchan(p.pid)
            found = _row(p.pid, p.ppid, p.user, state, wchan, p.cmdline, p.cgroup_path())
            found["etimes"] = str(max(0, int(host.now - p.born)))
            found["pgid"], found["sid"] = str(p.pgid or p.pid), str(p.sid or p.pid)
            rows.append(found)
    # -s SID and -p PID select rows as procps does (a process group's clean-up asks -s).
    for flag, column in (("-s", "sid"), ("-p", "pid")):
        wanted = option(args, flag)
        if wanted is not None:
            chosen = {w.strip() for w in wanted.split(",") if w.strip()}
            rows = [r for r in rows if r.get(column) in chosen]
    headers = {
        "pid": "PID",
        "ppid": "PPID",
        "pgid": "PGID",
        "sid": "SID",
        "user": "USER",
        "uid": "UID",
        "etimes": "ELAPSED",
        "stat": "STAT",
        "wchan": "WCHAN",
        "cgroup": "CGROUP",
        "args": "COMMAND",
        "cmd": "CMD",
        "comm": "COMMAND",
    }
    out = []
    for row in [None, *rows]:
        cells = []
        for f in fields:
            spec, _, header = f.partition("=")
            name, _, width = spec.partition(":")
            text = header or headers.get(name, name.upper()) if row is None else row.get(name, "-")
            if name in ("pid", "ppid", "pgid", "sid", "uid", "etimes"):
                cells.append(f"{text:>7}")
            elif name in ("args", "cmd", "comm"):
                cells.append(text)
            else:
                cells.append(f"{text:<{min(int(width), 64) if width.isdigit() else 4}}")
        if row is None and all(f.endswith("=") for f in fields):
            continue
        out.append(" ".join(cells).rstrip() + "\n")
    env.out("".join(out))
    return 0


def _row(
    pid: int, ppid: int, user: str, stat: str, wchan: str, command: str, cgroup: str
) -> dict[str, str]:
    return {
        "pid": str(pid),
        "ppid": str(ppid),
        "pgid": str(pid),
        "sid": str(pid),
        "user": user,
        "uid": str(uid_of(user)),
        "etimes": "3600",
        "stat": stat,
        "wchan": wchan,
        "cgroup": f"0::{cgroup}",
        "args": command,
        "cmd": command,
        "comm": command.split()[0],
    }


def signal_of(args: list[str], default: int = signal.SIGTERM) -> int:
    for i, arg in enumerate(args):
        name = None
        if arg in {"-s", "--signal"} and i + 1 < len(args):
            name = args[i + 1]
        elif arg.startswith("--signal="):
            name = arg.split("=", 1)[1]
        elif re.fullmatch(r"-(\d+|[A-Z]+[A-Z0-9]*)", arg):
            name = arg[1:]
        if name is not None:
            if name.isdigit():
                return int(name)
            return int(getattr(signal, name if name.startswith("SIG") else "SIG" + name))
    return default


def send(env: Env, processes: list[SimProcess], signum: int) -> list[int]:
    return [p.pid for p in processes if env.procs.signal(p.pid, signum)]


def pkill(env: Env, args: list[str]) -> int:
    host = env.host
    """pkill [-SIGNAL|--signal S] [-f] PATTERN, over the registered server processes only."""
    pattern = next((a for a in reversed(args) if not a.startswith("-")), None)
    if pattern is None or args[-2:-1] in (["-s"], ["--signal"]):
        env.err("pkill: no matching criteria specified\n")
        return 2
    full = "-f" in args or "--full" in args
    matching = [
        p
        for p in host.processes
        if re.search(
            pattern,
            env.procs.cmdline(p.pid)
            if full
            else env.procs.cmdline(p.pid).split(" ")[0].rsplit("/", 1)[-1],
        )
    ]
    return 0 if send(env, matching, signal_of(args)) else 1


def pgrep(env: Env, args: list[str]) -> int:
    host = env.host
    pattern = next((a for a in reversed(args) if not a.startswith("-")), "")
    matching = [p for p in host.processes if re.search(pattern, env.procs.cmdline(p.pid))]
    env.out("".join(f"{p.pid}\n" for p in matching))
    return 0 if matching else 1
