"""The sizing calculator (docs/assets/javascripts/sizing.js) and the preflights do the same
arithmetic: the page's JavaScript, run under node, and the preflights' own `let` expressions,
evaluated by the runbook engine on the same inputs, agree on a table of cases."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import REPO
from runbook_runner.expect import _Context
from runbook_runner.observe.state import Gpu, LaunchConfig, Memory
from runbook_runner.observe.vllm import parse_launch
from runbook_runner.runbook import load

NODE = shutil.which("node")
SIZING = REPO / "docs" / "assets" / "javascripts" / "sizing.js"
GiB = 2**30
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node to run the page's JavaScript")


def run_js(function: str, cases: list[dict]) -> list[dict]:
    script = (
        f"const s = require({json.dumps(str(SIZING))});"
        f"const cases = {json.dumps(cases)};"
        f"process.stdout.write(JSON.stringify(cases.map(c => s.{function}(c))));"
    )
    done = subprocess.run(
        [NODE, "-e", script], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def lets(runbook_name: str, state: dict, params: dict, names: list[str]) -> dict:
    runbook = load(REPO / "runbooks" / f"{runbook_name}.yaml")
    values = {name: p.default for name, p in runbook.parameters.items()}
    values.update(params)
    context = _Context(runbook, state, values)
    return {name: context.resolve(name) for name in names}


def memory(total_gib: float, available_gib: float) -> Memory:
    return Memory(total_bytes=int(total_gib * GiB), available_bytes=int(available_gib * GiB))


SGLANG_CASES = [
    # The incident: 8 ranks × 300 GB on a 449 GiB host with 408 GiB available.
    {
        "ranks": 8,
        "hicacheSizeGB": 300,
        "ratio": 2,
        "kvPoolGB": 8,
        "totalGiB": 449,
        "availableGiB": 408,
        "reserveGiB": 10,
        "headroom": 0.1,
    },
    {
        "ranks": 8,
        "hicacheSizeGB": 47,
        "ratio": 2,
        "kvPoolGB": 8,
        "totalGiB": 449,
        "availableGiB": 408,
        "reserveGiB": 10,
        "headroom": 0.1,
    },
    # The ratio path: 2 × an 8 GB device pool per rank.
    {
        "ranks": 4,
        "hicacheSizeGB": 0,
        "ratio": 2,
        "kvPoolGB": 8,
        "totalGiB": 256,
        "availableGiB": 200,
        "reserveGiB": 10,
        "headroom": 0.1,
    },
    {
        "ranks": 2,
        "hicacheSizeGB": 0,
        "ratio": 0.5,
        "kvPoolGB": 30,
        "totalGiB": 64,
        "availableGiB": 60,
        "reserveGiB": 10,
        "headroom": 0.2,
    },
]


def test_the_calculator_and_the_sglang_preflight_agree():
    got = run_js("sglang", SGLANG_CASES)
    for case, js in zip(SGLANG_CASES, got, strict=True):
        server = LaunchConfig(
            tp_size=case["ranks"],
            hicache_size_gb=case["hicacheSizeGB"] or None,
            hicache_ratio=case["ratio"],
        )
        yaml_side = lets(
            "sglang-hicache-preflight",
            {
                "server": server,
                "memory": memory(case["totalGiB"], case["availableGiB"]),
                "gpus": (Gpu(index=0, memory_used_mib=3, memory_total_mib=97887),),
            },
            {
                "kv_pool_gb_per_rank": case["kvPoolGB"],
                "sglang_reserve_gib": case["reserveGiB"],
                "headroom_fraction": case["headroom"],
            },
            ["per_rank_bytes", "requested_bytes", "budget_bytes", "max_per_rank_gb"],
        )
        assert js["perRankBytes"] == pytest.approx(yaml_side["per_rank_bytes"], rel=1e-9)
        assert js["requestedBytes"] == pytest.approx(yaml_side["requested_bytes"], rel=1e-9)
        assert js["budgetBytes"] == pytest.approx(yaml_side["budget_bytes"], rel=1e-6)
        assert js["maxPerRankGB"] == yaml_side["max_per_rank_gb"]
        assert js["fits"] == (yaml_side["requested_bytes"] <= yaml_side["budget_bytes"])
    assert [c["fits"] for c in got] == [False, True, True, True]
    assert got[0]["maxPerRankGB"] == 47
    # SGLang's own rule: the host pool above the device pool; a ratio of 0.5 breaks it.
    assert [c["hostAboveDevice"] for c in got] == [True, True, True, False]


VLLM_CASES = [
    ("vllm serve /m -tp 8 --kv-offloading-size 40", "native", 0, 0, 40),
    (
        "VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m -tp 8 --kv-offloading-size 40",
        "simple",
        0,
        0,
        40,
    ),
    (
        "vllm serve /m -tp 4 -pp 2 --cpu-offload-gb 5 --swap-space 2 --kv-offloading-size 100",
        "native",
        5,
        2,
        100,
    ),
    (
        "VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /m -tp 2 --cpu-offload-gb 40 --kv-offloading-size 10",
        "simple",
        40,
        0,
        10,
    ),
    ("vllm serve /m -tp 8 --cpu-offload-gb 40", "native", 40, 0, 0),
]


def _vllm_input(tp: int, pp: int, path: str, cpu: float, swap: float, kv: float) -> dict:
    return {
        "tp": tp,
        "pp": pp,
        "cpuOffloadGiB": cpu,
        "swapGiB": swap,
        "kvOffloadGiB": kv,
        "path": path,
        "kvFactor": 2,
        "totalGiB": 449,
        "availableGiB": 440,
        "headroom": 0.1,
    }


def test_the_calculator_and_the_vllm_preflight_agree():
    inputs, sides = [], []
    for launch, path, cpu, swap, kv in VLLM_CASES:
        flags = parse_launch(launch)
        assert (flags.kv_offload_path or "native") == path
        inputs.append(_vllm_input(flags.tp_size or 1, flags.pp_size or 1, path, cpu, swap, kv))
        sides.append(
            lets(
                "vllm-offload-preflight",
                {"launch_flags": flags, "memory": memory(449, 440), "gpus": ()},
                {},
                ["gpus_used", "kv_copies", "requested_bytes", "budget_bytes"],
            )
        )
    for js, yaml_side in zip(run_js("vllm", inputs), sides, strict=True):
        assert js["gpus"] == yaml_side["gpus_used"]
        assert js["kvCopies"] == yaml_side["kv_copies"]
        assert js["requestedBytes"] == pytest.approx(yaml_side["requested_bytes"], rel=1e-9)
        assert js["budgetBytes"] == pytest.approx(yaml_side["budget_bytes"], rel=1e-6)
    # The simple path at TP 8 pins the size eight times: 2 × 8 × 40 GiB.
    assert sides[1]["requested_bytes"] == 2 * 8 * 40 * GiB


def test_the_calculator_cannot_tell_lmcache_and_neither_can_the_preflight():
    (js,) = run_js("vllm", [_vllm_input(8, 1, "lmcache", 0, 0, 40)])
    assert js["cannotTell"] is True
    flags = parse_launch(
        "vllm serve /m -tp 8 --kv-offloading-backend lmcache --kv-offloading-size 40"
    )
    assert flags.kv_offload_each_worker is None  # the preflight's kv_copies cannot be computed
