"""The plan a reviewer approves (issue #23): the dry run says what the run will do, with the
run's own exit code, and a saved plan runs only what was approved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.simhost.scenarios import MATRIX

SCHEMA = Path(__file__).parent.parent / "runbook_runner" / "schema" / "plan.schema.json"
EXECUTED = {"ok", "failed", "timed_out", "unknown"}


def drill(capsys, scenario, *extra):
    argv = ["drill", scenario.runbook, "--scenario", scenario.name, "--json", *extra]
    if scenario.allow_reboot:
        argv.append("--allow-reboot")
    code = main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def validate(document):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.name for s in MATRIX])
def test_the_dry_run_says_what_the_run_then_does(capsys, scenario):
    """Same state, same first actions on the same targets, same ending (exit code)."""
    planned_code, plan, _ = drill(capsys, scenario, "--dry-run")
    validate(plan)
    assert planned_code == plan["exit_code"]
    code, run, _ = drill(capsys, scenario, "--yes")
    assert planned_code == code, (plan["ending"], [(s["id"], s["status"]) for s in run["steps"]])
    first = [a for a in plan["actions"] if a["timing"] == "first"]
    executed = [s for s in run["steps"] if s["status"] in EXECUTED | {"declined"}]
    assert [a["step"] for a in first] == [s["id"] for s in executed[: len(first)]], (
        [a["step"] for a in first],
        [s["id"] for s in executed],
    )
    for action, step in zip(first, executed, strict=False):
        assert action["commands"] == step.get("commands", []), action["step"]
        assert sorted(t["text"] for t in action["targets"]) == sorted(step.get("targets", []))
    stops = [a for a in plan["actions"] if a["timing"] == "stops"]
    if stops:
        blocked = [s for s in run["steps"] if s["status"] == "blocked"]
        assert blocked and blocked[0]["id"] == stops[0]["step"]
        assert not executed or all(s["id"] != stops[0]["step"] for s in executed)
