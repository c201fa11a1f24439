"""Helpers for the tests that run ``runbook`` under the engines users run it from (Prometheus's
node_exporter, Slurm's HealthCheckProgram): daemons started from Debian's packages on
127.0.0.1 and free ports, each stopped by its PID, and ``runbook check --local`` run against
the simulator's stand-in nvidia-smi, free, dmesg and ps first on its PATH (the machine's own
GPUs and processes are never looked at)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from runbook_runner.simhost import standin
from runbook_runner.simhost.model import SimHost

REPO = Path(__file__).resolve().parent.parent


def missing(*programs: str) -> str | None:
    """A one-line skip reason naming the programs (and their Debian packages) not installed."""
    absent = [name for name in programs if shutil.which(name) is None]
    if not absent:
        return None
    return f"not installed: {', '.join(absent)} (scripts/test installs them with apt-get)"


class Daemons:
    """Processes a test started; each is stopped by its PID (SIGTERM, then SIGKILL)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        log = (self.logs / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        log.close()
        self.started.append((name, process))
        return process.pid

    def alive(self, name: str) -> bool:
        return any(n == name and p.poll() is None for n, p in self.started)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        for _, process in reversed(self.started):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        for _, process in reversed(self.started):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=20)


@contextlib.contextmanager
def daemons(logs: Path) -> Iterator[Daemons]:
    started = Daemons(logs)
    try:
        yield started
    finally:
        started.stop()


def standin_env(root: Path, host: SimHost) -> dict[str, str]:
    """The environment of a ``runbook check --local`` on the simulated ``host``: the stand-ins
    and a ``runbook`` command (this tree) first on PATH; state, journals and lock under root."""
    bin_dir = root / "bin"
    sim = root / "sim"
    bin_dir.mkdir(parents=True, exist_ok=True)
    sim.mkdir(exist_ok=True)
    for name in sorted({*standin.HANDLERS, "sudo"}):
        wrapper = bin_dir / name
        wrapper.write_text(
            f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -S -B "
            f'-m runbook_runner.simhost.standin {name} "$@"\n'
        )
        wrapper.chmod(0o755)
    runbook = bin_dir / "runbook"
    runbook.write_text(
        f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m runbook_runner "$@"\n'
    )
    runbook.chmod(0o755)
    host.save(sim / "state.json")
    return {
        "PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "RBR_SIM_STATE": str(sim / "state.json"),
        "RBR_SIM_LOG": str(sim / "calls.log"),
        "RUNBOOK_LOCK_DIR": str(sim),
        "RUNBOOK_PATH": str(REPO / "runbooks"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CACHE_HOME": str(root / "cache"),
    }


def set_host(env: dict[str, str], host: SimHost) -> None:
    """Change the simulated host the stand-ins answer for."""
    host.save(Path(env["RBR_SIM_STATE"]))
