"""Ctrl-C, SIGTERM and SIGHUP during a remote command end it on the host (issue 15, item 7).

The signal goes to the test's own subprocess (the CLI) only; the remote command is a real
``sleep`` started over SSH by the test user, whose end the test observes through /proc.
The sleep lasts 600 s and every wait is at most 120 s: a run that waited for the sleep to end
on its own fails, and a machine ten times slower than usual still passes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import wait_for

from runbook_runner.journal import read

pytestmark = pytest.mark.ssh


def gone(pid: int) -> bool:
    """Ended (a zombie waiting for init counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def signal_mid_run(
    gpu_host, runbook: Path, pid_file: Path, signum: int
) -> tuple[int, int, str, str]:
    """Run the runbook with --yes in a subprocess; once the remote command has written its
    PID, send ``signum`` to that subprocess (ours, never the host's). Returns the remote
    PID, the exit status and the output."""
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runbook_runner",
            "run",
            str(runbook),
            *gpu_host.cli_args(),
            "--yes",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        pid = int(
            wait_for(
                lambda: pid_file.exists() and pid_file.read_text().strip(), 120, "the remote PID"
            )
        )
        assert not gone(pid)
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=120)  # far from the sleep's 600 s
    finally:
        if runner.poll() is None:
            runner.kill()
    return pid, runner.returncode, out, err


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
)
def test_a_signal_ends_the_remote_command_journals_it_and_releases_the_lock(
    gpu_host, tmp_path, run_journals_in_tmp, signum, code
):
    sim = gpu_host.root / "sim"
    pid_file = sim / "sleeper.pid"
    pid_file.unlink(missing_ok=True)
    runbook = tmp_path / "sleepy.yaml"
    runbook.write_text(
        f"""name: sleepy
title: A destructive step that sleeps
summary: For the interrupt tests.
observations:
  marker:
    command: cat {sim}/never 2>/dev/null || true
    parser: lines
checks:
  never: {{description: never true, expect: count(marker) == 1}}
goal: [never]
steps:
  - id: sleep
    title: Sleep on the host
    run: 'sleep 600 & echo $! > {pid_file}; wait'
    destructive: true
    fixes: goal
    affects: process
    timeout: 900
"""
    )
    pid, returncode, out, err = signal_mid_run(gpu_host, runbook, pid_file, signum)
    assert returncode == code, out + err
    assert f"interrupted ({signal.Signals(signum).name})" in err
    assert "ended on the host" in err
    wait_for(lambda: gone(pid), 120, "the remote command to end")
    (path,) = run_journals_in_tmp.glob("*.jsonl")
    end = read(path).events[-1]
    assert end["event"] == "run-end"
    assert end["outcome"] == "interrupted"
    assert end["signal"] == signal.Signals(signum).name
    assert end["ended_on_host"].startswith("process group ")
    assert not (sim / "runbook-runner.lock").exists()  # released


def test_a_signal_during_batched_observations_ends_them_on_the_host(
    gpu_host, tmp_path, run_journals_in_tmp
):
    """The goal check sends its observations as one batch (run_many): a SIGTERM while they
    run ends them on the host too, not only a step's command."""
    sim = gpu_host.root / "sim"
    pid_file = sim / "observer.pid"
    pid_file.unlink(missing_ok=True)
    runbook = tmp_path / "slow-look.yaml"
    runbook.write_text(
        f"""name: slow-look
title: An observation that takes its time
summary: For the interrupt tests.
observations:
  slow:
    command: 'sh -c ''echo $$ > {pid_file}; exec sleep 600'''
    parser: lines
    timeout: 900
  quick:
    command: echo quick
    parser: lines
checks:
  seen: {{description: both seen, expect: count(slow) + count(quick) == 2}}
goal: [seen]
steps:
  - id: mark
    title: Mark
    run: echo mark
    destructive: true
    fixes: goal
    affects: process
"""
    )
    pid, returncode, out, err = signal_mid_run(gpu_host, runbook, pid_file, signal.SIGTERM)
    assert returncode == 143, out + err
    wait_for(lambda: gone(pid), 120, "the batched observation to end on the host")


def test_the_group_clean_up_never_signals_group_1_whatever_ps_prints():
    """The clean-up after a signal reads the session's groups from ps. A ps that prints
    "1" (a shim, a stand-in, BusyBox's) once made it "kill -TERM -1": every process the
    login may signal, another session's sshd included. Only the leader's group and real
    group numbers above 1 are signalled, and ps is the system's (command -p)."""
    from runbook_runner.ssh.channel import end_group_script

    script = end_group_script("4242", session=True)
    assert "command -p ps" in script
    shimmed = script.replace("command -p ps", "fake_ps")
    program = (
        "fake_ps() { printf 'PGID\\n-\\n1\\n0\\n4300\\n'; }; "
        'kill() { echo "kill $*"; }; sleep() { :; }; ' + shimmed
    )
    for shell in ("sh", "bash"):
        out = subprocess.run([shell, "-c", program], capture_output=True, text=True, check=True)
        signalled = {line.split()[-1] for line in out.stdout.splitlines()}
        assert signalled == {"-4242", "-4300"}, out.stdout
    assert end_group_script("1", session=True) == "true"
    assert end_group_script("0") == "true"
