"""The run's verdict, pure: what is still held (exit 9), what was left alone (with the
command a person runs to look at it), as the last lines on the screen."""

from __future__ import annotations

from pathlib import Path

from runbook_runner.cli import render
from runbook_runner.cli.outcomes import run_code
from runbook_runner.events import Observed, RunReport, StepRecord
from runbook_runner.exitcodes import ExitCode
from runbook_runner.observe.state import ProcessOwner
from runbook_runner.runbook import load
from runbook_runner.status import StepStatus

RUNBOOK = load(Path(__file__).resolve().parent.parent / "runbooks" / "gpu-oom-recovery.yaml")


def row(pid: int, gpu: int, **fields: object) -> ProcessOwner:
    return ProcessOwner(
        pid=pid, minor_number=gpu, command="python3 -m sglang.launch_server", **fields
    )  # type: ignore[arg-type]


def ended_with(*rows: ProcessOwner) -> RunReport:
    """A run whose goal's checks all hold (none evaluated here) on a host with ``rows``."""
    report = RunReport(RUNBOOK)
    report.after = Observed("after", {"holders": tuple(rows)}, ())
    return report


def test_a_gpu_of_the_subject_held_by_a_broken_server_is_exit_9_not_0():
    broken = row(
        4001,
        0,
        owner="ours",
        subject=True,
        health="failing",
        disposition="act",
        reason="broken: its port 30000 is closed, still after 2000 s",
    )
    report = ended_with(broken)
    assert report.verdict.held == (
        "GPU /dev/nvidia0: still held by the server, memory not reported: PID 4001 python3 -m "
        "sglang.launch_server (broken: its port 30000 is closed, still after 2000 s) (look: ps "
        "-o pid,ppid,user,etimes,args -p 4001; cat /proc/4001/cgroup)",
    )
    assert run_code(report, dry_run=False, reboot_blocked=False) == ExitCode.SUBJECT_HELD


def starting(pid: int, gpu: int) -> ProcessOwner:
    return row(
        pid,
        gpu,
        owner="ours",
        subject=True,
        instance=pid,
        health="starting",
        disposition="leave",
        reason="starting: up 3 s, its port 30000 is not open yet, 8 of its workers live",
    )


def test_a_server_healthy_or_started_again_by_this_run_is_not_held():
    """A server the run started again holds its GPUs as it should while it loads: its
    instance was not there at the first look (the run started its unit): exit 0."""
    healthy = row(4001, 0, owner="ours", subject=True, health="healthy", disposition="leave")
    report = ended_with(healthy, starting(4002, 1))
    report.before = Observed("before", {"holders": ()}, ())
    assert report.verdict.held == ()
    assert report.verdict.left_alone == ()  # the server itself is in the GPU table, not here
    assert [e.status for e in report.verdict.ledger.entries] == ["serving", "started"]
    assert run_code(report, dry_run=False, reboot_blocked=False) == ExitCode.OK


def test_a_server_called_starting_from_the_first_look_to_the_last_is_not_recovered():
    """A launcher judged "starting" when the run began, and still at its end (a restart
    loop whose every incarnation looks new is another instance each time; this one is
    the same): its GPU is held by ours, exit 9, never "goal holds"."""
    report = ended_with(starting(4002, 1))
    report.before = Observed("before", {"holders": (starting(4002, 1),)}, ())
    assert report.verdict.held[0].startswith("GPU /dev/nvidia1: still held by the server")
    assert "starting: up 3 s" in report.verdict.held[0]
    assert run_code(report, dry_run=False, reboot_blocked=False) == ExitCode.SUBJECT_HELD


def test_what_no_step_may_touch_is_left_alone_with_the_command_to_look_at_it():
    """A stranger no rung ever reached (its GPU was not failing) is still named, whose it
    is and why, with the command a person runs; the same PID a rung named is named once."""
    stranger = row(
        7001,
        5,
        owner="unknown",
        subject=False,
        disposition="cannot-tell",
        evidence="no unit, container, job or session in its cgroup",
        reason="cannot tell whose it is",
    )
    other = row(
        7100,
        6,
        owner="another-owner",
        subject=False,
        disposition="leave",
        evidence="login session-4 of uid 1510",
        reason="not the subject's",
    )
    report = ended_with(stranger, other)
    left = report.verdict.left_alone
    assert len(left) == 2, left
    assert left[0].startswith("PID 7001 (python3 -m sglang.launch_server) on GPU /dev/nvidia5")
    assert "(look: ps -o pid,user,lstart,args -p 7001; cat /proc/7001/cgroup)" in left[0]
    lines = render.verdict_lines(report.verdict, ())
    assert "  look: ps -o pid,user,lstart,args -p 7001; cat /proc/7001/cgroup" in "\n".join(lines)
    assert all(len(line) <= render.LINE for line in lines)

    report.steps.append(
        StepRecord(
            "reset-gpus",
            StepStatus.OK,
            0.0,
            0.0,
            left_alone=("GPU /dev/nvidia5: held by PID 7001 (...): not reset",),
        )
    )
    again = report.verdict.left_alone
    assert [said for said in again if "7001" in said] == [
        "GPU /dev/nvidia5: held by PID 7001 (...): not reset"
    ]
    assert any("PID 7100" in said for said in again)


def _looked(state: dict[str, object], checks: list[str]) -> RunReport:
    from runbook_runner.events import Observed
    from runbook_runner.expect import evaluate_checks

    params = {n: p.default for n, p in RUNBOOK.parameters.items()}
    results = tuple(evaluate_checks(checks, RUNBOOK, state, params, {}))
    report = RunReport(RUNBOOK)
    report.after = Observed("after", state, results)
    return report


def test_a_check_nobody_could_tell_says_make_what_it_reads_observable_not_its_hint():
    """nvidia-smi missing: the memory check's hint (reset that GPU...) is about a state
    nobody saw; what a person does next is make the observation work, then look again."""
    from runbook_runner.observe.state import Unavailable

    missing = Unavailable("'nvidia-smi -q' exited 127 (command not found)", "not-found")
    report = _looked({"gpus": missing, "holders": ()}, ["gpu-memory-released", "gpus-answer"])
    [said] = report.verdict.next
    assert said.startswith("make 'gpus' observable: install the command it runs")
    assert "runbook check gpu-oom-recovery --host HOST" in said
    assert "nvidia-smi --gpu-reset" not in said


def test_a_condition_a_failing_check_judges_is_that_checks_finding_and_hint():
    """The driver/library mismatch: nvidia-smi cannot say, and that is the finding; the
    next step is the mismatch check's own hint, once, not 'make gpus observable'."""
    from runbook_runner.observe.state import Unavailable

    mismatch = Unavailable("nvidia-smi failed: mismatch", "driver-library-mismatch")
    report = _looked(
        {"gpus": mismatch, "holders": ()},
        ["gpu-memory-released", "gpus-answer", "driver-matches-library"],
    )
    [said] = report.verdict.next
    assert said == " ".join(RUNBOOK.checks["driver-matches-library"].hint.split())


def test_a_rung_that_failed_is_done_with_why_it_failed():
    """The driver will not load: 'done' says the attempt failed, and the host's words."""
    from runbook_runner.events import StepRecord

    report = ended_with()
    report.steps.append(
        StepRecord(
            "load-driver",
            StepStatus.FAILED,
            0.0,
            0.1,
            exit_status=1,
            message="exit status 1: modprobe: FATAL: Module nvidia not found",
            commands=("modprobe nvidia && modprobe nvidia_uvm",),
        )
    )
    assert report.verdict.done == (
        "load-driver: modprobe nvidia && modprobe nvidia_uvm (failed: exit status 1: modprobe: "
        "FATAL: Module nvidia not found)",
    )


def test_a_check_on_an_observations_condition_speaks_of_the_check_not_a_gpu():
    from runbook_runner.expect import evaluate_checks
    from runbook_runner.observe.state import Unavailable

    state = {"gpus": Unavailable("nvidia-smi failed", "driver-not-loaded")}
    params = {n: p.default for n, p in RUNBOOK.parameters.items()}
    [result] = evaluate_checks(["driver-loaded"], RUNBOOK, state, params, {})
    assert result.message == (
        "The NVIDIA driver is loaded: condition 'driver-not-loaded', expected != "
        "'driver-not-loaded'"
    )


def test_a_rung_held_back_by_what_it_would_reach_is_the_next_step_not_its_checks_hint():
    """A stranger shares the NVLink group: the reset and the GPU services' stop were held
    back. 'Reset that GPU' (the memory check's hint) is what the run refused to do: the
    next step is to look at what held the rung back, then run again."""
    from runbook_runner.events import Observed, StepRecord
    from runbook_runner.expect import CheckResult

    report = RunReport(RUNBOOK)
    held = CheckResult("gpu-memory-released", False, "<= 1024", "30003", "GPU 0: 30,003 MiB")
    drain = CheckResult("no-gpu-to-drain", False, "none", "Xid 48", "Xid 48 twice")
    report.after = Observed("after", {"holders": ()}, (held, drain))
    report.blocked = StepRecord(
        "stop-gpu-services",
        StepStatus.BLOCKED,
        0.0,
        0.0,
        message="blocked: stopping nvidia-persistenced.service reaches every GPU; cannot tell "
        "who holds: PID 7001 (python3 train.py): its owner cannot be told",
    )
    said = report.verdict.next
    assert said[0] == (
        "stop-gpu-services was held back (stopping nvidia-persistenced.service reaches every "
        "GPU; cannot tell who holds): look at what holds it back (named above), and run this "
        "runbook again once that is gone"
    )
    assert not any("--gpu-reset" in line for line in said)  # the refused rung's advice
    assert " ".join(RUNBOOK.checks["no-gpu-to-drain"].hint.split()) in said  # not its to fix


def test_a_reset_that_left_its_gpu_alone_is_not_advised_again():
    """reset-gpus left GPU 2 alone (a reset of it would reach another owner's pod): the
    verdict's next names that and what to look at, and never "reset that GPU"."""
    from runbook_runner.expect import CheckResult

    report = RunReport(RUNBOOK)
    failing = CheckResult("gpu-memory-released", False, "<= 1024", "96413", "GPU 2: 96,413 MiB")
    report.after = Observed("after", {}, (failing,))
    report.steps.append(
        StepRecord(
            "reset-gpus",
            StepStatus.SKIPPED,
            0.0,
            0.0,
            message="left alone: GPU 2: its reset reaches GPU 3, another owner's pod",
            left_alone=("GPU 2: its reset reaches GPU 3, another owner's pod",),
        )
    )
    said = " ".join(report.verdict.next)
    assert "reset that GPU" not in said
    assert "reset-gpus left its targets alone" in said
