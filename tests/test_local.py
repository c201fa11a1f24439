"""``--local``: a runbook on this machine itself, without SSH (issue 25, item 5).

The same runner, parsers, checks and journal as over SSH: a read-only runbook whose commands
are harmless here gives the same JSON run locally as over the test sshd to 127.0.0.1.
"""

from __future__ import annotations

import json

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read

READ_ONLY = """\
name: local-look
title: Harmless observations
summary: For the --local tests.
observations:
  kernel: {command: uname -s, parser: lines}
  ostype: {command: cat /proc/sys/kernel/ostype, parser: lines}
  words: {command: "printf '%s\\\\n' one 'two words' three", parser: lines}
  missing: {command: "cat /nonexistent/rbr-file", parser: lines}
checks:
  linux: {description: a Linux kernel, expect: count(kernel) == 1}
  three-lines: {description: three lines, expect: count(words) == 3}
  never-four: {description: not four lines, expect: count(words) == 4}
  needs-missing: {description: a file that is not there, expect: count(missing) == 1}
goal: [linux, three-lines, never-four, needs-missing]
steps: []
"""

CHANGES = """\
name: local-change
title: A destructive step on this machine
summary: For the --local tests.
parameters:
  where: {type: string, default: /nonexistent, description: d}
observations:
  marker:
    command: [sh, -c, 'ls -- "$1" 2>/dev/null | grep -x marker || true', sh, "{{ where }}"]
    parser: lines
checks:
  marked: {description: the marker is there, expect: count(marker) == 1}
goal: [marked]
steps:
  - id: mark
    title: Write the marker
    run: [touch, --, "{{ where }}/marker"]
    destructive: true
    fixes: goal
    affects: files
"""


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.ssh
def test_local_json_is_the_ssh_json_for_the_same_host_state(gpu_host, tmp_path, capsys):
    runbook = tmp_path / "local-look.yaml"
    runbook.write_text(READ_ONLY)
    code, out, err = cli(capsys, "check", str(runbook), "--local", "--json")
    local = json.loads(out)
    assert code == ExitCode.GOAL_NOT_MET, err  # never-four fails; needs-missing cannot tell
    code_ssh, out, err = cli(capsys, "check", str(runbook), *gpu_host.cli_args(), "--json")
    remote = json.loads(out)
    assert code_ssh == code
    assert remote.pop("host") == "127.0.0.1"
    assert local.pop("host") != "127.0.0.1"
    assert local == remote
    statuses = {c["name"]: c["status"] for c in local["checks"]}
    assert statuses == {
        "linux": "ok",
        "three-lines": "ok",
        "never-four": "failing",
        "needs-missing": "cannot-tell",
    }


def test_a_destructive_runbook_refuses_local_unless_asked(tmp_path, capsys, run_journals_in_tmp):
    runbook = tmp_path / "local-change.yaml"
    runbook.write_text(CHANGES)
    where = ["--set", f"where={tmp_path}"]
    code, _, err = cli(capsys, "run", str(runbook), "--local", "--yes", *where)
    assert code == ExitCode.BAD_INPUT
    assert "only with --allow-local-changes" in err
    assert not (tmp_path / "marker").exists()
    code, _, err = cli(capsys, "check", str(runbook), "--local", "--host", "h")
    assert code == ExitCode.BAD_INPUT
    assert "--local or --host" in err


def test_a_destructive_local_run_when_asked_takes_the_lock_journals_and_releases_it(
    tmp_path, capsys, run_journals_in_tmp, monkeypatch
):
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    monkeypatch.setenv("RUNBOOK_LOCK_DIR", str(lock_dir))
    runbook = tmp_path / "local-change.yaml"
    runbook.write_text(CHANGES)
    code, out, err = cli(
        capsys, "run", str(runbook), "--local", "--allow-local-changes", "--yes",
        "--set", f"where={tmp_path}",
    )  # fmt: skip
    assert code == ExitCode.OK, out + err
    assert (tmp_path / "marker").exists()
    assert list(lock_dir.iterdir()) == []  # the lock was taken and released
    (path,) = run_journals_in_tmp.glob("*.jsonl")
    events = [e["event"] for e in read(path).events]
    assert events[0] == "run-start"
    assert "lock" in events
    assert events[-1] == "run-end"
