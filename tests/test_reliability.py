"""Run journal, resume after SIGKILL, one operator per host, secrets kept out of the record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import wait_for

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read

pytestmark = pytest.mark.ssh


def write_runbook(folder: Path, sim: Path, *, slow_step: str = "sleep 0") -> Path:
    """Three steps: a destructive one that appends to a marker, one that may be slow, one more."""
    for leftover in ("marker", "release", "go-fast"):
        (sim / leftover).unlink(missing_ok=True)
    path = folder / "three-steps.yaml"
    path.write_text(
        f"""name: three-steps
title: Three steps
summary: For the journal tests.
parameters:
  token: {{type: string, default: "", secret: true, description: a secret}}
observations:
  marker:
    command: cat {sim}/marker 2>/dev/null || true
    parser: lines
checks:
  marked-once: {{description: the first step ran exactly once, expect: count(marker) == 1}}
goal: [marked-once]
steps:
  - id: mark
    title: Append to the marker (not to be done twice)
    run: [sh, -c, 'echo "ran$1" >> {sim}/marker', sh, "{{{{ token }}}}"]
    destructive: true
    affects: process
    fixes: [marked-once]
  - id: slow
    title: Maybe slow
    run: '{slow_step}'
    timeout: 600  # the tests hold it while they act: far longer than any of their waits
  - id: last
    title: Last
    run: echo last
"""
    )
    return path


def journal_of(folder: Path) -> Path:
    (path,) = sorted(folder.glob("*.jsonl"))
    return path


def test_a_run_writes_a_journal_of_everything_but_its_secrets(
    gpu_host, tmp_path, capsys, run_journals_in_tmp
):
    runbook = write_runbook(tmp_path, gpu_host.root / "sim")
    code = main(
        ["run", str(runbook), *gpu_host.cli_args(), "--yes", "--set", "token=hunter2-secret"]
    )
    out, err = capsys.readouterr()
    assert code == ExitCode.OK
    path = journal_of(run_journals_in_tmp)
    text = path.read_text()
    assert "hunter2-secret" not in text
    assert "hunter2-secret" not in out + err
    events = [json.loads(line) for line in text.splitlines()]  # every line is whole JSON
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run-start"
    assert kinds[-1] == "run-end"
    start = events[0]
    assert start["runbook"] == "three-steps"
    assert len(start["runbook_sha256"]) == 64
    assert start["parameters"] == {"token": "***"}
    assert start["host_key"].startswith("SHA256:")
    assert start["host"] == f"127.0.0.1:{gpu_host.port}"
    assert [e["id"] for e in events if e["event"] == "step-end"] == ["mark", "slow", "last"]
    confirmation = next(e for e in events if e["event"] == "confirmation")
    assert confirmation["answer"] == "yes"
    marker = gpu_host.root / "sim" / "marker"
    assert confirmation["commands"] == [f"sh -c 'echo \"ran$1\" >> {marker}' sh '***'"]
    command = next(e for e in events if e["event"] == "command" and e["step"] == "last")
    assert command["stdout_tail"] == "last\n"
    assert command["exit_status"] == 0
    assert events[-1]["ok"] is True
    assert (gpu_host.root / "sim" / "marker").read_text() == "ranhunter2-secret\n"  # it was sent


def test_a_cut_short_last_line_is_reported_not_fatal(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"event": "run-start", "t": "x"}\n{"event": "step-start", "id": "a"}\n{"event": "step-e'
    )
    journal = read(path)
    assert [e["event"] for e in journal.events] == ["run-start", "step-start"]
    assert journal.problems == [
        f"{path}:3: line was cut short (the runner stopped while writing it); skipped"
    ]


def test_runs_lists_and_shows_a_markdown_timeline(gpu_host, tmp_path, capsys):
    runbook = write_runbook(tmp_path, gpu_host.root / "sim")
    main(["run", str(runbook), *gpu_host.cli_args(), "--yes"])
    capsys.readouterr()
    assert main(["runs"]) == ExitCode.OK
    listing = capsys.readouterr()[0]
    run_id = listing.splitlines()[1].split()[0]
    assert "three-steps" in run_id
    assert main(["runs", "show", run_id, "--markdown"]) == ExitCode.OK
    table = capsys.readouterr()[0].splitlines()
    assert table[0] == "| Time (UTC) | Step | Event |"
    assert any("| mark | ok" in row for row in table)
    # 'last' only echoes (not destructive, no wait): the goal was reached by 'mark'
    assert table[-1].endswith("run ended: goal holds (reached by mark) |")


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runbook_runner", *args]


def test_sigkill_mid_step_then_resume_finishes_without_redoing_steps(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    flag = sim / "go-fast"
    runbook = write_runbook(tmp_path, sim, slow_step=f"[ -e {flag} ] || sleep 60")
    env = {**os.environ, "XDG_STATE_HOME": str(run_journals_in_tmp.parent.parent)}
    runner = subprocess.Popen(
        cli("run", str(runbook), *gpu_host.cli_args(), "--yes"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:

        def in_slow_step() -> bool:
            paths = list(run_journals_in_tmp.glob("*.jsonl"))
            return bool(paths) and '"event": "step-start", "id": "slow"' in paths[0].read_text()

        wait_for(in_slow_step, 120, "the run to reach its slow step")
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    journal = read(journal_of(run_journals_in_tmp))
    assert journal.problems == []
    assert [e["id"] for e in journal.events if e["event"] == "step-end"] == ["mark"]
    run_id = journal_of(run_journals_in_tmp).stem
    flag.touch()

    assert (sim / "runbook-runner.lock").is_dir()  # the killed run left its lock behind
    # Its own resume takes the lock over (no --break-lock); another run would be refused.
    resumed = subprocess.run(
        cli("run", str(runbook), *gpu_host.cli_args(), "--yes", "--resume", run_id),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == ExitCode.OK, resumed.stdout + resumed.stderr
    assert (sim / "marker").read_text() == "ran\n"  # the destructive first step ran once
    journal = read(journal_of(run_journals_in_tmp))
    assert [e["id"] for e in journal.events if e["event"] == "step-end"] == ["mark", "slow", "last"]
    assert any(e["event"] == "resume" and e["from_step"] == "slow" for e in journal.events)
    took_over = [e for e in journal.events if e["event"] == "lock" and "taken_over_from" in e]
    assert took_over
    assert took_over[0]["taken_over_from"]["run"] == run_id
    assert not (sim / "runbook-runner.lock").exists()  # released at the end


def test_resume_refuses_a_changed_runbook(gpu_host, tmp_path, capsys, run_journals_in_tmp):
    runbook = write_runbook(tmp_path, gpu_host.root / "sim")
    main(["run", str(runbook), *gpu_host.cli_args(), "--yes"])
    run_id = journal_of(run_journals_in_tmp).stem
    runbook.write_text(runbook.read_text().replace("title: Last", "title: Last, renamed"))
    capsys.readouterr()
    code = main(["run", str(runbook), *gpu_host.cli_args(), "--yes", "--resume", run_id])
    assert code == ExitCode.JOURNAL
    assert "changed since run" in capsys.readouterr()[1]


def test_two_destructive_runs_on_one_host_exactly_one_proceeds(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = write_runbook(
        tmp_path, sim, slow_step=f"while [ ! -e {sim}/release ]; do sleep 0.05; done"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(run_journals_in_tmp.parent.parent)}
    first = subprocess.Popen(
        cli("run", str(runbook), *gpu_host.cli_args(), "--yes"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_for(
            lambda: any(
                '"event": "lock"' in p.read_text() for p in run_journals_in_tmp.glob("*.jsonl")
            ),
            120,
            "the first run to take the lock",
        )
        second = subprocess.run(
            cli("run", str(runbook), *gpu_host.cli_args(), "--yes"),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        (sim / "release").touch()
        first_out, first_err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == ExitCode.OK, first_out + first_err
    assert second.returncode == ExitCode.LOCKED
    assert "is locked by" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert (sim / "marker").read_text() == "ran\n"
    assert not (sim / "runbook-runner.lock").exists()  # released at the end


def test_a_dropped_connection_mid_step_reconnects_and_re_observes_instead_of_resending(
    gpu_host, tmp_path, capsys, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    for name in ("inflight", "released", "sent"):
        (sim / name).unlink(missing_ok=True)
    runbook = tmp_path / "drop.yaml"
    runbook.write_text(
        f"""name: drop
title: A step whose connection drops
summary: For the reconnect test.
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
    run: 'echo x >> {sim}/sent; touch {sim}/inflight; while [ ! -e {sim}/released ]; do sleep 0.05; done'
    timeout: 600
    wait: {{until: [is-released], interval: 0.2, timeout: 300}}
  - id: after
    title: After
    run: echo after
"""
    )
    env = {**os.environ, "XDG_STATE_HOME": str(run_journals_in_tmp.parent.parent)}
    runner = subprocess.Popen(
        cli("run", str(runbook), *gpu_host.cli_args()),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        wait_for(lambda: (sim / "inflight").exists(), 120, "the step to be in flight")
        before = gpu_host.logins()
        gpu_host.drop_and_restart()  # as a reboot would: the connection drops, sshd comes back
        (sim / "released").touch()
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == ExitCode.OK, out
    assert gpu_host.logins() - before == 1  # reconnected once
    assert (sim / "sent").read_text() == "x\n"  # the in-flight command was not sent again
    journal = read(journal_of(run_journals_in_tmp))
    hold = next(e for e in journal.events if e["event"] == "step-end" and e["id"] == "hold")
    assert hold["status"] == "ok", hold
    assert "outcome unknown" in hold["message"]
    assert "re-observed" in hold["message"]
