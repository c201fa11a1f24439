"""Stand-in commands for a test host with no GPU: ``standin.py NAME ARGS...``.

The test sshd puts a folder of wrappers first on PATH, one per name below;
each runs this module with the simulated host's state file ($RBR_SIM_STATE)
and appends the call to a log ($RBR_SIM_LOG). The commands themselves are the
simulator's (commands.py); here the processes are real: the test's own stand-in
server processes, registered in the state file, which signals really reach.
Commands that would change the machine (reboot, rmmod, systemctl, fuser -k,
sudo, pkill) only act on the simulation and those processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

from runbook_runner.simhost.commands import COMMANDS, Env, option
from runbook_runner.simhost.model import SimHost, SimProcess


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22): with
    the PID, what tells one process from another that was handed the same PID later."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class RealProcesses:
    """The registered stand-in servers are real processes: /proc and kill(2)."""

    def __init__(self, started: dict[int, int] | None = None) -> None:
        self.started = started or {}  # PID -> its start ticks, as registered

    def alive(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError):
            return False
        # A PID the state file lists may have died and been handed to another process
        # (pid_max is 32768 on some machines): only the stand-in server registered under
        # that PID, started when it was, is the simulation's.
        if b"runbook_runner.simhost.standin" not in cmdline:
            return False
        registered = self.started.get(pid)
        if registered and fields[19] != str(registered).encode():
            return False
        return fields[0] != b"Z"  # a zombie holds nothing

    def cmdline(self, pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            return ""

    def signal(self, pid: int, signum: int) -> bool:
        if not self.alive(pid):  # never a process of the machine that took a dead one's PID
            return False
        try:
            os.kill(pid, signum)
        except OSError:
            return False
        return True

    def state(self, pid: int) -> str:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                return handle.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError, UnicodeDecodeError):
            return "?"

    def wchan(self, pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
        except OSError:
            return "-"


def sudo(args: list[str]) -> int:
    """Record, then run the command unprivileged: the stand-ins after it decide what happens.

    With a file ``no-sudo`` beside the state file, answer as sudo does for a user without
    the right to run it without a password.
    """
    folder = Path(os.environ["RBR_SIM_STATE"]).parent
    if (folder / "no-sudo").exists():
        sys.stderr.write("sudo: a password is required\n")
        return 1
    rest = list(args)
    options: list[str] = []
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        options.append(option)
        if option in {"-u", "-g", "-p"} and rest:
            rest.pop(0)
    # With a file ``sudo-password`` beside the state: sudo -n is refused, sudo -S reads it.
    password = folder / "sudo-password"
    if password.exists():
        if "-S" not in options:
            sys.stderr.write("sudo: a password is required\n")
            return 1
        if sys.stdin.readline().rstrip("\n") != password.read_text().rstrip("\n"):
            sys.stderr.write("sudo: 1 incorrect password attempt\n")
            return 1
    if not rest:
        sys.stderr.write("usage: sudo -n COMMAND\n")
        return 1
    sys.stdout.flush()
    os.execvp(rest[0], rest)  # noqa: S606  (argv as given, no shell)
    return 127  # not reached


def sim_server(env: Env, args: list[str]) -> int:
    host = env.host
    """Start a stand-in inference server: a real, detached process holding simulated memory.

    sim-server --name CMDLINE [--gpu INDEX:MIB ...] [--host-gib N] [--orphan] [--ignore-term]
    --orphan: its GPU memory stays held after it dies (what the incident saw on GPUs 0 and 2).
    """
    name = option(args, "--name") or "python3 -m sglang.launch_server"
    gpus = {}
    for i, arg in enumerate(args):
        if arg == "--gpu" and i + 1 < len(args):
            index, _, mib = args[i + 1].partition(":")
            gpus[index] = int(mib)
    host_gib = float(option(args, "--host-gib") or 0)
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
            user=env.user,
            start_ticks=start_ticks(pid) or 0,
        )
    )
    env.out(f"{pid}\n")
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


def _cat(env: Env, args: list[str]) -> int:
    from runbook_runner.simhost.utilities import cat

    return cat(env, args)


# cat: only for the simulated paths (the tests' wrapper runs the real cat for any other).
HANDLERS = {**COMMANDS, "sim-server": sim_server, "cat": _cat}


def main(argv: list[str]) -> int:
    name, args = Path(argv[0]).name, argv[1:]
    if name not in HANDLERS and name != "sudo":
        sys.stderr.write(f"{name}: not simulated\n")
        return 127
    log = os.environ.get("RBR_SIM_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"t": time.time(), "argv": [name, *args]}) + "\n")
    if name == "sudo":
        return sudo(args)
    state = Path(os.environ["RBR_SIM_STATE"])
    with open(state.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        host = SimHost.load(state)
        processes = RealProcesses({p.pid: p.start_ticks for p in host.processes})
        host.forget_dead(processes.alive)
        if name in host.missing_commands:  # as the shell answers for a command not installed
            return 127
        env = Env(host, processes, on_reboot=_drop_own_session, daemons_hold_devices=False)
        status = HANDLERS[name](env, args)
        host.save(state)
    sys.stdout.write("".join(env.stdout))
    sys.stderr.write("".join(env.stderr))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
