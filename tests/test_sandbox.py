"""The practice host is a sandbox: a runbook under review (``compare``, ``test``, ``drill``,
``sim``) that writes outside its scratch, reads a file of the operator's and signals a
process of this machine changes nothing here, from its observations and from its steps;
where no sandbox can be made, the command refuses to run (exit 11, one line)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from sshd import only_simulated_hosts_start
from test_practice_host import Sim

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.simhost import sandbox

SECRET = "operator-secret-7f3a"

RUNBOOK = """\
name: reach-out
title: A runbook under review that reaches outside the practice host
summary: Its observation and its step write, read a secret and signal outside the host (the step
  says it is read-only, as a stranger's runbook may).
observations:
  probe:
    command: {probe}
    parser: lines
checks:
  stepped:
    description: the step ran
    none: probe
    where: text == 'not-yet'
    empty: ok
  secret-unseen:
    description: the operator's secret is not seen
    none: probe
    where: text == '{secret}'
    empty: ok
goal: [stepped, secret-unseen]
steps:
  - id: reach-out
    title: Write, read and signal outside the host
    run: [sh, -c, {step}]
    fixes: [stepped]
"""


def reach_out(outside: Path, secret: Path, pid: int) -> str:
    """Shell that writes into ``outside``, copies ``secret`` there, prints it, and signals
    ``pid`` with the stand-in kill, the real one and Python's."""
    out, sec = shlex.quote(str(outside)), shlex.quote(str(secret))
    return (
        f"cat {sec}; cp {sec} {out}/copied; echo written > {out}/$$;"
        f" echo appended >> {sec}; kill -9 {pid}; /bin/kill -9 {pid};"
        f" python3 -c 'import os; os.kill({pid}, 9)'; true"
    )


@pytest.fixture
def hostile(tmp_path: Path):
    """The runbook (a copy in old/ and new/ for compare), the folder it writes into, the
    secret it reads and the process it signals."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    bystander = subprocess.Popen(["sleep", "600"])
    kill = os.kill  # the drill's guard refuses os.kill until after this fixture ends
    probe = "[ -e ~/stepped ] || echo not-yet; " + reach_out(outside, secret, bystander.pid)
    step = "touch ~/stepped; " + reach_out(outside, secret, bystander.pid)
    text = RUNBOOK.format(probe=_yaml(probe), step=_yaml(step), secret=SECRET)
    books = []
    for side in ("old", "new"):
        (tmp_path / side).mkdir()
        books.append(tmp_path / side / "reach-out.yaml")
        books[-1].write_text(text)
    try:
        yield books, outside, secret, bystander
    finally:
        kill(bystander.pid, signal.SIGKILL)
        bystander.wait()


def _yaml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def nothing_changed(outside: Path, secret: Path, bystander: subprocess.Popen[bytes]) -> None:
    assert list(outside.iterdir()) == []
    assert secret.read_text() == SECRET + "\n"
    assert bystander.poll() is None


COMMANDS = {
    "test": lambda old, new: ["test", str(new), "--scenario", "oom-crash"],
    "drill": lambda old, new: ["drill", str(new), "--scenario", "oom-crash", "--yes"],
    "compare": lambda old, new: ["compare", str(old), str(new), "--scenario", "oom-crash"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_runbook_under_review_changes_nothing_here(command, hostile, capsys, monkeypatch):
    only_simulated_hosts_start(monkeypatch)
    (old, new), outside, secret, bystander = hostile
    code = main(COMMANDS[command](old, new))
    out, err = capsys.readouterr()
    nothing_changed(outside, secret, bystander)
    assert SECRET not in out + err
    # the step ran (the goal's 'stepped'), and the secret was not seen ('secret-unseen')
    assert code == ExitCode.OK, out + err
    assert ("oom-crash: same" if command == "compare" else "reach-out") in out


def test_a_practice_host_of_runbook_sim_changes_nothing_here(hostile, tmp_path):
    _, outside, secret, bystander = hostile
    sim = Sim(tmp_path / "sim", "--scenario", "oom-crash")
    try:
        done = subprocess.run(
            [
                *("ssh", "-F", str(tmp_path / "sim" / "ssh_config"), "sim0001"),
                reach_out(outside, secret, bystander.pid) + "; echo $?",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        code, err = sim.stop()
    assert done.stdout == "0\n", done.stderr
    assert "No such file or directory" in done.stderr  # the secret's path is not there
    nothing_changed(outside, secret, bystander)
    assert code == 0, err


@pytest.mark.parametrize("command", COMMANDS)
def test_without_namespaces_the_practice_host_is_refused(command, hostile, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "available", lambda: False)
    (old, new), outside, secret, bystander = hostile
    code = main(COMMANDS[command](old, new))
    _, err = capsys.readouterr()
    assert code == ExitCode.NO_SANDBOX
    assert err.count("\n") == 1
    assert "namespaces" in err
    assert "nothing was run" in err
    nothing_changed(outside, secret, bystander)


def test_a_host_folder_whose_path_has_spaces_is_sandboxed(tmp_path: Path):
    """The mount table escapes its paths as libmount reads them."""
    from runbook_runner.simhost.scenarios import SCENARIOS
    from runbook_runner.simhost.sshserver import DrillHost

    folder = tmp_path / "a folder\twith blanks"
    folder.mkdir()
    host = DrillHost(SCENARIOS["oom-crash"].build(), folder=folder, save_state=False)
    try:
        done = host.run_local(
            'echo kept > "$HOME/note"; echo lost > ../note; nvidia-smi -L | wc -l'
        )
    finally:
        host.stop()
    assert done.stdout == b"8\n", done.stderr
    assert b"Read-only file system" in done.stderr
    assert (folder / "home" / "note").read_text() == "kept\n"
    assert not (folder / "note").exists()


def test_a_link_the_host_puts_in_its_shm_is_not_followed_from_outside(tmp_path: Path):
    """shm/ is the sandbox's to write, and the stand-in server (outside) keeps its segment
    files: a link put in place of one, to a file of this machine, is left alone."""
    from runbook_runner.simhost.scenarios import SCENARIOS
    from runbook_runner.simhost.sshserver import DrillHost

    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    host = DrillHost(SCENARIOS["leaked-shm"].build(), save_state=False)
    try:
        segment = host.host.shm[0]
        shm = shlex.quote(f"/dev/shm/{segment.name}")
        done = host.run_local(f"/bin/rm {shm} && ln -s {shlex.quote(str(victim))} {shm}")
        assert done.returncode == 0, done.stderr
        assert host.run_local("nvidia-smi -L | wc -l").stdout == b"8\n"  # the server syncs shm/
    finally:
        host.stop()
    assert victim.read_text() == "mine\n"
