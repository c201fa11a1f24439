"""Writing the next runbook: runbook new, runbook test, the parser reference, the paper cuts."""

from __future__ import annotations

import html
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO
from runbook_runner.cli import build_parser, main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.kb.docs_page import render_page
from runbook_runner.observe import PARSERS
from runbook_runner.runbook import RunbookInvalid, load
from runbook_runner.simhost.drill import changes as drill_changes
from runbook_runner.simhost.sshserver import DrillHost
from runbook_runner.simhost.statefile import StateFileError, host_from_state

GIB = 1024**3


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the runbooks, the docs and mkdocs.yml, as the working folder."""
    for name in ("docs", "runbooks"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNBOOK_PATH", raising=False)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def shell_output(host, command: str) -> tuple[int, str]:
    """The command on the simulated host's real shell, with its stand-ins (no SSH)."""
    simulated = DrillHost(host)
    try:
        done = simulated.run_local(command)
    finally:
        simulated.stop()
    return done.returncode, done.stdout.decode()


# -- runbook new ------------------------------------------------------------------------------


def test_new_writes_a_skeleton_that_validates_and_links_its_docs_page(project, capsys):
    code, out, _ = run_cli(
        capsys, "new", "tmp-free-space", "--docs", "pitfalls/kv-cache-capacity.md"
    )
    assert code == ExitCode.OK
    runbook = load(project / "runbooks" / "tmp-free-space.yaml")
    assert runbook.docs == ("pitfalls/kv-cache-capacity.md",)
    page = (project / "docs" / "pitfalls" / "kv-cache-capacity.md").read_text()
    assert "(../runbooks/tmp-free-space.md)" in page
    commands = [line.strip() for line in out.splitlines() if line.startswith("  runbook ")]
    assert [c.split()[1] for c in commands] == ["validate", "show", "test"]
    assert run_cli(capsys, *shlex.split(commands[0])[1:])[0] == ExitCode.OK
    assert run_cli(capsys, *shlex.split(commands[1])[1:])[0] == ExitCode.OK


def test_new_refuses_to_overwrite_a_bad_name_and_a_missing_page(project, capsys):
    existing = (project / "runbooks" / "gpu-node-health.yaml").read_text()
    code, _, err = run_cli(capsys, "new", "gpu-node-health", "--docs", "index.md")
    assert code == ExitCode.BAD_INPUT
    assert "already exists" in err
    assert (project / "runbooks" / "gpu-node-health.yaml").read_text() == existing
    code, _, err = run_cli(capsys, "new", "Tmp_Free", "--docs", "pitfalls/kv-cache-capacity.md")
    assert code == ExitCode.BAD_INPUT
    assert "kebab-case" in err
    code, _, err = run_cli(capsys, "new", "tmp-free", "--docs", "pitfalls/nope.md")
    assert code == ExitCode.BAD_INPUT
    assert "no such page" in err
    assert not (project / "runbooks" / "tmp-free.yaml").exists()


def test_new_without_a_terminal_asks_for_docs(project, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115
    code, _, err = run_cli(capsys, "new", "tmp-free")
    assert code == ExitCode.BAD_INPUT
    assert "--docs PAGE" in err
    assert "pitfalls/kv-cache-capacity.md" in err


def test_new_on_a_terminal_asks_which_docs_page(project, capsys, monkeypatch):
    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: "2")
    code, out, _ = run_cli(capsys, "new", "tmp-free")
    assert code == ExitCode.OK
    listed = [line.split(". ", 1)[1] for line in out.splitlines() if line.startswith("  2. ")]
    assert load(project / "runbooks" / "tmp-free.yaml").docs == tuple(listed)


# -- the whole way: new, edit, validate, test, the site -----------------------------------


def readme_walkthrough() -> tuple[list[str], str, str]:
    """The site's "Add a runbook" page: its five commands, the runbook edit, the state file
    (the walkthrough, before the page's sections on the list form and on changing a runbook)."""
    section = (REPO / "docs" / "manual" / "authoring.md").read_text().split("\n## ", 1)[0]
    blocks = [
        (language, textwrap.dedent(body))
        for language, body in re.findall(r"```(\w+)\n(.*?)^ *```", section, re.M | re.S)
    ]
    (commands,) = [body for language, body in blocks if language == "sh"]
    edit, state = [body for language, body in blocks if language == "yaml"]
    return commands.splitlines(), edit, state


def test_a_new_tmp_free_space_runbook_from_new_to_the_site(project, capsys, tmp_path_factory):
    """The "Add a runbook" page's five commands, as written, from `runbook new` to the site."""
    commands, edit, state = readme_walkthrough()
    assert [c.split()[:2] for c in commands] == [
        ["runbook", "new"],
        ["$EDITOR", "runbooks/tmp-free-space.yaml"],
        ["runbook", "validate"],
        ["runbook", "test"],
        ["mkdocs", "build"],
    ]
    new, _, validate, test, _ = (shlex.split(c)[1:] for c in commands)
    assert run_cli(capsys, *new)[0] == ExitCode.OK
    path = project / "runbooks" / "tmp-free-space.yaml"
    skeleton = path.read_text()
    backslash = "  server_pattern:\n    type: string\n    default: 'vllm\\.entrypoints'\n    description: The server, e.g. vllm\\.entrypoints.\n"
    edited = edit.replace("observations:", backslash + "\nobservations:", 1)
    write(path, skeleton[: skeleton.index("parameters:")] + edited)
    code, out, _ = run_cli(capsys, *validate)
    assert code == ExitCode.OK
    assert "ok (0 steps)" in out

    write(project / "full-tmp.yaml", state)
    code, out, _ = run_cli(capsys, *test)
    assert code == ExitCode.GOAL_NOT_MET
    assert "FAIL tmp-has-space: filesystem /tmp: Avail 512.0 MiB, expected >= 1.0 GiB" in out
    assert "Delete old files under /tmp" in out
    write(project / "full-tmp.yaml", state.replace("19.5 GiB", "1 GiB"))
    code, out, _ = run_cli(capsys, *test)
    assert code == ExitCode.OK
    assert "ok   the goal's 1 check holds" in out
    assert "The goal held already: no rung was needed." in out

    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '- "Tmp free space": runbooks/tmp-free-space.md' in (project / "mkdocs.yml").read_text()
    page = (site / "runbooks" / "tmp-free-space.html").read_text()
    assert 'href="tmp-free-space.html"' in page  # the nav lists it
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "available_bytes >= min_free_bytes" in text
    assert "vllm\\.entrypoints" in text  # the description's backslash survives Markdown


# -- runbook test ------------------------------------------------------------------------------


def test_test_with_a_scenario_is_the_drill_without_questions(capsys, in_repo):
    code, out, _ = run_cli(capsys, "test", "gpu-oom-recovery", "--scenario", "oom-crash")
    assert code == ExitCode.OK
    assert "Test: oom-crash" in out
    assert "reset GPU 0" in out
    assert "reset GPU 2" in out


def test_a_bad_state_file_is_one_line_exit_2(capsys, in_repo, tmp_path):
    bad = write(tmp_path / "bad.yaml", "filesystem: []\n")
    code, _out, err = run_cli(capsys, "test", "gpu-node-health", "--state", str(bad))
    assert code == ExitCode.BAD_INPUT
    assert "unknown key 'filesystem'; did you mean 'filesystems'?" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli(
        capsys, "test", "gpu-node-health", "--state", str(tmp_path / "none.yaml")
    )
    assert code == ExitCode.BAD_INPUT


def test_the_state_file_maps_onto_the_simulated_host():
    host = host_from_state(
        {
            "gpus": [{"orphaned_mib": 96410}, {}],
            "processes": [
                {"pid": 42, "cmdline": "python3 -m vllm.entrypoints", "gpu_mib": {1: 512}}
            ],
            "memory": {"total": "64 GiB", "used": "60 GiB"},
            "filesystems": [{"mounted_on": "/tmp", "size": "2 GiB", "used": "1.5 GiB"}],
            "files": {"/proc/sys/kernel/pid_max": "4194304\n"},
        }
    )
    assert [host.used_mib(g) for g in host.gpus] == [96413, 515]
    status, text = shell_output(host, "cat /proc/meminfo")
    info = PARSERS["meminfo"].parse(text, status, "cat /proc/meminfo")
    assert info.mem_total_bytes == 64 * GIB
    assert info.mem_available_bytes == 4 * GIB
    status, text = shell_output(host, "df -B1 --output=target,avail /tmp/x")
    (tmp,) = PARSERS["df"].parse(text, status, "df -B1")
    assert (tmp.mounted_on, tmp.available_bytes) == ("/tmp", GIB // 2)
    status, text = shell_output(host, "df -P /")
    assert PARSERS["df"].parse(text, status, "df -P")[0].mounted_on == "/"
    assert shell_output(host, "cat /proc/sys/kernel/pid_max") == (0, "4194304\n")
    with pytest.raises(StateFileError, match="not a size"):
        host_from_state({"memory": {"total": "lots"}})


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"processes": 1}, "processes: expected a list, got 1"),
        ({"kernel_messages": True}, "kernel_messages: expected a list"),
        ({"services": 1}, "services: expected a list"),
        ({"gpus": [{"orphaned_mib": "lots"}]}, "gpus[0].orphaned_mib: expected an integer"),
        ({"gpus": [{"persistence": "yes"}]}, "gpus[0].persistence: expected true or false"),
        ({"processes": [{"pid": 1, "cmdline": "x", "gpu_mib": {0: "x"}}]}, "processes[0].gpu_mib"),
        ({"processes": [{"pid": "one"}]}, "processes[0].pid: expected an integer"),
    ],
)
def test_a_state_file_value_of_the_wrong_type_is_refused_by_name(state, message):
    """Found by fuzzing host_from_state: these crashed (`processes: 1`), or were taken and
    crashed the simulated host in the middle of the run (a GPU's memory given as text)."""
    with pytest.raises(StateFileError, match=re.escape(message)):
        host_from_state(state)


@pytest.mark.parametrize(
    ("command", "parser"),
    [
        ("df -B1 --output=source,fstype,size,used,avail,pcent,file,target /tmp", "df"),
        ("df -P", "df"),
        ("df -h /dev/shm", "df"),
        ("df", "df"),
        ("cat /proc/meminfo", "meminfo"),
        ("systemctl show -p ActiveState,MainPID nvidia-persistenced", "systemctl-show"),
        ("systemctl show --property=LoadState dcgm-exporter", "systemctl-show"),
    ],
)
def test_simulated_df_meminfo_and_systemctl_show_parse(command, parser):
    status, text = shell_output(host_from_state({}), command)
    assert status == 0
    assert PARSERS[parser].parse(text, status, command)


def test_simulated_systemctl_show_follows_the_services_and_changes_nothing():
    host = host_from_state({"services": [{"name": "nvidia-persistenced", "active": False}]})
    _, text = shell_output(host, "systemctl show -p ActiveState,LoadState nvidia-persistenced")
    unit = PARSERS["systemctl-show"].parse(text, 0, "systemctl show")
    assert (unit.active_state, unit.load_state) == ("inactive", "loaded")
    assert drill_changes([["systemctl", "show", "-p", "ActiveState", "x"]]) == []


# -- the parser reference ---------------------------------------------------------------------


def test_show_parsers_lists_every_parser_and_its_fields(capsys):
    code, out, _ = run_cli(capsys, "show", "--parsers")
    assert code == ExitCode.OK
    for name in PARSERS:
        assert f"\n{name}: " in "\n" + out
    assert "available_bytes (int | None [bytes])" in out
    assert "fields named from the output's header: str | None" in out


def test_an_open_record_type_checks_a_typo_on_a_closed_one(tmp_path):
    text = (
        "name: t\ntitle: T\nsummary: S\n"
        "observations:\n  disks: {command: lsblk, parser: table}\n  tmp: {command: df -P /tmp, parser: df}\n"
        "checks:\n  a: {description: d, every: disks, expect: \"type == 'disk'\"}\n"
        "  b: {description: d, every: tmp, expect: avail_bytes > 0}\ngoal: [a, b]\n"
    )
    with pytest.raises(RunbookInvalid) as raised:
        load(write(tmp_path / "t.yaml", text))
    (only,) = raised.value.lines  # a table's column is a field; a typo on df's record is not
    assert "checks.b.expect: unknown name 'avail_bytes'; did you mean 'available_bytes'?" in only


# -- paper cuts ---------------------------------------------------------------------------------


def test_validate_a_missing_file_says_the_file_does_not_exist(capsys, in_repo):
    code, _, err = run_cli(capsys, "validate", "runbooks/mine.yaml")
    assert code == ExitCode.BAD_INPUT
    assert err.strip() == "runbook: runbooks/mine.yaml: the file does not exist"


def test_show_has_no_default_none_no_empty_steps_and_no_doubled_backslashes(tmp_path, capsys):
    path = write(
        tmp_path / "pre.yaml",
        "name: pre\ntitle: T\nsummary: S\nparameters:\n"
        "  pattern: {type: string, default: 'sglang\\.launch_server', description: d}\n"
        "  tp: {type: integer, default: null, description: d}\n"
        "observations:\n  m: {command: free -b, parser: free}\n"
        "checks:\n  c: {description: d, expect: m.total_bytes > 0}\ngoal: [c]\n",
    )
    code, out, _ = run_cli(capsys, "show", str(path))
    assert code == ExitCode.OK
    assert "None" not in out
    assert "pattern (string, default 'sglang\\.launch_server')" in out
    assert "tp (integer, optional, no default)" in out
    assert not re.search(r"^Steps:\s*$", out, re.M)


def test_the_site_page_keeps_backslashes_in_code_spans(tmp_path):
    path = write(
        tmp_path / "pre.yaml",
        "name: pre\ntitle: T\nsummary: Kills vllm\\.entrypoints first.\nparameters:\n"
        "  pattern: {type: string, default: 'vllm\\.entrypoints', description: 'e.g. vllm\\.entrypoints'}\n"
        "observations:\n  m: {command: free -b, parser: free}\n"
        "checks:\n  c: {description: d, expect: m.total_bytes > 0}\ngoal: [c]\n",
    )
    page = render_page(load(path), "runbooks/pre.yaml")
    assert "Kills `vllm\\.entrypoints` first." in page
    assert "| `vllm\\.entrypoints` | e.g. `vllm\\.entrypoints` |" in page


def _help(*argv: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "runbook_runner", *argv, "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return result.stdout


COMMANDS = ["list", "show", "validate", "check", "run", "runs", "drill", "new", "test"]


def test_the_exit_code_table_is_in_runbook_help_and_the_exit_codes_page_only():
    assert "130  interrupted" in _help()
    for command in COMMANDS:
        assert "130  interrupted" not in _help(command), command
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    tables = [p for p in pages if "| 130 |" in p.read_text()]
    assert tables == [REPO / "docs" / "manual" / "exit-codes.md"]
    assert tables[0].read_text().count("| 130 |") == 1


def _examples() -> list[str]:
    lines = []
    for argv in [[], *[[c] for c in COMMANDS]]:
        lines += [ln.strip() for ln in _help(*argv).splitlines() if ln.startswith("  runbook ")]
    return lines


@pytest.mark.hand_written_journal  # minimal run-start lines, for the examples of `runbook runs`
def test_every_help_example_runs_as_written(project, capsys, run_journals_in_tmp):
    run_journals_in_tmp.mkdir(parents=True)
    for stamp in ("20261130T1412", "20261130T1630"):
        write(
            run_journals_in_tmp / f"{stamp}00Z-gpu-oom-recovery-h-0000.jsonl",
            '{"event": "run-start", "t": "x"}\n',
        )
    examples = _examples()
    assert len(examples) >= 10
    parser = build_parser()
    for example in examples:
        argv = shlex.split(example)[1:]
        args = parser.parse_args(argv)  # every example parses
        if getattr(args, "runbook", None):
            assert load(project / "runbooks" / f"{args.runbook}.yaml")
        if argv[0] in {"check", "run", "plan", "drill"}:
            continue  # reach a host (a drill: tested in test_drill.py)
        code, _out, err = run_cli(capsys, *argv)
        assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET), (example, err)


@pytest.mark.hand_written_journal  # two minimal run-start lines
def test_runs_show_with_a_prefix_of_two_runs_shows_the_latest(capsys, run_journals_in_tmp):
    run_journals_in_tmp.mkdir(parents=True)
    for stamp in ("20261130T141200Z", "20261130T163000Z"):
        write(
            run_journals_in_tmp / f"{stamp}-gpu-oom-recovery-h-0000.jsonl",
            '{"event": "run-start", "t": "x"}\n',
        )
    code, _, err = run_cli(capsys, "runs", "show", "20261130T")
    assert code == ExitCode.OK
    assert "matches 2 runs; showing the latest, 20261130T163000Z" in err


def test_counts_are_singular_and_plural(tmp_path, capsys):
    one_step = (REPO / "runbooks" / "gpu-node-health.yaml").read_text()
    one_step = one_step[: one_step.index("steps:")] + "steps:\n  - {id: a, title: A, run: 'true'}\n"
    write(tmp_path / "gpu-node-health.yaml", one_step)
    _, out, err = run_cli(capsys, "validate", str(tmp_path / "gpu-node-health.yaml"))
    assert "ok (1 step)" in out
    assert "1 runbook valid" in err
    write(
        tmp_path / "broken.yaml",
        one_step.replace("name: gpu-node-health", "name: broken").replace(
            "count(gpus) >= min_gpus", "count(gpus) >= min_gpu"
        ),
    )
    _, out, err = run_cli(capsys, "validate", str(tmp_path / "broken.yaml"))
    assert "1 of 1 runbook invalid, 1 error" in err
    _code, out, err = run_cli(capsys, "list", "--runbooks", str(tmp_path))
    assert "broken: invalid (1 error)" in err


def test_a_key_typo_says_did_you_mean_first_and_only(tmp_path, capsys):
    text = (
        (REPO / "runbooks" / "gpu-node-health.yaml")
        .read_text()
        .replace("    command: free -b", "    comand: free -b")
    )
    code, out, _ = run_cli(capsys, "validate", str(write(tmp_path / "gpu-node-health.yaml", text)))
    assert code == ExitCode.BAD_INPUT
    assert out.splitlines()[0].endswith(
        "observations.memory.comand: unknown key 'comand'; did you mean 'command'?"
    )
    assert "expected either" not in out
