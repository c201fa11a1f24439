"""Resume never redoes, never skips: a crash at every journal event, then resume (issue 15, 4-6)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read, resume
from runbook_runner.runbook import load


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runbook_runner", *args]


# The runner, SIGKILLed right after its journal took N lines (a crash at a chosen point).
_KILLED = """
import os, signal, sys
from runbook_runner import journal
from runbook_runner.cli import entry
after, append = int(sys.argv.pop(1)), journal.Journal.append
def append_then_die(self, line):
    append(self, line)
    self.lines_so_far = getattr(self, "lines_so_far", 0) + 1
    if self.lines_so_far == after:
        os.kill(os.getpid(), signal.SIGKILL)
journal.Journal.append = append_then_die
entry()
"""


def cli_killed_after(lines: int, *args: str) -> list[str]:
    return [sys.executable, "-c", _KILLED, str(lines), *args]


def write_runbook(folder: Path, sim: Path) -> Path:
    """A destructive step with an observable effect (one line in a marker), then two more."""
    (sim / "marker").unlink(missing_ok=True)
    path = folder / "crash-me.yaml"
    path.write_text(
        f"""name: crash-me
title: Crash me
summary: For the resume tests.
observations:
  marker:
    command: cat {sim}/marker 2>/dev/null || true
    parser: lines
checks:
  marked-once: {{description: the first step ran exactly once, expect: count(marker) == 1}}
goal: [marked-once]
steps:
  - id: mark
    title: Append to the marker (never twice)
    run: echo ran >> {sim}/marker
    destructive: true
    fixes: goal
    affects: process
    wait: {{until: [marked-once], interval: 0.1, timeout: 0.5}}
  - id: middle
    title: Middle
    run: echo middle
  - id: last
    title: Last
    run: echo last
"""
    )
    return path


# -- the plan, from a journal (pure) ------------------------------------------------------


def plan_of(tmp_path: Path, *events: dict) -> resume.ResumePlan:
    runbook = load(write_runbook(tmp_path, tmp_path))
    start = {"event": "run-start", "run": "R1", "runbook": "crash-me"}
    return resume.plan([start, *events], runbook, "R1")


def test_every_step_whose_end_is_journalled_is_left_out_whatever_its_status(tmp_path):
    plan = plan_of(
        tmp_path,
        {"event": "step-start", "id": "mark"},
        {"event": "step-end", "id": "mark", "status": "ok"},
        {"event": "step-start", "id": "middle"},
        {"event": "step-end", "id": "middle", "status": "skipped"},
    )
    assert plan.finished == ("mark", "middle")
    assert plan.remaining == ("last",)
    assert plan.in_flight is None
    assert plan.run == "R1"


def test_an_in_flight_destructive_step_counts_as_sent_once_confirmed(tmp_path):
    started = {"event": "step-start", "id": "mark"}
    assert plan_of(tmp_path, started).in_flight == resume.InFlight("mark", maybe_sent=False)
    confirmed = {"event": "confirmation", "step": "mark", "answer": "yes"}
    assert plan_of(tmp_path, started, confirmed).in_flight == resume.InFlight("mark", True)
    middle = {"event": "step-start", "id": "middle"}
    done = {"event": "step-end", "id": "mark", "status": "ok"}
    assert plan_of(tmp_path, started, confirmed, done, middle).in_flight == resume.InFlight(
        "middle", True
    )


@pytest.mark.parametrize(
    ("events", "says"),
    [
        ([{"event": "run-end", "ok": True, "outcome": "finished"}], "already finished"),
        ([{"event": "run-end", "ok": False, "interrupted": False}], "already finished"),
        ([{"event": "step-end", "id": "mark", "status": "declined"}], "stopped at step 'mark'"),
        ([{"event": "step-end", "id": "mark", "status": "failed"}], "stopped at step 'mark'"),
    ],
)
def test_a_finished_or_decided_run_is_not_resumed(tmp_path, events, says):
    with pytest.raises(resume.NotResumable, match=says):
        plan_of(tmp_path, *events)


def test_an_interrupted_run_is_resumed_after_its_run_end(tmp_path):
    plan = plan_of(
        tmp_path,
        {"event": "step-start", "id": "mark"},
        {"event": "run-end", "ok": False, "outcome": "interrupted", "interrupted": True},
    )
    assert plan.first == "mark"


# -- damaged journals, journal paths (no host reached) ----------------------------------------


def test_a_damaged_journal_line_stops_the_resume_naming_the_line(tmp_path, capsys):
    runbook = write_runbook(tmp_path, tmp_path)
    journal = tmp_path / "run.jsonl"
    journal.write_text(
        json.dumps({"event": "run-start", "run": "R1", "runbook": "crash-me"})
        + '\n{"event": "step-end", "id": "mark", "sta\n'
        + json.dumps({"event": "step-start", "id": "middle"})
        + "\n"
    )
    code = main(["run", str(runbook), "--host", "192.0.2.1", "--resume", str(journal)])
    err = capsys.readouterr()[1]
    assert code == ExitCode.JOURNAL
    assert f"{journal}:2: the journal is damaged" in err
    assert "start a new run" in err


def test_resume_names_a_missing_journal_file(tmp_path, capsys):
    runbook = write_runbook(tmp_path, tmp_path)
    code = main(["run", str(runbook), "--host", "192.0.2.1", "--resume", str(tmp_path / "nope")])
    assert code == ExitCode.JOURNAL
    assert "no journal file" in capsys.readouterr()[1]


def test_help_says_resume_takes_a_journal_path(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "journal file (--journal FILE)" in " ".join(capsys.readouterr()[0].split())


# -- against a real sshd ------------------------------------------------------------------


@pytest.mark.ssh
def test_resume_accepts_the_path_of_a_journal_written_with_journal(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = write_runbook(tmp_path, sim)
    journal = tmp_path / "elsewhere" / "my-run.log"  # not in the runs folder, not .jsonl
    killed = subprocess.run(  # after 8 lines: the first step ended
        cli_killed_after(
            8, "run", str(runbook), *gpu_host.cli_args(), "--yes", "--journal", str(journal)
        ),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -9
    resumed = subprocess.run(
        cli("run", str(runbook), *gpu_host.cli_args(), "--yes", "--resume", str(journal)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == ExitCode.OK, resumed.stdout + resumed.stderr
    events = read(journal).events
    assert [e["id"] for e in events if e["event"] == "step-end"] == ["mark", "middle", "last"]
    assert (sim / "marker").read_text() == "ran\n"


def _resume(runbook: Path, gpu_host, run_id: str, *extra: str, terminal: bool = False):
    args = cli("run", str(runbook), *gpu_host.cli_args(), "--yes", "--resume", run_id, *extra)
    if not terminal:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
        )
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"y\n")  # the operator's answer, waiting in the terminal
        return subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=False, stdin=follower
        )
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.ssh
def test_sigkill_at_every_journal_event_then_resume_neither_redoes_nor_skips(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = write_runbook(tmp_path, sim)
    complete = subprocess.run(
        cli("run", str(runbook), *gpu_host.cli_args(), "--yes"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert complete.returncode == ExitCode.OK
    (only,) = run_journals_in_tmp.glob("*.jsonl")
    events = len(read(only).events)
    only.unlink()
    seen_asks = seen_refusals = 0
    for kill_after in range(1, events + 1):
        (sim / "marker").unlink(missing_ok=True)
        killed = subprocess.run(
            cli_killed_after(kill_after, "run", str(runbook), *gpu_host.cli_args(), "--yes"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert killed.returncode == -9, (kill_after, killed.stderr)
        (path,) = run_journals_in_tmp.glob("*.jsonl")
        resumed = _resume(runbook, gpu_host, path.stem)
        why = f"killed after event {kill_after}: {resumed.stdout}{resumed.stderr}"
        if kill_after == events:  # killed after its run-end: a finished run
            assert resumed.returncode == ExitCode.JOURNAL, why
            assert "already finished" in resumed.stderr, why
            seen_refusals += 1
        elif resumed.returncode == ExitCode.DECLINED:
            # Killed after the confirmation, before the command went out: the marker does
            # not show it, and --yes does not cover a second send: ask on a terminal.
            assert "in flight" in resumed.stderr, why
            assert "terminal" in resumed.stderr, why
            assert not (sim / "marker").exists(), why
            seen_asks += 1
            resumed = _resume(runbook, gpu_host, path.stem, terminal=True)
            assert resumed.returncode == ExitCode.OK, why + resumed.stdout + resumed.stderr
        else:
            assert resumed.returncode == ExitCode.OK, why
        assert (sim / "marker").read_text() == "ran\n", why  # the destructive step ran once
        journal = read(path).events
        ended = [e["id"] for e in journal if e["event"] == "step-end"]
        assert ended == ["mark", "middle", "last"], why  # each step decided exactly once
        assert not (sim / "runbook-runner.lock").exists(), why
        path.unlink()
    assert seen_asks == 1
    assert seen_refusals == 1


def test_a_dry_run_is_not_resumed_and_resume_takes_no_dry_run_or_from(tmp_path, capsys):
    with pytest.raises(resume.NotResumable, match="dry run"):
        resume.plan(
            [{"event": "run-start", "run": "R1", "runbook": "crash-me", "dry_run": True}],
            load(write_runbook(tmp_path, tmp_path)),
            "R1",
        )
    runbook = write_runbook(tmp_path, tmp_path)
    for extra in (["--dry-run"], ["--from", "last"]):
        code = main(["run", str(runbook), "--host", "192.0.2.1", "--resume", "R1", *extra])
        assert code == ExitCode.BAD_INPUT
        assert "cannot be combined" in capsys.readouterr()[1]


def test_the_plan_remembers_what_the_first_part_of_the_run_acted_on(tmp_path):
    """A resumed run puts back only what its first part took out: the items of each step
    that ended having sent its commands, and of an in-flight one that may have."""
    gpu2, gpu5 = {"index": 2}, {"index": 5}
    plan = plan_of(
        tmp_path,
        {"event": "step-start", "id": "mark", "items": [gpu2]},
        {"event": "step-end", "id": "mark", "status": "ok", "acted": [gpu2]},
        {"event": "step-start", "id": "middle", "items": [gpu5]},
    )
    assert plan.changed == {"mark": (gpu2,), "middle": (gpu5,)}  # middle: in flight, maybe sent
    declined = plan_of(
        tmp_path,
        {"event": "step-start", "id": "mark", "items": [gpu2]},
        {"event": "step-end", "id": "mark", "status": "skipped"},
    )
    assert declined.changed == {}
    unconfirmed = plan_of(tmp_path, {"event": "step-start", "id": "mark", "items": [gpu2]})
    assert unconfirmed.changed == {}  # destructive, never confirmed: never sent


@pytest.mark.ssh
def test_a_run_under_a_saved_plan_resumes_only_under_that_plan(
    gpu_host, tmp_path, run_journals_in_tmp
):
    sim = gpu_host.root / "sim"
    runbook = write_runbook(tmp_path, sim)
    plan = tmp_path / "plan.json"
    made = subprocess.run(
        cli("plan", str(runbook), *gpu_host.cli_args(), "--out", str(plan)),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == ExitCode.OK, made.stdout + made.stderr
    journal = tmp_path / "run.jsonl"
    killed = subprocess.run(
        cli_killed_after(8, "run", "--plan", str(plan), *gpu_host.cli_args(), "--yes",
            "--journal", str(journal), "--approved-sha256", json.loads(plan.read_text())["sha256"]),
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert killed.returncode == -9
    proof = ("--approved-sha256", json.loads(plan.read_text())["sha256"])
    start = read(journal).first("run-start")
    assert start["plan"]["sha256"] == json.loads(plan.read_text())["sha256"]
    before = (sim / "marker").read_text() if (sim / "marker").exists() else None
    moved = plan.rename(tmp_path / "elsewhere.json")
    gone = _resume(runbook, gpu_host, str(journal), *proof)
    assert gone.returncode == ExitCode.JOURNAL, gone.stdout + gone.stderr
    assert "a resume goes on only under the same plan" in gone.stderr
    moved.rename(plan)
    # The journal says who approved it; anyone can write that: the approval is proved again.
    unproved = _resume(runbook, gpu_host, str(journal))
    assert unproved.returncode == ExitCode.BAD_INPUT, unproved.stdout + unproved.stderr
    assert "a resume proves its approval again" in unproved.stderr
    wrong = _resume(runbook, gpu_host, str(journal), "--approved-sha256", "0" * 64)
    assert wrong.returncode == ExitCode.BAD_INPUT, wrong.stdout + wrong.stderr
    assert ((sim / "marker").read_text() if (sim / "marker").exists() else None) == before
    # The same name pointing at another host (here: another port): refused before login.
    from sshd import started_hosts

    with started_hosts(1) as (other,):
        logins = other.logins()
        elsewhere = subprocess.run(
            cli("run", str(runbook), *other.cli_args(), "--yes", "--resume", str(journal), *proof),
            capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert elsewhere.returncode == ExitCode.HOST_UNREACHABLE, (
            elsewhere.stdout + elsewhere.stderr
        )
        assert "not connecting" in elsewhere.stderr + elsewhere.stdout
        assert other.logins() == logins
        assert other.calls() == []
    resumed = _resume(runbook, gpu_host, str(journal), *proof)
    assert resumed.returncode == ExitCode.OK, resumed.stdout + resumed.stderr
    assert "applying the approved plan" in resumed.stdout
    assert (sim / "marker").read_text() == "ran\n"
