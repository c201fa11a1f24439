"""``runbook sim --folder``: a new or empty folder is used, one an earlier ``runbook sim``
made is reused, and any other is refused with what is in the way named."""

from __future__ import annotations

import os
import subprocess
import sys

from test_practice_host import Sim

from conftest import REPO
from runbook_runner.cli.sim import MARKER
from runbook_runner.exitcodes import ExitCode


def sim_refused(folder) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook_runner", "sim", "--folder", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_a_folder_with_someone_elses_files_is_refused_naming_them(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    (folder / "bin").mkdir()
    done = sim_refused(folder)
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert "in the way: bin, notes.txt" in done.stderr
    assert "Traceback" not in done.stderr
    assert (folder / "notes.txt").read_text() == "keep me"  # nothing of it was touched
    afile = tmp_path / "afile"
    afile.write_text("x")
    done = sim_refused(afile)
    assert done.returncode == ExitCode.BAD_INPUT
    assert "a file is in the way" in done.stderr


def test_a_folder_runbook_sim_made_is_reused(tmp_path):
    folder = tmp_path / "practice"
    first = Sim(folder)
    assert first.stop()[0] == 0
    assert (folder / MARKER).is_file()
    assert (folder / "hosts").is_dir()  # what the first one left: the next one may reuse it
    second = Sim(folder)  # serves again in the same folder
    try:
        assert second.host_folders()
    finally:
        assert second.stop()[0] == 0
