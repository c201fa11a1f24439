"""The ledger of a run's end (plan/ledger.py), with no SSH: every GPU gets one entry, and no
run whose checks hold exits 0 while a GPU of the subject holds memory. The hosts are drawn
(orphaned memory, the server's orphans, a launcher judged starting, a holder nobody can
attribute in a flat cgroup, another owner's Slurm job) and read by the run's own parsers
(tests/ladder_host.py); what the test expects is read from the drawn host, not from the
ledger's rules."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ladder_host import Host

from runbook_runner.exitcodes import ExitCode
from runbook_runner.plan.ledger import GpuStatus, exit_code, ledger_of
from runbook_runner.runbook import Runbook, load
from runbook_runner.simhost.hosts import FLAT, RELAUNCH, START
from runbook_runner.simhost.model import SimHost, SimProcess, eight_gpu_server

RUNBOOK = Path(__file__).parent.parent / "runbooks" / "gpu-oom-recovery.yaml"
IDLE_MIB = 1024


@cache
def runbook() -> Runbook:
    return load(RUNBOOK)


def params() -> dict[str, Any]:
    return {n: p.default for n, p in runbook().parameters.items()}


KINDS = ("idle", "orphaned", "ours-orphan", "starting", "unknown", "slurm")


def build(kinds: list[str]) -> SimHost:
    """GPU i is in the state ``kinds[i]``."""
    host = eight_gpu_server()
    host.processes = []
    for index, kind in enumerate(kinds):
        gpu = {str(index): 60_000}
        pid = 5000 + index
        if kind == "orphaned":
            host.gpu(index).orphaned_mib = 90_000
        elif kind == "ours-orphan":  # a worker of the dead server, reparented to PID 1
            host.processes.append(SimProcess(pid, f"sglang::scheduler_TP{index}", gpu_mib=gpu))
        elif kind == "starting":  # a launcher up 30 s with its port closed and no worker
            host.processes.append(
                SimProcess(pid, RELAUNCH, gpu_mib=gpu, listens=None, born=START - 30.0)
            )
        elif kind == "unknown":  # nothing in its cgroup, environment or login says whose
            host.processes.append(
                SimProcess(pid, "python3 job.py", gpu_mib=gpu, cgroup=FLAT, born=-7200.0)
            )
        elif kind == "slurm":
            host.processes.append(
                SimProcess(
                    pid,
                    "python3 train.py",
                    gpu_mib=gpu,
                    user="alice",
                    cgroup=f"/system.slice/slurmstepd.scope/job_{700 + index}/step_0/user/task_0",
                    environ={"SLURM_JOB_ID": str(700 + index)},
                    born=-7200.0,
                )
            )
    return host


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(KINDS), min_size=8, max_size=8))
def test_no_gpu_of_the_subject_holding_memory_is_ever_exit_0(kinds: list[str]) -> None:
    state = Host(build(kinds)).state(runbook(), params())
    ledger = ledger_of(state, params(), state)
    assert [e.index for e in ledger.entries] == list(range(8))  # one entry per GPU
    code = exit_code(ledger, ExitCode.OK)
    ours_seen = any(k in ("ours-orphan", "starting") for k in kinds)
    for index, kind in enumerate(kinds):
        entry = ledger.entries[index]
        if kind == "idle":
            assert entry.status is GpuStatus.FREE, entry
        elif kind == "slurm":  # positive evidence of another owner: not the subject's
            assert entry.status is GpuStatus.ANOTHER_OWNER, entry
            assert not entry.subjects, entry
        elif kind == "unknown" and ours_seen:
            # the first look named the server's GPUs: a stranger elsewhere is named only
            assert entry.status is GpuStatus.CANNOT_TELL, entry
            assert not entry.subjects, entry
        else:  # the incident's memory, or a holder nothing says is not the server's
            assert not entry.accounted, entry
            assert code is not ExitCode.OK, (kinds, entry)
            assert entry.look, entry  # with the command a person runs to look
    if code is ExitCode.OK:
        assert not any(k in ("orphaned", "ours-orphan", "starting") for k in kinds)


def test_the_seed_with_its_launcher_left_is_exit_9_naming_gpu_0_and_its_holder() -> None:
    """The seed's launcher lives on (its port closed) on GPU 0 and GPU 2 keeps orphaned
    memory: whatever the checks say, the ledger names both and the run is not 0."""
    kinds = ["starting", "idle", "orphaned", "idle", "idle", "idle", "idle", "idle"]
    state = Host(build(kinds)).state(runbook(), params())
    ledger = ledger_of(state, params(), state)
    assert exit_code(ledger, ExitCode.OK) is ExitCode.SUBJECT_HELD
    said = [e.said() for e in ledger.unaccounted]
    assert said[0].startswith("GPU 0: still held by the server")
    assert "PID 5000" in said[0]
    assert "sglang.launch_server" in said[0]
    assert said[1].startswith("GPU 2: orphaned memory, 90,003 MiB")


def test_a_run_that_started_the_server_again_is_not_held_by_its_loading() -> None:
    """The same launcher, absent at the first look (the run started its unit again): its
    GPU is 'started', and the run may end 0."""
    kinds = ["starting"] + ["idle"] * 7
    state = Host(build(kinds)).state(runbook(), params())
    first = Host(build(["idle"] * 8)).state(runbook(), params())
    ledger = ledger_of(state, params(), first)
    assert ledger.entries[0].status is GpuStatus.STARTED
    assert exit_code(ledger, ExitCode.OK) is ExitCode.OK


def test_a_code_already_not_0_is_kept() -> None:
    state = Host(build(["orphaned"] + ["idle"] * 7)).state(runbook(), params())
    ledger = ledger_of(state, params(), state)
    assert exit_code(ledger, ExitCode.CANNOT_TELL) is ExitCode.CANNOT_TELL
    assert exit_code(ledger, ExitCode.DECLINED) is ExitCode.DECLINED
