"""The run session (runbook_runner/session.py) called directly, over the real test sshd:
a typed request in, a typed outcome out; the lock released and the end journalled whatever
the consent or the run does."""

from __future__ import annotations

import pytest

from runbook_runner import session
from runbook_runner.events import Answer
from runbook_runner.journal import read
from runbook_runner.runbook import load
from runbook_runner.ssh.hostlock import LOCK_NAME

pytestmark = pytest.mark.ssh

MARK = """\
name: mark-once
title: t
summary: s
observations:
  marker: {command: 'cat "$RUNBOOK_LOCK_DIR/marker" 2>/dev/null || true', parser: lines}
checks:
  marked: {description: marked, expect: count(marker) == 1}
goal: [marked]
steps:
  - id: mark
    title: Mark the host
    run: 'echo ran >> "$RUNBOOK_LOCK_DIR/marker"'
    destructive: true
    fixes: goal
    affects: process
"""


@pytest.fixture(autouse=True)
def unmarked(gpu_host):
    (gpu_host.root / "sim" / "marker").unlink(missing_ok=True)


class Scripted:
    """A consent that answers as told, or raises (a bug in a caller's consent)."""

    def __init__(self, answer: Answer | BaseException) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def __call__(self, request):
        self.asked.append(request.step.id)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def answered_by(self, request, answer):
        return "tester"


def request(tmp_path, transport, consent, events, **overrides):
    path = tmp_path / "mark-once.yaml"
    path.write_text(MARK)
    fields = {
        "runbook": load(path),
        "parameters": {},
        "transport": transport,
        "consent": consent,
        "journal": session.JournalPolicy(tmp_path / "runs"),
        "operator": "tester",
        "on_event": events.append,
    }
    return session.RunRequest(**{**fields, **overrides})


def test_a_finished_run_returns_its_report_and_journals_one_end(gpu_host, connect, tmp_path):
    events: list = []
    consent = Scripted(Answer(True, "scripted"))
    outcome = session.run(request(tmp_path, connect(), consent, events))
    assert outcome.ended is session.Ended.FINISHED
    assert outcome.error is None
    assert outcome.report is not None
    assert outcome.report.ok
    assert outcome.report.reached_by == "mark"
    assert consent.asked == ["mark"]
    assert isinstance(events[0], session.JournalOpened)
    assert events[0].path == outcome.journal
    lines = read(outcome.journal).events
    assert [e["event"] for e in lines if e["event"] in {"run-start", "lock", "run-end"}] == [
        "run-start",
        "lock",
        "run-end",
    ]
    (asked,) = [e for e in lines if e["event"] == "confirmation"]
    assert (asked["answer"], asked["operator"], asked["reason"]) == ("yes", "tester", "scripted")
    assert lines[-1]["outcome"] == "finished"
    assert lines[-1]["ok"] is True
    assert (gpu_host.root / "sim" / "marker").read_text() == "ran\n"
    assert not (gpu_host.root / "sim" / LOCK_NAME).exists()


def test_a_consent_that_raises_ends_the_run_as_an_error_with_the_lock_released(
    gpu_host, connect, tmp_path
):
    events: list = []
    outcome = session.run(
        request(tmp_path, connect(), Scripted(ZeroDivisionError("in the consent")), events)
    )
    assert outcome.ended is session.Ended.ERROR
    assert isinstance(outcome.error, ZeroDivisionError)
    assert outcome.report is None
    end = read(outcome.journal).events[-1]
    assert end["event"] == "run-end"
    assert (end["outcome"], end["error"], end["interrupted"]) == ("error", "in the consent", False)
    assert not (gpu_host.root / "sim" / "marker").exists()
    assert not (gpu_host.root / "sim" / LOCK_NAME).exists()


def test_nobody_asked_is_declined_and_journalled_as_not_asked(gpu_host, connect, tmp_path):
    events: list = []
    consent = Scripted(Answer(False, "no terminal to ask (use --yes)", asked=False))
    outcome = session.run(request(tmp_path, connect(), consent, events))
    assert outcome.ended is session.Ended.DECLINED
    assert outcome.report is not None
    assert outcome.report.declined
    lines = read(outcome.journal).events
    (asked,) = [e for e in lines if e["event"] == "confirmation"]
    assert asked["answer"] == "not asked"
    assert lines[-1]["outcome"] == "declined"
    assert lines[-1]["stopped_by"] == outcome.stopped_by == "no terminal to ask (use --yes)"


def test_a_dry_run_takes_no_lock_and_asks_nothing(gpu_host, connect, tmp_path):
    events: list = []
    consent = Scripted(AssertionError("asked during a dry run"))
    outcome = session.run(request(tmp_path, connect(), consent, events, dry_run=True))
    assert outcome.ended is session.Ended.FINISHED, outcome.error
    assert consent.asked == []
    assert [e["event"] for e in read(outcome.journal).events if e["event"] == "lock"] == []
    assert not (gpu_host.root / "sim" / "marker").exists()


def test_a_journal_that_cannot_be_opened_is_the_outcome_before_anything_runs(
    gpu_host, connect, tmp_path
):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    events: list = []
    consent = Scripted(AssertionError("asked without a journal"))
    policy = session.JournalPolicy(tmp_path, path=blocker / "run.jsonl")
    outcome = session.run(request(tmp_path, connect(), consent, events, journal=policy))
    assert outcome.ended is session.Ended.ERROR
    assert outcome.journal is None
    assert outcome.report is None
    assert events == []
    assert not (gpu_host.root / "sim" / LOCK_NAME).exists()
