"""SIGINT, SIGTERM and SIGHUP on a fleet run, over four real sshd (issue 25, item 1).

As on one host (tests/test_interrupts.py): the signal goes to the test's own subprocess (the
CLI) only; each host's destructive step is a real 600 s ``sleep`` started over SSH, whose
end the test observes through /proc. Every wait is at most 120 s: a run that waited for the
sleeps to end on their own fails, and a machine ten times slower than usual still passes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from sshd import started_hosts, wait_for
from test_interrupts import gone

from runbook_runner.journal import read

pytestmark = pytest.mark.ssh

SLEEPY = """\
name: fleet-sleepy
title: A destructive step that sleeps 600 s on every host
summary: For the fleet interrupt tests.
observations:
  marker:
    command: cat "$RUNBOOK_LOCK_DIR/never" 2>/dev/null || true
    parser: lines
checks:
  never: {description: never true, expect: count(marker) == 1}
goal: [never]
steps:
  - id: sleep
    title: Sleep on the host
    run: 'sleep 600 & echo $! > "$RUNBOOK_LOCK_DIR/sleeper.pid"; wait; touch "$RUNBOOK_LOCK_DIR/reached-the-end"'
    destructive: true
    fixes: goal
    affects: process
    timeout: 900
"""


@pytest.fixture(scope="module")
def four():
    with started_hosts(4) as hosts:
        yield hosts


@pytest.fixture
def setup(four, tmp_path):
    for host in four:
        sim = host.root / "sim"
        for name in ("sleeper.pid", "reached-the-end"):
            (sim / name).unlink(missing_ok=True)
    known = tmp_path / "known_hosts"
    known.write_text("".join(host.known_hosts.read_text() for host in four))
    config = tmp_path / "ssh_config"
    config.write_text(
        "".join(
            f"Host s{i}\n  HostName 127.0.0.1\n  Port {host.port}\n  IdentityFile {host.client_key}\n"
            for i, host in enumerate(four, 1)
        )
    )
    runbook = tmp_path / "fleet-sleepy.yaml"
    runbook.write_text(SLEEPY)
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = [
        sys.executable,
        "-m",
        "runbook_runner",
        "run",
        str(runbook),
        "--hosts",
        "s[1-4]",
        "--user",
        four[0].user,
        "--known-hosts",
        str(known),
        "--ssh-config",
        str(config),
        "--yes",
    ]
    return argv, env, state / "runbook-runner" / "runs"


def pid_of(host) -> int | None:
    path = host.root / "sim" / "sleeper.pid"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


def signal_fleet(argv, env, hosts, signum) -> tuple[dict[str, int], int, float, str, str]:
    """Start the fleet run; once ``hosts`` all run their sleep, send ``signum`` to the CLI.
    Returns the remote PIDs, the exit status, the seconds from the signal to the exit, and
    the output."""
    runner = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        pids = wait_for(
            lambda: all(pid_of(h) for h in hosts) and {h.root.name: pid_of(h) for h in hosts},
            120,
            "every host's remote sleep to start",
        )
        assert not any(gone(pid) for pid in pids.values())
        sent = time.monotonic()
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=120)  # far from the sleep's 600 s
        took = time.monotonic() - sent
    finally:
        if runner.poll() is None:
            runner.kill()
    return pids, runner.returncode, took, out, err


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
)
def test_a_signal_ends_the_command_on_every_host_journals_it_and_releases_every_lock(
    four, setup, signum, code
):
    argv, env, journals = setup
    pids, returncode, took, out, err = signal_fleet([*argv, "--serial", "4"], env, four, signum)
    assert returncode == code, out + err
    assert took < 60, f"exited {took:.1f}s after the signal"  # not at the sleep's end
    name = signal.Signals(signum).name
    assert f"interrupted ({name}); the running command was ended on 4 hosts" in err
    assert f"s[1-4]: interrupted ({name}) — the command running there was ended" in out
    for pid in pids.values():  # ended long before its 600 s
        wait_for(lambda pid=pid: gone(pid), 120, "the remote sleep to end")
    for host in four:
        sim = host.root / "sim"
        assert not (sim / "reached-the-end").exists()
        assert not (sim / "runbook-runner.lock").exists()  # released
    paths = sorted(journals.glob("*.jsonl"))
    assert len(paths) == 4
    for path in paths:
        end = read(path).events[-1]
        assert end["event"] == "run-end"
        assert end["outcome"] == "interrupted"
        assert end["signal"] == name
        assert end["ended_on_host"].startswith("process group ")


def test_hosts_a_signal_reaches_before_their_batch_are_journalled_as_not_started(four, setup):
    argv, env, journals = setup
    _, returncode, took, out, err = signal_fleet(
        [*argv, "--serial", "2"], env, four[:2], signal.SIGTERM
    )
    assert returncode == 143, out + err
    assert took < 60
    assert "s[1-2]: interrupted (SIGTERM) — the command running there was ended" in out
    assert "s[3-4]: not started — interrupted (SIGTERM) before its run began" in out
    assert pid_of(four[2]) is None
    assert pid_of(four[3]) is None
    ends = {}
    for path in journals.glob("*.jsonl"):
        events = read(path).events
        ends[events[0]["host"].split(":")[0]] = events[-1]  # s1:PORT once connected
    assert sorted(ends) == ["s1", "s2", "s3", "s4"]
    assert all(end["outcome"] == "interrupted" for end in ends.values())
    assert ends["s3"]["not_started"]
    assert ends["s4"]["not_started"]
    assert "not_started" not in ends["s1"]


SLOW_LOOK = """\
name: fleet-slow-look
title: An observation that takes 600 s on every host
summary: For the fleet interrupt tests.
observations:
  slow:
    command: 'sh -c ''echo $$ > "$RUNBOOK_LOCK_DIR/sleeper.pid"; exec sleep 600'''
    parser: lines
    timeout: 900
checks:
  seen: {description: seen, expect: count(slow) == 0}
goal: [seen]
"""


def test_a_check_spread_over_worker_processes_stops_every_host_on_a_signal(four, setup, tmp_path):
    argv, env, _ = setup
    runbook = tmp_path / "fleet-slow-look.yaml"
    runbook.write_text(SLOW_LOOK)
    check = ["check" if a == "run" else a for a in argv if a != "--yes"]
    check[check.index(str(tmp_path / "fleet-sleepy.yaml"))] = str(runbook)
    pids, returncode, took, out, err = signal_fleet(
        [*check, "--workers", "2"], env, four, signal.SIGTERM
    )
    assert returncode == 143, out + err
    assert took < 60
    assert "s[1-4]: interrupted (SIGTERM) — the command running there was ended" in out
    for pid in pids.values():
        wait_for(lambda pid=pid: gone(pid), 120, "the remote observation to end")


def test_a_check_over_worker_processes_says_what_threads_say(four, setup, tmp_path):
    argv, env, _ = setup
    runbook = tmp_path / "fleet-quick.yaml"
    runbook.write_text(
        SLOW_LOOK.replace("exec sleep 600", "true").replace("fleet-slow-look", "fleet-quick")
    )
    check = ["check" if a == "run" else a for a in argv if a != "--yes"]
    check[check.index(str(tmp_path / "fleet-sleepy.yaml"))] = str(runbook)
    for workers in ("1", "3"):
        done = subprocess.run(
            [*check, "--workers", workers, "--json"], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        document = json.loads(done.stdout)
        assert [h["host"] for h in document["hosts"]] == ["s1", "s2", "s3", "s4"]
        assert {h["outcome"] for h in document["hosts"]} == {"ok"}
        assert all(h["checks"][0]["status"] == "ok" for h in document["hosts"])


def test_a_host_whose_ssh_g_the_ctrl_c_killed_is_interrupted_not_bad_input(tmp_path, monkeypatch):
    """Ctrl-C reaches the terminal's whole process group: an `ssh -G` still resolving a host
    dies of the SIGINT that stopped the fleet. That host was interrupted; its settings were
    never wrong (issue 48)."""
    from runbook_runner.cli import fleet
    from runbook_runner.cli.request import Target
    from runbook_runner.errors import Interrupted
    from runbook_runner.fleet.selection import FleetHost
    from runbook_runner.fleet.stop import Stop

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\nkill -INT $$\n")  # as the terminal's Ctrl-C ends it
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    stop = Stop()
    host_stop = stop.for_host()
    stop.set(signal.SIGINT)
    with pytest.raises(Interrupted) as raised:
        fleet.connect(Target(hosts="gpu1"), None, FleetHost("gpu1"), fleet.Messages(), host_stop)
    assert raised.value.signum == signal.SIGINT  # fleet_check: interrupted_outcome, not bad input
