"""'Cannot tell' holds back only what it could reach: a property over generated hosts (flat
cgroups, NVIDIA MPS, Ray clusters, strangers nobody can attribute, the subject's server in
its several states), driven through the pure decision (plan/decide.py), no SSH.

- no action reaches an unattributed holder: no signal to it, no reset of a GPU it holds,
  no node-wide rung (nor a stop of the GPU services) while one is on the node;
- no run stops for a holder no action of it could reach: with the strangers there, each
  per-process and per-GPU step acts on exactly what it would act on without them, less the
  GPUs they hold, and is never blocked for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ownership import fuser_lines, listing

from conftest import REPO
from runbook_runner.observe.proctree import parse_owners
from runbook_runner.observe.state import Gpu, GpuFabric, Memory, ProcessOwner, TextLine
from runbook_runner.plan import decide, ownership
from runbook_runner.plan.permission import held_back
from runbook_runner.runbook import load

RECOVERY = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
DEFAULTS = {name: p.default for name, p in RECOVERY.parameters.items()}
SUBJECT = RECOVERY.subject.with_parameters(DEFAULTS)
FLAT = "0::/"
LAUNCH = "python3 -m sglang.launch_server --model-path /m --tp-size 4"
RAYLET = "/opt/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray/raylet"


@dataclass(frozen=True)
class Host:
    text: str
    used_mib: tuple[int, ...]  # per GPU
    health: tuple[int, str]  # the probe's curl exit status and stdout
    bare: str = ""  # the same listing without the sections of more evidence (@@ proc, @@ mps)


# What else a holder's /proc may say of its owner (the runbook's @@ proc lines), or nothing.
EVIDENCE = (
    "",
    "SLURM_JOB_ID=81422",
    "loginuid=1007",
    "loginuid=4294967295",
    "KUBERNETES_SERVICE_HOST=10.96.0.1",
    "RAY_JOB_ID=02000000",
    "mount=/var/lib/docker/containers/" + "a" * 64 + "/hostname",
    "CUDA_VISIBLE_DEVICES=0",
)


@st.composite
def hosts(draw: Any) -> Host:
    flat = draw(st.booleans())

    def cgroup(own: str) -> str:
        return FLAT if flat else own

    rows: list[tuple] = []
    holds: dict[int, list[int]] = {}
    gpus = st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True)
    server = draw(st.sampled_from(["none", "running", "orphans", "launcher-only"]))
    session = "0::/user.slice/user-0.slice/session-4.scope"
    if server in {"running", "launcher-only"}:
        age = draw(st.sampled_from([30, 93, 600, 4000]))
        rows.append((4101, 1, "root", age, "Sl", cgroup(session), LAUNCH))
        holds[4101] = [0] if server == "launcher-only" else []
    if server in {"running", "orphans"}:
        for rank in range(draw(st.integers(1, 4))):
            pid, parent = 4120 + rank, 4101 if server == "running" else 1
            state = draw(st.sampled_from(["Sl", "Rl", "D"]))
            rows.append(
                (pid, parent, "root", 600, state, cgroup(session), f"sglang::scheduler_TP{rank}")
            )
            holds[pid] = [rank]
    # Strangers: jobs nobody can attribute (always in the flat root cgroup), some only in
    # fuser (another PID namespace).
    for n in range(draw(st.integers(0, 3))):
        pid = 7001 + n
        if draw(st.booleans()):
            rows.append(
                (
                    pid,
                    1,
                    draw(st.sampled_from(["alice", "root", "1000"])),
                    900,
                    "Rl",
                    FLAT,
                    f"python3 train_{n}.py",
                )
            )
        holds[pid] = draw(gpus)
    if draw(st.booleans()):  # a Ray cluster: a raylet and its actors
        rows.append((7500, 1, "bob", 9000, "Sl", cgroup("0::/system.slice/ray.service"), RAYLET))
        for n in range(draw(st.integers(1, 3))):
            rows.append(
                (
                    7510 + n,
                    7500,
                    "bob",
                    900,
                    "Sl",
                    cgroup("0::/system.slice/ray.service"),
                    "ray::RayTrainWorker.train",
                )
            )
            holds[7510 + n] = draw(gpus)
    mps: list[str] = []
    if draw(st.booleans()):  # NVIDIA MPS: the control daemon and its server, GPU infrastructure
        rows.append((7800, 1, "root", 9000, "Ssl", FLAT, "nvidia-cuda-mps-control -d"))
        rows.append((7801, 7800, "root", 9000, "Sl", FLAT, "nvidia-cuda-mps-server"))
        holds[7801] = draw(gpus)
        mps.append("server 7801")
        # its clients: any process holding a GPU (our schedulers, strangers)
        mps += [f"client 7801 {pid}" for pid in holds if pid != 7801 and draw(st.booleans())]
    # More evidence for every holder, ours and strangers alike: it may tell a stranger's
    # owner, and never makes a process ours or takes one from us.
    proc = [
        f"{pid} {found}"
        for pid in sorted(holds)
        for found in [draw(st.sampled_from(EVIDENCE))]
        if found
    ]
    used = tuple(draw(st.sampled_from([3, 3, 90_000])) for _ in range(8))
    health = draw(st.sampled_from([(0, "200"), (7, ""), (28, ""), (0, "503"), (127, "")]))
    bare = listing(rows, fuser_lines({p: m for p, m in holds.items() if m}, {}))
    sections = "@@ proc\n" + "".join(f"{line}\n" for line in proc)
    sections += "@@ listening\n@@ mps\n" + "".join(f"{line}\n" for line in mps)
    text = bare.replace("@@ end\n", sections + "@@ end\n")
    return Host(text, used, health, bare)


def classified(host: Host) -> tuple[ProcessOwner, ...]:
    records = parse_owners(host.text)
    status, stdout = host.health
    results = [
        ownership.judge_probe(p, status, stdout, "") for p in ownership.probes(SUBJECT, records)
    ]
    return ownership.classify(SUBJECT, records, results)


def state_of(owners: tuple[ProcessOwner, ...], used: tuple[int, ...]) -> dict[str, Any]:
    return {
        "holders": owners,
        "gpus": tuple(
            Gpu(
                index=i,
                minor_number=i,
                memory_used_mib=mib,
                memory_total_mib=97_887,
                persistence_mode="Enabled",
            )
            for i, mib in enumerate(used)
        ),
        "memory": Memory(
            total_bytes=449 * 2**30, available_bytes=440 * 2**30, used_bytes=9 * 2**30
        ),
        "xids": (),
        "processes": (),
        "hung_tasks": (),
        "shm": (),
        "server_log": (),
        "stopped_units": (),
        "running_gpu_services": (TextLine(text="nvidia-persistenced"),),
        "stopped_gpu_services": (),
        # PCIe GPUs, no NVLink: a reset reaches its own GPU (tests/test_fabric.py: others)
        "gpu_fabric": tuple(
            GpuFabric(index=i, minor_number=i, architecture="Blackwell", nvlink_peers=())
            for i in range(len(used))
        ),
    }


def unattributed(row: ProcessOwner) -> bool:
    return row.disposition == "cannot-tell" and not row.subject


def targets(decision: decide.Decision) -> set[Any]:
    found = set()
    for item in decision.items:
        for name in ("pid", "minor_number", "index", "unit", "text"):
            value = getattr(item, name, None)
            if value is not None:
                found.add((name, value))
                break
    return found


def node_wide(step: Any) -> bool:
    return step.affects == "node"


def decisions(
    owners: tuple[ProcessOwner, ...], used: tuple[int, ...], gate: bool
) -> dict[str, decide.Decision]:
    state = state_of(owners, used)
    return {
        step.id: decide.decide(
            RECOVERY, DEFAULTS, state, {}, step, subject=SUBJECT, allow_node_wide=gate
        )
        for step in RECOVERY.steps
        if step.destructive
    }


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_no_action_reaches_a_holder_nobody_can_attribute(host, gate):
    owners = classified(host)
    strangers = [r for r in owners if unattributed(r)]
    rows = {r.pid: r for r in owners}
    for step_id, decision in decisions(owners, host.used_mib, gate).items():
        if decision.verdict is not decide.Verdict.RUN:
            continue
        step = RECOVERY.step(step_id)
        if strangers:
            assert not node_wide(step), (step_id, strangers[0])
            if step.affects == "service" and step_id == "stop-gpu-services":
                raise AssertionError("the GPU services stopped beside a stranger")
        for item in decision.items:
            if step.affects == "process":
                assert rows[item.pid].disposition == "act", (step_id, rows[item.pid])
            if step.affects == "gpu":
                held = [r for r in owners if r.minor_number == item.minor_number]
                assert not any(r.disposition == "cannot-tell" for r in held), (step_id, held)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_no_step_stops_for_a_holder_it_could_not_reach(host, gate):
    owners = classified(host)
    strangers = {r.pid for r in owners if unattributed(r)}
    reach = {r.minor_number for r in owners if r.pid in strangers and r.minor_number is not None}
    alone = tuple(r for r in owners if r.pid not in strangers)
    with_them = decisions(owners, host.used_mib, gate)
    without = decisions(alone, host.used_mib, gate)
    for step_id, decision in with_them.items():
        step = RECOVERY.step(step_id)
        if node_wide(step) or step_id == "stop-gpu-services":
            continue  # a node-wide rung reaches every holder: it may stop for them
        before = without[step_id]
        if before.verdict is decide.Verdict.BLOCKED:
            continue  # blocked for something else than the strangers
        assert decision.verdict is not decide.Verdict.BLOCKED, (step_id, decision.message)
        expected = {
            t for t in targets(before) if not (t[0] in {"minor_number", "index"} and t[1] in reach)
        }
        if before.verdict is decide.Verdict.RUN:
            assert targets(decision) == expected, (step_id, decision, before)
        else:
            assert not targets(decision), (step_id, decision)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_more_evidence_only_ever_tells_another_owner(host):
    """A holder's environment, login, mounts and MPS server never make a process the
    subject's nor take one from it: what they change is only who else a process is."""
    told = {r.pid: r for r in classified(host)}
    before = {r.pid: r for r in classified(Host(host.bare, host.used_mib, host.health))}
    assert told.keys() == before.keys()
    for pid, row in told.items():
        was = before[pid]
        assert row.subject == was.subject, (row, was)
        assert (row.owner in {"ours", "orphaned-ours"}) == (was.owner in {"ours", "orphaned-ours"})
        if row.owner != was.owner:
            assert (was.owner, row.owner) == ("unknown", "another-owner"), (was, row)
            assert row.disposition == "leave"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_an_mps_client_is_ended_only_through_the_control_daemon_and_only_if_ours(host, gate):
    owners = classified(host)
    rows = {r.pid: r for r in owners}
    made = decisions(owners, host.used_mib, gate)
    ending = made["end-mps-clients"]
    if ending.verdict is decide.Verdict.RUN:
        for item in ending.items:
            assert rows[item.pid].disposition == "act"
            assert item.mps_server == 7801
    for step_id, decision in made.items():
        if decision.verdict is not decide.Verdict.RUN or step_id == "end-mps-clients":
            continue
        for item in decision.items:  # the MPS daemons are never a process step's target
            assert getattr(item, "pid", None) not in {7800, 7801}, (step_id, item)


def test_a_stranger_on_gpu5_holds_back_only_gpu5_and_the_node_wide_rungs():
    """The issue's host: flat cgroups, our server's memory orphaned on GPUs 0-3, a job
    nobody can attribute on GPU 5."""
    text = listing(
        [(7001, 1, "alice", 900, "Rl", FLAT, "python3 train.py --config ablation-12.yaml")],
        fuser_lines({7001: [5]}, {7001: "alice"}),
    )
    owners = classified(Host(text, (), (7, "")))
    used = (91_000, 91_000, 91_000, 91_000, 3, 80_000, 3, 3)
    made = decisions(owners, used, gate=True)
    reset = made["reset-gpus"]
    assert reset.verdict is decide.Verdict.RUN
    assert sorted(g.index for g in reset.items) == [0, 1, 2, 3]
    for step_id in ("reload-driver", "reboot"):
        assert made[step_id].verdict is not decide.Verdict.RUN
    # The run's verdict names it: what, whose, why, and how to look at it.
    (named,) = held_back(owners)
    assert named.cannot_tell
    assert named.what.startswith("PID 7001")
    assert "/dev/nvidia5" in named.what
    assert "cannot be told" in named.why
    assert named.look == "ps -o pid,user,lstart,args -p 7001; cat /proc/7001/cgroup"
    # Asked to reset GPU 5 anyway (an operator's narrower check), it is left alone, said so.
    from runbook_runner.plan.permission import permitted

    asked = permitted(SUBJECT, "gpu", [Gpu(index=i, minor_number=i) for i in (2, 5)], owners)
    assert [g.index for g in asked.allowed] == [2]
    assert not asked.blocked
    assert "look: ps -o pid,user,lstart,args -p 7001" in asked.left_alone[0]
    node = permitted(SUBJECT, "node", [None], owners, allow_node_wide=True)
    assert node.blocked
    assert "PID 7001" in node.blocked[0]
