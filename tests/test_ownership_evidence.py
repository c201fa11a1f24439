"""Owners told from more than the cgroup (issue 33, item 2): a holder's environment,
login, mounts and sockets, and NVIDIA MPS. Pure: the parser (observe/proctree.py) and the
classification (plan/ownership.py) over listings written here, no host involved."""

from __future__ import annotations

from pathlib import Path

from test_ownership import HEADER, SUBJECT

from conftest import REPO
from runbook_runner.expect import evaluate_check
from runbook_runner.observe.proctree import (
    container_of_mount,
    listening_ports,
    mps_clients,
    parse_owners,
    proc_facts,
)
from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import ownership
from runbook_runner.plan import permission as guard
from runbook_runner.plan.ownership import Owner, ProbeResult
from runbook_runner.runbook import load

FLAT = "0::/"
LAUNCH = "python3 -m sglang.launch_server --model-path /m --tp-size 4"


def listing(
    rows: list[tuple[int, int, str, str]],
    holds: dict[int, list[int]],
    proc: str = "",
    listening: str = "",
    mps: str = "",
) -> str:
    """A process-owner listing as the runbook's script prints it: ps, fuser -v, then the
    sections of more evidence. Rows are (pid, ppid, user, command), all in one cgroup."""
    text = HEADER
    for pid, ppid, user, command in rows:
        text += f"{pid:>7} {ppid:>7} {pid:>7} {pid:>7} {user:<8} {9000:>8} Sl   {FLAT} {command}\n"
    text += "@@ fuser\n                     USER        PID ACCESS COMMAND\n"
    for pid, minors in holds.items():
        for minor in minors:
            text += f"{f'/dev/nvidia{minor}:':<20} root     {pid:>6} F...m python3\n"
    text += "@@ proc\n" + proc + "@@ listening\n" + listening + "@@ mps\n" + mps + "@@ end\n"
    return text


def classified(text: str, results: list[ProbeResult] | None = None) -> dict[int, ProcessOwner]:
    records = parse_owners(text)
    owners = ownership.classify(SUBJECT, records, results or [])
    return {r.pid: r for r in owners if r.pid is not None}


# -- the parser ---------------------------------------------------------------------------


def test_the_environment_lines_give_each_holder_its_owner_variables():
    facts = proc_facts(
        [
            "7001 SLURM_JOB_ID=81422",
            "7001 CUDA_VISIBLE_DEVICES=4,5",
            "7001 loginuid=4294967295",
            "7002 KUBERNETES_SERVICE_HOST=10.96.0.1",
            "7002 loginuid=1007",
            "7003 RAY_RAYLET_PID=7500",
            "7004 mount=/var/lib/docker/containers/" + "ab" * 32 + "/hostname",
            "7005 mount=/etc/my-own-hostname",
            "not a line of ours",
        ]
    )
    assert facts[7001] == {"slurm_job_id": "81422", "cuda_visible_devices": "4,5"}
    assert facts[7002] == {"kubernetes": "KUBERNETES_SERVICE_HOST=10.96.0.1", "loginuid": 1007}
    assert facts[7003] == {"ray": "RAY_RAYLET_PID=7500"}
    assert facts[7004] == {"container_id": "docker abababababab"}
    assert facts[7005] == {}  # a bind mount no container runtime's folder names: nothing


def test_a_value_from_the_environment_stays_data_and_is_cut_short():
    hostile = "$(reboot); rm -rf / `id`" + "x" * 500
    facts = proc_facts([f"7001 SLURM_JOB_ID={hostile}"])
    value = facts[7001]["slurm_job_id"]
    assert isinstance(value, str)
    assert value.startswith("$(reboot); rm -rf / `id`")
    assert len(value) == 120


def test_container_runtimes_are_named_from_the_folder_their_mount_comes_from():
    pod = "5f1c2a3b-9d8e-4f70-a1b2-c3d4e5f60718"
    assert (
        container_of_mount(f"/var/lib/kubelet/pods/{pod}/etc-hosts")
        == "kubernetes pod 5f1c2a3b-9d8"
    )
    assert (
        container_of_mount(
            "/var/lib/containers/storage/overlay-containers/" + "c" * 64 + "/userdata/hostname"
        )
        == "podman cccccccccccc"
    )
    assert (
        container_of_mount(
            "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + "d" * 64 + "/hostname"
        )
        == "containerd sandbox dddddddddddd"
    )
    assert container_of_mount("/etc/hostname") == ""


def test_ss_lines_give_the_ports_each_process_listens_on():
    lines = [
        "State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process",
        'LISTEN 0      2048         0.0.0.0:30000      0.0.0.0:*    users:(("python3",pid=4101,fd=23))',
        'LISTEN 0      2048            [::]:8000          [::]:*    users:(("vllm",pid=5101,fd=9),("vllm",pid=5102,fd=9))',
        'LISTEN 0      128        127.0.0.1:8001       0.0.0.0:*    users:(("vllm",pid=5101,fd=11))',
        "LISTEN 0      128        127.0.0.1:22         0.0.0.0:*",  # no process column (not root)
        'LISTEN 0      128        127.0.0.1:99999      0.0.0.0:*    users:(("x",pid=1,fd=1))',
    ]
    assert listening_ports(lines) == {4101: [30000], 5101: [8000, 8001], 5102: [8000]}


def test_the_mps_control_daemons_answer_gives_each_client_its_server():
    assert mps_clients(["server 7801", "client 7801 4120", "client 7801 4121", "client x 1"]) == {
        4120: 7801,
        4121: 7801,
    }


def test_the_listing_puts_every_piece_of_evidence_on_the_holders_records():
    text = listing(
        [(4101, 1, "root", LAUNCH), (4120, 4101, "root", "sglang::scheduler_TP0")],
        {4120: [0, 1]},
        proc="4120 CUDA_VISIBLE_DEVICES=0,1\n4120 loginuid=0\n",
        listening='LISTEN 0 2048 0.0.0.0:30000 0.0.0.0:* users:(("python3",pid=4101,fd=23))\n',
        mps="server 7801\nclient 7801 4120\n",
    )
    records = parse_owners(text)
    worker = [r for r in records if r.pid == 4120]
    assert [r.minor_number for r in worker] == [0, 1]
    assert {(r.cuda_visible_devices, r.loginuid, r.mps_server) for r in worker} == {
        ("0,1", 0, 7801)
    }
    launcher = next(r for r in records if r.pid == 4101)
    assert launcher.listening == "30000"
    assert launcher.mps_server is None


def test_a_listing_without_the_new_sections_still_parses():
    """The older script (ps and fuser only) gives the same records, with nothing more."""
    text = HEADER + f"{4101:>7} {1:>7} {4101:>7} {4101:>7} root     9000 Sl   {FLAT} {LAUNCH}\n"
    text += "@@ fuser\n@@ end\n"
    (record,) = parse_owners(text)
    assert record.slurm_job_id is None
    assert record.listening is None
    assert record.mps_server is None


# -- the classification ---------------------------------------------------------------------

STRANGER = (7001, 1, "alice", "python3 train.py")


def test_a_stranger_in_a_flat_cgroup_is_told_by_its_environment_and_says_where():
    cannot = classified(listing([STRANGER], {7001: [5]}))[7001]
    assert cannot.owner == Owner.UNKNOWN
    assert cannot.disposition == "cannot-tell"
    cases = {
        "7001 SLURM_JOB_ID=81422\n": "Slurm job 81422 (SLURM_JOB_ID in /proc/7001/environ)",
        "7001 KUBERNETES_SERVICE_HOST=10.96.0.1\n": "a Kubernetes pod (KUBERNETES_SERVICE_HOST=10.96.0.1 in /proc/7001/environ)",
        "7001 mount=/var/lib/docker/containers/"
        + "a" * 64
        + "/hostname\n": "container docker aaaaaaaaaaaa",
        "7001 loginuid=1007\n": "the login of uid 1007 (/proc/7001/loginuid)",
        "7001 RAY_JOB_ID=02000000\n": "a Ray cluster's: RAY_JOB_ID=02000000 in /proc/7001/environ",
    }
    for proc, said in cases.items():
        row = classified(listing([STRANGER], {7001: [5]}, proc=proc))[7001]
        assert row.owner == Owner.ANOTHER_OWNER, proc
        assert row.disposition == "leave"
        assert said in (row.evidence or ""), (proc, row.evidence)


def test_an_unset_loginuid_tells_nothing():
    row = classified(listing([STRANGER], {7001: [5]}, proc="7001 loginuid=4294967295\n"))[7001]
    assert row.owner == Owner.UNKNOWN


def test_a_process_under_an_ssh_login_is_that_logins():
    rows = [
        (6980, 1, "root", "sshd: bob@pts/3"),
        (6981, 6980, "bob", "-bash"),
        (7003, 6981, "bob", "python3 eval.py"),
    ]
    row = classified(listing(rows, {7003: [6]}))[7003]
    assert row.owner == Owner.ANOTHER_OWNER
    assert "bob's SSH login (pts/3, sshd PID 6980: parent chain)" in (row.evidence or "")
    # "sshd: bob [priv]" is the privileged half, not a login's session: it names no tty
    rows[0] = (6980, 1, "root", "sshd: bob [priv]")
    assert classified(listing(rows, {7003: [6]}))[7003].owner == Owner.UNKNOWN


def test_the_environment_never_makes_a_process_ours_nor_takes_ours_away():
    rows = [(4101, 1, "root", LAUNCH), (4120, 4101, "root", "sglang::scheduler_TP0")]
    proc = "4120 SLURM_JOB_ID=81422\n4120 loginuid=1000\n4101 KUBERNETES_PORT=tcp://10.96.0.1:443\n"
    owners = classified(listing(rows, {4120: [0]}, proc=proc))
    assert owners[4120].owner == Owner.OURS
    assert owners[4101].owner == Owner.OURS
    # the same environment on a process the subject does not name makes it another's
    owners = classified(
        listing([(7001, 1, "root", "python3 x.py")], {7001: [0]}, proc=proc.replace("4120", "7001"))
    )
    assert owners[7001].owner == Owner.ANOTHER_OWNER


def test_the_cuda_visible_devices_note_says_when_a_process_holds_more_gpus_than_it_was_shown():
    row = classified(
        listing(
            [STRANGER], {7001: [4, 5]}, proc="7001 SLURM_JOB_ID=9\n7001 CUDA_VISIBLE_DEVICES=4\n"
        )
    )[7001]
    assert (
        "its CUDA_VISIBLE_DEVICES=4 (/proc/7001/environ), it holds /dev/nvidia4, /dev/nvidia5: more GPUs than the 1 it was shown"
        in (row.evidence or "")
    )


def _instance(launcher: str, listening: str = "") -> dict[int, ownership._Process]:
    records = parse_owners(
        listing(
            [(5101, 1, "root", launcher), (5120, 5101, "root", "VLLM::Worker_TP0")],
            {5120: [0]},
            listening=listening,
        )
    )
    table = ownership._processes(records)
    ownership._first_pass(SUBJECT, table)
    return table


def _ss(*ports: int) -> str:
    return "".join(
        f'LISTEN 0 2048 0.0.0.0:{p} 0.0.0.0:* users:(("vllm",pid=5101,fd=9))\n' for p in ports
    )


def test_the_health_port_is_the_flag_else_the_one_port_the_launcher_listens_on():
    serve = "vllm serve --config /etc/vllm/a.yaml"
    assert ownership.health_port(SUBJECT, _instance(serve + " --port 9100", _ss(8100)), 5101) == (
        9100,
        "its --port",
    )
    assert ownership.health_port(SUBJECT, _instance(serve, _ss(8100)), 5101) == (
        8100,
        "the one port its launcher listens on (ss -ltnp)",
    )
    assert ownership.health_port(SUBJECT, _instance(serve, _ss(8000, 8001)), 5101)[0] == 8000
    port, why = ownership.health_port(SUBJECT, _instance(serve, _ss(8100, 8101)), 5101)
    assert port is None
    assert "8100, 8101" in why
    assert ownership.health_port(SUBJECT, _instance(serve), 5101) == (8000, "its kind's default")


def test_a_launcher_on_several_ports_none_the_default_cannot_be_told_and_is_not_asked():
    text = listing(
        [(5101, 1, "root", "vllm serve --config a.yaml"), (5120, 5101, "root", "VLLM::Worker_TP0")],
        {5120: [0]},
        listening=_ss(8100, 8101),
    )
    records = parse_owners(text)
    assert ownership.probes(SUBJECT, records) == []
    row = {r.pid: r for r in ownership.classify(SUBJECT, records)}[5120]
    assert row.disposition == "cannot-tell"
    assert "listens on ports 8100, 8101 (ss -ltnp)" in (row.reason or "")


def test_the_probe_asks_the_port_from_ss_not_the_default():
    text = listing(
        [(5101, 1, "root", "vllm serve --config a.yaml"), (5120, 5101, "root", "VLLM::Worker_TP0")],
        {5120: [0]},
        listening=_ss(8100),
    )
    (probe,) = ownership.probes(SUBJECT, parse_owners(text))
    assert probe.port == 8100
    assert probe.url == "http://127.0.0.1:8100/health"


RECOVERY = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
PARAMS = {name: p.default for name, p in RECOVERY.parameters.items()}


def _mps_host(health: str) -> tuple[ProcessOwner, ...]:
    rows = [
        (7800, 1, "root", "nvidia-cuda-mps-control -d"),
        (7801, 7800, "root", "nvidia-cuda-mps-server"),
        (4101, 1, "root", LAUNCH + " --port 30000"),
        (4120, 4101, "root", "sglang::scheduler_TP0"),
        (4201, 1, "root", LAUNCH + " --port 30001"),
        (4220, 4201, "root", "sglang::scheduler_TP0"),
    ]
    text = listing(
        rows,
        {7801: [0, 1], 4120: [0], 4220: [1]},
        proc="7801 exe=/usr/bin/nvidia-cuda-mps-server\n",  # infrastructure: its path, not its name
        mps="server 7801\nclient 7801 4120\nclient 7801 4220\n",
    )
    records = parse_owners(text)
    status = {"hung": (28, ""), "ok": (0, "200")}
    results = [
        ownership.judge_probe(p, *(status[health] if p.port == 30000 else status["ok"]), "")
        for p in ownership.probes(SUBJECT, records)
    ]
    return ownership.classify(SUBJECT, records, results)


def test_only_a_broken_servers_mps_clients_are_ended_through_the_control_daemon():
    owners = _mps_host("hung")
    by_pid = {r.pid: r for r in owners}
    assert by_pid[7801].owner == Owner.INFRASTRUCTURE
    assert "a client of MPS server PID 7801" in (by_pid[4120].evidence or "")
    verdict = evaluate_check(
        RECOVERY.checks["mps-clients-ended"], RECOVERY, {"holders": owners}, PARAMS
    )
    assert not verdict.ok
    assert not verdict.cannot_tell
    assert [(r.pid, r.mps_server) for r in verdict.failing] == [(4120, 7801)]
    permission = guard.permitted(SUBJECT, "process", list(verdict.failing), owners)
    assert [r.pid for r in permission.allowed] == [4120]
    # the healthy one's client, or the MPS server itself, is never a target
    assert not guard.permitted(SUBJECT, "process", [by_pid[4220], by_pid[7801]], owners).allowed


def test_no_mps_client_is_ended_when_every_server_is_healthy():
    owners = _mps_host("ok")
    verdict = evaluate_check(
        RECOVERY.checks["mps-clients-ended"], RECOVERY, {"holders": owners}, PARAMS
    )
    assert verdict.ok


def test_the_recovery_ends_mps_clients_before_any_signal_or_unit_stop():
    order = [step.id for step in RECOVERY.steps]
    first_stop = min(
        order.index(s)
        for s in ("stop-crash-looping-unit", "stop-server-unit", "stop-server", "kill-server")
    )
    assert order.index("end-mps-clients") < first_stop
    step = RECOVERY.steps[order.index("end-mps-clients")]
    assert "terminate_client" in step.run.source
    assert "nvidia-cuda-mps-control" in step.run.source
