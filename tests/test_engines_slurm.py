"""Slurm's HealthCheckProgram, real (issue 35, item 2): munge, slurmctld and slurmd (Debian's
slurm-wlm) for one node on 127.0.0.1, with HealthCheckProgram set to the script the docs give
(deploy/slurm/runbook-health), run by slurmd itself every HealthCheckInterval. The script runs
``runbook check gpu-node-health --local`` against the simulator's stand-in nvidia-smi, dmesg,
free and ps; a failing check drains the node through the real slurmctld with the check's
one-line reason, a passing one resumes only a node the script drained, never one a person
drained.

Everything lives in the test's folder (state, spool, logs, munge's key and socket) on free
ports; the machine's own munge and Slurm, if any, are never touched. Each daemon is stopped
by its PID."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from engines import REPO, daemons, missing, set_host, standin_env
from sshd import wait_for

from runbook_runner.simhost.hosts import xid_79
from runbook_runner.simhost.model import eight_gpu_server

SCRIPT = REPO / "deploy" / "slurm" / "runbook-health"
PAGE = REPO / "docs" / "engines" / "slurm.md"
NODE = "rbrnode"
BOUND_S = 15  # the health program's own bound (RUNBOOK_HEALTH_TIMEOUT; 40 s on a real node)
SLURMD_LIMIT_S = 60  # slurmd kills a HealthCheckProgram after this (slurm.conf(5))
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "flock")

_absent = missing(*PROGRAMS)
needs_slurm = pytest.mark.skipif(
    bool(_absent) or os.geteuid() != 0,
    reason=_absent or "slurmd and scontrol update need root",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.runs = root / "health-runs"

    def scontrol(self, *argv: str) -> str:
        done = subprocess.run(
            ["scontrol", *argv], env=self.env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def node(self) -> dict[str, str]:
        """``scontrol show node`` as fields (Reason keeps its spaces: the last field)."""
        try:
            line = self.scontrol("show", "node", NODE, "--oneliner").strip()
        except AssertionError:
            return {}
        fields = dict(re.findall(r"(\w+)=(\S*)", line.split(" Reason=")[0]))
        if " Reason=" in line:
            fields["Reason"] = re.sub(r" \[[^\]]*\]\s*$", "", line.split(" Reason=", 1)[1])
        return fields

    def durations(self) -> list[int]:
        """How long each health check that ended took, in seconds."""
        text = self.runs.read_text() if self.runs.exists() else ""
        return [int(line.split()[1]) for line in text.splitlines() if line.startswith("end ")]

    def checks_done(self) -> int:
        return len(self.durations())

    def wait_checks(self, count: int) -> None:
        """Until ``count`` more health checks, each started after this call, have ended (the
        wrapper runs one at a time: the one running now, if any, is not counted)."""
        target = self.checks_done() + 1 + count
        wait_for(lambda: self.checks_done() >= target, 180, f"{count} health checks to run")


@contextlib.contextmanager
def _health_checks_ended(pids: Path) -> Iterator[None]:
    """slurmd starts each health check in a process group of its own, and stopping slurmd
    leaves a running one behind: end those groups, by the PIDs the wrapper wrote."""
    try:
        yield
    finally:
        for line in pids.read_text().split() if pids.exists() else []:
            try:
                cmdline = Path(f"/proc/{line}/cmdline").read_bytes()
            except OSError:
                continue  # ended
            if str(pids.parent / "health-check").encode() in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(line), signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path):
    for sub in ("munge", "state", "spool", "log", "textfile"):
        (tmp_path / sub).mkdir()
    (tmp_path / "munge").chmod(0o700)
    env = standin_env(tmp_path / "host", xid_79())  # a GPU fell off the bus
    conf = tmp_path / "slurm.conf"
    env["SLURM_CONF"] = str(conf)
    socket_path = tmp_path / "munge" / "munge.socket"
    # What slurmd runs: the docs' script, in the environment a node's image would give it
    # (here: the stand-ins first on PATH); one at a time, each run counted.
    wrapper = tmp_path / "health-check"
    exports = " ".join(f"{key}='{value}'" for key, value in env.items())
    wrapper.write_text(
        f"""#!/bin/sh
echo $$ >> {tmp_path / "health-pids"}
exec 9>{tmp_path / "health.lock"}
flock --nonblock 9 || exit 0  # one at a time: a check still running is not queued behind
export {exports} RUNBOOK_HEALTH_PROMETHEUS='{tmp_path / "textfile" / "runbook.prom"}'
export RUNBOOK_HEALTH_TIMEOUT={BOUND_S}
read -r started _ </proc/uptime  # not date: the stand-ins include the simulated host's date
{SCRIPT}
read -r ended _ </proc/uptime
echo "end $(( ${{ended%.*}} - ${{started%.*}} ))" >> {tmp_path / "health-runs"}
"""
    )
    wrapper.chmod(0o755)
    conf.write_text(
        f"""ClusterName=rbrtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={tmp_path / "state"}
SlurmdSpoolDir={tmp_path / "spool"}
SlurmctldPidFile={tmp_path / "slurmctld.pid"}
SlurmdPidFile={tmp_path / "slurmd.pid"}
SlurmctldLogFile={tmp_path / "log" / "slurmctld.log"}
SlurmdLogFile={tmp_path / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
HealthCheckProgram={wrapper}
HealthCheckInterval=2
HealthCheckNodeState=ANY
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES State=UP
"""
    )
    key = tmp_path / "munge" / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30)
    with _health_checks_ended(tmp_path / "health-pids"), daemons(tmp_path / "log") as started:
        started.start(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={tmp_path / 'munge' / 'munged.pid'}",
                f"--seed-file={tmp_path / 'munge' / 'munged.seed'}",
                f"--log-file={tmp_path / 'log' / 'munged.file.log'}",
            ],
        )
        wait_for(socket_path.exists, 60, lambda: "munged's socket: " + started.log("munged"))
        started.start("slurmctld", ["slurmctld", "-D", "-f", str(conf)], env=env)
        started.start("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(conf)], env=env)
        made = Cluster(tmp_path, env)

        def registered() -> bool:
            for name in ("munged", "slurmctld", "slurmd"):
                if not started.alive(name):
                    raise AssertionError(f"{name} exited: {started.log(name)}")
            return made.node().get("SlurmdStartTime", "None") != "None"

        wait_for(registered, 120, lambda: "slurmd to register: " + started.log("slurmd"))
        yield made


def drained(node: dict[str, str]) -> bool:
    return "DRAIN" in node.get("State", "")


@needs_slurm
def test_a_failing_check_drains_and_a_passing_one_resumes_only_its_own_drain(cluster):
    # A GPU fell off the bus: the node is drained with the failing check's one line.
    node = wait_for(
        lambda: (n := cluster.node()) and drained(n) and n,
        180,
        lambda: f"a drain: {cluster.node()}",
    )
    assert node["Reason"].startswith(
        "runbook: gpu-node-health: gpus-answer: GPU 3 (unknown-error)"  # that GPU, by name
    ), node
    assert "\n" not in node["Reason"]
    assert len(node["Reason"]) <= 230
    assert "runbook_check_status" in (cluster.root / "textfile" / "runbook.prom").read_text()

    # Healthy again: the script resumes the node it drained.
    set_host(cluster.env, eight_gpu_server())
    wait_for(
        lambda: (n := cluster.node()) and not drained(n) and "Reason" not in n,
        180,
        lambda: f"a resume: {cluster.node()}",
    )

    # A person drains it: passing checks leave it drained, with the person's reason.
    cluster.scontrol("update", f"nodename={NODE}", "state=drain", "reason=ops: waiting for RMA")
    cluster.wait_checks(2)
    node = cluster.node()
    assert drained(node), node
    assert node["Reason"] == "ops: waiting for RMA", node

    # Failing while a person holds it: their reason is not overwritten.
    set_host(cluster.env, xid_79())
    cluster.wait_checks(2)
    node = cluster.node()
    assert drained(node), node
    assert node["Reason"] == "ops: waiting for RMA", node

    # The person resumes it; the check, still failing, drains it with its own reason.
    cluster.scontrol("update", f"nodename={NODE}", "state=resume")
    node = wait_for(
        lambda: (n := cluster.node()) and n.get("Reason", "").startswith("runbook:") and n,
        180,
        lambda: f"the check's drain: {cluster.node()}",
    )
    assert drained(node)

    # nvidia-smi stops answering (the commonest sign of a dying GPU): the health program,
    # bounded under slurmd's limit, drains the node saying so, instead of being killed first.
    hung = cluster.root / "hung-pids"
    standin = Path(cluster.env["PATH"].split(":")[0]) / "nvidia-smi"
    answering = standin.read_text()
    standin.write_text(f"#!/bin/sh\necho $$ >> {hung}\nexec sleep 300\n")
    try:
        node = wait_for(
            lambda: (n := cluster.node()) and "does not answer" in n.get("Reason", "") and n,
            180,
            lambda: f"the hang's drain: {cluster.node()}",
        )
        assert drained(node), node
        assert node["Reason"].startswith(
            f"runbook: gpu-node-health: nvidia-smi does not answer (no answer in {BOUND_S} s)"
        ), node
        cluster.wait_checks(1)
        slowest = max(cluster.durations()[-2:])
        assert BOUND_S <= slowest < SLURMD_LIMIT_S, cluster.durations()
    finally:
        standin.write_text(answering)
        cluster.wait_checks(1)  # the check in flight has ended: no hung one starts after it
        for pid in hung.read_text().split() if hung.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _blocks(page: Path) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def test_the_docs_page_shows_the_script_as_it_is():
    assert SCRIPT.read_text() in _blocks(PAGE)
    assert "deploy/slurm/runbook-health" in PAGE.read_text()
