"""Ownership that a user cannot steer (issue 48): a user's own unit named like the
server's, a program named like a GPU service, another team's server in a Slurm job.
Pure: listings written here and generated cgroup trees, no host involved."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ownership import SUBJECT, by_pid, fuser_lines, hosts, listing

from runbook_runner.observe.proctree import owner_of_cgroup, parse_owners
from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import ownership
from runbook_runner.plan import permission as guard
from runbook_runner.plan.evidence import INFRASTRUCTURE_EXECUTABLES
from runbook_runner.plan.ownership import Owner

SYSTEM = "0::/system.slice/sglang.service"
USER_UNIT = "0::/user.slice/user-1666.slice/user@1666.service/app.slice/sglang.service"
LAUNCH = "python3 -m sglang.launch_server --model-path /m --tp-size 2"


def classified(text: str, status: int = 0, answer: str = "200") -> dict[int, ProcessOwner]:
    records = parse_owners(text)
    results = [
        ownership.judge_probe(p, status, answer, "") for p in ownership.probes(SUBJECT, records)
    ]
    return by_pid(ownership.classify(SUBJECT, records, results))


def _system(cgroup: str) -> bool:
    return cgroup.removeprefix("0::").startswith("/system.slice/")


# -- a user's own unit named like the server's ----------------------------------------------


def test_a_users_own_unit_is_that_users_never_the_system_units():
    assert owner_of_cgroup(USER_UNIT[3:]) == ("user-unit", "sglang.service of uid 1666")
    assert owner_of_cgroup("/user.slice/user-1666.slice/user@1666.service/init.scope") == (
        "user-unit",
        "user@1666.service of uid 1666",
    )
    assert owner_of_cgroup("/system.slice/system-sglang.slice/sglang@a.service") == (
        "unit",
        "sglang@a.service",
    )
    # below a unit's own cgroup is that unit's, whatever a sub-cgroup is named
    assert owner_of_cgroup("/system.slice/sglang.service/evil.service") == (
        "unit",
        "sglang.service",
    )
    assert owner_of_cgroup("/user.slice/sglang.service") == ("", "")


def _production_and_a_users_unit() -> str:
    """Production: the system unit sglang.service, TP 2, healthy on its --port 30000. A
    user's `systemd-run --user --unit=sglang ... --port 31337` answering 503, listed first."""
    rows = [
        (1, 0, "root", 9000, "Ss", "0::/init.scope", "/sbin/init"),
        (3001, 1, "bob", 300, "Sl", USER_UNIT, "python3 -m sglang.launch_server --port 31337"),
        (4101, 1, "root", 3600, "Sl", SYSTEM, LAUNCH + " --port 30000"),
        (4120, 4101, "root", 3600, "Sl", SYSTEM, "sglang::scheduler_TP0"),
        (4121, 4101, "root", 3600, "Sl", SYSTEM, "sglang::scheduler_TP1"),
    ]
    holds = {3001: [7], 4120: [0], 4121: [1]}
    return listing(rows, fuser_lines(holds, {3001: "bob"}))


def test_a_users_unit_named_like_production_never_joins_it_nor_steers_its_probe():
    records = parse_owners(_production_and_a_users_unit())
    asked = {p.instance: p.port for p in ownership.probes(SUBJECT, records)}
    assert asked == {4101: 30000}  # only production's launcher, on its own --port
    rows = classified(_production_and_a_users_unit(), 0, "503")
    assert rows[3001].owner == Owner.ANOTHER_OWNER
    assert "user bob's own unit sglang.service of uid 1666" in (rows[3001].evidence or "")
    assert rows[3001].unit == ""
    assert rows[3001].instance is None
    assert {rows[p].instance for p in (4101, 4120, 4121)} == {4101}
    # production answers 200: nothing is acted on, and its unit is not stopped
    rows = classified(_production_and_a_users_unit(), 0, "200")
    assert all(r.disposition == "leave" for r in rows.values()), rows
    unit = [type("U", (), {"unit": "sglang.service"})()]
    assert not guard.permitted(SUBJECT, "service", unit, list(rows.values())).allowed


def test_the_health_port_is_the_launchers_never_another_members():
    rows = [
        (4090, 1, "root", 3600, "Sl", SYSTEM, "python3 -m sglang_router --port 31337"),
        (4101, 1, "root", 3600, "Sl", SYSTEM, LAUNCH + " --port 30001"),
    ]
    subject = type(SUBJECT)(**{**SUBJECT.__dict__, "workers": r"sglang::|sglang_router"})
    records = parse_owners(listing(rows, fuser_lines({4101: [0]}, {})))
    assert [(p.instance, p.port) for p in ownership.probes(subject, records)] == [(4101, 30001)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_a_member_outside_system_slice_never_joins_a_system_units_instance(host):
    text, truth, (status, stdout) = host
    records = parse_owners(text)
    rows = classified(text, status, stdout)
    in_unit = {rows[r.pid].instance for r in records if r.pid in rows and r.unit}
    for record in records:
        row = rows.get(record.pid)
        if row is None or record.cgroup is None or _system(record.cgroup):
            continue
        assert row.unit == "", row  # no unit of the system's outside system.slice
        if record.owner_kind:  # a cgroup that names its owner: a session, job, user unit
            assert row.instance is None or row.instance not in in_unit, row
    for pid, kind in truth.items():
        if kind in {"other-user-unit", "other-job-named"} and pid in rows:
            assert rows[pid].owner == Owner.ANOTHER_OWNER, rows[pid]
    for probe in ownership.probes(SUBJECT, records):
        assert probe.port != 31337  # the user unit's --port never becomes a probe's


# -- a program named like a GPU service -----------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_an_executables_base_name_never_makes_infrastructure(host):
    text, truth, (status, stdout) = host
    for pid, row in classified(text, status, stdout).items():
        if row.owner == Owner.INFRASTRUCTURE:
            assert truth[pid].startswith("infra"), (truth[pid], row)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(sorted(INFRASTRUCTURE_EXECUTABLES)),
    st.sampled_from(["/usr/bin", "/usr/sbin", "/home/mallory", "/tmp", "/usr/local/bin/x", ""]),
    st.sampled_from(["root", "mallory", "nvidia-persistenced", "1666"]),
    st.sampled_from(
        ["0::/", "0::/user.slice/user-1666.slice/session-4.scope", "0::/system.slice/x.service"]
    ),
)
def test_only_the_installed_program_run_by_its_account_is_infrastructure(
    name, folder, user, cgroup
):
    rows = [(7001, 1, user, 600, "Sl", cgroup, f"/usr/bin/{name} --user nvidia-persistenced")]
    proc = f"7001 exe={folder}/{name}\n" if folder else ""
    row = classified(listing(rows, fuser_lines({7001: [3]}, {7001: user}), proc))[7001]
    installed = folder in {"/usr/bin", "/usr/sbin"} and user in {"root", "nvidia-persistenced"}
    assert (row.owner == Owner.INFRASTRUCTURE) is installed, row
    if installed:
        assert f"{folder}/{name} (/proc/7001/exe), run by {user}" in (row.evidence or "")


def test_a_users_persistenced_holding_a_gpu_opens_no_node_wide_stop():
    """mallory's own nvidia-persistenced on GPU 5, nothing of the subject on the node: it is
    mallory's, so stopping the GPU services (node-wide) is held back beside it."""
    rows = [
        (
            7001,
            1,
            "mallory",
            600,
            "Sl",
            "0::/user.slice/user-1666.slice/session-4.scope",
            "nvidia-persistenced",
        )
    ]
    text = listing(
        rows, fuser_lines({7001: [5]}, {7001: "mallory"}), "7001 exe=/home/m/nvidia-persistenced\n"
    )
    owners = list(classified(text).values())
    assert owners[0].owner == Owner.ANOTHER_OWNER
    assert not guard.permitted(
        SUBJECT, "gpu", [type("G", (), {"index": 5, "minor_number": 5})()], owners
    ).allowed
    assert not guard.permitted(SUBJECT, "node", [None], owners).allowed


# -- another team's server in a Slurm job ----------------------------------------------------


def test_a_slurm_jobs_server_is_the_jobs_whatever_its_command_line_says():
    job = "0::/system.slice/slurmstepd.scope/job_777/step_0/user/task_0"
    rows = [
        (5001, 1, "bob", 3600, "Sl", job, "vllm serve Qwen/Qwen3-8B --port 8001"),
        (5002, 5001, "bob", 3600, "Sl", job, "VLLM::Worker_TP0"),
    ]
    text = listing(
        rows,
        fuser_lines({5001: [4], 5002: [4]}, {5001: "bob", 5002: "bob"}),
        "5001 SLURM_JOB_ID=777\n5002 SLURM_JOB_ID=777\n",
    )
    assert ownership.probes(SUBJECT, parse_owners(text)) == []
    rows_by_pid = classified(text, 0, "503")
    for pid in (5001, 5002):
        assert rows_by_pid[pid].owner == Owner.ANOTHER_OWNER
        assert rows_by_pid[pid].disposition == "leave"
    assert "Slurm job 777, which outranks its name" in (rows_by_pid[5001].evidence or "")
    every = [type("P", (), {"pid": p})() for p in (5001, 5002)]
    assert not guard.permitted(SUBJECT, "process", every, list(rows_by_pid.values())).allowed


# -- /dev/shm: only the server stack's segments ----------------------------------------------


def test_only_the_server_stacks_unheld_shm_segments_are_removed():
    from pathlib import Path

    from conftest import REPO
    from runbook_runner.expect import evaluate_check
    from runbook_runner.observe.shm import parse_shm
    from runbook_runner.runbook import load

    runbook = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
    params = {name: p.default for name, p in runbook.parameters.items()}
    shm = parse_shm(
        "1796001000\n"
        "322122547200 bob 1796000000 free /dev/shm/bob-embeddings.bin\n"
        "42949672960 root 1796000100 free /dev/shm/sglang_hicache_0\n"
        "8388608 svc 1796000100 free /dev/shm/nccl-AbC123\n"
        "1048576 svc 1796000100 free /dev/shm/psm_5f1c2a9b\n"
        "1048576 svc 1796000100 free /dev/shm/torch_4120_1234567890_0\n"
        "32 root 1796000100 free /dev/shm/sem.mp-8f2a1c\n"
        "2147483648 postgres 1795914600 held /dev/shm/PostgreSQL.2131\n"
    )
    verdict = evaluate_check(runbook.checks["no-leaked-shm"], runbook, {"shm": shm}, params)
    assert sorted(s.path for s in verdict.failing) == [
        "/dev/shm/nccl-AbC123",
        "/dev/shm/psm_5f1c2a9b",
        "/dev/shm/sem.mp-8f2a1c",
        "/dev/shm/sglang_hicache_0",
        "/dev/shm/torch_4120_1234567890_0",
    ]  # bob's 300 GiB file is his, held or not; postgres's is held


def test_a_program_path_with_a_newline_stays_one_fact_of_its_own_process(tmp_path):
    """readlink prints a path as it is: a program named "x\\n1 exe=/usr/bin/nvidia-smi"
    must not forge a line for PID 1."""
    import shutil
    import subprocess

    from runbook_runner.observe.commands import OWN_COMMANDS
    from runbook_runner.observe.proctree import proc_facts

    text = OWN_COMMANDS["process-owners"].text
    fragment = next(part for part in text.split("; ") if "exe=" in part)
    program = tmp_path / "x\n1 exe=" / "usr" / "bin" / "nvidia-smi"
    program.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    child = subprocess.Popen([str(program), "30"])
    try:
        out = subprocess.run(
            ["sh", "-c", f"p={child.pid}; {fragment}"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        child.kill()
        child.wait()
    facts = proc_facts(out.splitlines())
    assert set(facts) == {child.pid}, out
    assert facts[child.pid]["executable"] == f"{tmp_path}/x 1 exe=/usr/bin/nvidia-smi"


# -- the same over `runbook test --state`: the simulated host answers /proc/PID/exe too ------

STATE = """
processes:
  - {pid: 3001, cmdline: "python3 -m sglang.launch_server --port 31337", user: bob, listens: 31337,
     health: error, gpu_mib: {5: 60000},
     cgroup: /user.slice/user-1666.slice/user@1666.service/app.slice/sglang.service}
  - {pid: 4100, cmdline: "python3 -m sglang.launch_server --port 30000", unit: sglang.service,
     listens: 30000}
  - {pid: 4120, cmdline: "sglang::scheduler_TP0", ppid: 4100, unit: sglang.service,
     gpu_mib: {0: 90112}}
  - {pid: 7101, cmdline: "nvidia-persistenced --verbose", user: mallory, gpu_mib: {6: 40000},
     exe: /home/mallory/bin/nvidia-persistenced}
services:
  - {name: sglang, main_pid: 4100}
shm:
  - {name: bob-embeddings.bin, size: 300 GiB, owner: bob, age_s: 9000}
"""


def test_a_state_with_a_users_unit_an_impostor_and_a_users_shm_file_changes_nothing(
    tmp_path, capsys
):
    import json

    from runbook_runner.cli import main

    state = tmp_path / "state.yaml"
    state.write_text(STATE)
    code = main(["test", "gpu-oom-recovery", "--state", str(state), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, document["verdict"]
    assert document["verdict"]["done"] == []  # no stop, signal, reset nor rm
    holders = {h["pid"]: h for h in document["state"]["holders"]}
    assert holders[3001]["owner"] == "another-owner"
    assert holders[7101]["owner"] == "another-owner"
    assert {holders[4100]["verdict"], holders[4120]["verdict"]} == {"leave"}  # healthy
