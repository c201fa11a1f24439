"""`runbook check` and `runbook run` end to end, over SSH to the stand-in GPU host."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from sshd import wait_for

from conftest import REPO, TESTS
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.simhost.model import GIB, eight_gpu_server
from runbook_runner.ssh import knownhosts

pytestmark = pytest.mark.ssh
MINI = str(TESTS / "runbooks" / "mini-recovery.yaml")
HEALTH = str(REPO / "runbooks" / "gpu-node-health.yaml")


def cli(capsys, host, *argv):
    code = main([argv[0], argv[1], *host.cli_args(), *argv[2:]])
    out, err = capsys.readouterr()
    return code, out, err


def server_name(host) -> str:
    """A server command line unique to this test host: xdist workers share one login user
    and one process table, and a runbook matching ``ps`` output must find only its own."""
    return f"/usr/bin/python3 -m sglang.launch_server --tp-size 8 --port {host.port}"


def crash(host, *, orphaned=(0, 2)):
    """The incident: a TP8 server; GPUs in ``orphaned`` keep their memory after it dies."""
    host.set_state(eight_gpu_server())
    command = f"sim-server --name '{server_name(host)}' --host-gib 40"
    script = []
    if orphaned:
        script.append(command + " --orphan " + " ".join(f"--gpu {i}:96410" for i in orphaned))
    rest = [i for i in range(8) if i not in orphaned]
    if rest:
        script.append(command + " " + " ".join(f"--gpu {i}:90000" for i in rest))
    result = host.ssh("; ".join(script))
    assert result.returncode == 0, result.stderr
    host.clear_calls()
    return [int(pid) for pid in result.stdout.split()]


def resets(host):
    return [call for call in host.calls() if call[:2] == ["nvidia-smi", "--gpu-reset"]]


def destructive_calls(host):
    """The recorded calls that would change a real machine (reads like fuser -v are left out)."""

    def changes(call: list[str]) -> bool:
        name, args = call[0], call[1:]
        if name == "systemctl":
            return args[:1] not in (["is-active"], ["is-enabled"], ["show"], ["list-units"])
        if name == "fuser":
            return "-k" in args
        if name == "nvidia-smi":
            return bool({"--gpu-reset", "-r", "-pm"} & set(args))
        return name in {"pkill", "rmmod", "modprobe", "reboot", "shutdown"}

    return [call for call in host.calls() if changes(call)]


def test_crashed_host_check_then_run_then_check(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")  # the server died; GPUs 0 and 2 stay held

    code, out, _ = cli(capsys, gpu_host, "check", MINI)
    assert code == ExitCode.GOAL_NOT_MET
    assert "GPU 0: memory.used 96,413 MiB, expected <= 1,024 MiB" in out
    assert "GPU 2: memory.used 96,413 MiB" in out
    assert "GPU 1:" not in out.split("gpu-memory-released")[1].split("\n")[0]

    code, out, _ = cli(capsys, gpu_host, "run", MINI, "--yes")
    assert code == ExitCode.OK, out
    assert [call[-1] for call in resets(gpu_host)] == ["0", "2"]  # only the held GPUs
    assert "reached by step 'reset-gpus'" in out
    assert ["systemctl", "start", "nvidia-persistenced"] in gpu_host.calls()

    code, out, _ = cli(capsys, gpu_host, "check", MINI)
    assert code == ExitCode.OK
    assert "goal holds" in out


def test_live_server_stopped_by_the_first_rung_skips_the_rest(gpu_host, capsys):
    pids = crash(gpu_host, orphaned=())
    code, out, _ = cli(capsys, gpu_host, "run", MINI, "--yes")
    assert code == ExitCode.OK
    assert resets(gpu_host) == []
    assert "reached by step 'stop-server'" in out
    for pid in pids:
        wait_for(
            lambda pid=pid: gpu_host.ssh(f"kill -0 {pid}").returncode != 0, 60, f"{pid} to exit"
        )


def test_root_steps_go_through_sudo_for_a_non_root_login(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    cli(capsys, gpu_host, "run", MINI, "--yes")
    assert ["sudo", "-n", "sh", "-c", "nvidia-smi --gpu-reset -i 0"] in gpu_host.calls()


def test_without_a_terminal_or_yes_a_destructive_step_is_not_run(gpu_host, capsys):
    crash(gpu_host)
    before = gpu_host.state_file.read_bytes()
    code, _, err_and_out = (lambda r: (r[0], r[1], r[1] + r[2]))(cli(capsys, gpu_host, "run", MINI))
    assert code == ExitCode.DECLINED
    assert "re-run with --yes" in err_and_out
    assert destructive_calls(gpu_host) == []
    assert [p.pid for p in gpu_host.state().processes] == [
        p["pid"] for p in json.loads(before)["processes"]
    ]


def test_dry_run_changes_nothing_and_prints_every_command(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    gpu_host.clear_calls()
    gpu_host.ssh("nvidia-smi -L >/dev/null")  # settle the dead processes into the state first
    before = gpu_host.state_file.read_bytes()
    gpu_host.clear_calls()
    code, out, _ = cli(capsys, gpu_host, "run", MINI, "--dry-run")
    assert code == ExitCode.OK
    assert gpu_host.state_file.read_bytes() == before
    assert destructive_calls(gpu_host) == []
    assert "nothing to fix: no-compute-processes hold" in out
    assert "kill -TERM" not in out  # the server is gone: no evidence for stopping it
    assert re.search(r"would run( then)?: \$ nvidia-smi --gpu-reset -i 0\n", out), out
    assert re.search(r"would run( then)?: \$ nvidia-smi --gpu-reset -i 2\n", out), out
    assert "-i 1" not in out


def test_json_document_of_a_run(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    code, out, err = cli(capsys, gpu_host, "run", MINI, "--yes", "--json")
    assert code == ExitCode.OK
    document = json.loads(out)
    assert document["runbook"] == "mini-recovery"
    assert document["host"] == "127.0.0.1"
    assert document["ok"] is True
    assert [g["memory_used_mib"] for g in document["state"]["gpus"]] == [3] * 8
    assert document["state"]["gpus"][0]["memory_total_mib"] == 97887
    assert document["state"]["gpu_processes"] == []
    assert document["state"]["memory"]["total_bytes"] == 449 * GIB
    assert {c["name"] for c in document["checks"]} == {
        "no-compute-processes",
        "gpu-memory-released",
    }
    statuses = {s["id"]: s["status"] for s in document["steps"]}
    assert statuses == {
        "stop-server": "skipped",  # nothing to fix: no compute process is left
        "kill-server": "skipped",
        "stop-persistenced": "ok",
        "reset-gpus": "ok",
        "start-persistenced": "ok",
    }
    assert set(document["steps"][0]) >= {"id", "status", "started", "duration_s", "exit_status"}
    assert "reset-gpus" in err  # progress went to stderr


def test_check_json_reports_missing_values_as_null(gpu_host, capsys):
    state = eight_gpu_server(driver_loaded=False)
    gpu_host.set_state(state)
    code, out, _ = cli(capsys, gpu_host, "check", HEALTH, "--json")
    document = json.loads(out)
    # The GPUs cannot be read: 6, unless a check of this machine's real ps fails (a zombie).
    seen_failing = any(c["status"] == "failing" for c in document["checks"])
    assert code == (ExitCode.GOAL_NOT_MET if seen_failing else ExitCode.CANNOT_TELL)
    assert document["state"]["gpus"] is None
    assert "driver is not loaded" in document["state"]["unavailable"]["gpus"]
    failing = {c["name"]: c for c in document["checks"] if not c["ok"]}
    assert "the NVIDIA driver is not loaded" in failing["gpu-memory-released"]["message"]
    assert failing["gpu-memory-released"]["status"] == "cannot-tell"


def test_a_reset_that_keeps_failing_escalates_to_exit_1_with_the_hint(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    state = gpu_host.state()
    state.forget_dead(lambda pid: False)
    state.gpu(2).resets_that_fail = 99
    gpu_host.set_state(state)
    code, out, _ = cli(capsys, gpu_host, "run", MINI, "--yes")
    assert code == ExitCode.GOAL_NOT_MET
    assert "goal NOT reached" in out
    assert "GPU 2: memory.used" in out
    assert "next: reset the GPUs that still hold memory, or reboot" in out


def test_from_starts_at_the_named_step(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    gpu_host.clear_calls()
    _code, out, _ = cli(capsys, gpu_host, "run", MINI, "--yes", "--from", "reset-gpus", "--json")
    steps = [s["id"] for s in json.loads(out)["steps"]]
    assert steps == ["reset-gpus", "start-persistenced"]


def test_from_an_unknown_step_is_bad_input(gpu_host, capsys):
    code, _, err = cli(capsys, gpu_host, "run", MINI, "--from", "nope")
    assert code == ExitCode.BAD_INPUT
    assert "has no step 'nope'" in err


def test_parameter_values_are_one_shell_word(gpu_host, capsys, tmp_path):
    marker = gpu_host.root / "sim" / "pwned"
    runbook = tmp_path / "quoting.yaml"
    runbook.write_text(
        "name: quoting\ntitle: t\nsummary: s\n"
        "parameters:\n  value: {type: string, default: x, description: d}\n"
        "observations:\n  echo:\n    command: [printf, '%s\\n', \"{{ value }}\"]\n    parser: lines\n"
        "checks:\n  one-line:\n    description: exactly one argument arrived\n    expect: count(echo) == 1\n"
        "goal: [one-line]\nsteps:\n  - id: show\n    title: show\n    run: [printf, '[%s]', \"{{ value }}\"]\n"
    )
    hostile = f"a b; touch {marker}; $(touch {marker}) `touch {marker}` \"'"
    code, out, _ = cli(capsys, gpu_host, "run", str(runbook), "--set", f"value={hostile}", "--json")
    assert code == ExitCode.OK
    assert not marker.exists()
    document = json.loads(out)
    assert document["checks"][0]["ok"]


def test_step_timeout_ends_the_remote_command(gpu_host, capsys, tmp_path):
    runbook = tmp_path / "slow.yaml"
    runbook.write_text(
        "name: slow\ntitle: t\nsummary: s\n"
        "observations:\n  memory: {command: free -b, parser: free}\n"
        "checks:\n  any: {description: d, expect: memory.total_bytes > 0}\n"
        "goal: [any]\nsteps:\n"
        "  - {id: hang, title: hang, run: 'echo started; exec sleep 301', timeout: 1}\n"
    )
    code, out, _ = cli(capsys, gpu_host, "run", str(runbook), "--json")
    document = json.loads(out)
    assert document["steps"][0]["status"] == "timed_out"
    assert code == ExitCode.OK  # the goal itself holds
    wait_for(
        lambda: "sleep 301" not in gpu_host.ssh("ps -eo args").stdout,
        60,  # far from its own 301 s
        "the remote sleep to be ended",
    )


def test_wrong_port_exits_3_with_one_line(gpu_host):
    from sshd import free_port

    args = gpu_host.cli_args()
    args[args.index("--port") + 1] = str(free_port())
    result = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "check", HEALTH, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == ExitCode.HOST_UNREACHABLE
    assert len(result.stderr.strip().splitlines()) == 1
    assert "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_host_key_exits_3_naming_the_flag(gpu_host, tmp_path, capsys):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    args = gpu_host.cli_args()
    args[args.index("--known-hosts") + 1] = str(empty)
    code = main(["check", HEALTH, *args])
    _, err = capsys.readouterr()
    assert code == ExitCode.HOST_UNREACHABLE
    assert "unknown host key ssh-ed25519 SHA256:" in err
    assert "--accept-new-host-key" in err
    code = main(["check", HEALTH, *args, "--accept-new-host-key"])
    out, _ = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET)
    assert f"recorded the host key of [127.0.0.1]:{gpu_host.port}" in out
    # Hashed when the ssh config says HashKnownHosts (Debian's /etc/ssh/ssh_config does).
    name, key_type = empty.read_text().split()[:2]
    assert knownhosts.host_matches(name, f"[127.0.0.1]:{gpu_host.port}")
    assert key_type == "ssh-ed25519"


def test_one_connection_for_a_whole_run(gpu_host, capsys):
    crash(gpu_host)
    before = gpu_host.logins()
    cli(capsys, gpu_host, "run", MINI, "--yes")
    assert gpu_host.logins() - before == 1


def test_wait_progress_says_what_is_still_wrong(gpu_host, capsys, tmp_path):
    runbook = tmp_path / "waits.yaml"
    runbook.write_text(
        "name: waits\ntitle: t\nsummary: s\n"
        "observations:\n  gpus: {command: 'nvidia-smi --query-gpu=index,memory.used --format=csv', parser: gpus}\n"
        "checks:\n  idle: {description: d, every: gpus, expect: memory_used_mib < 100}\n"
        "goal: [idle]\nsteps:\n"
        "  - {id: wait, title: wait, wait: {until: goal, timeout: 0.6, interval: 0.2}}\n"
    )
    state = eight_gpu_server()
    state.gpu(0).orphaned_mib = 96410
    gpu_host.set_state(state)
    code, out, _ = cli(capsys, gpu_host, "run", str(runbook))
    assert code == ExitCode.GOAL_NOT_MET
    # the elapsed seconds are the machine's: a loaded one reads the GPUs later
    assert re.search(r"waiting \d+s of 1s: GPU 0: memory.used 96,413 MiB, expected < 100 MiB", out)
    assert "wait ended: deadline (0.6 s), still: GPU 0: memory.used 96,413 MiB" in out


def _run_on_a_terminal(host, answers: str, *extra: str) -> subprocess.CompletedProcess:
    """The CLI with a real terminal as stdin (a pty), the answers typed ahead."""
    import os
    import pty

    controller, terminal = pty.openpty()
    os.write(controller, answers.encode())
    try:
        return subprocess.run(
            [sys.executable, "-m", "runbook_runner", "run", MINI, *host.cli_args(), *extra],
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


def test_prompt_names_the_host_and_command_and_no_stops_the_run(gpu_host):
    pids = crash(gpu_host)
    result = _run_on_a_terminal(gpu_host, "n\n")
    assert result.returncode == ExitCode.DECLINED
    assert (
        f"DESTRUCTIVE, affects process, on 127.0.0.1:{gpu_host.port} as {gpu_host.user}"
        in result.stdout
    )
    assert "$ kill -TERM " in result.stdout
    assert "stopped: declined step 'stop-server'" in result.stdout
    assert destructive_calls(gpu_host) == []
    assert all(gpu_host.ssh(f"kill -0 {pid}").returncode == 0 for pid in pids)  # kill: no stand-in


def test_prompt_answered_yes_runs_the_step(gpu_host):
    pids = crash(gpu_host)
    result = _run_on_a_terminal(gpu_host, "y\ny\ny\ny\ny\n")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    for pid in pids:  # kill is no stand-in: the processes it was sent to are gone
        wait_for(
            lambda pid=pid: gpu_host.ssh(f"kill -0 {pid}").returncode != 0, 60, f"{pid} to exit"
        )
    assert "\x1b[" not in result.stdout  # NO_COLOR


def test_hostile_values_arrive_as_one_literal_argument_and_odd_output_is_shown(gpu_host, tmp_path):
    runbook = tmp_path / "echo.yaml"
    runbook.write_text(
        "name: echo\ntitle: t\nsummary: s\n"
        "parameters:\n  value: {type: string, default: x, description: d}\n"
        "observations:\n  memory: {command: free -b, parser: free}\n"
        "checks:\n  any: {description: d, expect: memory.total_bytes > 0}\n"
        "goal: [any]\nsteps:\n  - id: show\n    title: show\n    run: [printf, '<%s>', \"{{ value }}\"]\n"
    )
    marker = gpu_host.root / "sim" / "pwned"
    # (a value that is not UTF-8 is refused before anything is sent: test_set_value_utf8.py)
    hostile = b"line one\nline two; touch " + str(marker).encode() + b" \xc3\xa9 $(id) 'q\" end"
    result = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"runbook_runner",
            b"run",
            str(runbook).encode(),
            *(a.encode() for a in gpu_host.cli_args()),
            b"--json",
            b"--set",
            b"value=" + hostile,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == ExitCode.OK, result.stderr
    assert not marker.exists()
    shown = result.stderr.decode("utf-8", "replace")
    assert "<line one" in shown
    assert "line two; touch" in shown
    assert "\u00e9 $(id) 'q\" end>" in shown  # one literal word, shown as sent


def test_a_missing_sudo_right_is_a_clear_error(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    no_sudo = gpu_host.root / "sim" / "no-sudo"
    no_sudo.touch()
    try:
        code, out, _ = cli(capsys, gpu_host, "run", MINI, "--yes", "--json")
    finally:
        no_sudo.unlink()
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    assert code == ExitCode.GOAL_NOT_MET
    assert steps["stop-persistenced"]["status"] == "failed"
    assert "needs root: sudo -n was refused" in steps["stop-persistenced"]["message"]
    assert "sudo: a password is required" in steps["stop-persistenced"]["message"]
