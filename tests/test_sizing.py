"""One table of sizing cases (tests/fixtures/sizing/cases.yaml), run three ways: the rules of
runbook_runner/observe/sizing.py, the preflights' own expressions on the launch as the host
parses it, and the calculator's JavaScript on the fields a reader types; then the done-means
launches over SSH against the drill host, and the container limits."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.errors import ParseError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.expect import evaluate_check
from runbook_runner.observe import PARSERS, memlimit, sizing
from runbook_runner.observe.state import Gpu, Memory, MemoryLimit, Unavailable
from runbook_runner.runbook import load

GiB = 2**30
CASES = yaml.safe_load((REPO / "tests" / "fixtures" / "sizing" / "cases.yaml").read_text())
HOST = CASES["host"]
NODE = shutil.which("node")
SIZING_JS = REPO / "docs" / "assets" / "javascripts" / "sizing.js"
SGLANG = str(REPO / "runbooks" / "sglang-hicache-preflight.yaml")
VLLM = str(REPO / "runbooks" / "vllm-offload-preflight.yaml")
needs_node = pytest.mark.skipif(NODE is None, reason="needs node to run the page's JavaScript")


def run_js(function: str, args: list) -> list:
    script = (
        f"const s = require({json.dumps(str(SIZING_JS))});"
        f"const cases = {json.dumps(args)};"
        f"process.stdout.write(JSON.stringify(cases.map(c => s.{function}(c))));"
    )
    done = subprocess.run(
        [NODE, "-e", script], capture_output=True, text=True, timeout=30, check=True
    )
    return json.loads(done.stdout)


def parsed(parser: str, text: str):
    try:
        return PARSERS[parser].parse(text, 0, "")
    except ParseError as error:
        return Unavailable(str(error), "unparsable")


def drill_host_state(launch_name: str, launch) -> dict:
    return {
        launch_name: launch,
        "memory": Memory(
            total_bytes=HOST["total_gib"] * GiB, available_bytes=HOST["available_gib"] * GiB
        ),
        "limits": MemoryLimit(source="no cgroup limit", in_container=False),
        "gpus": tuple(Gpu(index=i, memory_used_mib=3, memory_total_mib=97887) for i in range(8)),
    }


def preflight(runbook_path: str, state: dict, check: str, names: list[str]) -> dict:
    from runbook_runner.expect import _Context

    runbook = load(Path(runbook_path))
    params = {name: p.default for name, p in runbook.parameters.items()}
    result = evaluate_check(runbook.checks[check], runbook, state, params)
    out: dict = {"verdict": str(result.status.value), "message": result.message}
    if result.status.value != "cannot-tell":
        context = _Context(runbook, state, params)
        out.update({name: context.resolve(name) for name in names})
    return out


VERDICT = {"ok": "fits", "failing": "does-not-fit", "cannot-tell": "cannot-tell"}


# -- the rules ------------------------------------------------------------------------------


POOL_NAMES = {
    sizing.ExtraPool.DRAFT: "draft",
    sizing.ExtraPool.DSA_INDEXER: "dsa",
    sizing.ExtraPool.HYBRID: "hybrid",
}


def _launch_flags(launch: str) -> dict:
    words = launch.split()
    return {flag: words[i + 1] for i, flag in enumerate(words[:-1]) if flag.startswith("--")}


@pytest.mark.parametrize("case", CASES["sglang"], ids=lambda c: c["name"])
def test_the_sglang_rules_count_the_ranks_and_name_the_pools_of_the_table(case):
    f = case["fields"]
    ranks = sizing.sglang_ranks(f["tp"], f["pp"], f["dp"], f["dp_attention"], f["nnodes"])
    flags = _launch_flags(case["launch"])
    pools = sizing.sglang_extra_pools(
        flags.get("--speculative-algorithm"),
        flags.get("--model-path"),
        flags.get("--attention-backend"),
    )
    assert [POOL_NAMES[pool] for pool in pools] == (
        [] if f.get("extra_pools", "none") == "none" else [f["extra_pools"]]
    )
    if pools:  # the ranks count; what each pins beside --hicache-size does not
        assert ranks.count == f["tp"]
        assert case["ranks"] is None
        return
    assert ranks.count == case["ranks"]
    assert (ranks.why != "") == (case["ranks"] is None)


@pytest.mark.parametrize("case", CASES["vllm"], ids=lambda c: c["name"])
def test_the_vllm_rule_holds_the_kv_offload_once_per_engine(case):
    f = case["fields"]
    workers = sizing.vllm_workers(f["tp"], f["pp"], f["dp"])
    assert workers.count == case["workers"]
    path = f["path"] if f["kv_offload"] else None  # no KV offload: nothing held
    copies = sizing.vllm_kv_copies(path, case["workers"], f["tp"], f["pp"])
    assert copies == case["kv_copies"]


def test_every_rule_cites_an_upstream_file_at_a_commit_or_a_report():
    for source in sizing.SOURCES.values():
        assert source.url.startswith("https://github.com/"), source
        assert "/blob/" in source.url or "/issues/" in source.url or "/pull/" in source.url
        if "/blob/" in source.url:
            commit = source.url.split("/blob/")[1].split("/")[0]
            assert len(commit) >= 8, source
            assert all(c in "0123456789abcdef" for c in commit), source
    assert [v.source for v in sizing.SGLANG_VERSIONS]


def test_the_factors_are_the_rounding_where_it_applies_and_exact_where_not():
    assert sizing.cpu_offload_factor(exact_pins=False) == 2.0
    assert sizing.cpu_offload_factor(exact_pins=True) == 1.0
    assert sizing.KV_OFFLOAD_FACTOR == {"native": 2.0, "simple": 1.0, "lmcache": None}


# -- the preflights and the calculator on the same table ------------------------------------


def _sglang_js_input(fields: dict) -> dict:
    return {
        "tp": fields["tp"],
        "pp": fields["pp"],
        "dp": fields["dp"],
        "dpAttention": fields["dp_attention"],
        "nnodes": fields["nnodes"],
        "hicacheSizeGB": fields["hicache_size"],
        "extraPools": fields.get("extra_pools", "none"),
        "ratio": 2,
        "kvPoolGiB": 8,
        "totalGiB": HOST["total_gib"],
        "availableGiB": HOST["available_gib"],
        "limitGiB": None,
        "reserveGiB": 10,
        "headroom": 0.1,
    }


@needs_node
def test_the_sglang_preflight_and_the_calculator_agree_on_every_case():
    js = run_js("sglang", [_sglang_js_input(c["fields"]) for c in CASES["sglang"]])
    for case, page in zip(CASES["sglang"], js, strict=True):
        server = parsed("sglang-launch", f"launch: {case['launch']}\n")
        got = preflight(
            SGLANG,
            drill_host_state("server", server),
            "hicache-fits",
            ["ranks", "requested_bytes", "budget_bytes", "max_per_rank_gb"],
        )
        assert VERDICT[got["verdict"]] == case["verdict"], (case["name"], got["message"])
        if case["verdict"] == "cannot-tell":
            assert page["cannotTell"] is True, case["name"]
            assert page["why"] in got["message"], (case["name"], got["message"])
            continue
        assert got["ranks"] == page["ranks"] == case["ranks"], case["name"]
        assert got["requested_bytes"] == pytest.approx(case["requested_gb"] * 1e9)
        assert page["requestedBytes"] == pytest.approx(got["requested_bytes"], rel=1e-9)
        assert page["budgetBytes"] == pytest.approx(got["budget_bytes"], rel=1e-9)
        assert got["max_per_rank_gb"] == page["maxPerRankGB"] == case["max_per_rank_gb"]
        assert page["fits"] == (case["verdict"] == "fits")
        assert f"{case['ranks']} ranks × " in got["message"]


def _vllm_js_input(fields: dict) -> dict:
    return {
        "tp": fields["tp"],
        "pp": fields["pp"],
        "dp": fields["dp"],
        "nnodes": 1,
        "cpuOffloadGiB": fields["cpu_offload"],
        "exactPins": fields["exact_pins"],
        "swapGiB": fields["swap"],
        "kvOffloadGiB": fields["kv_offload"],
        "path": fields["path"],
        "totalGiB": HOST["total_gib"],
        "availableGiB": HOST["available_gib"],
        "limitGiB": None,
        "headroom": 0.1,
    }


@needs_node
def test_the_vllm_preflight_and_the_calculator_agree_on_every_case():
    js = run_js("vllm", [_vllm_js_input(c["fields"]) for c in CASES["vllm"]])
    for case, page in zip(CASES["vllm"], js, strict=True):
        flags = parsed("vllm-launch", case["launch"])
        assert (flags.kv_offload_path or "native") == case["fields"]["path"]
        assert flags.workers_per_host == case["workers"]
        got = preflight(
            VLLM,
            drill_host_state("launch_flags", flags),
            "offload-fits",
            ["gpus_used", "kv_copies", "requested_bytes", "budget_bytes", "max_cpu_offload_gib"],
        )
        assert VERDICT[got["verdict"]] == case["verdict"], (case["name"], got["message"])
        if case["verdict"] == "cannot-tell":
            assert page["cannotTell"] is True
            continue
        assert got["gpus_used"] == page["gpus"] == case["workers"]
        assert got["kv_copies"] == page["kvCopies"] == case["kv_copies"], case["name"]
        assert got["requested_bytes"] == pytest.approx(case["requested_gib"] * GiB)
        assert page["requestedBytes"] == pytest.approx(got["requested_bytes"], rel=1e-9)
        assert page["budgetBytes"] == pytest.approx(got["budget_bytes"], rel=1e-9)
        assert got["max_cpu_offload_gib"] == page["maxCpuOffloadGiB"] == case["max_cpu_offload_gib"]


SGLANG_FORM = {
    "tp": "4",
    "pp": "1",
    "dp": "2",
    "dp_attention": "false",
    "nnodes": "1",
    "hicache_size": "90",
    "extra_pools": "none",
    "ratio": "2",
    "kv_pool": "8",
    "total": "449",
    "available": "440",
    "limit": "",
    "reserve": "10",
    "headroom": "10",
}
VLLM_FORM = {
    "tp": "8",
    "pp": "1",
    "dp": "1",
    "nnodes": "1",
    "cpu_offload": "40",
    "exact_pins": "false",
    "swap": "0",
    "kv_offload": "0",
    "path": "native",
    "total": "449",
    "available": "440",
    "limit": "",
    "headroom": "10",
}
BAD = [
    ("", "enter a number"),
    ("0", "a whole number of 1 or more (got 0)"),
    ("-2", "a whole number of 1 or more (got -2)"),
    ("eight", "'eight' is not a number"),
    ("2.5", "a whole number of 1 or more (got 2.5)"),
]


@needs_node
@pytest.mark.parametrize(("value", "message"), BAD)
@pytest.mark.parametrize("field", ["tp", "pp", "dp", "nnodes"])
def test_the_calculator_refuses_a_bad_count_with_a_message(field, value, message):
    sglang, vllm = (
        run_js("sglangLines", [{**SGLANG_FORM, field: value}])[0],
        run_js("vllmLines", [{**VLLM_FORM, field: value}])[0],
    )
    for got in (sglang, vllm):
        assert got["verdict"] == "refused"
        assert any(message in line for line in got["lines"]), got
        assert not any("verdict" in line or "Infinity" in line for line in got["lines"])


@needs_node
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("total", "", "Total RAM: enter a number"),
        ("available", "0", "Available RAM: more than 0 (got 0)"),
        ("hicache_size", "-90", "--hicache-size: a whole number of 0 or more (got -90)"),
        ("headroom", "95", "Headroom: between 0 and 90 (got 95)"),
        ("limit", "abc", "Container memory limit: 'abc' is not a number"),
        ("hicache_size", "0", "give --hicache-size, or --hicache-ratio and the device KV pool"),
    ],
)
def test_the_calculator_refuses_bad_sizes(field, value, message):
    form = {**SGLANG_FORM, field: value}
    if field == "hicache_size" and value == "0":
        form["kv_pool"] = "0"
    (got,) = run_js("sglangLines", [form])
    assert got["verdict"] == "refused"
    assert any(message in line for line in got["lines"]), got


@needs_node
@pytest.mark.parametrize("case", CASES["refused"], ids=lambda c: c["name"])
def test_what_no_launch_could_mean_is_refused_by_the_page_and_not_passed_by_the_preflight(case):
    form = {**(SGLANG_FORM if case["runbook"] == "sglang" else VLLM_FORM), **case["form"]}
    (page,) = run_js(f"{case['runbook']}Lines", [form])
    assert page["verdict"] == "refused"
    assert case["message"] in page["lines"], page
    if "launch" in case:
        server = parsed("sglang-launch", f"launch: {case['launch']}\n")
        got = preflight(SGLANG, drill_host_state("server", server), "hicache-fits", [])
        assert got["verdict"] == "cannot-tell"
        assert case["reason"] in got["message"]


def test_hicache_size_0_is_sglangs_use_the_ratio():
    server = parsed(
        "sglang-launch",
        "launch: python3 -m sglang.launch_server --tp 4 --hicache-size 0 --hicache-ratio 2\n",
    )
    assert server.hicache_size_gb is None
    runbook = load(Path(SGLANG))
    state = {**drill_host_state("server", server)}
    got = evaluate_check(
        runbook.checks["hicache-fits"],
        runbook,
        state,
        {**{n: p.default for n, p in runbook.parameters.items()}, "kv_pool_gb_per_rank": 8},
    )
    # 4 ranks x 2 x 8 GiB = 68.7 GB: the ratio's pool, not a pool of 0 GB refused.
    assert got.status.value == "ok", got.message
    assert "4 ranks × 17.18 GB = 68.72 GB requested" in got.message


@needs_node
def test_the_calculator_shows_the_largest_size_that_fits_on_its_own_line():
    (sglang,) = run_js("sglangLines", [SGLANG_FORM])
    (vllm,) = run_js("vllmLines", [VLLM_FORM])
    assert "largest --hicache-size that fits: 51 GB per rank" in sglang["lines"]
    assert "requested: 8 ranks × 90 GB = 720 GB (670.6 GiB)" in sglang["lines"]
    assert sglang["verdict"] == "does-not-fit"
    assert "largest --cpu-offload-gb that fits: 24 GiB per GPU" in vllm["lines"]
    assert vllm["verdict"] == "does-not-fit"


@needs_node
def test_a_container_limit_below_free_wins_in_the_calculator():
    (free_only,) = run_js("sglangLines", [{**SGLANG_FORM, "dp": "1"}])
    (limited,) = run_js("sglangLines", [{**SGLANG_FORM, "dp": "1", "limit": "256"}])
    assert free_only["verdict"] == "fits"
    assert limited["verdict"] == "does-not-fit"
    assert any("container limit 256 GiB: the smaller wins" in line for line in limited["lines"])


# -- the memory-limit parser ----------------------------------------------------------------


def _limits(**files: str) -> str:
    lines = [f"{path}={files.get(path, '-')}" for path in memlimit.FILES]
    return "\n".join(lines) + "\nMounted on 1B-blocks Avail\n/dev/shm 68719476736 68719476736\n"


def test_cgroup_v2_limit_less_usage_is_what_may_be_used():
    got = memlimit.parse_limits(
        _limits(**{memlimit.V2_MAX: str(256 * GiB), memlimit.V2_CURRENT: str(6 * GiB)})
    )
    assert (got.limit_bytes, got.available_bytes) == (256 * GiB, 250 * GiB)
    assert got.source == "cgroup v2 memory.max"
    assert got.shm_size_bytes == 64 * GiB


def test_cgroup_v1_limit_and_the_smaller_of_two_wins():
    got = memlimit.parse_limits(
        _limits(
            **{
                memlimit.V2_MAX: str(300 * GiB),
                memlimit.V1_LIMIT: str(200 * GiB),
                memlimit.V1_USAGE: "0",
            }
        )
    )
    assert got.limit_bytes == 200 * GiB
    assert got.source == "cgroup v1 memory.limit_in_bytes"


@pytest.mark.parametrize(
    "files",
    [
        {memlimit.V2_MAX: "max"},
        {memlimit.V1_LIMIT: "9223372036854771712"},
        {},
    ],
)
def test_no_limit_is_no_limit(files):
    got = memlimit.parse_limits(_limits(**files))
    assert got.limit_bytes is None
    assert got.available_bytes is None


def test_inside_a_container_whose_limit_cannot_be_read_it_cannot_tell():
    with pytest.raises(ParseError, match="inside a container whose memory limit cannot be read"):
        memlimit.parse_limits(_limits(**{"/.dockerenv": "present"}))
    # A container with a readable "no limit" is told: no limit.
    assert memlimit.parse_limits(_limits(**{"/.dockerenv": "present", memlimit.V2_MAX: "max"}))


def test_a_limit_that_is_no_number_is_refused():
    with pytest.raises(ParseError, match="expected a number of bytes"):
        memlimit.parse_limits(_limits(**{memlimit.V2_MAX: "lots"}))


# -- the SGLang preflight handed another server's launch -------------------------------------


def test_the_sglang_parser_refuses_a_vllm_launch_and_does_not_read_ps():
    text = (
        "launch: vllm serve /m --tensor-parallel-size 8 --cpu-offload-gb 40\n"
        "COMMAND\npython3 -m sglang.launch_server --tp-size 8 --hicache-size 300\n"
    )
    with pytest.raises(ParseError, match="not SGLang's"):
        PARSERS["sglang-launch"].parse(text, 0, "")
    running = PARSERS["sglang-launch"].parse(
        "launch: \nCOMMAND\npython3 -m sglang.launch_server --tp-size 8 --hicache-size 300\n",
        0,
        "",
    )
    assert (running.ranks_per_host, running.hicache_size_gb) == (8, 300.0)


# -- over SSH, against the drill host --------------------------------------------------------


def check(gpu_host, capsys, runbook: str, launch: str) -> tuple[int, dict]:
    code = main(["check", runbook, *gpu_host.cli_args(), "--set", f"launch={launch}", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr()[0])["checks"]}
    return code, checks


@pytest.mark.ssh
@pytest.mark.parametrize(
    "launch",
    [
        "python3 -m sglang.launch_server --tp-size 4 --dp-size 2 --enable-hierarchical-cache --hicache-size 90",
        "python3 -m sglang.launch_server --tp-size 4 --pp-size 2 --enable-hierarchical-cache --hicache-size 90",
    ],
)
def test_the_preflight_refuses_eight_ranks_of_90_gb_on_the_drill_host(gpu_host, capsys, launch):
    code, checks = check(gpu_host, capsys, SGLANG, launch)
    assert code == ExitCode.GOAL_NOT_MET
    assert checks["ranks-counted"]["ok"], checks["ranks-counted"]
    assert "8 ranks on this host" in checks["ranks-counted"]["message"]
    fits = checks["hicache-fits"]
    assert fits["status"] == "failing"
    assert "8 ranks × 90 GB = 720 GB requested; 449 GiB total, 440 GiB available" in fits["message"]
    assert "at most 51 GB per rank fits" in fits["message"]


@pytest.mark.ssh
def test_the_preflight_passes_what_fits_on_the_drill_host(gpu_host, capsys):
    launch = (
        "python3 -m sglang.launch_server --tp 4 --dp 2 --enable-dp-attention "
        "--enable-hierarchical-cache --hicache-size 90"
    )
    code, checks = check(gpu_host, capsys, SGLANG, launch)
    assert code == ExitCode.OK, checks
    assert "4 ranks × 90 GB = 360 GB requested" in checks["hicache-fits"]["message"]


@pytest.mark.ssh
@pytest.mark.parametrize(
    ("launch", "reason"),
    [
        (
            "python3 -m sglang.launch_server --tp-size 6 --nnodes 4 --hicache-size 40",
            "6 ranks do not divide evenly over 4 nodes",
        ),
        ("vllm serve /m --tensor-parallel-size 8 --cpu-offload-gb 40", "not SGLang's"),
        (
            # 8 ranks x 47 GB = 376 GB fits the drill host, but each rank's draft pools too?
            "python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache "
            "--hicache-size 47 --speculative-algorithm EAGLE3",
            "each of the 8 ranks also pins speculative-decoding draft pools",
        ),
    ],
)
def test_the_preflight_cannot_tell_a_launch_it_cannot_read(gpu_host, capsys, launch, reason):
    code, checks = check(gpu_host, capsys, SGLANG, launch)
    assert code == ExitCode.CANNOT_TELL
    assert checks["hicache-fits"]["status"] == "cannot-tell"
    assert reason in checks["hicache-fits"]["message"]
    assert not checks["hicache-fits"]["ok"]
    assert "requested" not in checks["hicache-fits"]["message"]  # no partial sum as an answer
    assert checks["gpus-free"]["ok"]  # what it could reach is still told


@pytest.mark.ssh
def test_the_vllm_preflight_budgets_cpu_offload_with_the_rounding(gpu_host, capsys):
    launch = "vllm serve /m --tensor-parallel-size 8 --cpu-offload-gb 40"
    code, checks = check(gpu_host, capsys, VLLM, launch)
    assert code == ExitCode.GOAL_NOT_MET
    message = checks["offload-fits"]["message"]
    assert "8 GPUs × (2 × 40 GiB --cpu-offload-gb + 0 GiB --swap-space) = 80 GiB per GPU" in message
    assert "= 640 GiB requested" in message
    assert "largest --cpu-offload-gb that fits: 24 GiB per GPU" in message
    code, checks = check(
        gpu_host, capsys, VLLM, f"VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1 {launch}"
    )
    assert code == ExitCode.OK, checks
    assert "(1 × 40 GiB --cpu-offload-gb" in checks["offload-fits"]["message"]


@pytest.mark.ssh
def test_a_container_limit_below_free_wins_over_ssh(gpu_host, capsys):
    from runbook_runner.simhost.model import eight_gpu_server

    launch = (
        "python3 -m sglang.launch_server --tp-size 4 --enable-hierarchical-cache --hicache-size 90"
    )
    assert check(gpu_host, capsys, SGLANG, launch)[0] == ExitCode.OK
    state = eight_gpu_server()
    state.files[memlimit.V2_MAX] = f"{256 * GiB}\n"
    state.files[memlimit.V2_CURRENT] = f"{6 * GiB}\n"
    state.files["/.dockerenv"] = ""
    gpu_host.set_state(state)
    code, checks = check(gpu_host, capsys, SGLANG, launch)
    assert code == ExitCode.GOAL_NOT_MET
    message = checks["hicache-fits"]["message"]
    assert "256 GiB total, 250 GiB available" in message
    assert "memory limit: cgroup v2 memory.max" in message


@pytest.mark.ssh
def test_inside_a_container_with_no_readable_limit_the_preflights_cannot_tell(gpu_host, capsys):
    from runbook_runner.simhost.model import eight_gpu_server

    state = eight_gpu_server()
    state.files["/run/.containerenv"] = ""
    gpu_host.set_state(state)
    launch = (
        "python3 -m sglang.launch_server --tp-size 4 --enable-hierarchical-cache --hicache-size 40"
    )
    code, checks = check(gpu_host, capsys, SGLANG, launch)
    assert code == ExitCode.CANNOT_TELL
    assert "memory limit cannot be read" in checks["hicache-fits"]["message"]
    code, checks = check(gpu_host, capsys, VLLM, "vllm serve /m -tp 8 --cpu-offload-gb 1")
    assert code == ExitCode.CANNOT_TELL
    assert checks["offload-fits"]["status"] == "cannot-tell"


def test_the_simulated_host_answers_the_files_the_preflights_read():
    from runbook_runner.simhost.model import CONTAINER_FILES

    assert CONTAINER_FILES == memlimit.FILES


@pytest.mark.ssh
def test_plan_of_a_preflight_says_what_check_says(gpu_host, capsys):
    """The runbook pages show `runbook plan NAME`: on a preflight (no steps) it exits as the
    check would, 1 for a launch that does not fit."""
    launch = "python3 -m sglang.launch_server --tp-size 4 --pp-size 2 --hicache-size 90"
    code = main(["plan", SGLANG, *gpu_host.cli_args(), "--set", f"launch={launch}"])
    out, err = capsys.readouterr()
    assert code == ExitCode.GOAL_NOT_MET, out + err


def test_the_calculator_page_shows_every_source_and_the_version_table():
    page = (REPO / "docs" / "calculator.md").read_text()
    pitfall = (REPO / "docs" / "pitfalls" / "vllm-lmcache-offload.md").read_text()
    for name, source in sizing.SOURCES.items():
        assert source.url in page or source.url in pitfall, name
    for version in sizing.SGLANG_VERSIONS:
        assert version.source in page, version.change


@pytest.mark.ssh
def test_the_default_connectors_kv_file_must_fit_in_dev_shm(gpu_host, capsys):
    """The default connector's CPU tier is a file in /dev/shm: a 16 GiB /dev/shm (a
    container's) cannot hold 40 GiB, whatever free says; the simple connector pins memory,
    not a /dev/shm file."""
    from runbook_runner.simhost.model import SimFilesystem, eight_gpu_server

    state = eight_gpu_server()
    state.filesystems = [
        f
        if f.mounted_on != "/dev/shm"
        else SimFilesystem("/dev/shm", 16 * GiB, 0, "tmpfs", "tmpfs")
        for f in state.filesystems
    ]
    gpu_host.set_state(state)
    launch = "vllm serve /m -tp 8 --kv-offloading-size 40"
    code, checks = check(gpu_host, capsys, VLLM, launch)
    assert code == ExitCode.GOAL_NOT_MET
    assert checks["offload-fits"]["ok"]
    shm = checks["kv-offload-fits-dev-shm"]
    assert shm["status"] == "failing"
    assert (
        "1 × 40 GiB of KV offload file (one per data-parallel engine), 16 GiB available"
        in (shm["message"])
    )
    code, checks = check(gpu_host, capsys, VLLM, f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 {launch}")
    assert checks["kv-offload-fits-dev-shm"]["ok"], checks["kv-offload-fits-dev-shm"]
    # One file per data-parallel engine: 10 GiB fits once, four engines' 40 GiB do not.
    code, checks = check(gpu_host, capsys, VLLM, "vllm serve /m -tp 8 --kv-offloading-size 10")
    assert checks["kv-offload-fits-dev-shm"]["ok"], checks["kv-offload-fits-dev-shm"]
    code, checks = check(
        gpu_host, capsys, VLLM, "vllm serve /m -tp 2 -dp 4 --kv-offloading-size 10"
    )
    shm = checks["kv-offload-fits-dev-shm"]
    assert shm["status"] == "failing", shm
    assert "4 × 10 GiB of KV offload file (one per data-parallel engine)" in shm["message"]


def test_the_pitfalls_first_screen_states_the_rule_per_rank_with_the_incident():
    """The rule box, above the first heading of the page body, says "per rank" and works
    the incident's numbers (8 x 300 GB asked of a 449 GiB host) from the figures file."""
    page = (REPO / "docs" / "pitfalls" / "per-rank-vs-total.md").read_text()
    body = page.split("\n---\n", 1)[1]
    first_screen = body.split("\n## ", 1)[0]
    assert '!!! danger "The rule: a per-rank size is taken once **per rank**"' in first_screen
    assert "GB **per rank**" in first_screen
    for figure in ("calc.hicache_requested_total", "fig.host_ram_total", "fig.safe_hicache_size"):
        assert "{{ " + figure + " }}" in first_screen, figure
