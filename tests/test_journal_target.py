"""``--journal FILE`` appends only to a run journal: a symbolic link, or an existing file
that is not a journal, is refused in one line (exit 2) and left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from runbook_runner import journal
from runbook_runner.exitcodes import ExitCode


def run_with_journal(path: Path, host, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``runbook run`` on a real sshd's idle host (the run would reach its journal)."""
    argv = ["run", "gpu-oom-recovery", *host.cli_args(), "--yes", "--journal", str(path)]
    return subprocess.run(
        [sys.executable, "-m", "runbook_runner", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path)},
        cwd=tmp_path,
        check=False,
    )


@pytest.mark.ssh
def test_a_journal_through_a_symlink_is_refused_and_its_target_untouched(gpu_host, tmp_path):
    precious = tmp_path / "precious.conf"
    precious.write_text("keep = me\n")
    link = tmp_path / "run.jsonl"
    link.symlink_to(precious)
    done = run_with_journal(link, gpu_host, tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert done.stderr.count("\n") == 1
    assert "a symbolic link: not written" in done.stderr
    assert precious.read_text() == "keep = me\n"


@pytest.mark.ssh
def test_a_file_that_is_not_a_journal_is_refused_and_untouched(gpu_host, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    done = run_with_journal(notes, gpu_host, tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert "not a run journal" in done.stderr
    assert notes.read_text() == "my notes\n"


@pytest.mark.ssh
def test_a_journal_or_no_file_at_all_is_accepted(gpu_host, tmp_path):
    journal.check_target(tmp_path / "new.jsonl")  # not there yet
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    journal.check_target(empty)
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps({"t": "x", "event": "run-start", "run": "r"}) + "\n")
    journal.check_target(earlier)
    assert run_with_journal(earlier, gpu_host, tmp_path).returncode == ExitCode.OK
    assert journal.read(earlier).first("run-start") is not None
    earlier.write_text('{"t": "x", "event": "step-start"}\n')
    with pytest.raises(journal.UnknownRun, match="not a run journal"):
        journal.check_target(earlier)
