"""One host reached through two aliases has one lock (issue #38): the lock is the host's
(a folder on the host itself), not the name a run used to reach it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sshd import wait_for
from test_lock_and_host_key import _flock_held, _holding_runbook

from runbook_runner.exitcodes import ExitCode

pytestmark = pytest.mark.ssh


def _login(host, config) -> list[str]:
    return [
        "--ssh-config", str(config), "--user", host.user, "-i", str(host.client_key),
        "--known-hosts", str(host.known_hosts), "--yes",
    ]  # fmt: skip


def test_two_aliases_of_one_host_share_its_lock(gpu_host, tmp_path, run_journals_in_tmp):
    sim = gpu_host.root / "sim"
    runbook = _holding_runbook(tmp_path, sim)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-a\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n"
        f"Host gpu-b.example\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n"
    )
    argv = [sys.executable, "-m", "runbook_runner", "run", str(runbook)]
    first = subprocess.Popen(
        [*argv, "--host", "gpu-a", *_login(gpu_host, config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: (sim / "inflight").exists(), 60, "the first run's step")
        assert _flock_held(gpu_host)
        second = subprocess.run(
            [*argv, "--host", "gpu-b.example", *_login(gpu_host, config)],
            capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert second.returncode == ExitCode.LOCKED, second.stdout + second.stderr
        assert "is locked by" in second.stderr
        assert "run " in second.stderr  # names the run that holds it
        (sim / "released").touch()
        out, err = first.communicate(timeout=60)
        assert first.returncode == ExitCode.OK, out + err
    finally:
        (sim / "released").touch()
        if first.poll() is None:
            first.kill()
            first.wait()
    assert not (sim / "runbook-runner.lock").exists()
