"""`runbook sim`: the practice host. The on-call command, typed as printed, runs against it
as against a real host: interrupted, resumed, to the goal, with the host lock taken and
released on the simulated host."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sshd import wait_for

from conftest import REPO
from runbook_runner.exitcodes import ExitCode


class Sim:
    """``runbook sim`` in its own process, as a user starts it; what it printed, read."""

    def __init__(self, folder: Path, *argv: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runbook_runner", "sim", "--folder", str(folder), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.printed: list[str] = []
        wait_for(self._serving, 60, "runbook sim to say it serves")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def _serving(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"runbook sim exited: {self.process.stderr.read()}")  # type: ignore[union-attr]
        while not self.lines.empty():
            self.printed.append(self.lines.get())
        return any("Serving until Ctrl-C" in line for line in self.printed)

    def options(self) -> list[str]:
        """The options printed for runbook run and check, exactly as printed."""
        index = self.printed.index("Options for runbook run and check (the first host):")
        return shlex.split(self.printed[index + 1])

    def host_folders(self) -> list[Path]:
        return [Path(line.split("state in ", 1)[1]) for line in self.printed if "state in " in line]

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=120)
        return code, self.process.stderr.read()  # type: ignore[union-attr]


@pytest.fixture
def state_home(tmp_path) -> Path:
    return tmp_path / "state"


def runbook(state_home: Path, *argv: str, **kwargs) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(state_home)}
    return subprocess.Popen(
        [sys.executable, "-m", "runbook_runner", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def journal_events(state_home: Path) -> list[dict]:
    runs = sorted((state_home / "runbook-runner" / "runs").glob("*.jsonl"))
    if not runs:
        return []
    lines = runs[-1].read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_the_on_call_command_interrupted_and_resumed_reaches_the_goal_on_the_practice_host(
    tmp_path, state_home
):
    sim = Sim(tmp_path / "sim", "--scenario", "oom-crash")
    try:
        options = sim.options()
        assert options[:4] == ["--host", "127.0.0.1", "--port", options[3]]
        assert {"-i", "--known-hosts", "--user"} <= set(options)
        (folder,) = sim.host_folders()
        lock = folder / "lock" / "runbook-runner.lock"
        # settle_s: the teardown wait watches for 8 s of no progress instead of 30
        command = ["run", "gpu-oom-recovery", "--yes", "--set", "settle_s=8", *options]
        first = runbook(state_home, *command)

        def waiting_with_the_lock() -> bool:
            events = journal_events(state_home)
            started = [e.get("id") for e in events if e["event"] == "step-start"]
            return "wait-for-teardown" in started and (lock / "owner").is_file()

        wait_for(waiting_with_the_lock, 60, "the run to wait for the teardown, holding the lock")
        events = journal_events(state_home)
        run_id = events[0]["run"]
        owner = json.loads((lock / "owner").read_text())
        assert owner["run"] == run_id  # the run's own lock, on the simulated host
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 128 + signal.SIGINT, err
        assert "Traceback" not in err
        assert not lock.exists()  # released on the host when the run stopped
        assert not any(e["event"] == "step-start" and e["id"] == "reset-gpus" for e in events)

        resumed = runbook(state_home, *command, "--resume", run_id, "--json")
        out, err = resumed.communicate(timeout=180)
        assert resumed.returncode == ExitCode.OK, err
        document = json.loads(out)
        assert document["ok"]
        assert document["reached_by"] == "reset-gpus"
        assert not lock.exists()  # released again at the end
        taken = [e for e in journal_events(state_home) if e["event"] == "lock"]
        assert taken
        assert taken[0]["held"] is True
        calls = [
            json.loads(line)["argv"] for line in (folder / "calls.log").read_text().splitlines()
        ]
        assert ["nvidia-smi", "--gpu-reset", "-i", "0"] in calls
        assert ["nvidia-smi", "--gpu-reset", "-i", "2"] in calls
        assert not any(
            call[:2] == ["nvidia-smi", "--gpu-reset"] and call[-1] not in "02" for call in calls
        )
    finally:
        code, err = sim.stop()
    assert code == 0
    assert "Traceback" not in err


def test_plain_ssh_and_a_fleet_work_against_practice_hosts(tmp_path, state_home):
    sim = Sim(tmp_path / "sim", "--hosts", "2", "--scenario", "healthy-server")
    try:
        config = str(tmp_path / "sim" / "ssh_config")
        done = subprocess.run(
            ["ssh", "-F", config, "sim0002", "nvidia-smi -L | wc -l; echo $((6*7)) >&2; exit 3"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.stdout, done.stderr, done.returncode) == ("8\n", "42\n", 3)
        fleet = runbook(
            state_home,
            "check",
            "gpu-node-health",
            "--ssh-config",
            config,
            "--hosts",
            "sim[0001-0002]",
        )
        out, err = fleet.communicate(timeout=180)
        assert "sim[0001-0002]" in out + err
        assert "Traceback" not in err
    finally:
        code, err = sim.stop()
    assert code == 0
    assert "Traceback" not in err


def test_sim_refuses_an_unknown_scenario_and_a_bad_state_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("processes: 1\n")
    for argv in (["--scenario", "meteor-strike"], ["--state", str(bad)], ["--hosts", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "runbook_runner", "sim", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
        assert done.returncode == ExitCode.BAD_INPUT, (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert done.stderr.strip()


# -- a state file describes what a runbook can observe ---------------------------------------

STATE = """
processes:
  - {pid: 4100, cmdline: "python3 -m sglang.launch_server --port 30000", user: svc,
     unit: sglang.service, environ: {CUDA_VISIBLE_DEVICES: "0,1"}}
  - {pid: 4123, cmdline: "sglang::scheduler_TP0", ppid: 4100, pgid: 4100, sid: 4100,
     user: svc, unit: sglang.service, state: D, gpu_mib: {0: 90112}}
services:
  - {name: sglang, main_pid: 4100}
shm:
  - {path: /dev/shm/sglang_hicache_0, size: 40 GiB, owner: svc, age_s: 900, holder: 4100}
  - {name: leftover, size: 1 MiB, age_s: 30}
kernel_messages: ["NVRM: Xid (PCI:0000:18:00): 79, pid=4123, GPU has fallen off the bus."]
"""


def test_a_state_file_gives_shm_units_processes_and_their_environment(tmp_path):
    import yaml

    from runbook_runner.simhost.sshserver import DrillHost
    from runbook_runner.simhost.statefile import host_from_state

    simulated = DrillHost(host_from_state(yaml.safe_load(STATE)))
    try:

        def run(command: str) -> str:
            done = simulated.run_local(command)
            assert done.returncode == 0, done.stderr
            return done.stdout.decode()

        listing = run(
            'for f in /dev/shm/*; do if fuser -s "$f"; then h=held; else h=free; fi;'
            ' stat -c "%s %U %Y $h %n" "$f"; done'
        )
        assert listing.splitlines() == [
            "1048576 root 1796000970 free /dev/shm/leftover",
            "42949672960 svc 1796000100 held /dev/shm/sglang_hicache_0",
        ]
        table = run("ps -o pid=,pgid=,sid=,stat=,cgroup= -p 4123 | grep 4123")
        assert table.split()[:4] == ["4123", "4100", "4100", "D"]
        assert "/system.slice/sglang.service" in table
        assert run("cat /proc/4100/environ | tr '\\0' '\\n'") == "CUDA_VISIBLE_DEVICES=0,1\n"
        assert run("systemctl show -p MainPID sglang") == "MainPID=4100\n"
        assert "79, pid=4123" in run("dmesg")
    finally:
        simulated.stop()


def test_a_state_file_refuses_a_shm_file_outside_dev_shm_and_an_unknown_state():
    from runbook_runner.simhost.statefile import StateFileError, host_from_state

    with pytest.raises(StateFileError, match=r"shm\[0\]\.path"):
        host_from_state({"shm": [{"path": "/etc/passwd", "size": 1}]})
    with pytest.raises(StateFileError, match=r"processes\[0\]\.state"):
        host_from_state({"processes": [{"pid": 1, "cmdline": "x", "state": "Q"}]})


def test_a_drill_takes_the_host_lock_on_the_simulated_host_and_releases_it(
    capsys, run_journals_in_tmp
):
    from runbook_runner.cli import main
    from runbook_runner.journal import read

    assert main(["drill", "gpu-oom-recovery", "--scenario", "oom-crash", "--yes"]) == 0
    capsys.readouterr()
    [path] = list(run_journals_in_tmp.glob("*.jsonl"))
    journal = read(path)
    lock = journal.first("lock")
    assert lock is not None
    assert lock["held"] is True
    end = journal.last("run-end")
    assert end is not None
    assert "lock_release_failed" not in end
    assert journal.last("drill-end")["actions"] == ["reset GPU 0", "reset GPU 2"]
