"""``runbook compare``: two versions of a runbook on the scenarios of the matrix, and where
they differ. Real drills: the simulated hosts over real SSH, in simulated time."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from sshd import only_simulated_hosts_start

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode

RECOVERY = REPO / "runbooks" / "gpu-oom-recovery.yaml"


def _changed(text: str) -> str:
    """A change a reviewer could miss: the idle threshold raised so far that GPUs holding
    96 GiB count as released (the oom-crash row's resets would no longer happen)."""
    changed = text.replace(
        "idle_mib: {type: integer, default: 1024,", "idle_mib: {type: integer, default: 100000,"
    )
    assert changed != text
    return changed


@pytest.fixture
def versions(tmp_path):
    """The shipped recovery runbook (old) and a changed copy (new), each under its name."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = tmp_path / "old" / "gpu-oom-recovery.yaml"
    new = tmp_path / "new" / "gpu-oom-recovery.yaml"
    shutil.copy(RECOVERY, old)
    new.write_text(_changed(RECOVERY.read_text()))
    return old, new


def test_a_changed_runbook_shows_the_differing_scenario_and_exits_1(capsys, monkeypatch, versions):
    only_simulated_hosts_start(monkeypatch)
    old, new = versions
    code = main(["compare", str(old), str(new), "--scenario", "oom-crash"])
    out = capsys.readouterr().out
    assert code == ExitCode.GOAL_NOT_MET
    assert "oom-crash: DIFFERS" in out
    assert "old host: reset GPU 0 (at 30 s)" in out
    assert "old host: reset GPU 2 (at 30 s)" in out
    assert "old ends: exit 0: the goal holds, reached by reset-gpus" in out
    assert "1 of 1 scenario(s) differ: oom-crash" in out


def test_the_same_runbook_differs_on_no_scenario_and_exits_0(capsys, monkeypatch, versions):
    only_simulated_hosts_start(monkeypatch)
    old, _ = versions
    code = main(
        ["compare", str(old), str(RECOVERY), "--scenario", "oom-crash", "--scenario", "leaked-shm"]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert "oom-crash: same" in out
    assert "leaked-shm: same" in out
    assert "    host: remove /dev/shm/sglang_hicache_0 (at 0 s)" in out
    assert "no scenario differs (2 compared)" in out


def test_a_name_compares_the_working_copy_with_the_last_commit(capsys, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    folder = tmp_path / "repo"
    (folder / "runbooks").mkdir(parents=True)
    path = folder / "runbooks" / "gpu-oom-recovery.yaml"
    shutil.copy(RECOVERY, path)

    def git(*argv):
        subprocess.run(
            ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *argv],
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "the runbook")
    path.write_text(_changed(path.read_text()))
    code = main(
        [
            "compare",
            "gpu-oom-recovery",
            "--runbooks",
            str(folder / "runbooks"),
            "--scenario",
            "oom-crash",
        ]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.GOAL_NOT_MET
    assert "HEAD:runbooks/gpu-oom-recovery.yaml (old) and gpu-oom-recovery (new)" in out
    assert "oom-crash: DIFFERS" in out


def test_a_name_outside_a_git_checkout_is_bad_input(capsys, tmp_path):
    folder = tmp_path / "runbooks"
    folder.mkdir()
    shutil.copy(RECOVERY, folder / "gpu-oom-recovery.yaml")
    code = main(["compare", "gpu-oom-recovery", "--runbooks", str(folder)])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert "is not in a git checkout: give both files (runbook compare OLD.yaml NEW.yaml)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such.yaml", str(RECOVERY)], "no-such.yaml"),
        ([str(RECOVERY), str(RECOVERY), "--scenario", "nope"], "--scenario nope: no such scenario"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code = main(["compare", *argv])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert message in err
    assert "Traceback" not in err
