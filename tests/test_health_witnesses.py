"""Healthy on two witnesses (issue #44, item 3): /health's 200, then the server's own
Prometheus metrics read twice over a window. Pure: the judge in plan/health.py, fed the text
a metrics probe prints (the exposition's shape as SGLang's docs/references/production_metrics.md
and vLLM's PrometheusStatLogger show it: HELP and TYPE lines, a model_name label, histograms)."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
from sshd import only_simulated_hosts_start

from runbook_runner.cli import main
from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import ownership
from runbook_runner.plan.health import (
    WINDOW_MARK,
    Health,
    Probe,
    ProbeResult,
    judge_metrics,
    judge_probe,
    metrics_command,
    parse_exposition,
)
from runbook_runner.runbook import Subject
from runbook_runner.simhost.hosts import LAUNCH
from runbook_runner.simhost.model import SimProcess
from runbook_runner.simhost.system_tools import metrics

SUBJECT = Subject(
    description="the server",
    launcher=r"sglang\.launch_server|vllm\.entrypoints",
    workers=r"^sglang::scheduler",
    health_path="/health",
    ports=(("sglang", 30000), ("vllm", 8000)),
    metrics_path="/metrics",
    metrics_window_s=5.0,
)
PROBE = Probe(
    4101,
    30000,
    "http://127.0.0.1:30000/health",
    "curl ...",
    metrics_command(SUBJECT, 30000),
    "/metrics",
    5.0,
)
OK = judge_probe(PROBE, 0, "200", "")
MODEL = 'model_name="moonshotai/Kimi-K2.5"'


def sglang(running: float, waiting: float, tokens: float) -> str:
    return (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{{{MODEL}}} {running}\n"
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        f"sglang:num_queue_reqs{{{MODEL}}} {waiting}\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        f"sglang:generation_tokens_total{{{MODEL}}} {tokens:e}\n"
        "# TYPE sglang:time_to_first_token_seconds histogram\n"
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",{MODEL}}} 3.0\n'
    )


def vllm(running: float, waiting: float, tokens: float) -> str:
    """Two engines (data parallel): one sample per engine label, summed by the judge."""
    lines = []
    for engine in ("0", "1"):
        labels = f'engine="{engine}",{MODEL}'
        lines += [
            f"vllm:num_requests_running{{{labels}}} {running / 2}",
            f"vllm:num_requests_waiting{{{labels}}} {waiting / 2}",
            f"vllm:generation_tokens_total{{{labels}}} {tokens / 2}",
        ]
    return "\n".join(lines) + "\n"


def answer(first: str, second: str) -> str:
    return f"{first}\n{WINDOW_MARK}\n{second}"


def test_the_exposition_is_summed_per_metric_over_its_label_sets():
    text = (
        "# HELP x A comment with } and { in it\n"
        'x{a="1",b="with } brace and \\" quote"} 2.5\n'
        'x{a="2"} 1e3 1733370000000\n'  # a timestamp after the value
        "y 7\n"
        "z NaN\n"  # not a number to add: skipped
        'broken{a="never closed 4\n'
        "w{} +Inf\n"
        "junk\n"
    )
    assert parse_exposition(text) == {"x": 1002.5, "y": 7.0}


def test_requests_waiting_and_no_token_in_the_window_is_livelocked():
    said = judge_metrics(PROBE, OK, 0, answer(sglang(0, 12, 900_000), sglang(0, 12, 900_000)), "")
    assert said.health is Health.FAILING
    assert not said.refused  # broken on evidence: not a port still loading
    assert said.detail.startswith("livelocked: 12 requests waiting, 0 tokens in 5 s")
    assert said.progress is not None
    assert (said.progress.kind, said.progress.waiting, said.progress.tokens) == ("SGLang", 12, 0)


def test_a_livelocked_instance_is_ours_and_broken():
    records = (
        ProcessOwner(pid=4101, ppid=1, command="python3 -m sglang.launch_server --port 30000"),
        ProcessOwner(pid=4120, ppid=4101, command="sglang::scheduler_TP0", minor_number=0),
    )
    (probe,) = ownership.probes(SUBJECT, records)
    stuck = answer(sglang(0, 12, 5.0), sglang(0, 12, 5.0))
    result = judge_metrics(probe, judge_probe(probe, 0, "200", ""), 0, stuck, "")
    verdicts = {r.pid: r for r in ownership.classify(SUBJECT, records, [result])}
    assert verdicts[4101].disposition == "act"
    assert verdicts[4120].disposition == "act"
    assert verdicts[4120].reason.startswith("broken: livelocked: 12 requests waiting, 0 tokens")


def test_vllm_counts_tokens_every_step_so_running_requests_without_tokens_are_livelocked_too():
    still = vllm(4, 6, 10_000)
    said = judge_metrics(PROBE, OK, 0, answer(still, still), "")
    assert said.health is Health.FAILING
    assert "livelocked: 6 requests waiting" in said.detail


def test_sglang_counts_tokens_as_requests_finish_so_running_without_a_finish_is_not_livelocked():
    still = sglang(4, 6, 10_000)
    said = judge_metrics(PROBE, OK, 0, answer(still, still), "")
    assert said.health is Health.HEALTHY
    assert "counts tokens as a request finishes, and none did" in said.detail


def test_no_request_at_all_is_healthy_and_idle():
    idle = vllm(0, 0, 52_000)
    said = judge_metrics(PROBE, OK, 0, answer(idle, idle), "")
    assert said.health is Health.HEALTHY
    assert "idle: no request running or waiting (vLLM metrics)" in said.detail


def test_tokens_that_move_are_the_second_witness():
    said = judge_metrics(PROBE, OK, 0, answer(vllm(8, 3, 1000), vllm(8, 3, 8500)), "")
    assert said.health is Health.HEALTHY
    assert said.progress is not None
    assert said.progress.tokens == 7500
    assert "8 requests running, 3 waiting, 7,500 tokens in 5 s" in said.detail


@pytest.mark.parametrize(
    ("status", "stdout", "stderr", "why"),
    [
        (22, "", "curl: (22) The requested URL returned error: 404", "no /metrics (404)"),
        (22, "", "curl: (22) The requested URL returned error: 500", "answered an error"),
        (None, "", "", "did not answer in time"),
        (7, "", "curl: (7) Failed to connect", "could not be read (exit 7: curl: (7)"),
        (0, sglang(0, 1, 1), "", "answered once, not twice"),  # no window mark
        (0, answer("foo 1\n", "foo 2\n"), "", "neither SGLang's nor vLLM's"),
        (0, answer(sglang(0, 3, 9), "sglang:num_queue_reqs 3\n"), "", "lack sglang:gen"),
        (0, answer(sglang(1, 3, 900), sglang(1, 3, 10)), "", "went back"),
    ],
)
def test_without_a_second_witness_the_verdict_is_health_alone_and_says_so(
    status, stdout, stderr, why
):
    said = judge_metrics(PROBE, OK, status, stdout, stderr)
    assert said.health is Health.HEALTHY
    assert said.progress is None
    assert said.detail.startswith("http://127.0.0.1:30000/health answered 200; ")
    assert "healthy on /health alone: " in said.detail
    assert why in said.detail


def test_only_a_200_is_refined_by_the_metrics():
    failing = judge_probe(PROBE, 0, "503", "")
    stuck = answer(sglang(0, 12, 5.0), sglang(0, 12, 5.0))
    assert judge_metrics(PROBE, failing, 0, stuck, "") == failing
    moving = answer(vllm(1, 0, 1), vllm(1, 0, 9))
    cannot = ProbeResult(4101, Health.CANNOT_TELL, "curl is not installed on the host")
    assert judge_metrics(PROBE, cannot, 0, moving, "") == cannot


def test_the_metrics_probe_reads_twice_a_window_apart_with_its_url_as_one_word():
    odd = Subject(description="s", metrics_path="/m; rm -rf / #x", metrics_window_s=7.5)
    words = shlex.split(metrics_command(odd, 30000))
    urls = [w for w in words if w.startswith("http://")]
    assert urls == ["http://127.0.0.1:30000/m; rm -rf / #x"] * 2
    assert words[words.index("sleep") + 1] == "7.5"
    assert words.count("--fail") == 2  # a 404 ends it before the window is waited


def test_a_probe_asks_the_metrics_only_where_the_subject_names_them():
    records = (ProcessOwner(pid=9, ppid=1, command="vllm serve m --port 8001"),)
    subject = Subject(description="s", launcher="vllm serve", health_path="/health")
    (plain,) = ownership.probes(subject, records)
    assert plain.metrics_command == ""
    (both,) = ownership.probes(dataclasses.replace(subject, metrics_path="/metrics"), records)
    assert "http://127.0.0.1:8001/metrics" in both.metrics_command


# -- the simulated host's /metrics, and the run's verdict over SSH ---------------------------


def test_the_simulated_engine_counts_tokens_while_serving_and_stands_still_livelocked():
    serving = SimProcess(pid=1, cmdline="vllm serve m", born=0.0)
    first, second = metrics(serving, 100.0), metrics(serving, 105.0)
    assert first is not None
    assert second is not None
    before, after = parse_exposition(first), parse_exposition(second)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] > 0
    stuck = SimProcess(pid=2, cmdline=LAUNCH + " --enable-metrics", livelocked=12)
    assert metrics(stuck, 100.0) == metrics(stuck, 105.0)
    assert parse_exposition(metrics(stuck, 100.0) or "")["sglang:num_queue_reqs"] == 12
    assert metrics(SimProcess(pid=3, cmdline=LAUNCH), 100.0) is None  # no --enable-metrics: 404


@pytest.mark.parametrize(
    ("scenario", "pid", "said"),
    [
        ("healthy-server", 4101, "healthy on /health alone: no /metrics (404)"),
        ("port-from-config", 5201, "8 requests running, 0 waiting, 7,500 tokens in 5 s (vLLM"),
        ("livelocked-behind-health-200", 4101, "broken: livelocked: 12 requests waiting, 0 tok"),
    ],
)
def test_the_run_says_which_witnesses_it_had(monkeypatch, capsys, scenario, pid, said):
    only_simulated_hosts_start(monkeypatch)
    main(["drill", "gpu-oom-recovery", "--scenario", scenario, "--dry-run", "--json"])
    document = json.loads(capsys.readouterr().out)
    holders = {h["pid"]: h for h in document["state"]["holders"]}
    assert said in holders[pid]["reason"]
