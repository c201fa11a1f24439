"""The sizing calculator (docs/assets/javascripts/sizing.js) and the SGLang preflight on the
ratio path: the page's JavaScript, run under node, and the preflight's own `let`
expressions agree. The table of launches both run is tests/fixtures/sizing/cases.yaml
(tests/test_sizing.py), with the calculator's refusals of bad input."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import REPO
from runbook_runner.expect import _Context
from runbook_runner.observe.sglang import parse_launch as sglang_launch
from runbook_runner.observe.state import Gpu, Memory, MemoryLimit
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


# The ratio path: --hicache-ratio x the device KV pool of one rank (GiB, as SGLang logs it).
RATIO_CASES = [
    {"tp": 4, "ratio": 2, "kvPoolGiB": 8, "totalGiB": 256, "availableGiB": 200, "headroom": 0.1},
    {"tp": 2, "ratio": 0.5, "kvPoolGiB": 30, "totalGiB": 64, "availableGiB": 60, "headroom": 0.2},
    {"tp": 8, "ratio": 2, "kvPoolGiB": 40, "totalGiB": 449, "availableGiB": 408, "headroom": 0.1},
]


def test_the_calculator_and_the_sglang_preflight_agree_on_the_ratio_path():
    inputs = [
        {
            **case,
            "pp": 1,
            "dp": 1,
            "dpAttention": False,
            "nnodes": 1,
            "hicacheSizeGB": 0,
            "limitGiB": None,
            "reserveGiB": 10,
        }
        for case in RATIO_CASES
    ]
    got = run_js("sglang", inputs)
    for case, js in zip(RATIO_CASES, got, strict=True):
        launch = f"launch: python3 -m sglang.launch_server --tp {case['tp']} --hicache-ratio {case['ratio']}"
        yaml_side = lets(
            "sglang-hicache-preflight",
            {
                "server": sglang_launch(launch),
                "memory": memory(case["totalGiB"], case["availableGiB"]),
                "limits": MemoryLimit(source="no cgroup limit"),
                "gpus": (Gpu(index=0, memory_used_mib=3, memory_total_mib=97887),),
            },
            {"kv_pool_gb_per_rank": case["kvPoolGiB"], "headroom_fraction": case["headroom"]},
            ["per_rank_bytes", "requested_bytes", "budget_bytes", "max_per_rank_gb"],
        )
        assert js["perRankBytes"] == pytest.approx(yaml_side["per_rank_bytes"], rel=1e-9)
        assert js["requestedBytes"] == pytest.approx(yaml_side["requested_bytes"], rel=1e-9)
        assert js["budgetBytes"] == pytest.approx(yaml_side["budget_bytes"], rel=1e-6)
        assert js["maxPerRankGB"] == yaml_side["max_per_rank_gb"]
    # The logged device pool is GiB: 2 x 8 GiB = 17.18 GB per rank, not 16.
    assert got[0]["perRankBytes"] == 2 * 8 * GiB
    assert [c["fits"] for c in got] == [True, True, False]
    # SGLang's own rule: the host pool above the device pool; a ratio of 0.5 breaks it.
    assert [c["hostAboveDevice"] for c in got] == [True, False, True]


def test_the_calculator_cannot_tell_lmcache_and_neither_can_the_preflight():
    (js,) = run_js(
        "vllm",
        [
            {
                "tp": 8,
                "pp": 1,
                "dp": 1,
                "nnodes": 1,
                "cpuOffloadGiB": 0,
                "exactPins": False,
                "swapGiB": 0,
                "kvOffloadGiB": 40,
                "path": "lmcache",
                "totalGiB": 449,
                "availableGiB": 440,
                "limitGiB": None,
                "headroom": 0.1,
            }
        ],
    )
    assert js["cannotTell"] is True
    flags = parse_launch(
        "vllm serve /m -tp 8 --kv-offloading-backend lmcache --kv-offloading-size 40"
    )
    assert flags.kv_offload_copies is None  # the preflight's kv_copies cannot be computed


def test_every_pool_the_page_offers_is_one_the_calculator_cannot_size_but_none():
    """The form's choices of host pools besides --hicache-size (docs/calculator.md) are the
    ones the JavaScript knows; each but "none" ends in cannot tell, never in a verdict."""
    import re

    page = (REPO / "docs" / "calculator.md").read_text()
    select = page.split('<select name="extra_pools">', 1)[1].split("</select>", 1)[0]
    choices = re.findall(r'<option value="([a-z]+)"', select)
    assert choices == ["none", "draft", "dsa", "hybrid"]
    form = {
        "tp": "8",
        "pp": "1",
        "dp": "1",
        "dp_attention": "false",
        "nnodes": "1",
        "hicache_size": "47",
        "ratio": "2",
        "kv_pool": "8",
        "total": "449",
        "available": "440",
        "limit": "",
        "reserve": "10",
        "headroom": "10",
    }
    got = run_js("sglangLines", [{**form, "extra_pools": choice} for choice in choices])
    assert [g["verdict"] for g in got] == ["fits", "cannot-tell", "cannot-tell", "cannot-tell"]
    assert "each of the 8 ranks also pins the DSA indexer pool" in got[2]["lines"][0]
