"""--local with a hostile PATH and as a user who is not root; a --prometheus folder that
cannot be written (issue #38).

Each runs the command as a process of its own, as a user who is not root: when the tests
run as root, in a user namespace of its own (``unshare --user``: its uid is nobody's, and
what root owns is only the owner's to write, by its mode), else as the tester.
Nothing here changes the machine: the runbook only prints, and a "root" step goes through
``sudo -n``, which a user who is not root is refused (or which is not installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runbook_runner.exitcodes import ExitCode

REPO = Path(__file__).resolve().parent.parent

RUNBOOK = """\
name: {name}
title: t
summary: s
observations:
  words: {{command: "printf '%s\\\\n' hello", parser: lines}}
checks:
  said: {{description: it said hello twice, expect: count(words) == {count}}}
goal: [said]
steps:
  - id: as-root
    title: a root step
    run: printf '%s' step-ran
    root: true
    fixes: [said]
"""


def not_root() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed: cannot run as a user who is not root")
    probe = subprocess.run(
        ["unshare", "--user", sys.executable, "-c", "import os; print(os.geteuid())"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0 or probe.stdout.strip() == "0":
        pytest.skip(f"no user namespace here ({probe.stderr.strip()[:100]})")
    return ["unshare", "--user"]


def runbook(tmp_path: Path, count: int) -> Path:
    name = f"local-{count}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(RUNBOOK.format(name=name, count=count))
    path.chmod(0o644)
    return path


def cli(tmp_path: Path, *argv: str, path: str | None = None, cwd: Path | None = None):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [*not_root(), sys.executable, "-m", "runbook_runner", *argv],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=cwd,
    )  # fmt: skip


@pytest.fixture
def open_folder(tmp_path):
    tmp_path.chmod(0o777)  # the user namespace's nobody writes its journal here
    return tmp_path


def trojans(folder: Path) -> Path:
    """A folder of commands a hostile PATH would find first: each records that it ran."""
    log = folder / "trojan.log"
    for name in ("sudo", "printf", "sh", "id", "nvidia-smi"):
        script = folder / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit 0\n')
        script.chmod(0o755)
    return log


@pytest.mark.parametrize(
    "hostile",
    [".:{path}", "{path}::", ":{path}", "bin:{path}"],
    ids=["dot-first", "empty-last", "empty-first", "relative"],
)
def test_local_never_runs_a_command_from_the_current_directory(open_folder, hostile):
    log = trojans(open_folder)
    (open_folder / "bin").mkdir()
    for name in ("sudo", "printf"):
        shutil.copy(open_folder / name, open_folder / "bin" / name)
    path = hostile.format(path=os.environ.get("PATH", "/usr/bin:/bin"))
    done = cli(
        open_folder,
        "run", str(runbook(open_folder, 2)), "--local", "--allow-local-changes", "--yes",
        path=path, cwd=open_folder,
    )  # fmt: skip
    assert "Traceback" not in done.stderr
    assert done.returncode == ExitCode.GOAL_NOT_MET, done.stdout + done.stderr
    assert not log.exists(), log.read_text()


def test_local_as_a_user_who_is_not_root_says_a_root_step_needs_root(open_folder):
    done = cli(
        open_folder,
        "run", str(runbook(open_folder, 2)), "--local", "--allow-local-changes", "--yes",
        cwd=open_folder,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == ExitCode.GOAL_NOT_MET, out
    assert "Traceback" not in out
    assert "needs root" in out
    assert "as nobody" in out or os.geteuid() != 0  # the login the run names is this user's
    journals = list((open_folder / "state").rglob("*.jsonl"))
    assert len(journals) == 1  # journalled where this user may write


def test_a_prometheus_folder_that_cannot_be_written_is_one_line_naming_it(open_folder):
    folder = open_folder / "textfile"
    folder.mkdir()
    folder.chmod(0o555)  # root's, read-only to anyone else (and to the namespace's nobody)
    target = folder / "runbook.prom"
    done = cli(
        open_folder,
        "check", str(runbook(open_folder, 1)), "--local", "--prometheus", str(target),
        cwd=open_folder,
    )  # fmt: skip
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert f"--prometheus {target}: cannot write it" in errors[0]
    assert "goal holds" in done.stdout + done.stderr  # the check itself was made and said
    assert list(folder.iterdir()) == []  # no half file, no temporary left behind


def test_a_timed_out_command_whose_child_ignores_term_is_killed_with_its_group():
    """The TERM ends the shell; the child that ignores it is KILLed after the grace, before
    run() returns (issue 48)."""
    from runbook_runner.local import LocalTransport

    result = LocalTransport().run("(trap '' TERM; exec sleep 120) & echo $!; wait", 0.5)
    assert result.timed_out
    pid = int(result.stdout.split()[0])
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in {"Z", "gone"}, state


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("name", ["node1\nFAIL forged reason", "node1\rx", "a b"])
def test_a_host_name_that_would_split_a_line_is_refused_in_one_line(open_folder, name):
    """In a UTS namespace of its own, this machine is named with a newline (issue 48): the
    header and a Slurm drain reason would be split by it; the run refuses it, exit 2."""
    program = (
        "import socket, sys; socket.sethostname(sys.argv[1]); "
        "from runbook_runner.cli import main; raise SystemExit(main(sys.argv[2:]))"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--uts", sys.executable, "-c", program, name,
         "check", str(runbook(open_folder, 1)), "--local"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(open_folder / "s")},
    )  # fmt: skip
    if "unshare" in done.stderr and done.returncode != ExitCode.BAD_INPUT:
        pytest.skip(f"no user namespace here: {done.stderr.strip()}")
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "not a host name" in done.stderr


def test_local_observations_run_side_by_side_unless_alone(tmp_path):
    """Two commands that each wait for the other's mark: both succeed only side by side, as
    over SSH (ssh/batch.py); alone, the first gives up after 5 s (issue 48: a node whose
    nvidia-smi hangs answers in one timeout, not in one per observation)."""
    from runbook_runner.local import LocalTransport
    from runbook_runner.ssh.batch import BatchCommand

    def meet(me: str, other: str, *, alone: bool = False) -> BatchCommand:
        tries = 100 if alone else 1200  # of 0.05 s
        command = (
            f"touch {tmp_path}/{me}; i=0; "
            f"while [ ! -e {tmp_path}/{other} ] && [ $i -lt {tries} ]; do sleep 0.05; "
            f"i=$((i+1)); done; [ -e {tmp_path}/{other} ]"
        )
        return BatchCommand(command, 120, alone=alone)

    transport = LocalTransport()
    together = transport.run_many([meet("a", "b"), meet("b", "a")])
    assert [r.exit_status for r in together] == [0, 0]
    for name in ("a", "b"):
        (tmp_path / name).unlink()
    apart = transport.run_many([meet("a", "b", alone=True), meet("b", "a", alone=True)])
    assert [r.exit_status for r in apart] == [1, 0]
