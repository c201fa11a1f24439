"""Evidence before action, over a real sshd: each test fails without the rule it is named for.

- what cannot be observed blocks a destructive step (exit 6), never escalates;
- a host-RAM problem runs no GPU rung;
- a server pattern that matches nothing never leads to SIGKILL before SIGTERM;
- a process on a healthy GPU is never signalled;
- a flat reading ends a wait early, a falling one keeps it going;
- every step that did not run says truthfully why, in the journal.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_run_ssh import _run_on_a_terminal, crash, resets
from test_runbooks_ssh import RECOVERY, SHORT_WAITS, settle

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read
from runbook_runner.simhost.model import GIB, eight_gpu_server

pytestmark = pytest.mark.ssh
FAST = [*SHORT_WAITS, "--set=settle_s=1"]
GPU_CHANGES = ("systemctl stop", "fuser -k", "--gpu-reset", "rmmod", "modprobe", "kill -")


def run(capsys, host, runbook, *extra, pattern: str | None = None):
    if pattern is None:
        pattern = rf"sglang\.launch_server .*--port {host.port}( |$)"
    if runbook == RECOVERY:
        extra = ("--set", f"server_pattern={pattern}", "--set", "worker_pattern=(?!)", *extra)
    code = main(["run", runbook, *host.cli_args(), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def sent(host) -> list[str]:
    """Every command line the host was asked to run through sudo (kill is not a stand-in)."""
    lines = []
    for call in host.calls():
        if call[:1] == ["sudo"]:
            lines.append(" ".join(call[call.index("-c") + 1 :] if "-c" in call else call[2:]))
        else:
            lines.append(" ".join(call))
    return lines


def signals(host) -> list[tuple[str, int]]:
    """(signal, pid) of every kill the runbook sent, in order."""
    found = []
    for line in sent(host):
        for signal_name, pid in re.findall(r"\bkill -([A-Z0-9]+) (\d+)", line):
            found.append((signal_name, int(pid)))
    return found


def journal_events(folder: Path) -> list[dict]:
    (path,) = sorted(folder.glob("*.jsonl"))
    return read(path).events


def step_ends(folder: Path) -> dict[str, dict]:
    return {e["id"]: e for e in journal_events(folder) if e["event"] == "step-end"}


# -- cannot tell ----------------------------------------------------------------------------


def no_nvidia_smi(host):
    """The server died; GPUs 0 and 2 are held; and nvidia-smi answers 127 with nothing on stderr."""
    crash(host)
    host.ssh("pkill -KILL -f sglang")
    settle(host)
    state = host.state()
    state.missing_commands = ["nvidia-smi"]
    host.set_state(state)
    host.clear_calls()


def test_unknown_gpu_state_blocks_the_destructive_rungs_and_exits_6(gpu_host, capsys):
    no_nvidia_smi(gpu_host)
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *FAST)
    assert code == ExitCode.CANNOT_TELL, out
    assert not any(change in line for line in sent(gpu_host) for change in GPU_CHANGES)
    # Rungs told they have nothing to act on are not needed; the first that would act on
    # the GPUs nobody can read (the driver's recovery action, then the resets) stops the run.
    assert "stopped before step 'reboot-for-recovery-action': blocked: cannot tell:" in out
    assert "exited 127 (command not found)" in out
    assert "fix: install the command gpus runs" in out


def test_a_dry_run_shows_blocked_not_planned_and_does_not_exit_0(gpu_host, capsys):
    no_nvidia_smi(gpu_host)
    code, out = run(capsys, gpu_host, RECOVERY, "--dry-run", *FAST)
    assert code == ExitCode.CANNOT_TELL
    # The plan stops where the run would: at the first destructive step, which cannot tell.
    assert "STOPS here: blocked: cannot tell" in out, out
    reached = next(ln for ln in out.splitlines() if ln.startswith("not reached"))
    for rung in ("stop-gpu-services", "reset-gpus", "reload-driver", "reboot"):
        assert re.search(rf"\b{rung}\b", reached), reached
    assert "the run would stop before acting" in out
    assert not re.search(
        r"would run( then)?: \$ (kill|systemctl stop|nvidia-smi --gpu-reset|reboot)", out
    )


def test_a_typed_nvidia_smi_failure_is_evidence_a_step_can_act_on(gpu_host, capsys, tmp_path):
    runbook = tmp_path / "lost.yaml"
    runbook.write_text(
        "name: lost\ntitle: t\nsummary: s\n"
        "observations:\n  gpus: {command: nvidia-smi -q, parser: gpus-detail}\n"
        "checks:\n  released: {description: d, every: gpus, expect: memory_used_mib < 1024}\n"
        "goal: [released]\nsteps:\n"
        "  - id: driver-down\n    title: t\n    run: echo the driver is down\n"
        "    when: gpus.condition == 'driver-not-loaded'\n"
        "  - id: gpu-lost\n    title: t\n    run: echo a GPU fell off the bus\n"
        "    when: gpus.condition == 'gpu-lost'\n"
    )
    state = eight_gpu_server()
    state.driver_loaded = False
    gpu_host.set_state(state)
    code, out = run(capsys, gpu_host, str(runbook))
    # The goal reads the GPUs, which cannot be told: 6, as `check` says it (issue #23).
    assert code == ExitCode.CANNOT_TELL
    assert "| the driver is down" in out
    assert "a GPU fell off the bus" not in out.replace("echo a GPU fell off the bus", "")
    assert "not needed: gpu-lost" in out  # folded (-v says: when is false)


# -- rungs act on what fails, and only there -------------------------------------------------


def test_a_host_ram_only_failure_runs_no_gpu_rung(gpu_host, capsys, run_journals_in_tmp):
    state = eight_gpu_server()
    state.leaked_host_bytes = 120 * GIB  # leaked /dev/shm segments; every GPU is clean
    gpu_host.set_state(state)
    gpu_host.clear_calls()
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *FAST)
    assert code == ExitCode.GOAL_NOT_MET, out
    assert not any(change in line for line in sent(gpu_host) for change in GPU_CHANGES)
    ends = step_ends(run_journals_in_tmp)
    for rung in ("stop-gpu-services", "reset-gpus", "persistence-off", "reload-driver"):
        assert ends[rung]["status"] == "skipped"
        assert "nothing to fix: gpu-memory-released hold" in ends[rung]["message"]
    # The one rung that could help (a reboot frees leaked memory) says truthfully why it did not run.
    assert ends["reboot"]["message"] == "needs --allow-reboot"
    (asked,) = [e for e in journal_events(run_journals_in_tmp) if e["event"] == "confirmation"]
    assert asked["answer"] == "not asked"
    assert asked["reason"] == "needs --allow-reboot"


def test_a_server_the_subject_does_not_name_is_left_alone_and_named(gpu_host, capsys):
    """The recovery's subject is vLLM here; the SGLang server on the GPUs is not ours: no
    signal, no reset of its GPUs, and the run says whose they are (it used to be found
    through the device files and signalled)."""
    pids = crash(gpu_host)
    code, out = run(
        capsys, gpu_host, RECOVERY, "--yes", *FAST, pattern=r"vllm serve|vllm\.entrypoints"
    )
    assert code == ExitCode.OK, out
    assert signals(gpu_host) == []
    assert resets(gpu_host) == []
    assert not any("fuser -k" in line for line in sent(gpu_host))
    for pid in pids:
        assert Path(f"/proc/{pid}").exists()
    assert "another-owner" in out


def test_a_process_on_a_healthy_gpu_is_never_signalled(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    settle(gpu_host)
    probe = gpu_host.ssh(
        f"sim-server --name 'python3 /opt/gpu-probe.py --port {gpu_host.port}' --gpu 5:500"
    )
    probe_pid = int(probe.stdout)
    gpu_host.clear_calls()
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *FAST)
    assert code == ExitCode.OK, out
    assert [call[-1] for call in resets(gpu_host)] == ["0", "2"]
    assert all(pid != probe_pid for _, pid in signals(gpu_host))
    assert not any("fuser -k" in line for line in sent(gpu_host))
    assert Path(f"/proc/{probe_pid}").exists()  # still running on GPU 5


# -- waits that read the evidence ------------------------------------------------------------

WAITS = """name: waits
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
  holders: {command: 'fuser -v /dev/nvidia* 2>&1', parser: device-holders, ok_exit: [0, 1]}
checks:
  idle: {description: d, every: gpus, expect: memory_used_mib <= 1024}
  holders-gone:
    description: no process on a failing GPU
    none: holders
    empty: ok
    within: {failing: idle, match: minor_number}
goal: [idle]
steps:
  - id: wait
    title: wait
    wait: {until: goal, timeout: 300, interval: 0.2, settle: 1, nothing_left: [holders-gone]}
"""


def wait_end(capsys, host, tmp_path, folder) -> tuple[int, dict]:
    runbook = tmp_path / "waits.yaml"
    runbook.write_text(WAITS)
    code = main(["run", str(runbook), *host.cli_args()])
    capsys.readouterr()
    return code, step_ends(folder)["wait"]["wait"]


def test_a_flat_reading_with_nothing_left_ends_the_wait_early(
    gpu_host, capsys, tmp_path, run_journals_in_tmp
):
    state = eight_gpu_server()
    state.gpu(0).orphaned_mib = 96_410  # held, and nothing left that could give it back
    gpu_host.set_state(state)
    code, ended = wait_end(capsys, gpu_host, tmp_path, run_journals_in_tmp)
    assert code == ExitCode.GOAL_NOT_MET
    assert ended["ended"] == "no-progress", ended
    assert re.match(r"no progress for \d s, nothing left \(holders-gone hold\)", ended["reason"])
    assert ended["figures"] == ["GPU 0: memory.used 96,413 MiB, expected <= 1,024 MiB"]
    assert ended["elapsed_s"] < 150  # far from its 300 s deadline: a 1 s settle, loaded


def test_a_falling_reading_keeps_the_wait_going_until_it_is_reached(
    gpu_host, capsys, tmp_path, run_journals_in_tmp
):
    state = eight_gpu_server()
    state.gpu(0).orphaned_mib = 3_000
    state.gpu(0).draining_mib_per_read = 200  # slowly given back: never flat for a second
    gpu_host.set_state(state)
    code, ended = wait_end(capsys, gpu_host, tmp_path, run_journals_in_tmp)
    assert code == ExitCode.OK
    assert ended["ended"] == "reached", ended


def test_a_flat_reading_with_a_process_left_on_the_gpu_waits_on(
    gpu_host, capsys, tmp_path, run_journals_in_tmp
):
    gpu_host.set_state(eight_gpu_server())
    gpu_host.ssh(f"sim-server --name 'python3 /opt/worker.py {gpu_host.port}' --gpu 0:90000")
    runbook = tmp_path / "waits.yaml"
    runbook.write_text(WAITS.replace("timeout: 300", "timeout: 3"))
    code = main(["run", str(runbook), *gpu_host.cli_args()])
    capsys.readouterr()
    ended = step_ends(run_journals_in_tmp)["wait"]["wait"]
    assert code == ExitCode.GOAL_NOT_MET
    assert ended["ended"] == "deadline", ended
    gpu_host.ssh("pkill -KILL -f /opt/worker.py")


# -- truthful records ------------------------------------------------------------------------


def test_without_a_terminal_the_reason_is_no_terminal(gpu_host, capsys, run_journals_in_tmp):
    crash(gpu_host)
    code, _ = run(capsys, gpu_host, RECOVERY, *FAST)  # no --yes, stdin is not a terminal
    assert code == ExitCode.DECLINED
    ends = step_ends(run_journals_in_tmp)
    assert ends["stop-server"]["status"] == "declined"
    assert ends["stop-server"]["message"] == "no terminal to ask (use --yes)"
    (asked,) = [e for e in journal_events(run_journals_in_tmp) if e["event"] == "confirmation"]
    assert asked["answer"] == "not asked"
    summary = main(["runs"])
    assert summary == ExitCode.OK
    listing = capsys.readouterr()[0]
    assert "stopped: no terminal to ask (use --yes)" in listing


def test_an_operator_no_is_journalled_as_theirs_and_listed_as_stopped(
    gpu_host, capsys, run_journals_in_tmp
):
    crash(gpu_host)
    result = _run_on_a_terminal(gpu_host, "n\n")
    assert result.returncode == ExitCode.DECLINED
    ends = step_ends(run_journals_in_tmp)
    assert re.fullmatch(r"declined by \S+", ends["stop-server"]["message"])
    assert main(["runs"]) == ExitCode.OK
    assert "stopped by the operator" in capsys.readouterr()[0]


def test_the_prompt_lists_the_exact_pids_it_will_signal(gpu_host):
    pids = crash(gpu_host)
    controller, terminal = pty.openpty()
    os.write(controller, b"n\n")
    pattern = rf"server_pattern=sglang\.launch_server .*--port {gpu_host.port}( |$)"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runbook_runner",
                "run",
                RECOVERY,
                *gpu_host.cli_args(),
                "--set",
                pattern,
                "--set",
                "worker_pattern=(?!)",
            ],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "NO_COLOR": "1"},
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == ExitCode.DECLINED, done.stdout + done.stderr
    assert f"acts on {len(pids)} observed items:" in done.stdout
    for pid in pids:
        assert f"- PID {pid} [" in done.stdout


def test_check_says_cannot_tell_and_exits_6_when_nothing_fails_but_gpus_cannot_be_read(
    gpu_host, capsys
):
    gpu_host.set_state(eight_gpu_server())
    state = gpu_host.state()
    state.missing_commands = ["nvidia-smi"]
    gpu_host.set_state(state)
    code = main(["check", RECOVERY, *gpu_host.cli_args()])
    out = capsys.readouterr()[0]
    assert code == ExitCode.CANNOT_TELL
    assert "???? gpu-memory-released" in out
    assert "cannot tell whether the goal holds" in out


def test_a_value_the_host_did_not_report_is_never_sent_as_the_word_none(gpu_host, capsys, tmp_path):
    """A row without a PID: the kill is blocked (cannot tell), never `kill -TERM None`."""
    sim = gpu_host.root / "sim"
    (sim / "rows").write_text("NAME PID\nworker\n")
    runbook = tmp_path / "no-pid.yaml"
    runbook.write_text(
        "name: no-pid\ntitle: t\nsummary: s\n"
        f"observations:\n  rows: {{command: cat {sim}/rows, parser: table}}\n"
        "checks:\n  no-workers: {description: d, none: rows, where: name == 'worker'}\n"
        "goal: [no-workers]\nsteps:\n"
        '  - id: stop\n    title: t\n    run: [kill, -TERM, "{{ item.pid }}"]\n'
        "    for_each_failing: no-workers\n    fixes: [no-workers]\n"
        "    destructive: true\n    affects: process\n"
    )
    code, out = run(capsys, gpu_host, str(runbook))
    assert code == ExitCode.CANNOT_TELL, out
    assert "pid was not reported" in out
    assert "kill -TERM None" not in out
    assert "kill -TERM 'None'" not in out


# -- starting is not for ever ---------------------------------------------------------------


def launcher_up(host, seconds: float, *flags: str) -> int:
    """A live SGLang launcher, up ``seconds``, whose port never opened and whose workers are
    gone (none left of its instance)."""
    name = f"python3 -m sglang.launch_server --model-path /m --tp-size 8 --port {host.port}"
    started = host.ssh(f"sim-server --name '{name}' {' '.join(flags)}")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split()[0])
    state = host.state()
    (process,) = [p for p in state.processes if p.pid == pid]
    process.born = state.now - seconds
    host.set_state(state)
    host.clear_calls()
    return pid


def test_the_seeds_launcher_with_its_workers_gone_is_not_left_alone_as_starting(gpu_host, capsys):
    """The seed's state: the launcher lives on (up 93 s, well within the startup grace),
    its port closed, its schedulers OOM-killed; it holds GPU 0, a dead worker's memory stays
    on GPU 2. It used to be 'starting', GPU 0 left to it: now it is broken (no worker
    left), ended, and GPUs 0 and 2 are reset, with no --set of the grace."""
    state = eight_gpu_server()
    state.gpu(2).orphaned_mib = 96_410
    gpu_host.set_state(state)
    launcher = launcher_up(gpu_host, 93, "--orphan", "--gpu 0:96410")
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", "--json", *FAST)
    assert ("TERM", launcher) in signals(gpu_host), out
    assert [call[-1] for call in resets(gpu_host)] == ["0", "2"], out
    assert code == ExitCode.OK, out
    # (the screen cuts a rung's line at 150 characters; --json has the target's reason whole)
    (stop,) = [
        s for s in json.JSONDecoder().raw_decode(out)[0]["steps"] if s["id"] == "stop-server"
    ]
    assert "none of its workers lives" in " ".join(stop["targets"]), stop


def test_a_launcher_past_its_startup_grace_is_not_starting(gpu_host, capsys):
    """The seed's state with the launcher up past the startup grace (its default, no --set):
    its closed port is broken on that evidence alone, not 'starting' for ever. The run exits
    0 only with both GPUs recovered: the launcher ended, GPUs 0 and 2 reset, none held."""
    state = eight_gpu_server()
    state.gpu(2).orphaned_mib = 96_410
    gpu_host.set_state(state)
    launcher = launcher_up(gpu_host, 2_000, "--orphan", "--gpu 0:96410")
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", "--json", *FAST)
    assert "starting: up" not in out, out
    assert ("TERM", launcher) in signals(gpu_host), out
    assert [call[-1] for call in resets(gpu_host)] == ["0", "2"], out
    assert code == ExitCode.OK, out
    document = json.JSONDecoder().raw_decode(out)[0]  # (stderr follows it in out)
    (stop,) = [s for s in document["steps"] if s["id"] == "stop-server"]
    assert "past the startup grace of 1800 s" in " ".join(stop["targets"]), stop
    assert document["verdict"]["held"] == [], document["verdict"]
    assert document["verdict"]["still_wrong"] == [], document["verdict"]
    after = gpu_host.state()
    assert [after.used_mib(after.gpu(i)) <= 1024 for i in (0, 2)] == [True, True], out


def test_a_launcher_started_seconds_ago_is_left_to_load(gpu_host, capsys):
    """Up 20 s, before a launcher has started its workers: starting, never signalled."""
    gpu_host.set_state(eight_gpu_server())
    launcher_up(gpu_host, 20, "--gpu 0:2000")
    _code, out = run(capsys, gpu_host, RECOVERY, "--yes", *FAST)
    assert signals(gpu_host) == [], out
    assert resets(gpu_host) == [], out
    assert "starting: up 20 s" in out
