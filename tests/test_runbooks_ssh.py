"""The shipped runbooks, end to end over SSH against the stand-in GPU host."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sshd import wait_for
from test_run_ssh import crash, destructive_calls, resets, server_name

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.simhost.model import eight_gpu_server

pytestmark = pytest.mark.ssh
RECOVERY = str(REPO / "runbooks" / "gpu-oom-recovery.yaml")
PREFLIGHT = str(REPO / "runbooks" / "sglang-hicache-preflight.yaml")
HEALTH = str(REPO / "runbooks" / "gpu-node-health.yaml")
# The real waits are minutes; the behaviour under test needs seconds.
SHORT_WAITS = [
    f"--set={name}={seconds}"
    for name, seconds in [
        ("stop_wait_s", 3),
        ("kill_wait_s", 3),
        ("teardown_wait_s", 1),
        ("reset_wait_s", 2),
        ("reboot_wait_s", 60),
    ]
]


def run(capsys, host, runbook, *extra):
    """Run a runbook on the test host; the recovery's server pattern is narrowed to this host's
    servers (see ``server_name``), the same shape as its default."""
    if runbook == RECOVERY:
        extra = (
            *extra,
            "--set",
            rf"server_pattern=sglang\.launch_server .*--port {host.port}( |$)",
            # Other tests' stand-in servers run beside this host's: only its own are the
            # subject (workers of this test host's servers descend from its launchers).
            "--set",
            "worker_pattern=(?!)",
        )
    code = main(["run", runbook, *host.cli_args(), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def test_the_default_subject_patterns_find_sglang_and_vllm_and_nothing_else():
    from runbook_runner.runbook import load

    parameters = load(Path(RECOVERY)).parameters
    launcher = parameters["server_pattern"].default
    workers = parameters["worker_pattern"].default
    assert re.search(
        launcher, "/usr/bin/python3 -m sglang.launch_server --model-path m --tp-size 8"
    )
    assert re.search(launcher, "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m")
    assert re.search(launcher, "/opt/venv/bin/python /opt/venv/bin/vllm serve Qwen/Qwen3-8B")
    assert re.search(workers, "sglang::scheduler_TP3")
    assert re.search(workers, "VLLM::Worker_TP1")
    for ours in (
        "ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args",
        "fuser -v /dev/nvidia0",
    ):
        assert not re.search(launcher, ours)
        assert not re.search(workers, ours)
    assert not re.search(launcher, "python3 train.py --config ablation-12.yaml")


def settle(host):
    """Wait until the simulation has seen every killed server process go (any stand-in call looks)."""

    def settled() -> bool:
        host.ssh("nvidia-smi -L > /dev/null")
        return not host.state().processes

    wait_for(settled, 60, "the killed server processes to be gone")


def only_a_reboot_helps(host):
    """After the crash: GPU 2 refuses every reset and the driver will not unload."""
    host.ssh("pkill -KILL -f sglang")
    settle(host)
    state = host.state()
    state.gpu(2).resets_that_fail = 99
    state.module_held_by = "Xorg"  # nvidia_drm in use by a display server
    host.set_state(state)
    host.clear_calls()


def test_the_seed_incident_is_fixed_at_the_reset_rung_resetting_only_gpus_0_and_2(gpu_host, capsys):
    crash(gpu_host)  # a TP8 server whose death leaves GPUs 0 and 2 held
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *SHORT_WAITS, "--json")
    assert code == ExitCode.OK, out
    assert [call[-1] for call in resets(gpu_host)] == ["0", "2"]
    assert "reached by step 'reset-gpus'" in out
    calls = gpu_host.calls()
    # the reset worked with the daemon running: no service was stopped that did not need to be
    assert not any(c[:2] == ["systemctl", "stop"] for c in calls)
    assert not any(c[0] in {"rmmod", "reboot"} for c in calls)
    assert gpu_host.state().service("nvidia-persistenced").active


def test_when_a_kill_suffices_the_ladder_stops_there(gpu_host, capsys):
    host = gpu_host
    host.set_state(eight_gpu_server())
    result = host.ssh(
        f"sim-server --name '{server_name(host)}' --ignore-term "
        + " ".join(f"--gpu {i}:90000" for i in range(8))
    )
    assert result.returncode == 0
    host.clear_calls()
    code, out = run(capsys, host, RECOVERY, "--yes", *SHORT_WAITS)
    assert code == ExitCode.OK, out
    assert "reached by step 'kill-server'" in out
    assert resets(host) == []
    assert not any(c[:2] == ["systemctl", "stop"] for c in host.calls())


def test_a_reset_that_keeps_failing_escalates_and_stops_before_reboot(gpu_host, capsys):
    crash(gpu_host)
    only_a_reboot_helps(gpu_host)
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *SHORT_WAITS)
    assert code == ExitCode.GOAL_NOT_MET
    # refused: once, again out of persistence mode (GPU 2 only), again with the GPU services
    # stopped; then the driver reload
    assert [c[-1] for c in resets(gpu_host)] == ["0", "2", "2", "2"]
    assert ["nvidia-smi", "-i", "2", "-pm", "0"] in gpu_host.calls()
    assert ["rmmod", "nvidia_uvm"] in gpu_host.calls()
    assert not any(c[0] == "reboot" for c in gpu_host.calls())
    assert "next: reboot the host: runbook run gpu-oom-recovery" in out
    assert "--from reboot --allow-reboot" in out
    assert "GPU 2: memory.used" in out


def test_with_no_gpu_service_to_stop_the_reset_is_not_retried_for_nothing(gpu_host, capsys):
    """The reset after stopping the GPU services runs only when a service was stopped:
    otherwise nothing changed since the last refused reset."""
    crash(gpu_host)
    only_a_reboot_helps(gpu_host)
    state = gpu_host.state()
    state.services = [s for s in state.services if not s.holds_gpus]  # no daemon, no DCGM
    gpu_host.set_state(state)
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", *SHORT_WAITS)
    assert re.search(r"not needed: .*reset-gpus-without-services", out), out
    assert code == ExitCode.GOAL_NOT_MET
    assert [c[-1] for c in resets(gpu_host)] == ["0", "2", "2"]
    assert ["rmmod", "nvidia_uvm"] in gpu_host.calls()


def test_with_allow_reboot_the_host_reboots_reconnects_and_reaches_the_goal(gpu_host, capsys):
    crash(gpu_host)
    only_a_reboot_helps(gpu_host)
    before = gpu_host.logins()
    code, out = run(capsys, gpu_host, RECOVERY, "--yes", "--allow-reboot", *SHORT_WAITS)
    assert code == ExitCode.OK, out
    assert "reached by step 'reboot'" in out
    assert gpu_host.state().boots == 2
    assert gpu_host.logins() - before == 2  # the first connection dropped with the reboot


def test_the_dry_run_of_the_recovery_changes_nothing(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    settle(gpu_host)
    before = gpu_host.state_file.read_bytes()
    gpu_host.clear_calls()
    code, out = run(capsys, gpu_host, RECOVERY, "--dry-run")
    assert code == ExitCode.OK
    assert gpu_host.state_file.read_bytes() == before
    assert destructive_calls(gpu_host) == []
    assert re.search(r"would run( then)?: \$ nvidia-smi --gpu-reset -i 0\n", out), out


@pytest.mark.parametrize(
    ("launch", "code", "message"),
    [
        (
            "python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache --hicache-size 300",
            ExitCode.GOAL_NOT_MET,
            "8 ranks × 300 GB = 2,400 GB requested; 449 GiB total, 440 GiB available, less 10 GiB "
            "SGLang keeps free and 10% headroom: at most 51 GB per rank fits",
        ),
        (
            "python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache --hicache-size 40",
            ExitCode.OK,
            "8 ranks × 40 GB = 320 GB requested",
        ),
    ],
)
def test_preflight_does_the_arithmetic(gpu_host, capsys, launch, code, message):
    got = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}"])
    out, _ = capsys.readouterr()
    assert got == code
    assert message in out


def test_preflight_without_a_launch_or_a_running_server_cannot_tell(gpu_host, capsys):
    assert main(["check", PREFLIGHT, *gpu_host.cli_args()]) == ExitCode.CANNOT_TELL
    out = capsys.readouterr()[0]
    assert "goal holds on" not in out
    assert "cannot tell" in out


def test_preflight_ratio_path_uses_the_device_kv_pool_per_rank(gpu_host, capsys):
    launch = "python3 -m sglang.launch_server --tp 8 --enable-hierarchical-cache --hicache-ratio 2"
    args = ["--set", f"launch={launch}", "--set", "model_weights_gb=600", "--json"]
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), *args])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr()[0])["checks"]}
    # 0.9 x 97,887 MiB = 92.4 GB, less 600 GB / 8 ranks = 17.4 GB of KV pool; x 2 = 34.8 GB
    assert "the device KV pool per rank 17.38 GB" in checks["hicache-per-rank"]["message"]
    assert "per rank 34.76 GB" in checks["hicache-per-rank"]["message"]
    assert "8 ranks × 34.76 GB" in checks["hicache-fits"]["message"]
    assert code == ExitCode.OK


def test_preflight_ratio_path_without_the_weights_cannot_tell(gpu_host, capsys):
    launch = "python3 -m sglang.launch_server --tp 8 --enable-hierarchical-cache"
    assert main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}"]) == (
        ExitCode.CANNOT_TELL
    )


def test_preflight_reads_the_running_servers_command_line(capsys):
    from runbook_runner.simhost import drill as drills

    drill = drills.start("wedged-server")  # runs --tp-size 8 --hicache-size 300
    try:
        argv = ["check", PREFLIGHT, "--host", "127.0.0.1", "--port", str(drill.host.port)]
        argv += [
            "--user",
            "root",
            "-i",
            str(drill.identity),
            "--known-hosts",
            str(drill.known_hosts),
        ]
        argv += ["--ssh-config", str(drill.ssh_config)]
        code = main(argv)
    finally:
        drill.close()
    assert "8 ranks × 300 GB = 2,400 GB requested" in capsys.readouterr()[0]
    assert code == ExitCode.GOAL_NOT_MET


def test_preflight_fails_when_a_gpu_still_holds_memory(gpu_host, capsys):
    state = eight_gpu_server()
    state.gpu(2).orphaned_mib = 96410
    gpu_host.set_state(state)
    launch = "python3 -m sglang.launch_server --tp 8 --hicache-size 40"
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr()[0])["checks"]}
    assert code == ExitCode.GOAL_NOT_MET
    assert checks["hicache-fits"]["ok"]
    assert not checks["gpus-free"]["ok"]
    assert "GPU 2: memory.used 96,413 MiB" in checks["gpus-free"]["message"]


def test_node_health_changes_nothing(gpu_host, capsys):
    crash(gpu_host)
    gpu_host.ssh("nvidia-smi -L > /dev/null")  # let the simulation settle before the snapshot
    before = gpu_host.state_file.read_bytes()
    gpu_host.clear_calls()
    code, out = run(capsys, gpu_host, HEALTH)
    assert code == ExitCode.GOAL_NOT_MET
    assert gpu_host.state_file.read_bytes() == before
    assert destructive_calls(gpu_host) == []
    assert "USER        PID ACCESS COMMAND" in out  # the holders, as fuser -v lists them
