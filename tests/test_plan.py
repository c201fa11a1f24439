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
# Rows whose host refuses an action for a reason no look at it shows: a plan made from one
# look predicts that the action works, so only its first actions are compared, not its end.
UNFORESEEN = {
    "flat-cgroups-reset-refused": "the driver refuses every reset of GPU 3",
    "driver-not-built-for-kernel": "modprobe finds no module for the kernel only when tried",
    # the plan foresees the ledger (the clients held, 9); the run's holders-attributed check
    # says the same of them first (1)
    "mps-daemon-unreachable": "an MPS client whose daemon cannot be asked is never acted on",
}


def drill(capsys, scenario, *extra, as_played=True):
    argv = ["drill", scenario.runbook, "--scenario", scenario.name, "--json", *extra]
    if scenario.allow_reboot and as_played:
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
    if scenario.name not in UNFORESEEN:
        assert planned_code == code, (
            plan["ending"],
            [(s["id"], s["status"]) for s in run["steps"]],
        )
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
        # The run stops before the plan's stopping rung: the last it records, blocked (a
        # read-only rung that cannot be told is recorded blocked too, and the run goes on).
        assert run["steps"][-1]["status"] == "blocked"
        assert run["steps"][-1]["id"] == stops[0]["step"]
        assert not executed or all(s["id"] != stops[0]["step"] for s in executed)


# -- saved plans, over real SSH ---------------------------------------------------------


def make_plan(capsys, host, path, *extra):
    from test_runbooks_ssh import RECOVERY, SHORT_WAITS, run

    code, out = run(capsys, host, RECOVERY, "--dry-run", "--out", str(path), *SHORT_WAITS, *extra)
    return code, out


def approved_sha256(path):
    """The plan's SHA-256, as a reviewer gives it out of band (--approved-sha256)."""
    return ["--approved-sha256", json.loads(Path(path).read_text())["sha256"]]


def apply_plan(capsys, host, path, *extra, approval=None):
    from test_runbooks_ssh import RECOVERY

    approval = approved_sha256(path) if approval is None else approval
    argv = ["run", RECOVERY, *host.cli_args(), "--plan", str(path), "--yes", *approval, *extra]
    code = main(argv)
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
    assert [
        t["key"] for a in document["actions"] if a["step"] == "reset-gpus" for t in a["targets"]
    ] == ["0", "2"]
    assert f"plan saved: {plan}" in out
    assert crashed.calls()
    assert not resets(crashed)
    # The plan names the runbook and the host: the approver's command is only the plan.
    login = crashed.cli_args()[4:]  # --user, -i, --known-hosts: the tester's own setup
    approval = approved_sha256(plan)
    code = main(["run", "--plan", str(plan), "--approved-by", "alice", "--yes", *approval, *login])
    out = "".join(capsys.readouterr())
    assert code == ExitCode.OK, out
    assert f"applying the approved plan {plan}" in out
    assert "approval: its SHA-256 as given with --approved-sha256" in out
    assert {tuple(c[2:]) for c in resets(crashed)} == {("-i", "0"), ("-i", "2")}
    start = json.loads(next(run_journals_in_tmp.glob("*.jsonl")).read_text().splitlines()[0])
    assert start["plan"] == {
        "file": str(plan),
        "sha256": document["sha256"],
        "approved_by": "alice",
    }


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


# -- what the plan says, and one exit-code meaning --------------------------------------

LOOK_ONLY = """\
name: look-only
title: A read-only runbook whose goal cannot be told
summary: For the exit-code agreement.
observations:
  missing: {command: "cat /nonexistent/rbr-plan-file", parser: lines}
checks:
  needs-missing: {description: a file that is not there, expect: count(missing) == 1}
goal: [needs-missing]
steps:
  - {id: look, title: Look, run: "true"}
"""


def test_check_run_and_the_plan_agree_on_a_goal_that_cannot_be_told(capsys, tmp_path):
    runbook = tmp_path / "look-only.yaml"
    runbook.write_text(LOOK_ONLY)
    codes = {
        verb: main([verb, str(runbook), "--local", *extra])
        for verb, extra in (("check", []), ("run", []), ("plan", []))
    }
    out = capsys.readouterr().out
    assert codes == dict.fromkeys(codes, ExitCode.CANNOT_TELL)
    assert "the goal cannot be told" in out  # not "would stop before acting": nothing acts


def test_the_plan_pairs_restoring_steps_names_gates_and_folds_what_cannot_run(capsys):
    scenario = next(s for s in MATRIX if s.name == "oom-crash")
    code, plan, _ = drill(capsys, scenario, "--dry-run")
    assert code == ExitCode.OK
    assert plan["ending"] == "would-act"
    actions = {a["step"]: a for a in plan["actions"]}
    assert actions["wait-for-teardown"]["timing"] == "first"
    reset = actions["reset-gpus"]
    assert reset["timing"] == "if-still"
    assert "gpu-memory-released still fails" in reset["condition"]
    assert [t["key"] for t in reset["targets"]] == ["0", "2"]
    assert reset["commands"] == ["nvidia-smi --gpu-reset -i 0", "nvidia-smi --gpu-reset -i 2"]
    assert actions["persistence-off"]["restored_by"] == ["restore-persistence"]
    restore = actions["restore-persistence"]
    assert restore["timing"] == "restores"
    assert restore["restores"] == "persistence-off"
    assert restore["commands"] == ["nvidia-smi -i 0 -pm 1", "nvidia-smi -i 2 -pm 1"]
    assert actions["reboot"]["timing"] == "gated"
    assert actions["reboot"]["gate"] == "--allow-reboot"
    assert "reboot-for-xid" in {n["step"] for n in plan["not_applicable"]}
    assert not {n["step"] for n in plan["not_applicable"]} & set(actions)


def test_a_host_that_needs_a_reboot_plans_the_gate_and_exits_as_the_run(capsys):
    scenario = next(s for s in MATRIX if s.name == "xid-79")
    code, plan, _ = drill(capsys, scenario, "--dry-run", as_played=False)
    assert code == ExitCode.GOAL_NOT_MET
    assert plan["ending"] == "needs-gate"
    first = next(a for a in plan["actions"] if a["destructive"])
    assert (first["step"], first["timing"], first["gate"]) == (
        "reboot-for-xid",
        "gated",
        "--allow-reboot",
    )
    assert plan["not_reached"]  # the run stops at the gate: nothing after it is planned
    allowed, plan, _ = drill(capsys, scenario, "--dry-run", "--allow-reboot", as_played=False)
    assert allowed == ExitCode.OK
    assert next(a for a in plan["actions"] if a["destructive"])["timing"] == "first"


def test_a_healthy_host_has_nothing_to_do(capsys):
    scenario = next(s for s in MATRIX if s.name == "healthy-server")
    code, plan, err = drill(capsys, scenario, "--dry-run")
    assert code == ExitCode.OK
    assert plan["ending"] == "nothing-to-do"
    assert not [a for a in plan["actions"] if a["destructive"]]
    assert plan["left_alone"] or "healthy" in err


def test_the_sites_plan_is_the_plan_the_drill_prints_today(capsys, monkeypatch):
    """The page's example is real output: every line of it is a line the plan prints now."""
    monkeypatch.setenv("NO_COLOR", "1")
    page = (Path(__file__).parent.parent / "docs" / "review-before-you-run.md").read_text()
    shown = page.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert main(["drill", "gpu-oom-recovery", "--dry-run"]) == ExitCode.OK
    printed = capsys.readouterr().out.splitlines()
    port = re.compile(r"127\.0\.0\.1:\d+")
    printed = [port.sub("127.0.0.1:PORT", line) for line in printed]
    assert len(shown) > 40
    for line in shown:
        line = port.sub("127.0.0.1:PORT", line)
        if line.endswith("..."):
            assert any(p.startswith(line[:-3]) for p in printed), line
        else:
            assert line in printed, line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "No such file"),
        ("x", "not a plan (not JSON"),
        ("{}", "not a plan (make one with"),
        (
            '{"format": "runbook-runner/plan", "asked": {"runbook": "gpu-oom-recovery"}}',
            "plan format version None",
        ),
    ],
)
def test_a_plan_file_that_is_not_one_is_one_line_and_exit_2(capsys, tmp_path, text, said):
    plan = tmp_path / "plan.json"
    if text is not None:
        plan.write_text(text)
    code = main(["run", "--plan", str(plan)])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert said in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
