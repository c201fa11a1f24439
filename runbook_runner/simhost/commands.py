"""The commands a simulated GPU host answers, in one place for both of its front ends.

The tests' stand-in executables (standin.py: real processes, real signals, one
call per process) and the drill's simulated shell (shell.py: simulated processes
and time) run these same functions over the same model, so both print the same
formats. A command gets an :class:`Env`: the host, where to write, and the
process table that signals reach.
"""

from __future__ import annotations

import fnmatch
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from runbook_runner.simhost import render
from runbook_runner.simhost.model import (
    DAEMON_PID,
    EPOCH,
    SHM_DIR,
    SimHost,
    SimProcess,
    uid_of,
)


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


# -- nvidia-smi ------------------------------------------------------------------------


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def nvidia_smi(env: Env, args: list[str]) -> int:
    host = env.host
    if not host.driver_loaded:
        env.out(render.DRIVER_NOT_LOADED)
        return 9
    lost = [g for g in host.gpus if g.lost]
    if lost and not ({"-r", "--gpu-reset"} & set(args)):
        env.out(
            "".join(
                f"Unable to determine the device handle for GPU{g.bus_id}: Unknown Error\n"
                for g in lost
            )
        )
        return 15
    fmt = (option(args, "--format") or "csv").split(",")
    header, units = "noheader" not in fmt, "nounits" not in fmt
    ids_text = option(args, "-i", "--id")
    ids = [int(i) for i in ids_text.split(",")] if ids_text else None
    reads_memory = option(args, "--query-gpu") is not None or "-q" in args or "--query" in args
    for gpu in host.gpus if reads_memory else ():
        if gpu.draining_mib_per_read:  # memory the driver is still giving back, slowly
            gpu.orphaned_mib = max(0, gpu.orphaned_mib - gpu.draining_mib_per_read)
    if "-q" in args or "--query" in args:
        env.out(render.query_detail(host))
        return 0
    try:
        if (fields := option(args, "--query-gpu")) is not None:
            env.out(render.query_gpu(host, fields.split(","), header, units, ids))
            return 0
        if (fields := option(args, "--query-compute-apps")) is not None:
            env.out(render.query_compute_apps(host, fields.split(","), header, units))
            return 0
    except render.QueryError as error:
        env.out(str(error))
        return 2
    if "-r" in args or "--gpu-reset" in args:
        return _reset(env, ids)
    if "-pm" in args or "--persistence-mode" in args:
        enabled = (option(args, "-pm", "--persistence-mode") or "1") in {"1", "ENABLED"}
        refused = False
        for gpu in host.gpus:
            if ids is None or gpu.index in ids:
                if not enabled and gpu.persistence_locked:
                    host.note(f"persistence off was refused for GPU {gpu.index}")
                    env.out(f"Unable to set persistence mode for GPU {gpu.bus_id}: Unknown Error\n")
                    refused = True
                    continue
                gpu.persistence = enabled
                host.act(f"persistence {'on' if enabled else 'off'} GPU {gpu.index}")
                state = "Enabled" if enabled else "Disabled"
                env.out(f"{state} persistence mode for GPU {gpu.bus_id}.\n")
        if refused:
            env.out("Terminating early due to previous errors.\n")
            return 2
        env.out("All done.\n")
        return 0
    if "-L" in args:
        env.out("".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in host.gpus))
        return 0
    env.out(render.table(host))
    return 0


def _reset(env: Env, ids: list[int] | None) -> int:
    host = env.host
    if ids is None:
        env.out("ERROR: a GPU reset needs -i with the GPU to reset.\n\n")
        return 255
    for index in ids:
        gpu = host.gpu(index)
        refusal = host.reset(gpu)
        if refusal:
            env.out(render.reset_refused(gpu, refusal))
            return 255
        env.out(render.reset_succeeded(gpu))
    return 0


# -- free, dmesg ---------------------------------------------------------------------------


def free(env: Env, args: list[str]) -> int:
    host = env.host
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    divisor = 1024
    for letter, value in (("b", 1), ("k", 1024), ("m", 1024**2), ("g", 1024**3)):
        if letter in flags:
            divisor = value
    lc_all = os.environ.get("LC_ALL") if env.lc_all is None else env.lc_all
    language = (lc_all or host.locale)[:2] if host.locale else "C"
    env.out(render.free(host, divisor, human="h" in flags or "--human" in args, language=language))
    return 0


def df(env: Env, args: list[str]) -> int:
    """df [-P] [-h] [-B1|-k|-BSIZE] [--output=FIELDS] [PATH...] over the model's filesystems."""
    output = option(args, "--output")
    block, human, posix, paths = 1024, False, False, []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-B" and i + 1 < len(args):
            block, skip = _block(args[i + 1]), True
        elif arg.startswith("-B") or arg.startswith("--block-size="):
            block = _block(arg.split("=", 1)[1] if "=" in arg else arg[2:])
        elif arg.startswith("--output"):
            continue
        elif arg in {"-P", "--portability"}:
            posix = True
        elif arg in {"-h", "--human-readable"}:
            human = True
        elif arg == "-k":
            block = 1024
        elif arg.startswith("-"):
            env.err(f"df: option {arg!r} is not simulated\n")
            return 1
        else:
            paths.append(arg)
    fields = output.split(",") if output else None
    if fields and any(f not in render.DF_FIELDS for f in fields):
        env.err(
            f"df: option --output: field {next(f for f in fields if f not in render.DF_FIELDS)!r} unknown\n"
        )
        return 1
    text, errors = render.df(env.host, paths, fields, block, human, posix)
    env.out(text)
    for error in errors:
        env.err(error)
    return 1 if errors else 0


def _block(size: str) -> int:
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
    number = size.rstrip("KMG")
    return int(number or "1") * units[size[len(number) :]]


def dmesg(env: Env, args: list[str]) -> int:
    host = env.host
    env.out("".join(line + "\n" for line in host.kernel_messages))
    return 0


# -- process control ---------------------------------------------------------------------


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


def _signal_of(args: list[str], default: int = signal.SIGTERM) -> int:
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


def _send(env: Env, processes: list[SimProcess], signum: int) -> list[int]:
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
    return 0 if _send(env, matching, _signal_of(args)) else 1


def pgrep(env: Env, args: list[str]) -> int:
    host = env.host
    pattern = next((a for a in reversed(args) if not a.startswith("-")), "")
    matching = [p for p in host.processes if re.search(pattern, env.procs.cmdline(p.pid))]
    env.out("".join(f"{p.pid}\n" for p in matching))
    return 0 if matching else 1


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
        _send(
            env, processes, _signal_of([a for a in args if a not in {"-k", "-v"}], signal.SIGKILL)
        )
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


def date(env: Env, args: list[str]) -> int:
    if "+%s" in args:
        env.out(f"{int(env.host.now + EPOCH)}\n")
    else:
        env.out("Mon Nov 30 14:02:11 UTC 2026\n")
    return 0


# -- services, modules, power --------------------------------------------------------------


def systemctl_show(env: Env, args: list[str]) -> int:
    """systemctl show [-p PROP,...] UNIT...: Key=value lines, a blank line between units."""
    wanted: list[str] = []
    units: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in {"-p", "--property"} and i + 1 < len(args):
            wanted += args[i + 1].split(",")
            skip = True
        elif arg.startswith("--property="):
            wanted += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-p") and len(arg) > 2:
            wanted += arg[2:].split(",")
        elif not arg.startswith("-") and arg != "show":
            units.append(arg)
    blocks = []
    for unit in units:
        service = env.host.service(unit)
        name = unit if "." in unit else f"{unit}.service"
        active = service is not None and service.active
        values = {
            "Id": name,
            "LoadState": "loaded" if service else "not-found",
            "ActiveState": "active" if active else "inactive",
            "SubState": "running" if active else "dead",
            "UnitFileState": ("enabled" if service.enabled else "disabled") if service else "",
            "Result": "success",
            "MainPID": str(service.main_pid or DAEMON_PID + env.host.services.index(service))
            if active and service
            else "0",
            "NRestarts": str(service.restarts if service else 0),
            "ExecMainStatus": "0",
            "MemoryCurrent": "1220608" if active else "[not set]",
        }
        keys = [k for k in values if not wanted or k in wanted]
        blocks.append("".join(f"{k}={values[k]}\n" for k in keys))
    env.out("\n".join(blocks))
    return 0


def systemctl(env: Env, args: list[str]) -> int:
    host = env.host
    if "show" in args:
        return systemctl_show(env, args)
    words = [a for a in args if not a.startswith("-")]
    quiet = "--quiet" in args or "-q" in args
    if words[:1] == ["reboot"]:
        return reboot(env, [])
    if words[:1] == ["list-units"]:
        running = "--state=running" in args
        inactive = "--state=inactive" in args
        for listed in host.services:
            if (running and not listed.active) or (inactive and listed.active):
                continue
            state = "active running" if listed.active else "inactive dead"
            env.out(f"{listed.name}.service loaded {state} {listed.name}\n")
        return 0
    if len(words) < 2:
        env.err("systemctl: this stand-in needs VERB UNIT\n")
        return 1
    verb, units = words[0], words[1:]
    for unit in units:
        service = host.service(unit)
        if verb == "is-enabled" and service is None:
            # systemd: nothing on stdout for a unit that is not installed, only the error.
            env.err(
                f"Failed to get unit file state for {unit}.service: No such file or directory\n"
            )
            return 1
        if verb in {"is-active", "is-enabled"}:
            if verb == "is-active":
                yes = service is not None and service.active
                answer = "active" if yes else "inactive"
            else:
                yes = service is not None and service.enabled
                answer = "enabled" if yes else "disabled"
            if not quiet:
                env.out(answer + "\n")
            if not yes:
                return 3 if verb == "is-active" else 1
        elif service is None:
            env.err(f"Failed to {verb} {unit}: Unit {unit} not loaded.\n")
            return 5
        elif verb in {"stop", "start", "restart"}:
            host.act(f"{verb} {service.name}")
            if verb in {"stop", "restart"}:
                service.active = False
                for process in [p for p in host.processes if p.unit == service.name]:
                    # systemd ends the unit's cgroup (SIGTERM, SIGKILL after TimeoutStopSec)
                    if process.exits_at is None and not process.stuck:
                        process.exits_at = host.now + process.teardown_s
            if verb in {"start", "restart"}:
                service.restarts = 0  # systemd flushes NRestarts on a start by hand
                if service.runs:
                    host.start_service(service)
                service.active = True
    return 0


MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


def lsmod(env: Env, args: list[str]) -> int:
    host = env.host
    env.out("Module                  Size  Used by\n")
    if host.driver_loaded:
        for module in MODULES:
            env.out(f"{module:<24}{1_000_000:>8}  0\n")
    return 0


def rmmod(env: Env, args: list[str]) -> int:
    host = env.host
    for module in [a for a in args if not a.startswith("-")]:
        if not host.driver_loaded:
            env.err(f"rmmod: ERROR: Module {module} is not currently loaded\n")
            return 1
        held = any(p.gpu_mib for p in host.processes) or any(
            s.active and s.holds_gpus for s in host.services
        )
        if held or (host.module_held_by and module in {"nvidia_drm", "nvidia_modeset", "nvidia"}):
            env.err(f"rmmod: ERROR: Module {module} is in use\n")
            return 1
        if module == "nvidia":
            host.act("unload the driver")
            host.driver_loaded = False
            for gpu in host.gpus:
                gpu.orphaned_mib = 0
    return 0


def modprobe(env: Env, args: list[str]) -> int:
    host = env.host
    if "-r" not in args and any(a in MODULES for a in args):
        if not host.driver_loaded:
            host.act("load the driver")
        host.driver_loaded = True
    return 0


def reboot(env: Env, args: list[str]) -> int:
    """Reboot the simulation: end its server processes, reset its state, drop the session."""
    host = env.host
    for process in host.processes:
        env.procs.signal(process.pid, signal.SIGKILL)
    host.reboot()
    env.on_reboot()
    return 0


def curl(env: Env, args: list[str]) -> int:
    """curl [-sS] [-o FILE] [-w '%{http_code}'] [--max-time S] http://127.0.0.1:PORT/PATH:
    a server's health endpoint, as the process that listens on PORT answers it."""
    url = next((a for a in args if a.startswith("http://")), None)
    match = re.match(r"http://(?:127\.0\.0\.1|localhost)(?::(\d+))?(/.*)?$", url or "")
    if match is None:
        env.err(f"curl: (6) Could not resolve host in {url!r}\n")
        return 6
    port = int(match[1] or 80)
    write = option(args, "-w", "--write-out") or ""
    host = env.host
    listening = [
        p
        for p in host.processes
        if p.listens == port and env.procs.alive(p.pid) and host.now >= p.starts_at
    ]
    if not listening:
        env.err(
            f"curl: (7) Failed to connect to 127.0.0.1 port {port} after 0 ms: "
            "Couldn't connect to server\n"
        )
        return 7
    server = listening[0]
    if server.health == "hung" or server.exits_at is not None or server.stuck:
        seconds = option(args, "--max-time", "-m") or "5"
        env.err(
            f"curl: (28) Operation timed out after {float(seconds) * 1000:.0f} milliseconds "
            "with 0 bytes received\n"
        )
        return 28
    code = "200" if server.health == "ok" else "503"
    body = "" if "-o" in args else ("OK" if code == "200" else "unhealthy")
    env.out(body + write.replace("%{http_code}", code))
    return 0


def journalctl(env: Env, args: list[str]) -> int:
    """journalctl -u PATTERN [-u ...] [-n N] [--no-pager] [-o cat] [--since ...]: the log
    lines of the units the glob patterns name (the simulated journal keeps no time)."""
    patterns = [args[i + 1] for i, a in enumerate(args[:-1]) if a in {"-u", "--unit"}]
    patterns += [a.split("=", 1)[1] for a in args if a.startswith("--unit=")]
    count = int(option(args, "-n", "--lines") or "10")
    lines = []
    for service in env.host.services:
        unit = f"{service.name}.service"
        if any(
            fnmatch.fnmatchcase(unit, p) or fnmatch.fnmatchcase(service.name, p) for p in patterns
        ):
            lines += service.log
    if not lines:
        env.out("-- No entries --\n")
        return 0
    env.out("".join(line + "\n" for line in lines[-count:]))
    return 0


def record_only(env: Env, args: list[str]) -> int:
    return 0


COMMANDS: dict[str, Command] = {
    "nvidia-smi": nvidia_smi,
    "free": free,
    "dmesg": dmesg,
    "df": df,
    "pkill": pkill,
    "pgrep": pgrep,
    "fuser": fuser,
    "systemctl": systemctl,
    "lsmod": lsmod,
    "rmmod": rmmod,
    "modprobe": modprobe,
    "reboot": reboot,
    "shutdown": record_only,
    "stat": stat_,
    "date": date,
    "curl": curl,
    "ps": ps,
    "journalctl": journalctl,
}
