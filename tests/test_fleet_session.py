"""Each host of a fleet runs through the same session as one host (runbook_runner/session.py):
the lifecycle's drifted copies are gone, each drift with a test here, over real sshd."""

from __future__ import annotations

from pathlib import Path

import pytest
from sshd import started_hosts

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read
from runbook_runner.simhost.model import eight_gpu_server
from runbook_runner.ssh.hostlock import LOCK_NAME

pytestmark = pytest.mark.ssh

RESET = """\
name: fleet-reset
title: GPU memory on a fleet
summary: s
observations:
  gpus:
    command: nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
    parser: gpus
checks:
  gpu-memory-released:
    description: Every GPU's memory is released
    every: gpus
    expect: memory_used_mib <= 1024
goal: [gpu-memory-released]
steps:
  - id: reset-gpus
    title: Reset only the GPUs that still hold memory
    run: [nvidia-smi, --gpu-reset, -i, "{{ item.index }}"]
    for_each_failing: gpu-memory-released
    root: true
    destructive: true
    fixes: goal
    affects: gpu
    wait: {until: goal, timeout: 2, interval: 0.2}
"""


@pytest.fixture(scope="module")
def pair():
    with started_hosts(2) as hosts:
        yield hosts


@pytest.fixture
def argv(pair, tmp_path):
    for host in pair:
        state = eight_gpu_server(services=[])
        state.gpu(3).orphaned_mib = 81920
        host.set_state(state)
        host.clear_calls()
    known = tmp_path / "known_hosts"
    known.write_text("".join(host.known_hosts.read_text() for host in pair))
    config = tmp_path / "ssh_config"
    config.write_text(
        "".join(
            f"Host gpu{i}\n  HostName 127.0.0.1\n  Port {host.port}\n  IdentityFile {host.client_key}\n"
            for i, host in enumerate(pair, 1)
        )
    )
    runbook = tmp_path / "fleet-reset.yaml"
    runbook.write_text(RESET)
    return [
        "run", str(runbook), "--user", pair[0].user,
        "--known-hosts", str(known), "--ssh-config", str(config),
    ]  # fmt: skip


def journals(folder: Path) -> list[list[dict]]:
    return [read(path).events for path in sorted(folder.glob("*.jsonl"))]


def run_end(events: list[dict]) -> dict:
    (end,) = [e for e in events if e["event"] == "run-end"]
    return end


def crash_after_the_lock(monkeypatch, error: BaseException) -> list[bool]:
    """Runner.run raises ``error`` once the host lock is held; says whether it was held."""
    from runbook_runner.engine import Runner

    held: list[bool] = []

    def broken(self, **kwargs):
        lock = self.transport.run(f'ls -d "${{RUNBOOK_LOCK_DIR:-/run/lock}}/{LOCK_NAME}"', 10)
        held.append(lock.exit_status == 0)
        raise error

    monkeypatch.setattr(Runner, "run", broken)
    return held


def test_an_error_in_a_hosts_run_releases_its_lock_and_is_journalled_as_an_error(
    pair, argv, capsys, monkeypatch, run_journals_in_tmp
):
    """(a) and (b): a bug while a host runs leaves no lock behind, and its journal says
    'error' with the error, never 'interrupted' (nothing was interrupted). The fleet's copy
    of the lifecycle already did both when the session replaced it: this keeps them so."""
    held = crash_after_the_lock(monkeypatch, ZeroDivisionError("injected"))
    code = main([*argv, "--hosts", "gpu[1-2]", "--serial", "2", "--yes"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.INTERNAL, out
    assert held == [True, True]
    for host in pair:
        assert not (host.root / "sim" / LOCK_NAME).exists()
    ends = [run_end(events) for events in journals(run_journals_in_tmp)]
    assert len(ends) == 2
    for end in ends:
        assert end["outcome"] == "error"
        assert end["interrupted"] is False
        assert end["error"] == "injected"


def test_a_transport_error_in_a_hosts_run_is_journalled_as_what_it_was(
    pair, argv, capsys, monkeypatch, run_journals_in_tmp
):
    """(b): a connection lost mid-run is an error of that host (exit 3), journalled as such,
    in the same run-end line as one host journals (the fleet's copy left out stopped_by)."""
    from runbook_runner.errors import ConnectionLost

    crash_after_the_lock(monkeypatch, ConnectionLost("the connection dropped"))
    code = main([*argv, "--hosts", "gpu1", "--yes"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.HOST_UNREACHABLE, out
    (fleet_events,) = journals(run_journals_in_tmp)
    fleet_end = run_end(fleet_events)
    assert fleet_end["outcome"] == "error"
    assert fleet_end["error"] == "the connection dropped"
    for path in run_journals_in_tmp.glob("*.jsonl"):
        path.unlink()
    code = main([*argv, "--host", "gpu1", "--yes"])
    capsys.readouterr()
    assert code == ExitCode.HOST_UNREACHABLE
    (host_events,) = journals(run_journals_in_tmp)
    drop = {"t", "lock_release_failed"}
    assert {k: v for k, v in run_end(host_events).items() if k not in drop} == {
        k: v for k, v in fleet_end.items() if k not in drop
    }


def test_nobody_asked_is_journalled_as_not_asked_on_a_fleet_as_on_one_host(
    pair, argv, capsys, run_journals_in_tmp
):
    """(c): without --yes and without a terminal, nobody is asked: the journal says 'not
    asked' and why, on each host of a fleet as on one host, never an answer 'no'."""
    code = main([*argv, "--hosts", "gpu[1-2]", "--serial", "2"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.DECLINED, out
    asked = [
        e
        for events in journals(run_journals_in_tmp)
        for e in events
        if e["event"] == "confirmation"
    ]
    assert len(asked) == 2
    for line in asked:
        assert line["answer"] == "not asked"
        assert line["reason"] == "no terminal to ask (use --yes)"
    assert not any(call[:2] == ["nvidia-smi", "--gpu-reset"] for h in pair for call in h.calls())


def test_a_refused_reboot_is_journalled_as_not_asked_on_a_fleet(
    pair, argv, capsys, run_journals_in_tmp, tmp_path
):
    """(c): a reboot without --allow-reboot is not an operator's 'no' either."""
    runbook = tmp_path / "fleet-reboot.yaml"
    runbook.write_text(
        RESET.replace("name: fleet-reset", "name: fleet-reboot").replace(
            "    affects: gpu\n", "    affects: node\n    reboots: true\n"
        )
    )
    code = main([argv[0], str(runbook), *argv[2:], "--hosts", "gpu1", "--yes"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.GOAL_NOT_MET, out
    ((line,),) = [
        [e for e in events if e["event"] == "confirmation"]
        for events in journals(run_journals_in_tmp)
    ]
    assert line["answer"] == "not asked"
    assert line["reason"] == "needs --allow-reboot"


def test_the_fleet_uses_the_session_not_the_host_commands_private_parts():
    """(d): one lifecycle, in session.py: no CLI module takes a host lock or writes a run's
    end itself, and none reaches a private name of the one-host command module (the
    fleet's journal and lock came from there before)."""
    import ast

    import runbook_runner.cli as cli_package

    folder = Path(cli_package.__file__).parent
    for path in folder.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "HostLock(" not in text, path.name
        assert '"run-end"' not in text, path.name
        if path.name == "host.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        private = [
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "cli_host"
            and node.attr.startswith("_")
        ]
        assert private == [], f"{path.name} reaches into cli/host.py: {private}"
