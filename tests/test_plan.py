"""The plan a reviewer approves (issue #23): the dry run says what the run will do, with the
run's own exit code, and a saved plan runs only what was approved."""

from __future__ import annotations

import json
import re
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


# -- saved plans, over real SSH ---------------------------------------------------------


@pytest.fixture
def crashed(gpu_host):
    """The incident after the server was killed: GPUs 0 and 2 still hold memory."""
    from test_runbooks_ssh import settle
    from test_run_ssh import crash

    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    settle(gpu_host)
    gpu_host.clear_calls()
    return gpu_host


def make_plan(capsys, host, path, *extra):
    from test_runbooks_ssh import RECOVERY, SHORT_WAITS, run

    code, out = run(capsys, host, RECOVERY, "--dry-run", "--out", str(path), *SHORT_WAITS, *extra)
    return code, out


def apply_plan(capsys, host, path, *extra):
    from test_runbooks_ssh import RECOVERY

    code = main(["run", RECOVERY, *host.cli_args(), "--plan", str(path), "--yes", *extra])
    out, err = capsys.readouterr()
    return code, out + err


def test_a_saved_plan_runs_as_approved_and_the_journal_says_by_whom(
    crashed, capsys, tmp_path, run_journals_in_tmp
):
    from test_run_ssh import resets

    plan = tmp_path / "plan.json"
    code, out = make_plan(capsys, crashed, plan)
    assert code == ExitCode.OK, out
    document = json.loads(plan.read_text())
    validate(document)
    assert [t["key"] for a in document["actions"] if a["step"] == "reset-gpus" for t in a["targets"]] == ["0", "2"]
    assert f"plan saved: {plan}" in out
    assert crashed.calls() and not resets(crashed)  # the plan only looked
    code, out = apply_plan(capsys, crashed, plan, "--approved-by", "alice")
    assert code == ExitCode.OK, out
    assert {tuple(c[2:]) for c in resets(crashed)} == {("-i", "0"), ("-i", "2")}
    start = json.loads(next(run_journals_in_tmp.glob("*.jsonl")).read_text().splitlines()[0])
    assert start["plan"] == {"file": str(plan), "sha256": document["sha256"], "approved_by": "alice"}


def test_a_saved_plan_stops_before_acting_when_another_process_took_a_target_gpu(
    crashed, capsys, tmp_path
):
    from test_run_ssh import destructive_calls

    plan = tmp_path / "plan.json"
    assert make_plan(capsys, crashed, plan)[0] == ExitCode.OK
    crashed.ssh("sim-server --name 'python3 train.py --epochs 3' --gpu 0:4000")
    crashed.clear_calls()
    code, out = apply_plan(capsys, crashed, plan)
    assert code == ExitCode.CANNOT_TELL, out
    assert "the host changed since the plan was made" in out
    assert re.search(r"GPU 0 is now also held by \d+ python3 train\.py", out), out
    assert destructive_calls(crashed) == []


def test_a_saved_plan_stops_before_acting_when_a_second_server_started(crashed, capsys, tmp_path):
    from test_run_ssh import destructive_calls, server_name

    plan = tmp_path / "plan.json"
    assert make_plan(capsys, crashed, plan)[0] == ExitCode.OK
    crashed.ssh(f"sim-server --name '{server_name(crashed)}' --gpu 5:2000")
    crashed.clear_calls()
    code, out = apply_plan(capsys, crashed, plan)
    assert code == ExitCode.CANNOT_TELL, out
    assert "a new instance of the server started" in out
    assert destructive_calls(crashed) == []


def test_a_plan_changed_after_it_was_made_is_refused(crashed, capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert make_plan(capsys, crashed, plan)[0] == ExitCode.OK
    document = json.loads(plan.read_text())
    document["actions"][0]["commands"] = ["reboot"]
    plan.write_text(json.dumps(document))
    crashed.clear_calls()
    code, out = apply_plan(capsys, crashed, plan)
    assert code == ExitCode.BAD_INPUT
    assert "changed after it was made" in out
    assert not crashed.calls()  # refused before connecting to do anything
