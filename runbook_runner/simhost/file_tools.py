"""The simulated file tools: fuser (device files and /dev/shm), rm and stat."""

from __future__ import annotations

import signal

from runbook_runner.simhost.env import Env, option
from runbook_runner.simhost.model import (
    DAEMON_PID,
    EPOCH,
    SHM_DIR,
    SimHost,
    SimProcess,
)
from runbook_runner.simhost.process_tools import send, signal_of


def _device_files(host: SimHost, args: list[str]) -> list[str]:
    """The device files named (a glob the shell did not expand means all of them)."""
    every = [f"/dev/nvidia{g.minor_number}" for g in host.gpus] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
    ]
    named = [a for a in args if a.startswith("/dev/")]
    if not named or "/dev/nvidia*" in named:
        return every
    return [f for f in every if f in named]


def fuser(env: Env, args: list[str]) -> int:
    """fuser [-v] [-s] [-k [-SIGNAL]] FILE...: over /dev/nvidia*. A process holds
    /dev/nvidiaN of each GPU it uses and /dev/nvidiactl, /dev/nvidia-uvm (node-wide);
    running GPU services hold /dev/nvidiactl."""
    host = env.host
    shm_named = [a for a in args if a.startswith(SHM_DIR + "/")]
    if shm_named:
        return _fuser_shm(env, args, shm_named)
    files = _device_files(host, args)
    minors = {f"/dev/nvidia{g.minor_number}": str(g.index) for g in host.gpus}
    # (file, process, daemon): a running GPU service keeps every /dev/nvidia* file open
    table: list[tuple[str, SimProcess | None, tuple[int, str, str, str] | None]] = []
    daemons = host.daemons() if env.daemons_hold_devices else []
    for file in files:
        if file in minors:
            table += [(file, p, None) for p in host.processes if minors[file] in p.gpu_mib]
        else:
            table += [(file, p, None) for p in host.processes if p.gpu_mib]
        if file in minors or file == "/dev/nvidiactl":
            table += [(file, None, daemon) for daemon in daemons]
    if not table:
        return 1
    if "-v" in args:
        env.err("                     USER        PID ACCESS COMMAND\n")
        shown = ""
        for file, process, daemon in table:
            label = f"{file}:" if file != shown else ""
            shown = file
            if process is not None:
                name = env.procs.cmdline(process.pid).split(" ")[0].rsplit("/", 1)[-1][:15]
                env.err(f"{label:<20} {env.user:<8} {process.pid:>6} F...m {name}\n")
            elif daemon is not None:
                pid, command, user, _ = daemon
                name = command.split(" ")[0].rsplit("/", 1)[-1][:15]
                env.err(f"{label:<20} {user[:8]:<8} {pid:>6} F.... {name}\n")
    elif "-s" not in args:
        pids = dict.fromkeys(p.pid for _, p, _ in table if p is not None)
        env.out(" ".join(str(pid) for pid in pids) + "\n")
    if "-k" in args:
        processes = list({id(p): p for _, p, _ in table if p is not None}.values())
        send(env, processes, signal_of([a for a in args if a not in {"-k", "-v"}], signal.SIGKILL))
        for _, _, daemon in table:
            if daemon is not None:  # fuser -k takes the persistence daemon down too
                host.services[daemon[0] - DAEMON_PID].active = False
    return 0


def _fuser_shm(env: Env, args: list[str], files: list[str]) -> int:
    """fuser over /dev/shm files: the live process that has each open or mapped."""
    host = env.host
    rows = []
    for file in files:
        segment = next((s for s in host.shm if s.path == file), None)
        if segment is None:
            env.err(f"Specified filename {file} does not exist.\n")
            continue
        if segment.holder is not None and env.procs.alive(segment.holder):
            rows.append((file, segment.holder))
    if "-v" in args and rows:
        env.err("                     USER        PID ACCESS COMMAND\n")
        for file, pid in rows:
            name = env.procs.cmdline(pid).split(" ")[0].rsplit("/", 1)[-1][:15]
            env.err(f"{file + ':':<20} {env.user:<8} {pid:>6} F...m {name}\n")
    elif "-s" not in args and rows:
        env.out(" ".join(str(pid) for _, pid in rows) + "\n")
    return 0 if rows else 1


def rm(env: Env, args: list[str]) -> int:
    """rm [-f] [--] FILE...: only files in /dev/shm exist on the simulated host. The drill's
    shell has it; it is no stand-in for the tests' sshd, whose host lock needs a real rm
    (and whose stat stand-in lists no /dev/shm file, so no run there ever removes one)."""
    host = env.host
    status = 0
    for file in [a for a in args if not a.startswith("-")]:
        segment = next((s for s in host.shm if s.path == file), None)
        host.act(f"remove {file}")
        if segment is None:
            if "-f" not in args:
                env.err(f"rm: cannot remove '{file}': No such file or directory\n")
                status = 1
            continue
        host.shm.remove(segment)  # a holder keeps its mapping; the name is gone either way
    return status


def stat_(env: Env, args: list[str]) -> int:
    """stat -c '%s %U %Y %n' FILE...: size, owner, mtime (epoch) and name."""
    host = env.host
    fmt = option(args, "-c", "--format") or "%n"
    status = 0
    for file in [a for a in args if a.startswith("/")]:
        segment = next((s for s in host.shm if s.path == file), None)
        if segment is None:
            env.err(f"stat: cannot statx '{file}': No such file or directory\n")
            status = 1
            continue
        values = {
            "%s": str(segment.size_bytes),
            "%U": segment.owner,
            "%Y": str(int(segment.mtime + EPOCH)),
            "%n": file,
        }
        text = fmt
        for key, value in values.items():
            text = text.replace(key, value)
        env.out(text + "\n")
    return status
