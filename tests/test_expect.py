"""Checks: expected vs found, in one line a tired person understands."""

from __future__ import annotations

import pytest

from conftest import REPO
from runbook_runner.expect import evaluate_check, evaluate_checks, format_number
from runbook_runner.format.parameters import resolve_parameters
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import Gpu, GpuProcess, HostProcess, Memory, Unavailable
from runbook_runner.runbook import load

HEALTH = load(REPO / "runbooks" / "gpu-node-health.yaml")
PARAMS = resolve_parameters(HEALTH, [])

# The seed incident, after pkill -9 and fuser -k: GPUs 0 and 2 still full.
SEED_GPU_CSV = (
    "index, name, uuid, pci.bus_id, memory.used [MiB], memory.total [MiB], persistence_mode\n"
    + "".join(
        f"{i}, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-{i}, 00000000:{i + 1:02X}:00.0, "
        f"{used} MiB, 97887 MiB, Enabled\n"
        for i, used in enumerate([96413, 99, 96417, 51, 3, 3, 3, 7])
    )
)
GIB = 1024**3


def seed_state(**overrides):
    gpus = PARSERS["gpus"].parse(SEED_GPU_CSV, 0, HEALTH.observations["gpus"].command.source)
    state = {
        "gpus": gpus,
        "gpu_processes": (),
        "memory": Memory(total_bytes=449 * GIB, used_bytes=318 * GIB, available_bytes=131 * GIB),
        "processes": (HostProcess(1, "S", "Ss", "/sbin/init"),),
    }
    state.update(overrides)
    return state


def check(name, state):
    return evaluate_check(HEALTH.checks[name], HEALTH, state, PARAMS)


def test_held_gpus_fail_with_one_line_each_naming_the_gpu():
    result = check("gpu-memory-released", seed_state())
    assert not result.ok
    assert [g.index for g in result.failing] == [0, 2]
    assert result.message == (
        "GPU 0: memory.used 96,413 MiB, expected <= 1,024 MiB (idle_mib); "
        "GPU 2: memory.used 96,417 MiB, expected <= 1,024 MiB (idle_mib)"
    )


def test_idle_gpus_pass():
    gpus = tuple(Gpu(index=i, memory_used_mib=3) for i in range(8))
    result = check("gpu-memory-released", seed_state(gpus=gpus))
    assert result.ok
    assert result.failing == ()


def test_missing_value_is_cannot_tell_not_failing_and_not_a_crash():
    gpus = (Gpu(index=0, memory_used_mib=None),)
    result = check("gpu-memory-released", seed_state(gpus=gpus))
    assert not result.ok
    assert result.status == "cannot-tell"
    assert result.message == "GPU 0: cannot tell: memory.used not reported by nvidia-smi"


def test_nvidia_smi_failure_fails_the_check_with_the_condition():
    down = Unavailable("nvidia-smi failed: the NVIDIA driver is not loaded", "driver-not-loaded")
    result = check("gpu-memory-released", seed_state(gpus=down))
    assert not result.ok
    assert result.status == "cannot-tell"
    assert not result.is_failing
    assert "the NVIDIA driver is not loaded" in result.message


def test_host_memory_threshold_does_the_arithmetic_in_the_message():
    result = check("host-memory-available", seed_state())
    assert not result.ok
    assert result.message == (
        "host memory: available 131.0 GiB, expected >= 359.2 GiB "
        "(min_available_fraction * memory.total_bytes)"
    )


def test_no_compute_processes_names_each_process():
    procs = (GpuProcess(pid=4242, process_name="sglang::scheduler", used_memory_mib=96000),)
    result = check("no-compute-processes", seed_state(gpu_processes=procs))
    assert not result.ok
    assert result.message.startswith("process 4242 (sglang::scheduler)")
    assert check("no-compute-processes", seed_state()).ok


def test_d_state_process_is_found_by_where():
    procs = (HostProcess(1, "S", "Ss", "init"), HostProcess(77, "D", "Dl", "python3 -m sglang"))
    result = check("no-stuck-processes", seed_state(processes=procs))
    assert not result.ok
    assert [p.pid for p in result.failing] == [77]


def test_count_check():
    assert check("all-gpus-visible", seed_state()).ok
    assert not check("all-gpus-visible", seed_state(gpus=())).ok


def test_goal_results_serialise_to_json_shape():
    results = evaluate_checks(HEALTH.goal, HEALTH, seed_state(), PARAMS)
    assert [r.name for r in results] == list(HEALTH.goal)
    assert set(results[0].to_json()) == {"name", "ok", "status", "expected", "found", "message"}
    ok = {r.name: r.ok for r in results}
    first = ["all-gpus-visible", "gpu-memory-released", "no-compute-processes"]
    first += ["no-stuck-processes", "host-memory-available"]
    assert [ok[name] for name in first] == [True, False, True, True, False]
    # the seed's CSV has no PCIe/ECC fields and no kernel log: those cannot be told
    assert {r.name for r in results if r.cannot_tell} >= {
        "pcie-link-full-width",
        "no-xid-since-boot",
    }


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (96413, "MiB", "96,413 MiB"),
        (0.5, "", "0.5"),
        (437 * GIB, "bytes", "437.0 GiB"),
        (12, "bytes", "12 bytes"),
    ],
)
def test_format_number(value, unit, text):
    assert format_number(value, unit) == text
