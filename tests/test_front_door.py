"""The front door: the exit codes said the same way everywhere, and ``run --plan`` as the
README's step 4 types it (the plan's host and key; an approver who is named)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import paramiko
import pytest
from test_habits import bash_complete
from test_practice_host import Sim

from conftest import REPO
from runbook_runner.exitcodes import WORDS, ExitCode, sentence
from runbook_runner.kb.docs_page import render_page
from runbook_runner.runbook import load


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_exit_code_has_its_words_and_the_sentence_names_each_once():
    assert set(WORDS) == set(ExitCode)
    said = sentence()
    for code, words in WORDS.items():
        assert said.count(f"{int(code)} {words}") == 1, code


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_readme_and_the_home_page_list_the_exit_codes_as_exitcodes_py_says(page):
    assert sentence() in flat((REPO / page).read_text())


@pytest.mark.parametrize("path", sorted((REPO / "runbooks").glob("*.yaml")), ids=lambda p: p.stem)
def test_each_runbook_page_lists_the_exit_codes_as_exitcodes_py_says(path):
    assert sentence() in flat(render_page(load(path), f"runbooks/{path.name}"))


def test_help_and_the_exit_codes_page_list_the_same_codes_with_the_same_words():
    shown = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    for code, words in WORDS.items():
        assert f"{int(code):>3}  {words}" in shown, code
    table = (REPO / "docs" / "manual" / "exit-codes.md").read_text()
    rows = [int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert rows == [int(c) for c in ExitCode]


def runbook(*argv: str, env: dict[str, str], cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook_runner", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=240,
    )


def test_run_plan_goes_to_the_plans_host_and_takes_its_key_but_not_another(
    tmp_path, run_journals_in_tmp
):
    """Step 4 without the SSH options but the key to log in with: the plan names the host,
    port and user, and its host key stands in for a known_hosts that lacks the host; a
    known_hosts with another key for it is still refused. An empty approver is refused."""
    sim = Sim(tmp_path / "sim", "--scenario", "oom-crash")
    home = tmp_path / "home"  # no ~/.ssh/known_hosts, no ~/.ssh/config
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home)}
    try:
        options = sim.options()
        key = options[options.index("-i") + 1]
        made = runbook(
            "plan", "gpu-oom-recovery", *options, "--out", "plan.json", env=env, cwd=tmp_path
        )
        assert made.returncode == 0, made.stderr
        (digest,) = re.findall(r"plan sha256: ([0-9a-f]{64})", made.stdout)
        approval = ["--approved-sha256", digest, "--yes"]

        empty = runbook(
            "run", "--plan", "plan.json", "--approved-by", " ", *approval, env=env, cwd=tmp_path
        )
        assert empty.returncode == ExitCode.BAD_INPUT
        assert empty.stderr.count("\n") == 1, empty.stderr
        assert "--approved-by is empty" in empty.stderr

        wrong = tmp_path / "known_hosts"  # the host named with another key
        port = options[options.index("--port") + 1]
        other = paramiko.ECDSAKey.generate()  # the type the practice host offers
        wrong.write_text(f"[127.0.0.1]:{port} {other.get_name()} {other.get_base64()}\n")
        refused = runbook(
            "run", "--plan", "plan.json", "-i", key, "--known-hosts", str(wrong),
            "--approved-by", "alice", *approval, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert refused.returncode == ExitCode.HOST_UNREACHABLE, refused.stderr
        assert "HOST KEY CHANGED" in refused.stderr or "another host" in refused.stderr

        ran = runbook(
            "run", "--plan", "plan.json", "-i", key, "--approved-by", "alice", *approval,
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert ran.returncode == ExitCode.OK, ran.stdout[-2000:] + ran.stderr
        assert "the one the plan plan.json records" in ran.stdout + ran.stderr
        assert not (home / ".ssh" / "known_hosts").exists()  # accepted, not recorded
    finally:
        sim.stop()


@pytest.mark.parametrize("command", ["sim", "test"])
def test_the_state_option_points_to_a_page_that_lists_the_state_files_keys(command):
    shown = subprocess.run(
        [sys.executable, "-m", "runbook_runner", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
    ).stdout
    (said,) = [line for line in shown.splitlines() if line.strip().startswith("--state")]
    (page,) = re.findall(r"docs/\S+\.md", said)
    assert "README" not in said
    assert "Every key is optional" in (REPO / page).read_text()


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("runbook drill gpu-oom-recovery --scenario oom", ["oom-crash"]),
        ("runbook sim --scenario stuck", ["stuck-d-state"]),
        ("runbook test gpu-oom-recovery --scenario slow", ["slow-teardown"]),
        ("runbook compare gpu-oom-recovery --scenario xid-", ["xid-79", "xid-95-gpu5"]),
        ("runbook drill gpu-oom-recovery --scenario rand", ["random"]),
    ],
)
def test_bash_completes_the_scenario_names(tmp_path, line, offered):
    assert bash_complete(tmp_path, line) == offered
