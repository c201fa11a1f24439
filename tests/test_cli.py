"""The runbook command: list, show, validate; exit codes; one-line errors."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO, TESTS
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_name_kind_title(in_repo, capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == ExitCode.OK
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:]}
    assert rows["gpu-node-health"] == ["read-only", "GPU"]
    assert rows["gpu-oom-recovery"] == ["destructive", "(node)"]
    assert out.splitlines()[0].split() == ["NAME", "KIND", "TITLE"]


def test_show_prints_steps_commands_checks_parameters_and_docs(in_repo, capsys):
    code, out, _ = run_cli(capsys, "show", "gpu-node-health")
    assert code == ExitCode.OK
    for text in [
        "$ fuser -v /dev/nvidia* 2>&1",
        "idle_mib (integer, default 1024; >= 0)",
        "every gpus: memory_used_mib <= idle_mib",
        "docs/postmortems/sglang-hicache-oom.md",
        "[needs root; timeout 60s]",
    ]:
        assert text in out


def test_validate_all_shipped_runbooks(in_repo, capsys):
    code, out, err = run_cli(capsys, "validate")
    assert code == ExitCode.OK
    assert "runbooks/gpu-node-health.yaml: ok" in out
    assert "valid" in err


def test_validate_broken_corpus_prints_every_error_and_exits_2(in_repo, capsys):
    folder = TESTS / "broken-runbooks"
    expected = sum(
        1 for path in folder.glob("*.yaml") for line in path.open() if line.startswith("# expect: ")
    )
    code, out, err = run_cli(capsys, "validate", "tests/broken-runbooks")
    assert code == ExitCode.BAD_INPUT
    lines = out.splitlines()
    assert len(lines) == expected
    assert all(
        line.startswith("tests/broken-runbooks/") and line.split(":")[1].isdigit() for line in lines
    )
    assert "Traceback" not in out + err
    assert f"{len(list(folder.glob('*.yaml')))} of" in err


def test_unknown_runbook_is_one_line_exit_2(in_repo, capsys):
    code, _, err = run_cli(capsys, "show", "gpu-oom-recover")
    assert code == ExitCode.BAD_INPUT
    assert len(err.strip().splitlines()) == 1
    assert "no runbook named 'gpu-oom-recover'" in err


def test_unknown_flag_is_one_line_exit_2(in_repo, capsys):
    code, _out, err = run_cli(capsys, "validate", "--frobnicate")
    assert code == ExitCode.BAD_INPUT
    assert err.strip() == "runbook: unrecognized arguments: --frobnicate; see 'runbook --help'"


def test_runbooks_folder_from_option_and_environment(tmp_path, monkeypatch, capsys):
    (tmp_path / "gpu-node-health.yaml").write_bytes(
        (REPO / "runbooks" / "gpu-node-health.yaml").read_bytes()
    )
    monkeypatch.chdir(tmp_path.parent)
    assert run_cli(capsys, "list", "--runbooks", str(tmp_path))[0] == ExitCode.OK
    monkeypatch.setenv("RUNBOOK_PATH", str(tmp_path))
    code, out, _ = run_cli(capsys, "list")
    assert code == ExitCode.OK
    assert "gpu-node-health" in out


def test_bundled_runbooks_when_there_is_no_runbooks_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNBOOK_PATH", raising=False)
    code, out, _ = run_cli(capsys, "list")
    assert code == ExitCode.OK
    assert "gpu-node-health" in out


def test_help_documents_exit_codes_and_fits_a_screen():
    result = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "exit codes:" in result.stdout
    for code in ExitCode:
        assert f"{int(code):>3}  " in result.stdout
    # a screen: 40 lines, and one more for each exit code added since (9, 10, 11 and 12)
    assert len(result.stdout.splitlines()) <= 44


@pytest.mark.skipif(shutil.which("runbook") is None, reason="console script not installed")
def test_console_script_is_installed():
    result = subprocess.run(["runbook", "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.startswith("runbook-runner ")


def test_validate_counts_in_singular_and_plural(in_repo, capsys, tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text(
        "name: one\ntitle: t\nsummary: s\n"
        "observations: {memory: {command: free -b, parser: free}}\n"
        "checks: {c: {description: d, expect: memory.free_bytes > 'x'}}\n"
        "goal: [c]\nsteps:\n  - {id: s, title: t, run: 'true'}\n"
    )
    code, out, err = run_cli(capsys, "validate", str(one))
    assert code == ExitCode.BAD_INPUT
    assert "cannot compare memory.free_bytes (a number) with 'x' (a string)" in out
    assert err.strip().endswith("1 of 1 runbook invalid, 1 error")
    code, out, _ = run_cli(
        capsys, "validate", str(REPO / "tests" / "runbooks" / "mini-recovery.yaml")
    )
    assert code == ExitCode.OK
    assert "ok (5 steps)" in out
