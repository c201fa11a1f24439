"""`runbook` never prints a traceback: faults and odd input are one line and their own code."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, TESTS
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode

MINI = str(TESTS / "runbooks" / "mini-recovery.yaml")
HEALTH = (REPO / "runbooks" / "gpu-node-health.yaml").read_text()


@pytest.mark.ssh
def test_full_disk_while_journalling_is_one_line_and_exit_7(gpu_host, tmp_path):
    """A journal on a file system that is full: a 4 KiB tmpfs of a mount namespace of the
    run's own (a journal is a regular file: /dev/full is refused before the run)."""
    full = tmp_path / "full"
    full.mkdir()
    argv = ["run", MINI, *gpu_host.cli_args(), "--yes", "--journal", str(full / "run.jsonl")]
    script = 'mount -t tmpfs -o size=4k full "$1" && shift && exec "$@"'
    own_tmpfs = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]
    done = subprocess.run(
        [*own_tmpfs, str(full), sys.executable, "-m", "runbook_runner", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path)},
        check=False,
    )
    if "mount" in done.stderr and "runbook" not in done.stderr:
        pytest.skip(f"no tmpfs of our own here: {done.stderr.strip()}")
    assert done.returncode == ExitCode.JOURNAL, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"cannot write the run journal {full / 'run.jsonl'}" in lines[0]
    assert "No space left on device" in lines[0]
    assert not any(call[:2] == ["systemctl", "stop"] for call in gpu_host.calls())


def test_drill_with_stdin_closed_is_declined_not_a_traceback(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "NO_COLOR": "1"}
    env.pop("RUNBOOK_DEBUG", None)
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m runbook_runner drill gpu-oom-recovery <&-', sys.executable],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == ExitCode.DECLINED, done.stdout + done.stderr
    assert "stdin is not a terminal" in done.stdout


def test_deeply_nested_runbook_given_to_run_is_bad_input(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\nsteps: " + "[" * 500 + "]" * 500 + "\n")
    code = main(["run", str(path), "--host", "127.0.0.1", "--port", "9"])
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert "Traceback" not in out + err
    assert "deep.yaml:2:" in err
    assert "nested more than 64 levels deep" in err


# -- fuzzing the entry point ----------------------------------------------------------------

ODD = st.sampled_from(
    [
        "",
        "-",
        "--",
        "x" * 300,
        "\x1b[2J",
        "é",
        "\udcff",
        "a=b",
        "=",
        "idle_mib=",
        "idle_mib=1e999",
        "idle_mib=" + "9" * 5000,
        "idle_mib=-1",
        "--set",
        "--json",
        "--yes",
        "--dry-run",
        "--from",
        "nope",
        "--last",
        "-5",
        "0",
        "--markdown",
        "/dev/null",
        "/dev/full",
        "/",
        "gpu-node-health",
        "gpu-oom-recovery",
        "--runbooks",
        "--scenario",
        "--port",
        "99999",
        "--connect-timeout",
        "nan",
        "--resume",
        "show",
        "../../etc/passwd",
    ]
)
COMMANDS = st.sampled_from(["list", "show", "validate", "runs", "check", "run", "bogus", "--help"])


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, max(0, len(lines) - 1)))
        how = data.draw(st.sampled_from(["drop", "dup", "insert", "garble"]))
        if how == "drop" and lines:
            lines.pop(at)
        elif how == "dup" and lines:
            lines.insert(at, lines[at])
        elif how == "insert":
            lines.insert(
                at,
                data.draw(
                    st.sampled_from(
                        [
                            "<<: *nope",
                            "x: &a [*a]",
                            "  - {",
                            "\t- tab",
                            "steps: 5",
                            "let: {a: '10 ** 10 ** 10'}",
                            "checks: {c: {expect: '" + "(" * 60 + "1'}}",
                            "observations: {o: {command: 'echo \"{{ x }}\"', parser: lines}}",
                            "name: " + "\x00",
                            "? [a, b]\n: c",
                        ]
                    )
                ),
            )
        elif lines:
            line = lines[at]
            cut = data.draw(st.integers(0, len(line)))
            lines[at] = (
                line[:cut]
                + data.draw(
                    st.sampled_from(
                        ["{", "]", ":", "'", '"', "*", "&", "!!python/object:os.system"]
                    )
                )
                + line[cut:]
            )
    return "\n".join(lines) + "\n"


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=COMMANDS, rest=st.lists(ODD, max_size=5), data=st.data())
def test_main_never_raises_nor_prints_a_traceback(command, rest, data, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("RUNBOOK_DEBUG", raising=False)
    with tempfile.TemporaryDirectory() as folder:
        runbook = Path(folder) / "gpu-node-health.yaml"
        runbook.write_text(_mutate(HEALTH, data), errors="surrogateescape")
        argv = [command]
        if command in {"show", "validate", "check", "run"} and data.draw(st.booleans()):
            argv.append(str(runbook))
        argv += rest
        if command in {"check", "run"}:
            argv += ["--host", "127.0.0.1", "--port", "9", "--connect-timeout", "1"]
        monkeypatch.setenv("XDG_STATE_HOME", folder)
        try:
            code = main(argv)
        except SystemExit as leaving:  # --help prints and leaves through argparse
            code = leaving.code if isinstance(leaving.code, int) else 0
        out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "internal error" not in err, (argv, err)
    assert code in set(ExitCode), (argv, code, err)


@pytest.mark.hand_written_journal  # a line nested thousands deep, on purpose
def test_runs_show_of_a_journal_nested_thousands_deep_is_not_a_traceback(
    run_journals_in_tmp, capsys
):
    run_journals_in_tmp.mkdir(parents=True)
    journal = run_journals_in_tmp / "20261130T000000Z-x-h-0000.jsonl"
    journal.write_text(
        '{"event": "run-start", "t": "x", "runbook": "x"}\n' + "[" * 100_000 + "]" * 100_000 + "\n"
    )
    code = main(["runs", "show", journal.stem])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "internal error" not in err
    assert code == ExitCode.OK
    assert ".jsonl:2: line " in err


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "/dev/zero"],
        ["show", "/dev/zero"],
        ["test", "benchmarks/ten-steps.yaml", "--state", "/dev/zero"],
        ["check", "benchmarks/ten-steps.yaml", "--inventory", "/dev/zero"],
    ],
)
def test_a_file_that_never_ends_is_refused_not_read_until_memory_runs_out(argv, capsys):
    """`runbook validate /dev/zero` read until the OOM killer came (found by the fuzzer
    above with /dev/full); every file named on the command line is read with a bound."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT, err
    assert "/dev/zero" in out + err
    assert "a character device, not a regular file" in out + err
    assert "Traceback" not in out + err


def test_the_bound_is_exact(tmp_path):
    from runbook_runner import localfile

    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert localfile.read_bytes(path, 10) == b"x" * 10
    with pytest.raises(localfile.TooLarge) as raised:
        localfile.read_bytes(path, 9)
    assert isinstance(raised.value, OSError)
    assert raised.value.filename == str(path)
