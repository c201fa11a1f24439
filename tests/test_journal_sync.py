"""A journal line about read-only work is not fsynced by itself; a destructive step's are."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from runbook_runner import journal as journal_module
from runbook_runner.events import StepDone, StepRecord, StepStarting
from runbook_runner.journal import lines
from runbook_runner.journal.recording import Recorder
from runbook_runner.runbook import load
from runbook_runner.status import RunOutcome

REPO = Path(__file__).resolve().parent.parent


def test_read_only_steps_cost_no_fsync_and_a_destructive_step_syncs_all_before_it(
    tmp_path, monkeypatch
):
    synced: list[int] = []  # how many lines the file held at each fsync
    path = tmp_path / "run.jsonl"
    real = journal_module.os.fsync

    def counting(fd: int) -> None:
        synced.append(len(path.read_bytes().splitlines()))
        real(fd)

    monkeypatch.setattr(journal_module.os, "fsync", counting)
    runbook = load(REPO / "benchmarks" / "ten-steps.yaml")
    journal = journal_module.Journal(path)
    recorder = Recorder(journal, runbook, {})
    for number, step in enumerate(runbook.steps[:3], start=1):
        recorder.on_event(StepStarting(step, number, 3, ("true",)))
        recorder.on_event(StepDone(step, StepRecord(step.id, "ok", 0.0, 0.1)))
    assert synced == []  # six lines, all flushed to the OS, none fsynced by itself
    assert len(path.read_bytes().splitlines()) == 6
    destructive = dataclasses.replace(runbook.steps[3], destructive=True)
    recorder.on_event(StepStarting(destructive, 4, 4, ("true",)))
    assert synced == [7]  # before a destructive command goes out, everything is on disk
    recorder.on_event(StepDone(destructive, StepRecord(destructive.id, "ok", 0.0, 0.1)))
    assert synced == [7, 8]
    journal.append(lines.run_end(RunOutcome.FINISHED))
    journal.close()
    assert synced == [7, 8, 9, 9]
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()][-1] == "run-end"
