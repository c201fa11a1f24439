"""'Cannot tell' holds back only what it could reach: properties over generated hosts (flat
cgroups, NVIDIA MPS, Ray clusters, GPUs in MIG mode, one GPU that answers with a fault,
strangers nobody can attribute, the subject's server in its several states), driven
through the pure decision (plan/decide.py), no SSH. Each host is host text (ps and /proc,
fuser, ``nvidia-smi -q``, the kernel's Xid lines) read by the parsers a run uses.

- no action reaches an unattributed holder: no signal to it, no reset of a GPU it holds,
  no node-wide rung (nor a stop of the GPU services) while one is on the node;
- no run stops for a holder no action of it could reach: with the strangers there, each
  per-process and per-GPU step acts on exactly what it would act on without them, less the
  GPUs they hold, and is never blocked for them;
- no reset reaches a GPU whose MIG instances are in use: a reset needs the whole GPU idle
  and its GPU and compute instances do not survive it (nvidia-smi(1), ``-r``; NVIDIA's MIG
  user guide, as cited in docs/pitfalls/orphaned-gpu-memory.md#a-gpu-in-mig-mode);
- one sick GPU is one GPU: it never holds back a step on the other GPUs or on processes
  proven the subject's, and it is never counted as answering (nor the goal as met).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ownership import fuser_lines, listing

from conftest import REPO
from runbook_runner.expect import all_ok, evaluate_check, evaluate_checks
from runbook_runner.observe.nvidia_smi_q import parse_processes, parse_query
from runbook_runner.observe.proctree import parse_owners
from runbook_runner.observe.state import Gpu, GpuFabric, Memory, ProcessOwner, TextLine
from runbook_runner.observe.xid import parse_xid
from runbook_runner.plan import decide, ownership
from runbook_runner.plan.permission import held_back
from runbook_runner.runbook import load

RECOVERY = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
DEFAULTS = {name: p.default for name, p in RECOVERY.parameters.items()}
SUBJECT = RECOVERY.subject.with_parameters(DEFAULTS)
FLAT = "0::/"
LAUNCH = "python3 -m sglang.launch_server --model-path /m --tp-size 4"
RAYLET = "/opt/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray/raylet"
GPUS = 8
SESSION = "0::/user.slice/user-0.slice/session-4.scope"


def bus(index: int) -> str:
    """GPU N's PCI bus id (nvidia-smi's form): 00000000:18:00.0, 00000000:28:00.0 ..."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


@dataclass(frozen=True)
class Card:
    """One GPU of a generated host, as its ``nvidia-smi -q`` block tells it."""

    used_mib: int
    mig_instances: int = 0  # in MIG mode with this many GPU/compute instance pairs; 0: not
    processes: tuple[int, ...] = ()  # the PIDs nvidia-smi lists on it (in MIG: in an instance)
    fault: str = ""  # what it answers instead of its values (FAULT_FORMS), '' when it answers


# How one GPU fails while the others answer, as nvidia-smi -q prints it, and the fault
# the run reads from it: a value NVML could not read (in every field that needs the GPU),
# a device-handle line in place of its block, or no answer to the per-GPU retry.
FAULT_FORMS = {
    "Unknown Error": "unknown-error",
    "[Unknown Error]": "unknown-error",
    "[GPU requires reset]": "reset-required",
    "[GPU is lost]": "gpu-lost",
    "handle: Unknown Error": "unknown-error",
    "handle: GPU is lost. Reboot the system to recover this GPU": "gpu-lost",
    "timed-out": "timed-out",
}
# The sick GPU's own Xid, if any (the kernel's line; its catalog action decides its rung).
XIDS = (
    None,
    "95, pid=7702, name=python3, Uncontained: FBHUB. RST: Yes",  # RESET_GPU
    "119, pid=1234, name=python3, Timeout after 6s of waiting for RPC response",  # RESET_GPU
    "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",  # RESTART_BM
    "13, pid=7702, name=python3, Graphics Exception: ESR 0x404600=0x80000002",  # RESTART_APP
    "48, pid=7702, name=python3, An uncorrectable double bit error (DBE)",  # drain it
)


def _row(indent: int, key: str, value: str) -> str:
    return f"{' ' * indent}{key:<{50 - indent}}: {value}\n"


def q_text(cards: tuple[Card, ...]) -> str:
    """``nvidia-smi -q`` (the lines the run reads, in the 590 driver's layout:
    tests/fixtures/nvidia-smi/q-590.48.01-h200-load.txt, -mig-idle.txt), or, where one GPU
    did not answer in time, the per-GPU retry the runbook's ``gpus`` command falls back to."""
    out = []
    if any(card.fault == "timed-out" for card in cards):
        out.append("@@ nvidia-smi -q gave no answer in 20 s: asking each GPU\n")
    out += ["\n==============NVSMI LOG==============\n\n", _row(0, "Driver Version", "590.48.01")]
    out.append(_row(0, "Attached GPUs", str(len(cards))))
    for index, card in enumerate(cards):
        if card.fault == "timed-out":
            out.append(f"@@ timed-out {bus(index)}\n")
            continue
        if card.fault.startswith("handle: "):
            why = card.fault.removeprefix("handle: ")
            out.append(f"Unable to determine the device handle for GPU{bus(index)[4:]}: {why}\n")
            continue
        bad, mode = card.fault, "Enabled" if card.mig_instances else "Disabled"
        out += [f"GPU {bus(index)}\n", _row(4, "Product Name", "NVIDIA H200")]
        out += [_row(4, "Persistence Mode", "Enabled"), "    MIG Mode\n"]
        out += [_row(8, "Current", bad or mode), _row(8, "Pending", bad or mode)]
        for n in range(0 if bad else card.mig_instances):
            out += ["    MIG Device\n", _row(8, "Index", str(n))]
            out += [_row(8, "GPU Instance ID", str(n + 1)), _row(8, "Compute Instance ID", "0")]
        out += [_row(4, "Minor Number", str(index)), "    FB Memory Usage\n"]
        out += [_row(8, "Total", "143771 MiB"), _row(8, "Used", bad or f"{card.used_mib} MiB")]
        out.append(_row(8, "Free", bad or f"{143771 - card.used_mib} MiB"))
        if bad or not card.processes:
            out.append(_row(4, "Processes", bad or "None"))
            continue
        out.append("    Processes\n")
        for n, pid in enumerate(card.processes):
            instance = str(n % card.mig_instances + 1) if card.mig_instances else "N/A"
            out += [_row(8, "GPU instance ID", instance)]
            out += [_row(8, "Compute instance ID", "0" if card.mig_instances else "N/A")]
            out += [_row(8, "Process ID", str(pid)), _row(12, "Type", "C")]
            out += [_row(12, "Name", "python3"), _row(12, "Used GPU Memory", "1024 MiB")]
        out.append("\n")
    return "".join(out)


def smi(cards: tuple[Card, ...], dmesg: str = "") -> dict[str, Any]:
    """What the run reads of these GPUs: ``nvidia-smi -q`` (the runbook's ``gpus``), its
    processes and their MIG instances (``-q -d PIDS``), and the kernel's Xid lines."""
    text = q_text(cards)
    return {
        "gpus": parse_query(text),
        "gpu_process_instances": parse_processes(text),
        "xids": parse_xid(dmesg),
    }


def answering(used: tuple[int, ...]) -> dict[str, Any]:
    """A host's GPUs where every GPU answers, with this memory used, as the run reads them."""
    return smi(tuple(Card(mib) for mib in used))


@dataclass(frozen=True)
class Host:
    text: str  # the process-owners listing (ps and /proc, fuser, @@ proc, @@ mps)
    cards: tuple[Card, ...]  # its GPUs
    health: tuple[int, str]  # the probe's curl exit status and stdout
    bare: str = ""  # the same listing without the sections of more evidence (@@ proc, @@ mps)
    dmesg: str = ""  # the kernel's Xid lines
    sick: int | None = None  # the GPU that answers with a fault, if one does


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
def hosts(draw: Any, sick: bool | None = None) -> Host:
    """A host; ``sick``: one GPU answers with a fault (True), none does (False), or either."""
    flat = draw(st.booleans())

    def cgroup(own: str) -> str:
        return FLAT if flat else own

    rows: list[tuple] = []
    holds: dict[int, list[int]] = {}
    gpus = st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True)
    server = draw(st.sampled_from(["none", "running", "orphans", "launcher-only"]))
    session = SESSION
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
    # The GPUs: each lists the processes that hold it; up to two in MIG mode, whose
    # instances are in use by their holders (ours, strangers, an MPS server), by a process
    # only nvidia-smi lists (7900 + N: no /proc nor fuser line of it), or by nobody; one
    # may answer with a fault instead (never read as MIG: its values are not there).
    mig = draw(st.lists(st.integers(0, GPUS - 1), max_size=2, unique=True))
    ill = draw(
        st.integers(0, GPUS - 1)
        if sick
        else st.none()
        if sick is False
        else st.none() | st.integers(0, GPUS - 1)
    )
    cards = []
    for index in range(GPUS):
        used = draw(st.sampled_from([3, 3, 90_000]))
        on_it = tuple(sorted(pid for pid, minors in holds.items() if index in minors))
        if index == ill:
            cards.append(
                Card(used, processes=on_it, fault=draw(st.sampled_from(sorted(FAULT_FORMS))))
            )
        elif index in mig:
            unseen = (7900 + index,) if draw(st.booleans()) else ()
            cards.append(Card(used, draw(st.integers(1, 2)), on_it + unseen))
        else:
            cards.append(Card(used, processes=on_it))
    xid = draw(st.sampled_from(XIDS)) if ill is not None else None
    dmesg = f"[ 8812.000001] NVRM: Xid (PCI:{bus(ill)[4:14].lower()}): {xid}\n" if xid else ""
    health = draw(st.sampled_from([(0, "200"), (7, ""), (28, ""), (0, "503"), (127, "")]))
    bare = listing(rows, fuser_lines({p: m for p, m in holds.items() if m}, {}))
    if mps:  # the MPS server is infrastructure by its program's path (/proc/PID/exe)
        bare = bare.replace(
            "@@ end\n", "@@ proc\n7801 exe=/usr/bin/nvidia-cuda-mps-server\n@@ end\n"
        )
    sections = "@@ proc\n" + "".join(f"{line}\n" for line in proc)
    sections += "@@ listening\n@@ mps\n" + "".join(f"{line}\n" for line in mps)
    text = bare.replace("@@ end\n", sections + "@@ end\n")
    return Host(text, tuple(cards), health, bare, dmesg, ill)


def observed(host: Host) -> dict[str, Any]:
    """The host's GPUs and Xids, as the run's parsers read its nvidia-smi -q and dmesg."""
    return smi(host.cards, host.dmesg)


def well(host: Host) -> Host:
    """The same host with its sick GPU answering (idle, its holders listed) and no Xid."""
    cards = tuple(replace(c, fault="", used_mib=3) if c.fault else c for c in host.cards)
    return replace(host, cards=cards, dmesg="", sick=None)


def classified(host: Host) -> tuple[ProcessOwner, ...]:
    records = parse_owners(host.text)
    status, stdout = host.health
    results = [
        ownership.judge_probe(p, status, stdout, "") for p in ownership.probes(SUBJECT, records)
    ]
    return ownership.classify(SUBJECT, records, results)


def state_of(owners: tuple[ProcessOwner, ...], seen: dict[str, Any]) -> dict[str, Any]:
    return {
        **seen,
        "holders": owners,
        "memory": Memory(
            total_bytes=449 * 2**30, available_bytes=440 * 2**30, used_bytes=9 * 2**30
        ),
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
            for i in range(len(seen["gpus"]))
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


def minor(item: Any) -> int:
    """The /dev/nvidiaN of a GPU item; a GPU that answered with no block of its own has only
    its index (the generated hosts number both alike)."""
    value = item.minor_number if item.minor_number is not None else item.index
    assert isinstance(value, int), item
    return value


def node_wide(step: Any) -> bool:
    return step.affects == "node"


STEPS = tuple(step for step in RECOVERY.steps if step.destructive)
PROCESS_STEPS = tuple(step for step in STEPS if step.affects == "process")
# What a reset reaches: a GPU's (affects gpu), or every GPU's (a node-wide rung).
RESET_STEPS = tuple(step for step in STEPS if step.affects in {"gpu", "node"})
# What a node-wide rung is not: every step a holder on one GPU may not stop.
SCOPED_STEPS = tuple(s for s in STEPS if not node_wide(s) and s.id != "stop-gpu-services")


def decisions(
    owners: tuple[ProcessOwner, ...],
    seen: dict[str, Any],
    gate: bool,
    steps: tuple[Any, ...] = STEPS,
) -> dict[str, decide.Decision]:
    state = state_of(owners, seen)
    return {
        step.id: decide.decide(
            RECOVERY, DEFAULTS, state, {}, step, subject=SUBJECT, allow_node_wide=gate
        )
        for step in steps
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_no_action_reaches_a_holder_nobody_can_attribute(host, gate):
    owners = classified(host)
    seen = observed(host)
    strangers = [r for r in owners if unattributed(r)]
    rows = {r.pid: r for r in owners}
    for step_id, decision in decisions(owners, seen, gate).items():
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
                held = [r for r in owners if r.minor_number == minor(item)]
                assert not any(r.disposition == "cannot-tell" for r in held), (step_id, held)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_no_step_stops_for_a_holder_it_could_not_reach(host, gate):
    owners = classified(host)
    seen = observed(host)
    strangers = {r.pid for r in owners if unattributed(r)}
    reach = {r.minor_number for r in owners if r.pid in strangers and r.minor_number is not None}
    alone = tuple(r for r in owners if r.pid not in strangers)
    # a node-wide rung reaches every holder: it may stop for them
    with_them = decisions(owners, seen, gate, SCOPED_STEPS)
    without = decisions(alone, seen, gate, SCOPED_STEPS)
    for step_id, decision in with_them.items():
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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_more_evidence_only_ever_tells_another_owner(host):
    """A holder's environment, login, mounts and MPS server never make a process the
    subject's nor take one from it: what they change is only who else a process is."""
    told = {r.pid: r for r in classified(host)}
    before = {r.pid: r for r in classified(replace(host, text=host.bare))}
    assert told.keys() == before.keys()
    for pid, row in told.items():
        was = before[pid]
        assert row.subject == was.subject, (row, was)
        assert (row.owner in {"ours", "orphaned-ours"}) == (was.owner in {"ours", "orphaned-ours"})
        if row.owner != was.owner:
            assert (was.owner, row.owner) == ("unknown", "another-owner"), (was, row)
            assert row.disposition == "leave"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_an_mps_client_is_ended_only_through_the_control_daemon_and_only_if_ours(host, gate):
    owners = classified(host)
    seen = observed(host)
    rows = {r.pid: r for r in owners}
    made = decisions(owners, seen, gate, PROCESS_STEPS)  # the steps with a PID as item
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


@settings(max_examples=125, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(sick=False), st.booleans())
def test_no_reset_reaches_a_gpu_whose_mig_instances_are_in_use(host, gate):
    """A reset needs the whole GPU idle, and a GPU's MIG instances do not survive it
    (nvidia-smi(1), -r; NVIDIA's MIG user guide): no per-GPU reset (nor the -pm 0 that
    prepares one) of a GPU in MIG mode with a process in an instance, whoever's it is; no
    node-wide rung while an instance is in use by a process the run cannot attribute (one
    whose owner cannot be told, or one only nvidia-smi lists), nor, without the gate, by
    any process but the subject's broken ones and GPU infrastructure."""
    owners = classified(host)
    seen = observed(host)
    in_use = {i for i, card in enumerate(host.cards) if card.mig_instances and card.processes}
    assert {g.index for g in seen["gpus"] if g.mig_processes} == in_use  # as the run reads it
    rows = {r.pid: r for r in owners}
    users = {pid for i in in_use for pid in host.cards[i].processes}
    unknown = {p for p in users if p not in rows or rows[p].disposition == "cannot-tell"}
    others = {p for p in users if p in unknown or rows[p].disposition == "leave"}
    others -= {p for p in users if p in rows and rows[p].owner == "infrastructure"}
    for step_id, decision in decisions(owners, seen, gate, RESET_STEPS).items():
        if decision.verdict is not decide.Verdict.RUN:
            continue
        if node_wide(RECOVERY.step(step_id)):
            assert not unknown, (step_id, sorted(unknown))
            assert gate or not others, (step_id, sorted(others))
        else:
            reset = {minor(item) for item in decision.items}
            assert not reset & in_use, (step_id, sorted(reset & in_use))


@settings(max_examples=125, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(sick=True), st.booleans())
def test_one_sick_gpu_is_one_gpu(host, gate):
    """A GPU that answers 'Unknown Error', 'GPU is lost', '[GPU requires reset]' (or gives
    no answer) while the others answer is a fact about that GPU: every step on the other
    GPUs and on the subject's processes decides as on the same host with that GPU well, and
    is never blocked for it; the sick GPU itself is never counted as answering (the goal is
    not met) and is reset only by its own rung, only when its own Xid asks for a reset."""
    owners = classified(host)
    seen = observed(host)
    sick = host.sick
    assert sick is not None
    (bad,) = [g for g in seen["gpus"] if g.fault]
    assert (bad.index, bad.pci_bus_id, bad.fault) == (
        sick,
        bus(sick),
        FAULT_FORMS[host.cards[sick].fault],
    )
    state = state_of(owners, seen)
    answer = evaluate_check(RECOVERY.checks["gpus-answer"], RECOVERY, state, DEFAULTS)
    assert [g.index for g in answer.failing] == [sick], answer
    assert not all_ok(evaluate_checks(RECOVERY.goal, RECOVERY, state, DEFAULTS))
    asks = any(x.action == "RESET_GPU" and x.pci == bad.pci for x in seen["xids"])
    made = decisions(owners, seen, gate)
    for step_id, decision in made.items():
        step = RECOVERY.step(step_id)
        assert not (decision.holds and step.skip_if == RECOVERY.goal), step_id
        reset = decision.verdict is decide.Verdict.RUN and step.affects == "gpu"
        if reset and any(minor(item) == sick for item in decision.items):
            assert step_id == "reset-sick-gpus", step_id
            assert asks, (step_id, host.dmesg)
            assert bad.fault != "gpu-lost", step_id
    was = well(host)
    before = decisions(owners, observed(was), gate, SCOPED_STEPS)
    own = {("minor_number", sick), ("index", sick)}
    for step_id, earlier in before.items():
        decision = made[step_id]
        if earlier.verdict is not decide.Verdict.BLOCKED:
            assert decision.verdict is not decide.Verdict.BLOCKED, (step_id, decision.message)
        then = targets(earlier) - own if earlier.verdict is decide.Verdict.RUN else set()
        now = targets(decision) - own if decision.verdict is decide.Verdict.RUN else set()
        assert now == then, (step_id, decision, earlier)


def test_a_stranger_on_gpu5_holds_back_only_gpu5_and_the_node_wide_rungs():
    """The issue's host: flat cgroups, our server's memory orphaned on GPUs 0-3, a job
    nobody can attribute on GPU 5."""
    text = listing(
        [(7001, 1, "alice", 900, "Rl", FLAT, "python3 train.py --config ablation-12.yaml")],
        fuser_lines({7001: [5]}, {7001: "alice"}),
    )
    owners = classified(Host(text, (), (7, "")))
    used = (91_000, 91_000, 91_000, 91_000, 3, 80_000, 3, 3)
    made = decisions(owners, answering(used), gate=True)
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


def test_a_mig_instance_used_by_a_process_no_holder_shows_holds_back_node_wide_rungs():
    """nvidia-smi lists PID 7301 in GPU 1's MIG instance 1 and no holder of /dev/nvidia* is
    it (no /proc, no fuser line): whose it is cannot be told, and a driver reload or a reboot
    would reach it. GPU 7's orphaned memory is still reset, GPU 1 is not."""
    cards = tuple(
        Card(91_000) if i == 7 else Card(30_000, 2, (7301,)) if i == 1 else Card(3)
        for i in range(GPUS)
    )
    owners = classified(Host(listing([], fuser_lines({}, {})), cards, (7, "")))
    made = decisions(owners, smi(cards), gate=True)
    assert [g.index for g in made["reset-gpus"].items] == [7]
    for step_id in ("reload-driver", "reboot"):
        decision = made[step_id]
        assert decision.verdict is decide.Verdict.BLOCKED, (step_id, decision)
        assert "PID 7301 (python3) in GPU instance 1 of GPU 00000000:28:00.0" in decision.message
    # The engine asks nvidia-smi what runs in the instances before every node-wide rung.
    assert "gpu_process_instances" in decide.observations_needed(
        RECOVERY, RECOVERY.step("reload-driver")
    )
    assert "gpu_process_instances" not in decide.observations_needed(
        RECOVERY, RECOVERY.step("reset-gpus")
    )
    # Seen as a holder (ours and broken: the recovery's to end), it holds nothing back.
    ours = [(7301, 1, "root", 600, "Sl", SESSION, "sglang::scheduler_TP1")]
    seen = classified(Host(listing(ours, fuser_lines({7301: [1]}, {})), cards, (7, "")))
    assert [r.disposition for r in seen] == ["act"]
    assert decisions(seen, smi(cards), gate=True)["reload-driver"].verdict is decide.Verdict.RUN
