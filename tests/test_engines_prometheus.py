"""``runbook check --prometheus`` under the real thing (issue 35, item 1): Debian's
prometheus-node-exporter reads the file from its textfile folder, a real Prometheus scrapes it,
and the runbook's series are read back through Prometheus's HTTP API with their labels and
values; the alerting rules the docs give pass ``promtool check rules`` and fire in
``promtool test rules`` on a failing series.

Both daemons listen on 127.0.0.1 on free ports, keep their state in the test's folder and are
stopped by PID; the check runs ``--local`` against the simulator's stand-ins."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from engines import REPO, daemons, missing, standin_env
from sshd import wait_for

from runbook_runner.fleet import prometheus
from runbook_runner.simhost.hosts import xid_79

RULES = REPO / "deploy" / "prometheus" / "runbook-alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "runbook-alerts.test.yml"
PAGE = REPO / "docs" / "engines" / "prometheus.md"

# Host text that the exposition format must escape (quote, backslash, newline), and what
# Prometheus must hand back for it: the same characters.
HOSTILE = 'gpu"7\\rack\nb}, x="y'

needs_prometheus = pytest.mark.skipif(
    bool(missing("prometheus", "prometheus-node-exporter")),
    reason=missing("prometheus", "prometheus-node-exporter") or "",
)
needs_promtool = pytest.mark.skipif(bool(missing("promtool")), reason=missing("promtool") or "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - 127.0.0.1 only
            return json.loads(answer.read())
    except OSError:
        return None


def query(port: int, expr: str) -> list[dict]:
    found = get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if not found or found.get("status") != "success":
        return []
    return list(found["data"]["result"])


@needs_prometheus
def test_prometheus_scrapes_the_runbook_series_through_node_exporter(tmp_path):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    env = standin_env(tmp_path / "host", xid_79())  # a GPU fell off the bus: checks fail
    node_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [{RULES}]
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ["127.0.0.1:{node_port}"]
"""
    )
    with daemons(tmp_path) as started:
        started.start(
            "node-exporter",
            [
                shutil.which("prometheus-node-exporter") or "prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{node_port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={textfile}",
            ],
        )
        started.start(
            "prometheus",
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            ],
        )
        # The runbook's file, written by the CLI into the collector's folder...
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runbook_runner",
                "check",
                "gpu-node-health",
                "--local",
                "--json",
                "--prometheus",
                str(textfile / "runbook.prom"),
            ],
            env={**env, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr  # the goal does not hold
        report = json.loads(done.stdout)
        assert sorted(p.name for p in textfile.iterdir()) == ["runbook.prom"]  # no temp left
        # ... and one with host text the format must escape, as render() writes it.
        hostile = prometheus.HostResult(
            HOSTILE, "failing", 1, 0.5, (("no-xid-since-boot", "failing"),)
        )
        outcomes = ("ok", "failing")
        (textfile / "escaped.prom").write_text(
            prometheus.render("escape-test", [hostile], outcomes, 1_800_000_000.0)
        )

        def status_series() -> list[dict]:
            if not (started.alive("prometheus") and started.alive("node-exporter")):
                raise AssertionError(started.log("prometheus") + started.log("node-exporter"))
            return query(prom_port, 'runbook_check_status{runbook="gpu-node-health"}')

        series = wait_for(
            status_series,
            120,
            lambda: (
                "runbook_check_status through Prometheus's API; node_exporter said: "
                + started.log("node-exporter")
            ),
        )
        got = {(s["metric"]["check"], s["metric"]["status"]): s["value"][1] for s in series}
        expected = {
            (c["name"], state): "1" if c["status"] == state else "0"
            for c in report["checks"]
            for state in ("ok", "failing", "cannot-tell")
        }
        assert got == expected
        assert got[("no-xid-since-boot", "failing")] == "1"
        assert {st for (_, st), v in got.items() if v == "1"} >= {"ok", "failing"}
        assert {s["metric"]["host"] for s in series} == {report["host"]}
        assert {s["metric"]["job"] for s in series} == {"node"}

        (code,) = wait_for(
            lambda: query(prom_port, 'runbook_host_exit_code{runbook="gpu-node-health"}'),
            60,
            "runbook_host_exit_code",
        )
        assert code["value"][1] == "1"
        (error,) = wait_for(
            lambda: query(prom_port, "node_textfile_scrape_error"), 60, "scrape error"
        )
        assert error["value"][1] == "0", started.log("node-exporter")

        # The hostile host name comes back from Prometheus exactly as it was.
        (escaped,) = wait_for(
            lambda: query(
                prom_port, 'runbook_check_status{runbook="escape-test",status="failing"}'
            ),
            60,
            "the escaped series",
        )
        assert escaped["metric"]["host"] == HOSTILE
        assert escaped["value"][1] == "1"

        # The docs' alerting rule, loaded by this Prometheus, is pending for the failing checks.
        def pending() -> set[tuple[str, str]]:
            found = get(f"http://127.0.0.1:{prom_port}/api/v1/alerts") or {}
            alerts = found.get("data", {}).get("alerts", [])
            return {
                (a["labels"].get("check", ""), a["labels"].get("status", ""))
                for a in alerts
                if a["labels"].get("alertname") == "GpuNodeCheckFailing"
                and a["labels"].get("runbook") == "gpu-node-health"
                and a["state"] == "pending"
            }

        alerting = wait_for(pending, 60, "GpuNodeCheckFailing pending")
        failing = {(c["name"], c["status"]) for c in report["checks"] if c["status"] != "ok"}
        wait_for(lambda: pending() == failing, 60, lambda: f"{pending()} to be {failing}")
        assert ("no-xid-since-boot", "failing") in alerting


@needs_promtool
def test_the_docs_alert_rules_are_valid_and_fire_on_a_failing_series(tmp_path):
    checked = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rules found" in checked.stdout
    tested = subprocess.run(
        ["promtool", "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # The unit test can fail: a rule that compares the wrong status never fires, and promtool
    # says so.
    shutil.copy(RULE_TESTS, tmp_path)
    (tmp_path / RULES.name).write_text(RULES.read_text().replace('status!="ok"', 'status="ok"'))
    broken = subprocess.run(
        ["promtool", "test", "rules", str(tmp_path / RULE_TESTS.name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert broken.returncode != 0
    assert "GpuNodeCheckFailing" in broken.stdout + broken.stderr


def _blocks(page: Path) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def test_the_docs_page_shows_the_rules_file_as_it_is():
    assert RULES.read_text() in _blocks(PAGE)
    assert "deploy/prometheus/runbook-alerts.yml" in PAGE.read_text()


def test_the_file_is_replaced_whole_never_written_in_place(tmp_path, monkeypatch):
    """The collector reads ``*.prom``: the temporary file is a dotfile not ending in .prom,
    in the same folder (a rename across file systems would not be atomic)."""
    from runbook_runner.cli import metrics

    target = tmp_path / "runbook.prom"
    target.write_text("old\n")
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace(source, destination):
        seen.append((str(source), str(destination)))
        assert target.read_text() == "old\n"  # the old file is whole until the rename
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    result = prometheus.HostResult("gpu1", "ok", 0, 1.0, (("c", "ok"),))
    metrics.write(str(target), "rb", [result], "runbook check")
    ((source, destination),) = seen
    assert Path(source).parent == tmp_path
    assert Path(source).name.startswith(".")
    assert not source.endswith(".prom")
    assert destination == str(target)
    assert 'runbook_check_status{runbook="rb",host="gpu1",check="c",status="ok"} 1' in (
        target.read_text()
    )
    assert oct(target.stat().st_mode & 0o777) == "0o644"
