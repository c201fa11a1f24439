"""Each test's outcome, kept where the site build reads it: build/test-results.json (or
$RUNBOOK_TEST_RESULTS).

The site marks an action item done only when the test it names passed, and says when a
runbook's drills last passed (runbook_runner/kb/incidents.py reads this file). A run of a
few tests updates their entries and keeps the others; each entry names the run that ran
it: its commit, whether the tree had uncommitted changes, when it finished, and the
SHA-256 of every runbook when it started.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_outcomes: dict[str, str] = {}
_runbooks: dict[str, str] = {}


def results_path() -> Path:
    return Path(os.environ.get("RUNBOOK_TEST_RESULTS") or REPO / "build" / "test-results.json")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False, timeout=30
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def pytest_sessionstart(session: pytest.Session) -> None:
    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        _runbooks[path.stem] = hashlib.sha256(path.read_bytes()).hexdigest()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A failed setup or teardown fails the test; a skip is no pass.
    if (report.when == "call" or report.outcome != "passed") and _outcomes.get(
        report.nodeid
    ) != "failed":
        _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or not _outcomes:
        return  # an xdist worker: the controller saw its reports and writes the file
    path = results_path()
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    sessions = dict(old.get("sessions") or {})
    sessions[finished] = {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "finished": finished,
        "runbooks": dict(_runbooks),
    }
    tests = dict(old.get("tests") or {})
    tests.update({test: {"outcome": o, "session": finished} for test, o in _outcomes.items()})
    used = {entry["session"] for entry in tests.values()}
    document = {"sessions": {k: v for k, v in sessions.items() if k in used}, "tests": tests}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(document, indent=1, sort_keys=True))
        path.with_suffix(".tmp").replace(path)
    except OSError:
        pass  # a read-only checkout: the site then says the tests have not run
