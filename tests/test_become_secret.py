"""-K: the sudo password is typed into sudo -S alone, and is seen nowhere else (issue #38).

Over a real sshd whose ``sudo`` is a stand-in that echoes what it reads on its standard input
(a sudo that says the password back, as a broken or hostile one may): the password must not
be in ``ps`` on either side (client and server are this machine: every process's command
line), in the environment of the remote commands (/proc/PID/environ of the command while it
runs), in the journal, in ``--json``, or on the terminal. The stand-in records what it read,
so the test also proves the password did reach sudo (a test that passes because nothing was
typed would prove nothing).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode

PASSWORD = "s3cret-K-pass word"

ECHOING_SUDO = """#!/bin/sh
# sudo -n is refused (a password is required); sudo -S -p '' CMD... reads one line, says it
# back on stdout (as a broken sudo might), records it beside the state, and runs CMD.
if [ "$1" = "-n" ]; then echo "sudo: a password is required" >&2; exit 1; fi
[ "$1" = "-S" ] || { echo "sudo: usage" >&2; exit 1; }
shift; [ "$1" = "-p" ] && shift 2
IFS= read -r typed
printf 'sudo read: %s\\n' "$typed"
printf '%s\\n' "$typed" >> "$(dirname "$RBR_SIM_STATE")/sudo-typed"
exec "$@"
"""

RUNBOOK = """\
name: become-secret
title: t
summary: s
observations:
  as_root: {command: "printf '%s\\\\n' root-ok", parser: lines, root: true}
checks:
  root-read: {description: the root observation ran, expect: count(as_root) >= 1}
goal: [root-read]
steps:
  - id: as-root
    title: a root step that runs a while
    run: "sleep 2.5; env; printf '%s' step-ran"
    root: true
"""


@pytest.fixture(scope="module")
def echoing_host():
    from sshd import start_test_host

    host = start_test_host()
    sudo = host.root / "bin" / "sudo"
    sudo.write_text(ECHOING_SUDO)
    sudo.chmod(0o755)
    yield host
    host.stop()


class Watch:
    """Every process's command line and environment on this machine, read until stopped."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen_marker = False
        self.leaks: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        secret = PASSWORD.encode()
        while not self.stopped.is_set():
            for proc in Path("/proc").glob("[0-9]*"):
                for part in ("cmdline", "environ"):
                    try:
                        text = (proc / part).read_bytes()
                    except OSError:
                        continue
                    if part == "cmdline" and self.marker.encode() in text:
                        self.seen_marker = True
                    if secret in text:
                        self.leaks.append(f"/proc/{proc.name}/{part}")
            self.stopped.wait(0.02)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


@pytest.mark.ssh
def test_the_sudo_password_reaches_sudo_alone(
    echoing_host, capsys, tmp_path, monkeypatch, run_journals_in_tmp
):
    from runbook_runner.cli import console

    monkeypatch.setattr(console, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(console, "ask_secret", lambda prompt: PASSWORD)
    runbook = tmp_path / "become-secret.yaml"
    runbook.write_text(RUNBOOK)
    typed = echoing_host.root / "sim" / "sudo-typed"
    typed.unlink(missing_ok=True)
    watch = Watch("sleep 2.5")
    try:
        code = main(["run", str(runbook), *echoing_host.cli_args(), "-K", "--yes", "--json"])
    finally:
        watch.stop()
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    # it was typed into sudo (every root command), and sudo said it back
    assert typed.read_text().splitlines()[-1] == PASSWORD
    assert watch.seen_marker, "the step's command was never seen running: nothing was watched"
    # ... and is nowhere else: ps on both sides, the remote commands' environment,
    assert watch.leaks == []
    # --json and the terminal,
    assert PASSWORD not in out
    assert PASSWORD not in err
    document = json.loads(out)
    assert any("step-ran" in json.dumps(step) for step in document["steps"])
    # the journal (and nothing the run wrote under the journal folder)
    journals = "".join(p.read_text() for p in run_journals_in_tmp.rglob("*") if p.is_file())
    assert '"event": "step-end"' in journals
    assert PASSWORD not in journals
    # nor a command line the host recorded
    assert PASSWORD not in json.dumps(echoing_host.calls())
