"""The journal's schema (runbook_runner/schema/journal.schema.json), its line builders
(journal/lines.py), the typed state of every parser in it, and journals of the previous
shape, which still resume. (conftest.py checks every journal the suite writes.)"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from conftest import FIXTURES, journal_problems, journal_validator
from runbook_runner.cli import main
from runbook_runner.events import Observed, RunReport, StepRecord
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import lines, read, resume
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import Unavailable, field_names
from runbook_runner.runbook import load
from runbook_runner.status import RunOutcome, StepStatus

OLD = FIXTURES / "journals"


def valid(line: lines.Line) -> dict:
    """The line as the journal writes it (through JSON), checked against the schema."""
    document = json.loads(
        json.dumps({"t": "2026-12-01T00:00:00.000Z", "event": line.event, **line.fields})
    )
    errors = [e.message for e in journal_validator().iter_errors(document)]
    assert not errors, (line.event, errors)
    return document


def test_the_schema_is_a_valid_json_schema_shipped_in_the_package():
    text = resources.files("runbook_runner").joinpath("schema/journal.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$defs"]["run-start"]["properties"]["journal_schema"]["const"] == (
        lines.SCHEMA_VERSION
    )


def test_the_schema_refuses_a_line_of_another_shape():
    validator = journal_validator()
    bad = [
        {"t": "2026-12-01T00:00:00.000Z", "event": "run-end", "ok": True},  # no outcome
        {
            "t": "2026-12-01T00:00:00.000Z",
            "event": "step-end",
            "id": "a",
            "status": "timed-out",
            "started": "x",
            "duration_s": 1,
            "exit_status": None,
            "message": "",
        },
        {
            "t": "2026-12-01T00:00:00.000Z",
            "event": "run-end",
            "ok": True,
            "outcome": "finished",
            "interrupted": False,
            "why": "a field nobody declared",
        },
        {"t": "2026-12-01T00:00:00.000Z", "event": "a-new-event"},
    ]
    for line in bad:
        assert list(validator.iter_errors(line)), line


def test_run_end_has_one_shape_for_every_outcome():
    runbook = load(OLD / "resume-me.yaml")
    report = RunReport(
        runbook,
        steps=[StepRecord("first", StepStatus.DECLINED, 0.0, 0.1, message="declined by alice")],
        declined=True,
    )
    ends = [
        valid(lines.run_end(RunOutcome.FINISHED, RunReport(runbook))),
        valid(lines.run_end(RunOutcome.DECLINED, report)),
        valid(lines.run_end(RunOutcome.INTERRUPTED, signum=signal.SIGTERM, ended_on_host="42")),
        valid(lines.run_end(RunOutcome.ERROR, error="disk full", lock_release_failed="gone")),
        valid(lines.run_end(RunOutcome.INTERRUPTED, signum=signal.SIGINT, not_started=True)),
        valid(lines.run_end(RunOutcome.ERROR, error="locked by bob", locked=True)),
    ]
    base = {"ok", "outcome", "reached_by", "declined", "interrupted", "stopped_by", "blocked"}
    assert all(base <= set(end) for end in ends)
    assert ends[1]["stopped_by"] == "operator"
    assert ends[2]["signal"] == "SIGTERM"
    assert ends[2]["ended_on_host"] == "process group 42"
    assert ends[4]["not_started"] is True
    assert "not_started" not in ends[2]


def _record(record_type: type, open_value: object) -> object:
    """A record of this type with every declared field set, and one host-named field."""
    values = {}
    hints = {f.name: str(f.type) for f in dataclasses.fields(record_type)}
    for name in field_names(record_type):
        kind = hints[name]
        values[name] = (
            3
            if "int" in kind
            else True
            if "bool" in kind
            else 1.5
            if "float" in kind
            else "x\x1b[31m"
        )
    if "extra" in hints:
        values["extra"] = (("from_the_host", open_value),)
    return record_type(**values)


def test_every_parsers_state_is_journalled_with_each_field_by_name():
    names = {f"o_{name.replace('-', '_')}": name for name in PARSERS}
    runbook = SimpleNamespace(
        observations={o: SimpleNamespace(parser=p) for o, p in names.items()}, subject=None
    )
    state: dict[str, object] = {}
    for observation, parser in names.items():
        record = _record(PARSERS[parser].record_type, "7")
        state[observation] = (record,) if PARSERS[parser].is_list else record
    state["o_lost"] = Unavailable("'nvidia-smi' timed out after 5s", "timed-out")
    runbook.observations["o_lost"] = SimpleNamespace(parser="gpus")
    line = valid(
        lines.observed(runbook, Observed("before", state, ()), lambda t: t.replace("x", "*"))
    )
    journalled = line["observations"]
    assert set(journalled) == {*names, "o_lost"}
    for observation, parser in names.items():
        value = journalled[observation]["value"]
        record = value[0] if PARSERS[parser].is_list else value
        assert journalled[observation]["parser"] == parser
        assert set(field_names(PARSERS[parser].record_type)) <= set(record), parser
        assert all(v != "x\x1b[31m" for v in record.values()), "host text is redacted"
        if "extra" in {f.name for f in dataclasses.fields(PARSERS[parser].record_type)}:
            assert record["from_the_host"] == "7"
    assert journalled["o_lost"] == {
        "parser": "gpus",
        "condition": "timed-out",
        "reason": "'nvidia-smi' timed out after 5s",
    }


def test_a_drills_journal_holds_each_observations_typed_state(capsys, run_journals_in_tmp):
    code = main(["drill", "gpu-oom-recovery", "--scenario", "oom-crash", "--yes"])
    capsys.readouterr()
    assert code == ExitCode.OK
    (path,) = run_journals_in_tmp.glob("*.jsonl")
    events = read(path).events
    assert events[0]["journal_schema"] == lines.SCHEMA_VERSION
    runbook = load(Path("runbook_runner/runbooks/gpu-oom-recovery.yaml").resolve())
    before = next(e for e in events if e["event"] == "observed" and e["label"] == "before")
    assert set(before["observations"]) == set(runbook.observations)
    owners = next(
        value["value"]
        for value in before["observations"].values()
        if value["parser"] == "process-owners"
    )
    assert owners
    assert {"pid", "owner", "disposition", "cgroup"} <= set(owners[0])
    assert not journal_problems(path)


def test_the_old_journals_match_the_schema():
    for path in sorted(OLD.glob("*.jsonl")):
        assert not journal_problems(path), path
        assert "journal_schema" not in read(path).events[0]  # written before the field


def test_a_journal_of_the_previous_shape_still_plans_its_resume():
    runbook = load(OLD / "resume-me.yaml")
    events = read(OLD / "v1-before-schema-field.jsonl").events
    plan = resume.plan(events, runbook, "old")
    assert plan.finished == ("first",)
    assert plan.in_flight == resume.InFlight("middle", maybe_sent=True)
    assert plan.remaining == ("middle", "last")
    with pytest.raises(resume.NotResumable, match="already finished"):
        resume.plan(read(OLD / "v1-finished.jsonl").events, runbook, "old")


@pytest.mark.ssh
def test_a_journal_of_the_previous_shape_still_resumes(gpu_host, tmp_path, run_journals_in_tmp):
    run_journals_in_tmp.mkdir(parents=True)
    path = run_journals_in_tmp / "v1-before-schema-field.jsonl"
    shutil.copy(OLD / "v1-before-schema-field.jsonl", path)
    runbook = tmp_path / "resume-me.yaml"
    shutil.copy(OLD / "resume-me.yaml", runbook)
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "runbook_runner",
            "run",
            str(runbook),
            *gpu_host.cli_args(),
            "--yes",
            "--resume",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert resumed.returncode == ExitCode.OK, resumed.stdout + resumed.stderr
    events = read(path).events
    assert [e["id"] for e in events if e["event"] == "step-end"] == ["first", "middle", "last"]
    # middle was in flight and its expected state holds: not sent again; last ran once.
    sent = [e["command"] for e in events if e["event"] == "command"]
    assert sent == ["echo first", "echo last"]
    assert events[-1]["event"] == "run-end"
    assert events[-1]["outcome"] == RunOutcome.FINISHED
