"""vLLM's host-memory flags: the launch parser, and the preflight's arithmetic over SSH."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.errors import ParseError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.observe.vllm import parse_launch
from runbook_runner.runbook import load

PREFLIGHT = str(REPO / "runbooks" / "vllm-offload-preflight.yaml")


def test_parser_reads_both_flag_forms_and_short_names():
    config = parse_launch(
        "vllm serve /m -tp 4 --pipeline-parallel-size=2 --cpu-offload-gb 40 "
        "--swap-space=8 --kv-offloading-size 200 --gpu-memory-utilization 0.9"
    )
    assert (config.tp_size, config.pp_size) == (4, 2)
    assert (config.cpu_offload_gib, config.swap_space_gib, config.kv_offloading_gib) == (
        40.0,
        8.0,
        200.0,
    )
    assert config.gpu_memory_utilization == 0.9


def test_parser_leaves_flags_not_given_unset():
    config = parse_launch("vllm serve /m")
    assert config.tp_size is None
    assert config.cpu_offload_gib is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vllm serve /m --cpu-offload-gb", "--cpu-offload-gb is missing its value"),
        ("vllm serve /m -tp eight", "-tp 'eight': expected int"),
        ("vllm serve '/m", "does not split into words"),
    ],
)
def test_parser_errors_are_one_line(text, message):
    with pytest.raises(ParseError, match=message):
        parse_launch(text)


def test_the_preflight_is_read_only():
    runbook = load(REPO / "runbooks" / "vllm-offload-preflight.yaml")
    assert not runbook.destructive
    assert runbook.steps == ()


@pytest.mark.ssh
@pytest.mark.parametrize(
    ("launch", "code", "message"),
    [
        (
            # 40 GiB per GPU read as a total: 8 GPUs take up to 2 x 320 GiB, with the KV
            # buffer 840 GiB.
            "vllm serve /m --tensor-parallel-size 8 --cpu-offload-gb 40 --kv-offloading-size 100",
            ExitCode.GOAL_NOT_MET,
            "8 GPUs × (2 × 40 GiB --cpu-offload-gb + 0 GiB --swap-space) = 80 GiB per GPU + 2 × 1 × 100 GiB KV offload (connector: native, held 1 time(s)) = 840 GiB requested",
        ),
        (
            "vllm serve /m -tp 4 -pp 2 --cpu-offload-gb 5 --kv-offloading-size 100",
            ExitCode.OK,
            "8 GPUs × (2 × 5 GiB --cpu-offload-gb + 0 GiB --swap-space) = 10 GiB per GPU + 2 × 1 × 100 GiB KV offload (connector: native, held 1 time(s)) = 280 GiB requested",
        ),
        (
            # TP 2 x DP 4: four engines, each holding its own 100 GiB (vLLM divides by TP x PP
            # only), where one copy was counted before.
            "vllm serve /m -tp 2 -dp 4 --kv-offloading-size 100",
            ExitCode.GOAL_NOT_MET,
            "+ 2 × 4 × 100 GiB KV offload (connector: native, held 4 time(s)) = 800 GiB requested",
        ),
        (
            "vllm serve /m -tp 2 -dp 4 --kv-offloading-size 40",
            ExitCode.OK,
            "+ 2 × 4 × 40 GiB KV offload (connector: native, held 4 time(s)) = 320 GiB requested",
        ),
    ],
)
def test_preflight_does_the_arithmetic(gpu_host, capsys, launch, code, message):
    got = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}"])
    out, _ = capsys.readouterr()
    assert message in out
    assert got == code


@pytest.mark.ssh
def test_preflight_fails_a_gpu_without_the_free_memory_asked_for(gpu_host, capsys):
    from runbook_runner.simhost.model import eight_gpu_server

    state = eight_gpu_server()
    state.gpu(5).orphaned_mib = 20_000
    gpu_host.set_state(state)
    launch = "vllm serve /m -tp 8 --gpu-memory-utilization 0.9"
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr()[0])["checks"]}
    assert code == ExitCode.GOAL_NOT_MET
    assert checks["offload-fits"]["ok"]
    assert not checks["gpus-fit-utilization"]["ok"]
    assert "GPU 5" in checks["gpus-fit-utilization"]["message"]


@pytest.mark.parametrize(
    ("launch", "path", "copies"),
    [
        ("vllm serve /m -tp 8 --kv-offloading-size 40", "native", 1),
        ("vllm serve /m -tp 8 --kv_offloading_backend native --kv_offloading_size 40", "native", 1),
        ("VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m -tp 8 --kv-offloading-size 40", "simple", 8),
        ("env VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m --kv-offloading-size=40", "simple", 1),
        ("export VLLM_USE_SIMPLE_KV_OFFLOAD=1; vllm serve /m --kv-offloading-size 4", "simple", 1),
        ("VLLM_USE_SIMPLE_KV_OFFLOAD=0 vllm serve /m --kv-offloading-size 40", "native", 1),
        ("vllm serve /m --kv-offloading-backend lmcache --kv-offloading-size 40", "lmcache", None),
        ("VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m -tp 8", None, 1),
        # One engine's total, held by each data-parallel engine (spec.py divides by TP x PP).
        ("vllm serve /m -tp 2 -dp 4 --kv-offloading-size 100", "native", 4),
        (
            "vllm serve /m -tp 2 -dp 4 --data-parallel-size-local 2 --kv-offloading-size 9",
            "native",
            2,
        ),
        # An engine spread over two hosts: each host's region is sized for the whole value.
        ("vllm serve /m -tp 16 --nnodes 2 --kv-offloading-size 100", "native", 1),
        (
            "VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m -tp 2 -dp 4 --kv-offloading-size 9",
            "simple",
            8,
        ),
    ],
)
def test_parser_names_the_kv_offload_path_and_its_copies_on_the_host(launch, path, copies):
    config = parse_launch(launch)
    assert config.kv_offload_path == path
    assert config.kv_offload_copies == copies


@pytest.mark.ssh
def test_preflight_counts_the_simple_path_once_per_worker(gpu_host, capsys):
    """VLLM_USE_SIMPLE_KV_OFFLOAD=1: each of the 8 workers pins the whole value (builds whose
    SimpleCPUOffloadConnector does not divide by the world size), exactly (it registers its
    pages), so 8 x the size is asked; the default connector pins the total at up to 2x."""
    plain = "vllm serve /m -tp 8 --kv-offloading-backend native --kv-offloading-size 60"
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={plain}"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.OK, out
    assert "2 × 1 × 60 GiB KV offload (connector: native, held 1 time(s)) = 120 GiB" in out
    simple = f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 {plain}"
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={simple}"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.GOAL_NOT_MET, out
    assert "1 × 8 × 60 GiB KV offload (connector: simple, held 8 time(s)) = 480 GiB" in out


def test_parser_reads_the_data_parallel_layout_and_the_exact_pin_workaround():
    config = parse_launch("vllm serve /m -tp 4 --data-parallel-size 2 --cpu-offload-gb 10")
    assert (config.workers_per_host, config.cpu_offload_factor) == (8, None)
    config = parse_launch(
        "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1 vllm serve /m -tp 4 -dp 4 "
        "--data-parallel-size-local 2 --cpu-offload-gb 10"
    )
    assert (config.workers_per_host, config.cpu_offload_factor) == (8, 1.0)
    assert parse_launch("vllm serve /m -tp 8 --nnodes 2").workers_per_host == 4
    with pytest.raises(ParseError, match="do not divide evenly over 4 nodes"):
        parse_launch("vllm serve /m -tp 6 --nnodes 4")
    assert parse_launch("").workers_per_host is None  # no launch: the parameters decide


@pytest.mark.ssh
def test_preflight_cannot_tell_the_lmcache_pool(gpu_host, capsys):
    launch = "vllm serve /m -tp 8 --kv-offloading-backend lmcache --kv-offloading-size 40"
    code = main(["check", PREFLIGHT, *gpu_host.cli_args(), "--set", f"launch={launch}", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr()[0])["checks"]}
    assert checks["offload-fits"]["status"] == "cannot-tell"
    assert code != ExitCode.OK
