"""Locks that fail closed, and a changed host key on reconnect reported as such
(issue 15, items 8 and 9). Each test has an sshd of its own: they change its setup.

A step held by the test has a 600 s timeout and the test's waits are 120 to 300 s: what each
test checks (the error, the lock's owner) does not depend on how fast the machine is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sshd import start_test_host, wait_for

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read

pytestmark = pytest.mark.ssh


def destructive_runbook(folder: Path, sim: Path, run: str) -> Path:
    path = folder / "locked.yaml"
    path.write_text(
        f"""name: locked
title: One destructive step
summary: For the lock tests.
observations:
  marker:
    command: cat {sim}/marker 2>/dev/null || true
    parser: lines
checks:
  marked: {{description: the step ran, expect: count(marker) >= 1}}
goal: [marked]
steps:
  - id: mark
    title: Append to the marker
    run: '{run}'
    destructive: true
    fixes: goal
    affects: process
    timeout: 600
"""
    )
    return path


@pytest.fixture
def own_host(request):
    hosts = []

    def start(**options):
        host = start_test_host(**options)
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        host.stop()


def test_a_lock_folder_that_cannot_be_used_stops_the_run_naming_it(
    own_host, tmp_path, capsys, run_journals_in_tmp
):
    public = Path(tempfile.mkdtemp(prefix="rbr-lockdir-"))
    public.chmod(0o755)  # the test's login user may look in, as on a host
    blocker = public / "a-file"
    blocker.write_text("not a folder\n")
    blocker.chmod(0o644)
    lock_dir = f"{blocker}/locks"  # under a regular file: no one, root included, can create it
    try:
        host = own_host(lock_dir=lock_dir)
        _run_with_an_unusable_lock_folder(host, lock_dir, tmp_path, capsys, run_journals_in_tmp)
    finally:
        shutil.rmtree(public)


def _run_with_an_unusable_lock_folder(host, lock_dir, tmp_path, capsys, run_journals_in_tmp):
    sim = host.root / "sim"
    runbook = destructive_runbook(tmp_path, sim, f"echo ran >> {sim}/marker")
    tmp_lock = Path("/tmp/runbook-runner.lock")
    existed = tmp_lock.exists()
    code = main(["run", str(runbook), *host.cli_args(), "--yes"])
    err = capsys.readouterr()[1]
    assert code == ExitCode.LOCKED, err
    assert f"lock folder {lock_dir}" in err
    assert "Not a directory" in err
    assert "locked by" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (sim / "marker").exists()  # nothing ran unlocked
    assert tmp_lock.exists() == existed  # no fallback to /tmp
    (path,) = run_journals_in_tmp.glob("*.jsonl")
    events = read(path).events
    assert not any(e["event"] == "lock" for e in events)
    assert events[-1]["event"] == "run-end"
    assert "lock folder" in events[-1]["error"]


def test_a_host_key_changed_on_reconnect_is_reported_as_such(
    own_host, tmp_path, run_journals_in_tmp
):
    host = own_host()
    sim = host.root / "sim"
    runbook = destructive_runbook(
        tmp_path,
        sim,
        f"touch {sim}/inflight; while [ ! -e {sim}/released ]; do sleep 0.05; done",
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "runbook_runner", "run", str(runbook), *host.cli_args(), "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (sim / "inflight").exists(), 120, "the step to be in flight")
        host.change_host_key()
        host.drop_and_restart()  # the connection drops; the server comes back with another key
        out, err = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == ExitCode.HOST_UNREACHABLE, out + err
    assert "HOST KEY CHANGED" in err, err
    assert "not connected" not in err
    (path,) = run_journals_in_tmp.glob("*.jsonl")
    end = read(path).events[-1]
    assert end["event"] == "run-end", json.dumps(end)
    assert "HOST KEY CHANGED" in end["error"], json.dumps(end)


def _holding_runbook(folder: Path, sim: Path) -> Path:
    """A destructive step that holds until the test releases it, and waits for that after a
    reconnect (so that the run outlives the reconnect)."""
    for name in ("inflight", "released", "marker"):
        (sim / name).unlink(missing_ok=True)
    path = folder / "holding.yaml"
    path.write_text(
        f"""name: holding
title: Hold the lock
summary: For the lock tests.
observations:
  released:
    command: ls {sim}/released 2>/dev/null || true
    parser: lines
checks:
  is-released: {{description: the release file exists, expect: count(released) == 1}}
goal: [is-released]
steps:
  - id: hold
    title: Hold until released
    run: 'echo ran >> {sim}/marker; touch {sim}/inflight; while [ ! -e {sim}/released ]; do sleep 0.05; done'
    destructive: true
    fixes: goal
    affects: process
    timeout: 600
    wait: {{until: [is-released], interval: 0.2, timeout: 300}}
"""
    )
    return path


def _start(runbook: Path, host, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runbook_runner", "run", str(runbook), *host.cli_args(), "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _flock_held(host) -> bool:
    alive = host.root / "sim" / "runbook-runner.lock" / "alive"
    return host.ssh(f"flock -n {alive} true").returncode == 1


def test_a_dead_runs_lock_is_free_for_the_next_run_which_records_whose_it_took(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = _holding_runbook(tmp_path, sim)
    first = _start(runbook, gpu_host)
    try:
        wait_for(lambda: (sim / "inflight").exists(), 120, "the first run's step")
        assert _flock_held(gpu_host)
        first.kill()  # SIGKILL: no cleanup; its connection drops with it
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    (dead,) = run_journals_in_tmp.glob("*.jsonl")
    (sim / "released").touch()
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "runbook_runner",
            "run",
            str(runbook),
            *gpu_host.cli_args(),
            "--yes",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert second.returncode == ExitCode.OK, second.stdout + second.stderr
    (path,) = set(run_journals_in_tmp.glob("*.jsonl")) - {dead}
    lock = next(e for e in read(path).events if e["event"] == "lock")
    assert lock["taken_over_from"]["run"] == dead.stem
    assert not (sim / "runbook-runner.lock").exists()


def test_the_lock_is_taken_again_after_a_reconnect(gpu_host, tmp_path, run_journals_in_tmp):
    sim = gpu_host.root / "sim"
    runbook = _holding_runbook(tmp_path, sim)
    runner = _start(runbook, gpu_host)
    try:
        wait_for(lambda: (sim / "inflight").exists(), 120, "the step to be in flight")
        assert _flock_held(gpu_host)
        gpu_host.drop_and_restart()  # the holder on the host dies with the connection
        wait_for(lambda: _flock_held(gpu_host), 120, "the lock to be taken again")
        (sim / "released").touch()
        out, err = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == ExitCode.OK, out + err
    assert (sim / "marker").read_text() == "ran\n"


def test_a_lock_taken_by_another_run_while_reconnecting_stops_the_run(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = _holding_runbook(tmp_path, sim)
    runner = _start(runbook, gpu_host)
    try:
        wait_for(lambda: (sim / "inflight").exists(), 120, "the step to be in flight")
        other = {"operator": "alice", "run": "OTHER-RUN", "client": "elsewhere"}
        (sim / "runbook-runner.lock" / "owner").write_text(json.dumps(other))  # --break-lock'ed
        gpu_host.drop_and_restart()
        (sim / "released").touch()
        out, err = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == ExitCode.LOCKED, out + err
    assert "OTHER-RUN" in err
    assert "while this run was reconnecting" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a lock folder the login user cannot write")
def test_a_lock_whose_files_cannot_be_written_stops_the_run(
    gpu_host, tmp_path, capsys, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    lock = sim / "runbook-runner.lock"
    lock.mkdir()  # owned by root, mode 0755: the test's login user cannot write in it
    lock.chmod(0o755)
    try:
        runbook = destructive_runbook(tmp_path, sim, f"echo ran >> {sim}/marker")
        (sim / "marker").unlink(missing_ok=True)
        code = main(["run", str(runbook), *gpu_host.cli_args(), "--yes"])
        err = capsys.readouterr()[1]
    finally:
        shutil.rmtree(lock)
    assert code == ExitCode.LOCKED, err
    assert f"cannot write the lock's files in the lock folder {sim}" in err
    assert "Permission denied" in err
    assert not (sim / "marker").exists()
