"""Start-up work: libyaml gives what the pure loader gives; a valid runbook is validated once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runbook_runner.format import yamlsource

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(
    [
        *REPO.glob("runbook_runner/runbooks/*.yaml"),
        *REPO.glob("tests/runbooks/*.yaml"),
        *REPO.glob("tests/broken-runbooks/*.yaml"),
        *REPO.glob("benchmarks/*.yaml"),
    ]
)
TRICKY = [
    "a: 'é€😀'\nb:\n  - x: é€ y\n    z: [1, {q: 😀😀 w}]\n  - \"é\": 2\n",
    "base: &b {x: 1, y: [2, 3]}\nother:\n  <<: *b\n  z: |\n    two\n    lines\n",
    "when: 2026-11-30\nn: 0x1f\nf: .5\nnone: ~\nyes: yes\n",
    "a: 1\na: 2\n",  # a duplicate key: the pure loader reports it
    "a: [1, 2\n",  # a syntax error
    "",
    "- just\n- a list\n",
]


def both(text: str) -> tuple[object, object]:
    slow = yamlsource._load(text, yaml.SafeLoader)
    return slow, yamlsource.load(text)


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
@pytest.mark.parametrize(
    "text",
    [p.read_text("utf-8", "replace") for p in DOCUMENTS] + TRICKY,
    ids=[p.name for p in DOCUMENTS] + [f"tricky-{i}" for i in range(len(TRICKY))],
)
def test_libyaml_gives_the_same_values_marks_and_problems(text):
    (slow_source, slow_problems), (source, problems) = both(text)
    assert problems == slow_problems
    assert source.data == slow_source.data
    assert source.value_marks == slow_source.value_marks
    assert source.key_marks == slow_source.key_marks
    assert source.inline == slow_source.inline


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
def test_a_clean_document_goes_through_libyaml():
    assert yamlsource._load_with_libyaml(TRICKY[0]) is not None
    assert yamlsource._load_with_libyaml(TRICKY[3]) is None  # a duplicate key: the pure loader


def test_a_runbook_passes_the_schema_once_then_its_digest_is_remembered(tmp_path, monkeypatch):
    from runbook_runner import runbook
    from runbook_runner.format import schema

    text = (REPO / "benchmarks" / "ten-steps.yaml").read_bytes()
    calls = []
    real = schema.validate
    monkeypatch.setattr(schema, "validate", lambda source: calls.append(1) or real(source))
    first = runbook.loads(text, "ten-steps.yaml", "ten-steps")
    second = runbook.loads(text, "ten-steps.yaml", "ten-steps")
    assert calls == [1]
    assert first == second
    assert list(schema.cache_dir({"XDG_CACHE_HOME": str(tmp_path / "cache")}).iterdir())
    # Another document, even one byte apart, is validated again; a broken one is never remembered.
    broken = text.replace(b"title: uname", b"titel: uname")
    for _ in range(2):
        with pytest.raises(runbook.RunbookInvalid, match="unknown key 'titel'"):
            runbook.loads(broken, "ten-steps.yaml", "ten-steps")
    assert calls == [1, 1, 1]


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    from runbook_runner import runbook

    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file where a folder must go
    text = (REPO / "benchmarks" / "ten-steps.yaml").read_bytes()
    assert runbook.loads(text, "ten-steps.yaml", "ten-steps").name == "ten-steps"


def test_match_exec_in_ssh_config_is_obeyed(gpu_host, tmp_path):
    """A "Match exec" in ssh_config (paramiko runs it through invoke) picks the host."""
    import subprocess
    import sys

    config = tmp_path / "ssh_config"
    config.write_text(
        f'Match originalhost gpu-alias exec "true"\n'
        f"  HostName 127.0.0.1\n  Port {gpu_host.port}\n  User {gpu_host.user}\n"
    )
    command = [
        sys.executable,
        "-m",
        "runbook_runner",
        "check",
        str(REPO / "benchmarks" / "ten-steps.yaml"),
        "--host",
        "gpu-alias",
        "--ssh-config",
        str(config),
        "-i",
        str(gpu_host.client_key),
        "--known-hosts",
        str(gpu_host.known_hosts),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "goal holds" in done.stdout


def test_a_bad_runbook_is_bad_input_even_while_the_host_cannot_be_reached(tmp_path, capsys):
    """The connection opens while the runbook loads; the runbook's error still decides."""
    import socket

    from runbook_runner.cli import main

    with socket.socket() as unused:  # a port where nothing listens
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    bad = REPO / "tests" / "broken-runbooks" / "bad-references.yaml"
    for command in ("check", "run"):
        code = main([command, str(bad), "--host", "127.0.0.1", "--port", str(port)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "bad-references.yaml:" in err
        assert "refused" not in err


def test_an_unreachable_host_with_a_good_runbook_is_exit_3(tmp_path, capsys):
    import socket

    from runbook_runner.cli import main

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    code = main(
        [
            "check",
            str(REPO / "benchmarks" / "ten-steps.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--known-hosts",
            str(tmp_path / "kh"),
        ]
    )
    assert code == 3
    assert "connection refused" in capsys.readouterr().err


def test_parsing_a_command_line_imports_nothing_heavy():
    """`runbook run` starts connecting right after parsing its command line; what loading
    and running need is imported while the handshake waits on the host. So importing the
    CLI and parsing must not pull in paramiko, the runbook model, YAML, regex or the
    scenario matrix (each worth milliseconds before the first packet)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from runbook_runner.cli import build_parser\n"
        "build_parser().parse_args(['run', 'x', '--host', 'h'])\n"
        "heavy = ['paramiko', 'runbook_runner.runbook', 'yaml', 'regex', 'jsonschema',\n"
        "         'runbook_runner.simhost.scenarios', 'runbook_runner.cli.host',\n"
        "         'runbook_runner.cli.fleet', 'runbook_runner.cli.render']\n"
        "print(' '.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_the_scenario_names_are_still_in_the_help(capsys, monkeypatch):
    """They are looked up only when help is printed."""
    from runbook_runner.cli import main
    from runbook_runner.simhost.scenarios import SCENARIOS

    monkeypatch.setenv("COLUMNS", "2000")  # no line wrapped inside a name
    for command in ("drill", "test"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "{scenarios}" not in text
        assert ", ".join(SCENARIOS) in text


def test_jsonl_with_one_host_is_refused_before_any_connection(capsys, monkeypatch):
    """A usage error never starts a login (which could ask for a passphrase)."""
    from runbook_runner.cli import connecting, main

    def no(*args, **kwargs):
        raise AssertionError("connected")

    monkeypatch.setattr(connecting.Connecting, "__init__", no)
    ten = str(REPO / "benchmarks" / "ten-steps.yaml")
    code = main(["run", ten, "--host", "h", "--jsonl"])
    assert code == 2
    assert "--jsonl is for many hosts" in capsys.readouterr().err
    code = main(["run", ten, "--host", "h", "--resume", "R1", "--dry-run"])
    assert code == 2
    assert "cannot be combined with --dry-run" in capsys.readouterr().err
