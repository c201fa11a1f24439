"""Every file input refuses what is not a regular file, as ``--plan`` does: a FIFO nobody
writes (or a device) is named in one line and the command ends, rather than waiting for
ever on its open or its read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from runbook_runner.exitcodes import ExitCode

RUNBOOK = REPO / "runbooks" / "gpu-oom-recovery.yaml"
SSH = ["--host", "127.0.0.1", "--port", "1", "--user", "root"]

# Each input, and the command line that reads it (FIFO stands for the FIFO's path).
INPUTS = {
    "validate": ["validate", "FIFO"],
    "compare": ["compare", "FIFO", str(RUNBOOK), "--scenario", "oom-crash"],
    "test": ["test", "FIFO", "--scenario", "oom-crash"],
    "--state": ["test", "gpu-oom-recovery", "--state", "FIFO"],
    "--inventory": ["check", "gpu-node-health", "--inventory", "FIFO"],
    "--ssh-config": ["check", "gpu-node-health", "--host", "somewhere", "--ssh-config", "FIFO"],
    "--known-hosts": ["check", "gpu-node-health", *SSH, "--known-hosts", "FIFO"],
    "-i": ["check", "gpu-node-health", *SSH, "-i", "FIFO"],
    "--journal": ["run", "gpu-oom-recovery", *SSH, "--yes", "--journal", "FIFO"],
    "--runbooks": ["validate", "--runbooks", "DIR"],
}


@pytest.mark.parametrize("name", INPUTS)
def test_a_fifo_is_refused_in_one_line_without_waiting(name, tmp_path: Path):
    folder = tmp_path / "mine"
    folder.mkdir()
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    os.mkfifo(folder / "mine.yaml")
    argv = [str(fifo) if a == "FIFO" else str(folder) if a == "DIR" else a for a in INPUTS[name]]
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "state")}
    env["HOME"] = str(tmp_path)  # no ssh_config or known_hosts of the user's
    try:
        done = subprocess.run(
            [sys.executable, "-m", "runbook_runner", *argv],
            capture_output=True,
            text=True,
            timeout=15,
            env=env,
            cwd=tmp_path,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still waiting on the FIFO after 15 s")
    said = done.stdout + done.stderr
    assert done.returncode == ExitCode.BAD_INPUT, said
    assert ("mine.yaml" if name == "--runbooks" else fifo.name) in said
    assert "a FIFO (named pipe), not a regular file" in said
    assert "Traceback" not in said
