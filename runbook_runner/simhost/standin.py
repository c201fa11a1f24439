"""Stand-in commands for a test host with no GPU: ``standin.py NAME ARGS...``.

The test sshd puts a folder of wrappers first on PATH, one per name below;
each runs this module with the simulated host's state file ($RBR_SIM_STATE)
and appends the call to a log ($RBR_SIM_LOG). Commands that would change the
machine (reboot, rmmod, systemctl, fuser -k, sudo, pkill) only record the call
and act on the simulation: the processes they signal are the test's own
stand-in server processes, registered in the state file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runbook_runner.simhost import render
from runbook_runner.simhost.model import SimHost, SimProcess

Handler = Callable[[SimHost, list[str]], int]


def _alive(pid: int) -> bool:
    """A real process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _out(text: str) -> None:
    sys.stdout.write(text)


def _err(text: str) -> None:
    sys.stderr.write(text)


# -- nvidia-smi ------------------------------------------------------------------------


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def nvidia_smi(host: SimHost, args: list[str]) -> int:
    if not host.driver_loaded:
        _out(render.DRIVER_NOT_LOADED)
        return 9
    fmt = (_option(args, "--format") or "csv").split(",")
    header, units = "noheader" not in fmt, "nounits" not in fmt
    ids_text = _option(args, "-i", "--id")
    ids = [int(i) for i in ids_text.split(",")] if ids_text else None
    try:
        if (fields := _option(args, "--query-gpu")) is not None:
            _out(render.query_gpu(host, fields.split(","), header, units, ids))
            return 0
        if (fields := _option(args, "--query-compute-apps")) is not None:
            _out(render.query_compute_apps(host, fields.split(","), header, units))
            return 0
    except render.QueryError as error:
        _out(str(error))
        return 2
    if "-r" in args or "--gpu-reset" in args:
        return _reset(host, ids)
    if "-pm" in args or "--persistence-mode" in args:
        enabled = (_option(args, "-pm", "--persistence-mode") or "1") in {"1", "ENABLED"}
        for gpu in host.gpus:
            if ids is None or gpu.index in ids:
                gpu.persistence = enabled
        _out("All done.\n")
        return 0
    if "-L" in args:
        _out("".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in host.gpus))
        return 0
    _out(render.table(host))
    return 0


def _reset(host: SimHost, ids: list[int] | None) -> int:
    if ids is None:
        _out("ERROR: a GPU reset needs -i with the GPU to reset.\n\n")
        return 255
    for index in ids:
        gpu = host.gpu(index)
        refusal = host.reset(gpu)
        if refusal:
            _out(render.reset_refused(gpu, refusal))
            return 255
        _out(render.reset_succeeded(gpu))
    return 0


# -- free, dmesg ---------------------------------------------------------------------------


def free(host: SimHost, args: list[str]) -> int:
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    divisor = 1024
    for letter, value in (("b", 1), ("k", 1024), ("m", 1024**2), ("g", 1024**3)):
        if letter in flags:
            divisor = value
    _out(render.free(host, divisor, human="h" in flags or "--human" in args))
    return 0


def dmesg(host: SimHost, args: list[str]) -> int:
    _out("".join(line + "\n" for line in host.kernel_messages))
    return 0


# -- process control ---------------------------------------------------------------------


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


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _send(processes: list[SimProcess], signum: int) -> list[int]:
    sent = []
    for process in processes:
        try:
            os.kill(process.pid, signum)
            sent.append(process.pid)
        except ProcessLookupError:
            pass
    return sent


def pkill(host: SimHost, args: list[str]) -> int:
    """pkill [-SIGNAL|--signal S] [-f] PATTERN, over the registered server processes only."""
    pattern = next((a for a in reversed(args) if not a.startswith("-")), None)
    if pattern is None or args[-2:-1] in (["-s"], ["--signal"]):
        _err("pkill: no matching criteria specified\n")
        return 2
    full = "-f" in args or "--full" in args
    matching = [
        p
        for p in host.processes
        if re.search(
            pattern, _cmdline(p.pid) if full else _cmdline(p.pid).split(" ")[0].rsplit("/", 1)[-1]
        )
    ]
    return 0 if _send(matching, _signal_of(args)) else 1


def pgrep(host: SimHost, args: list[str]) -> int:
    pattern = next((a for a in reversed(args) if not a.startswith("-")), "")
    matching = [p for p in host.processes if re.search(pattern, _cmdline(p.pid))]
    _out("".join(f"{p.pid}\n" for p in matching))
    return 0 if matching else 1


def fuser(host: SimHost, args: list[str]) -> int:
    """fuser [-v] [-k [-SIGNAL]] /dev/nvidia*: the GPU holders are registered processes and services."""
    holders = [p for p in host.processes if p.gpu_mib]
    services = [s for s in host.services if s.active and s.holds_gpus]
    if not holders and not services:
        return 1
    if "-v" in args:
        _err("                     USER        PID ACCESS COMMAND\n")
        for process in holders:
            name = _cmdline(process.pid).split(" ")[0].rsplit("/", 1)[-1][:15]
            _err(
                f"/dev/nvidia0:        {os.environ.get('USER', 'root'):<8} {process.pid:>6} F...m {name}\n"
            )
        for number, service in enumerate(services, start=1):
            _err(f"/dev/nvidiactl:      root     {9000 + number:>6} F.... {service.name[:15]}\n")
    elif "-s" not in args:
        _out(" ".join(str(p.pid) for p in holders) + "\n")
    if "-k" in args:
        _send(holders, _signal_of([a for a in args if a not in {"-k", "-v"}], signal.SIGKILL))
        for service in services:
            service.active = False  # fuser -k takes the persistence daemon down too
    return 0


# -- services, modules, power --------------------------------------------------------------


def systemctl(host: SimHost, args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    quiet = "--quiet" in args or "-q" in args
    if words[:1] == ["reboot"]:
        return reboot(host, [])
    if len(words) < 2:
        _err("systemctl: this stand-in needs VERB UNIT\n")
        return 1
    verb, units = words[0], words[1:]
    for unit in units:
        service = host.service(unit)
        if verb in {"is-active", "is-enabled"}:
            if verb == "is-active":
                yes = service is not None and service.active
                answer = "active" if yes else "inactive"
            else:
                yes = service is not None and service.enabled
                answer = "enabled" if yes else "disabled"
            if not quiet:
                _out(answer + "\n")
            if not yes:
                return 3 if verb == "is-active" else 1
        elif service is None:
            _err(f"Failed to {verb} {unit}: Unit {unit} not loaded.\n")
            return 5
        elif verb in {"stop", "start", "restart"}:
            service.active = verb != "stop"
    return 0


MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


def lsmod(host: SimHost, args: list[str]) -> int:
    _out("Module                  Size  Used by\n")
    if host.driver_loaded:
        for module in MODULES:
            _out(f"{module:<24}{1_000_000:>8}  0\n")
    return 0


def rmmod(host: SimHost, args: list[str]) -> int:
    for module in [a for a in args if not a.startswith("-")]:
        if not host.driver_loaded:
            _err(f"rmmod: ERROR: Module {module} is not currently loaded\n")
            return 1
        held = any(p.gpu_mib for p in host.processes) or any(
            s.active and s.holds_gpus for s in host.services
        )
        if held or (host.module_held_by and module in {"nvidia_drm", "nvidia_modeset", "nvidia"}):
            _err(f"rmmod: ERROR: Module {module} is in use\n")
            return 1
        if module == "nvidia":
            host.driver_loaded = False
            for gpu in host.gpus:
                gpu.orphaned_mib = 0
    return 0


def modprobe(host: SimHost, args: list[str]) -> int:
    if "-r" not in args and any(a in MODULES for a in args):
        host.driver_loaded = True
    return 0


def reboot(host: SimHost, args: list[str]) -> int:
    """Reboot the simulation: end its server processes, reset its state, drop this SSH session."""
    for process in host.processes:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGKILL)
    host.reboot()
    _drop_own_session()
    return 0


def _drop_own_session() -> None:
    """End the sshd process serving this session, as a reboot would: the client sees it drop."""
    pid = os.getppid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if name.startswith("sshd") and os.stat(f"/proc/{pid}").st_uid == os.getuid():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            return
        pid = parent


def record_only(host: SimHost, args: list[str]) -> int:
    return 0


def sudo(host: SimHost, args: list[str]) -> int:
    """Record, then run the command unprivileged: the stand-ins after it decide what happens."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in {"-u", "-g"} and rest:
            rest.pop(0)
    if not rest:
        _err("usage: sudo -n COMMAND\n")
        return 1
    sys.stdout.flush()
    os.execvp(rest[0], rest)  # noqa: S606  (argv as given, no shell)
    return 127  # not reached


def sim_server(host: SimHost, args: list[str]) -> int:
    """Start a stand-in inference server: a real, detached process holding simulated memory.

    sim-server --name CMDLINE [--gpu INDEX:MIB ...] [--host-gib N] [--orphan] [--ignore-term]
    --orphan: its GPU memory stays held after it dies (what the incident saw on GPUs 0 and 2).
    """
    name = _option(args, "--name") or "python3 -m sglang.launch_server"
    gpus = {}
    for i, arg in enumerate(args):
        if arg == "--gpu" and i + 1 < len(args):
            index, _, mib = args[i + 1].partition(":")
            gpus[index] = int(mib)
    host_gib = float(_option(args, "--host-gib") or 0)
    pid = os.fork()
    if pid == 0:  # the server: its own session, no terminal, no pipes back to sshd
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1024)  # above all the state file's lock, which the parent releases
        if "--ignore-term" in args:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            signal.pause()
    host.processes.append(
        SimProcess(
            pid=pid,
            cmdline=name,
            gpu_mib=gpus,
            host_bytes=int(host_gib * 1024**3),
            orphan_gpu_memory="--orphan" in args,
        )
    )
    _out(f"{pid}\n")
    return 0


HANDLERS: dict[str, Handler] = {
    "sim-server": sim_server,
    "nvidia-smi": nvidia_smi,
    "free": free,
    "dmesg": dmesg,
    "pkill": pkill,
    "pgrep": pgrep,
    "fuser": fuser,
    "systemctl": systemctl,
    "rmmod": rmmod,
    "modprobe": modprobe,
    "reboot": reboot,
    "shutdown": record_only,
    "lsmod": lsmod,
    "sudo": sudo,
}
READ_ONLY = {"free", "dmesg", "pgrep", "lsmod"}


def main(argv: list[str]) -> int:
    name, args = Path(argv[0]).name, argv[1:]
    if name not in HANDLERS:
        _err(f"{name}: not simulated\n")
        return 127
    log = os.environ.get("RBR_SIM_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"t": time.time(), "argv": [name, *args]}) + "\n")
    if name == "sudo":
        return sudo(SimHost(gpus=[]), args)
    state = Path(os.environ["RBR_SIM_STATE"])
    with open(state.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        host = SimHost.load(state)
        host.forget_dead(_alive)
        status = HANDLERS[name](host, args)
        host.save(state)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
