"""Ownership: who a process belongs to, whether the subject is broken, and the engine's
last word before a destructive command (plan/ownership.py). Pure: no host involved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from runbook_runner.expect import evaluate_check
from runbook_runner.observe.proctree import owner_of_cgroup, parse_owners
from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import ownership
from runbook_runner.plan import permission as guard
from runbook_runner.plan.ownership import Disposition, Health, Owner, ProbeResult
from runbook_runner.runbook import Subject, load

SUBJECT = Subject(
    description="the server",
    launcher=r"sglang\.launch_server|vllm serve",
    workers=r"sglang::|VLLM::",
    unit=r"^(sglang|vllm)[A-Za-z0-9_@.-]*\.service$",
    health_path="/health",
    ports=(("sglang", 30000), ("vllm", 8000)),
)
HEADER = "    PID    PPID    PGID     SID USER      ELAPSED STAT CGROUP     COMMAND\n"


def listing(rows: list[tuple], fuser: str = "", proc: str = "") -> str:
    lines = [HEADER]
    for pid, ppid, user, age, stat, cgroup, command in rows:
        lines.append(
            f"{pid:>7} {ppid:>7} {pid:>7} {pid:>7} {user:<8} {age:>8} {stat:<4} {cgroup} {command}\n"
        )
    return "".join(lines) + "@@ fuser\n" + fuser + "@@ proc\n" + proc + "@@ end\n"


def fuser_lines(holds: dict[int, list[int]], users: dict[int, str]) -> str:
    text = "                     USER        PID ACCESS COMMAND\n"
    by_minor: dict[int, list[int]] = {}
    for pid, minors in holds.items():
        for minor in minors:
            by_minor.setdefault(minor, []).append(pid)
    for minor, pids in sorted(by_minor.items()):
        for n, pid in enumerate(pids):
            label = f"/dev/nvidia{minor}:" if n == 0 else ""
            text += f"{label:<20} {users.get(pid, 'root'):<8} {pid:>6} F...m python3\n"
    return text


INCIDENT = listing(
    [
        (1, 0, "root", 9000, "Ss", "0::/init.scope", "/sbin/init"),
        (
            900,
            1,
            "nvidia-p",
            9000,
            "Ss",
            "0::/system.slice/nvidia-persistenced.service",
            "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
        ),
        (
            910,
            1,
            "root",
            9000,
            "Ssl",
            "0::/system.slice/nvidia-dcgm.service",
            "/usr/bin/nv-hostengine -n",
        ),
        (
            4101,
            1,
            "root",
            3600,
            "Sl",
            "0::/system.slice/sglang.service",
            "python3 -m sglang.launch_server --model-path m --tp-size 2 --port 30001",
        ),
        (
            4120,
            4101,
            "root",
            3600,
            "Sl",
            "0::/system.slice/sglang.service",
            "sglang::scheduler_TP0",
        ),
        (
            4121,
            4101,
            "root",
            3600,
            "Sl",
            "0::/system.slice/sglang.service",
            "sglang::scheduler_TP1",
        ),
        (
            5120,
            1,
            "root",
            7200,
            "Sl",
            "0::/user.slice/user-0.slice/session-7.scope",
            "sglang::scheduler_TP0",
        ),
        (
            7001,
            6990,
            "alice",
            600,
            "Rl",
            "0::/user.slice/user-1001.slice/session-3.scope",
            "python3 train.py --config ablation-12.yaml",
        ),
        (
            7101,
            1,
            "1000",
            600,
            "Sl",
            "0::/system.slice/docker-7d3f0a9c41be2e5f86a1c0d2b3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2.scope",
            "python3 /app/serve.py",
        ),
        (
            7201,
            1,
            "bob",
            600,
            "Sl",
            "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
            "python3 pretrain.py",
        ),
        (7301, 1, "root", 600, "Sl", "0::/", "python3 mystery.py"),
    ],
    fuser_lines(
        {
            900: [0, 1, 2, 3, 4, 5, 6, 7],
            910: [0, 1, 2, 3, 4, 5, 6, 7],
            4120: [0],
            4121: [1],
            5120: [2],
            7001: [5],
            7101: [6],
            7201: [7],
            7301: [4],
            8812: [3],
        },
        {7001: "alice", 900: "nvidia-p"},
    ),
)


def by_pid(records) -> dict[int, ProcessOwner]:
    return {r.pid: r for r in records}


def test_cgroups_name_their_owner():
    assert owner_of_cgroup("/system.slice/sglang.service") == ("unit", "sglang.service")
    assert owner_of_cgroup("/system.slice/docker-7d3f0a9c41be2e5f.scope")[0] == "container"
    assert (
        owner_of_cgroup(
            "/kubepods.slice/kubepods-pod1234abcd_5678.slice/cri-containerd-0123456789abcdef.scope"
        )[0]
        == "container"
    )
    assert owner_of_cgroup("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0") == (
        "slurm-job",
        "job 4242",
    )
    assert owner_of_cgroup("/slurm/uid_1000/job_77/step_batch") == ("slurm-job", "job 77")
    assert owner_of_cgroup("/user.slice/user-1001.slice/session-3.scope") == (
        "session",
        "session-3 of uid 1001",
    )
    assert owner_of_cgroup("/") == ("", "")
    assert owner_of_cgroup(None) == ("", "")


def test_every_holder_is_classified_with_its_evidence():
    records = parse_owners(INCIDENT)
    result = by_pid(ownership.classify(SUBJECT, records))
    assert result[4101].owner == "ours"
    assert "unit sglang.service" in result[4101].evidence
    assert result[4120].owner == "ours"
    assert result[5120].owner == "orphaned-ours"
    assert "launcher is gone" in result[5120].evidence
    assert result[900].owner == "infrastructure"
    assert result[900].disposition == "leave"
    assert result[910].owner == "infrastructure"  # nv-hostengine, by unit
    assert result[7001].owner == "another-owner"
    assert "session-3" in result[7001].evidence
    assert result[7101].owner == "another-owner"
    assert "container docker 7d3f0a9c41be" in result[7101].evidence
    assert result[7201].owner == "another-owner"
    assert "Slurm job 4242" in result[7201].evidence
    assert result[7301].owner == "unknown"
    assert result[7301].disposition == "cannot-tell"
    assert result[8812].owner == "unknown"
    assert "ps does not" in result[8812].evidence
    assert 1 not in result  # holds nothing and is not the subject's: not listed


def test_health_decides_whether_the_subject_is_broken():
    records = parse_owners(INCIDENT)
    (probe,) = ownership.probes(SUBJECT, records)
    assert probe.port == 30001
    assert probe.instance == 4101
    assert "curl" in probe.command
    assert "http://127.0.0.1:30001/health" in probe.command

    def verdict(exit_status, stdout="", stderr=""):
        result = ownership.judge_probe(probe, exit_status, stdout, stderr)
        return by_pid(ownership.classify(SUBJECT, records, [result]))[4120]

    healthy = verdict(0, "200")
    assert healthy.disposition == "leave"
    assert "healthy" in healthy.reason
    assert verdict(28).disposition == "act"  # timed out
    assert verdict(0, "503").disposition == "act"
    assert verdict(127).disposition == "cannot-tell"  # no curl: cannot tell, never act
    assert "nothing listens on port 30001" in verdict(7).reason  # old enough to be up
    # a process of the instance in D state is evidence of its own, health unknown or not
    stuck = parse_owners(
        INCIDENT.replace(
            "Sl   0::/system.slice/sglang.service sglang::scheduler_TP1",
            "D    0::/system.slice/sglang.service sglang::scheduler_TP1",
        )
    )
    unknown = ownership.judge_probe(probe, 127, "", "")
    row = by_pid(ownership.classify(SUBJECT, stuck, [unknown]))[4120]
    assert row.disposition == "act"
    assert "D state" in row.reason


def test_a_young_server_whose_port_is_not_open_is_starting_not_broken():
    records = parse_owners(
        listing(
            [
                (
                    4101,
                    1,
                    "root",
                    40,
                    "Sl",
                    "0::/system.slice/sglang.service",
                    "python3 -m sglang.launch_server --model-path m",
                )
            ],
        )
    )
    (probe,) = ownership.probes(SUBJECT, records)
    assert probe.port == 30000  # SGLang's default
    refused = ownership.judge_probe(probe, 7, "", "curl: (7) Failed to connect")
    (row,) = ownership.classify(SUBJECT, records, [refused])
    assert row.disposition == "leave"
    assert row.reason.startswith("starting")


def classified(health: int = 28) -> tuple[ProcessOwner, ...]:
    records = parse_owners(INCIDENT)
    results = [ownership.judge_probe(p, health, "", "") for p in ownership.probes(SUBJECT, records)]
    return ownership.classify(SUBJECT, records, results)


@dataclass(frozen=True)
class Pid:
    pid: int


@dataclass(frozen=True)
class Gpu:
    index: int
    minor_number: int


def test_the_engine_signals_only_ours_and_broken():
    owners = classified()
    wanted = [Pid(p) for p in (4101, 4120, 5120, 900, 7001, 7101, 7201)]
    permission = guard.permitted(SUBJECT, "process", wanted, owners)
    assert {item.pid for item in permission.allowed} == {4101, 4120, 5120}
    assert len(permission.left_alone) == 4
    assert any("infrastructure" in line for line in permission.left_alone)
    # A process whose owner cannot be told is not signalled; the signals to the subject's
    # processes still go: "cannot tell" holds back only what would reach it.
    mixed = guard.permitted(SUBJECT, "process", [Pid(4120), Pid(7301)], owners)
    assert [item.pid for item in mixed.allowed] == [4120]
    assert not mixed.blocked
    (held,) = mixed.held_back
    assert held.cannot_tell
    assert held.what.startswith("PID 7301")
    assert held.look == "ps -o pid,user,lstart,args -p 7301; cat /proc/7301/cgroup"
    assert "look: ps -o pid,user,lstart,args -p 7301" in mixed.left_alone[0]


def test_no_gpu_another_owner_uses_is_reset_and_no_node_wide_rung_runs_beside_them():
    owners = classified()
    gpus = [Gpu(i, i) for i in range(8)]
    permission = guard.permitted(SUBJECT, "gpu", gpus, owners)
    allowed = {g.index for g in permission.allowed}
    assert 5 not in allowed
    assert 6 not in allowed
    assert 7 not in allowed
    assert {0, 1, 2} <= allowed  # ours (daemons hold them too: infrastructure is no obstacle)
    # GPUs 3 and 4 are held by processes whose owner cannot be told: they are not reset,
    # and the resets of GPUs 0-2 go ahead all the same (nothing blocks the step).
    assert 3 not in allowed
    assert 4 not in allowed
    assert not permission.blocked
    cannot = {h.what for h in permission.held_back if h.cannot_tell}
    assert cannot == {"GPU /dev/nvidia3", "GPU /dev/nvidia4"}
    assert any("cat /proc/7301/cgroup" in h.look for h in permission.held_back)
    node = guard.permitted(SUBJECT, "node", [None], owners)
    assert node.blocked
    assert "--allow-node-wide" in node.blocked[0]
    assert "PID 7001" in node.blocked[0]


def test_a_healthy_server_is_left_alone_and_its_unit_is_not_stopped():
    owners = classified(health=0)  # curl exits 0 ... with no code: cannot tell
    assert by_pid(owners)[4101].disposition == "cannot-tell"
    records = parse_owners(INCIDENT)
    results = [ownership.judge_probe(p, 0, "200", "") for p in ownership.probes(SUBJECT, records)]
    owners = ownership.classify(SUBJECT, records, results)
    unit = guard.permitted(
        SUBJECT, "service", [type("U", (), {"unit": "sglang.service"})()], owners
    )
    assert not unit.allowed
    assert "healthy" in unit.left_alone[0]
    persistenced = [type("U", (), {"text": "nvidia-persistenced"})()]
    # Stopping the GPU services reaches every GPU: while holders nobody can attribute (7301,
    # 8812) are on the node, that node-wide rung is blocked; starting them again never is.
    stop = guard.permitted(SUBJECT, "service", persistenced, owners)
    assert not stop.allowed
    assert "cannot tell who holds" in stop.blocked[0]
    assert "PID 7301" in stop.blocked[0]
    assert guard.permitted(SUBJECT, "service", persistenced, owners, stops=False).allowed
    told = [o for o in owners if o.disposition != "cannot-tell"]
    infra = guard.permitted(SUBJECT, "service", persistenced, told)
    assert infra.allowed  # stopped as a unit, as NVIDIA documents, never signalled by PID


# -- the property: generated hosts ------------------------------------------------------------

KINDS = (
    "ours-unit",
    "ours-orphan",
    "ours-container",
    "infra-unit",
    "infra-exe",
    "other-unit",
    "other-session",
    "other-container",
    "other-job",
    "unknown-root",
    "unknown-hidden",
    "other-user-unit",
    "other-named-infra",
    "other-job-named",
)
# A user's own unit named like the subject's (systemd-run --user --unit=sglang), and a
# program named like a GPU service run by a user or from another folder: other owners'.
USER_UNIT = "0::/user.slice/user-1666.slice/user@1666.service/app.slice/sglang.service"
NAMED_INFRA = (
    ("mallory", "/home/mallory/bin/nvidia-persistenced"),
    ("mallory", "/usr/bin/nv-hostengine"),
    ("root", "/tmp/nv-hostengine"),
    ("root", "/usr/local/share/dcgm-exporter"),
)


@st.composite
def hosts(draw):
    count = draw(st.integers(1, 14))
    pids = draw(st.lists(st.integers(100, 60000), min_size=count, max_size=count, unique=True))
    rows, holds, truth, hidden, proc = [], {}, {}, set(), ""
    for pid in pids:
        kind = draw(st.sampled_from(KINDS))
        user = "root"
        state = draw(st.sampled_from(["S", "Sl", "D", "R", "Z"]))
        parent = draw(st.sampled_from([1, *pids]))
        age = draw(st.integers(0, 100000))
        if kind == "ours-unit":
            cgroup, command = (
                "0::/system.slice/sglang.service",
                draw(
                    st.sampled_from(
                        [
                            "python3 -m sglang.launch_server --port 30000",
                            "sglang::scheduler_TP1",
                            "python3 -c helper",
                        ]
                    )
                ),
            )
        elif kind == "ours-orphan":
            cgroup, command, parent = (
                "0::/user.slice/user-0.slice/session-2.scope",
                "VLLM::Worker_TP3",
                1,
            )
        elif kind == "ours-container":
            cgroup, command = (
                "0::/system.slice/docker-0123456789abcdef0123.scope",
                "vllm serve Qwen/Qwen3-8B",
            )
        elif kind == "infra-unit":
            cgroup, command = (
                "0::/system.slice/nvidia-persistenced.service",
                "/usr/bin/nvidia-persistenced",
            )
        elif kind == "infra-exe":
            cgroup, command = (
                "0::/",
                draw(st.sampled_from(["/usr/bin/nv-hostengine -n", "/usr/bin/dcgm-exporter"])),
            )
            proc += f"{pid} exe={command.split()[0]}\n"
        elif kind == "other-user-unit":
            cgroup, user = USER_UNIT, "bob"
            command = draw(
                st.sampled_from(
                    ["python3 -m sglang.launch_server --port 31337", "sglang::scheduler_TP0"]
                )
            )
        elif kind == "other-named-infra":
            user, exe = draw(st.sampled_from(NAMED_INFRA))
            cgroup = draw(
                st.sampled_from(["0::/", "0::/user.slice/user-1666.slice/session-4.scope"])
            )
            command = f"/usr/bin/{exe.rsplit('/', 1)[-1]} --user nvidia-persistenced"
            proc += f"{pid} exe={exe}\n"
        elif kind == "other-job-named":
            cgroup, user = "0::/slurm/uid_1002/job_777/step_0", "bob"
            command = draw(st.sampled_from(["vllm serve m --port 8001", "VLLM::Worker_TP0"]))
            proc += f"{pid} SLURM_JOB_ID=777\n"
        elif kind == "other-unit":
            cgroup, command = "0::/system.slice/trainer.service", "python3 train.py"
        elif kind == "other-session":
            cgroup, command = (
                "0::/user.slice/user-1001.slice/session-9.scope",
                "python3 notebook.py",
            )
        elif kind == "other-container":
            cgroup, command = (
                "0::/system.slice/docker-fedcba9876543210fedc.scope",
                "python3 /app/serve.py",
            )
        elif kind == "other-job":
            cgroup, command = "0::/slurm/uid_1002/job_99/step_0", "python3 pretrain.py"
        elif kind == "unknown-root":
            cgroup, command = "0::/", "python3 mystery.py"
        else:
            cgroup, command = "0::/", "python3 ghost.py"
            hidden.add(pid)
        truth[pid] = kind
        if pid not in hidden:
            rows.append((pid, parent, user, age, state, cgroup, command))
        holds[pid] = draw(st.lists(st.integers(0, 7), max_size=3, unique=True))
        if kind.startswith("infra"):
            holds[pid] = list(range(8))  # the daemons hold every GPU
    text = listing(rows, fuser_lines({p: m for p, m in holds.items() if m}, {}), proc)
    health = draw(st.sampled_from([(0, "200"), (7, ""), (28, ""), (0, "503"), (127, "")]))
    return text, truth, health


def _descends_from_ours(pid: int, records, truth) -> bool:
    parents = {r.pid: r.ppid for r in records}
    seen, current = set(), parents.get(pid)
    while current in parents and current not in seen:
        if truth.get(current, "").startswith("ours"):
            return True
        seen.add(current)
        current = parents[current]
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_generated_hosts_never_see_another_owners_process_signalled(host, gate):
    text, truth, (status, stdout) = host
    records = parse_owners(text)
    results = [
        ownership.judge_probe(p, status, stdout, "") for p in ownership.probes(SUBJECT, records)
    ]
    owners = ownership.classify(SUBJECT, records, results)
    rows = by_pid(owners)
    every = [Pid(p) for p in truth]
    allowed = {i.pid for i in guard.permitted(SUBJECT, "process", every, owners).allowed}
    for pid in allowed:
        # every signalled PID is ours or orphaned ours (or a child of ours that has no owner
        # of its own), judged broken
        assert rows[pid].owner in {"ours", "orphaned-ours"}, (pid, truth[pid], rows[pid])
        assert rows[pid].disposition == "act"
        assert not truth[pid].startswith(("infra", "other")) or _descends_from_ours(
            pid, records, truth
        )
        assert not truth[pid].startswith("infra")  # infrastructure is never signalled
    for pid in allowed:
        assert rows[pid].reason.startswith("broken"), rows[pid]  # with its evidence
    gpus = [Gpu(i, i) for i in range(8)]
    reset = {g.index for g in guard.permitted(SUBJECT, "gpu", gpus, owners).allowed}
    for row in owners:
        if row.minor_number in reset:
            # no GPU holding another owner's process (or a healthy server's) is reset
            assert row.disposition != "leave" or row.owner == "infrastructure", row
            assert row.disposition != "cannot-tell", row
    node = guard.permitted(SUBJECT, "node", [None], owners, allow_node_wide=gate)
    others = [r for r in owners if r.owner == "another-owner" and (r.holds_gpu or r.node_wide)]
    if others and not gate:
        assert not node.allowed  # no node-wide rung with another owner present and no gate


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts())
def test_the_runbooks_targets_pass_the_engines_guard_unchanged(host):
    """What gpu-oom-recovery's checks pick as targets is already ours and broken: the guard
    is a second line, not the first."""
    text, _truth, (status, stdout) = host
    runbook = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
    subject = runbook.subject.with_parameters(
        {name: p.default for name, p in runbook.parameters.items()}
    )
    records = parse_owners(text)
    results = [
        ownership.judge_probe(p, status, stdout, "") for p in ownership.probes(subject, records)
    ]
    owners = ownership.classify(subject, records, results)
    params = {name: p.default for name, p in runbook.parameters.items()}
    verdict = evaluate_check(
        runbook.checks["live-broken-server-gone"], runbook, {"holders": owners}, params
    )
    if verdict.cannot_tell:
        return
    permission = guard.permitted(subject, "process", list(verdict.failing), owners)
    assert not permission.left_alone
    assert not permission.blocked
    for item in verdict.failing:
        assert item.owner in {"ours", "orphaned-ours"}
        assert item.state not in {"D", "Z"}


def test_enums_spell_each_class_once():
    assert {o.value for o in Owner} == {
        "ours",
        "orphaned-ours",
        "another-owner",
        "infrastructure",
        "unknown",
    }
    assert {d.value for d in Disposition} == {"act", "leave", "cannot-tell"}
    assert Health.HEALTHY.value == "healthy"
    assert str(Owner.OURS) == "ours"
    assert ProbeResult(1, Health.FAILING, "x").refused is False


# -- the pure decision over generated states -------------------------------------------------

from runbook_runner.observe.state import Gpu as GpuRecord  # noqa: E402
from runbook_runner.observe.state import Memory, Unavailable  # noqa: E402
from runbook_runner.plan import decide  # noqa: E402

RECOVERY = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
DEFAULTS = {name: p.default for name, p in RECOVERY.parameters.items()}
RECOVERY_SUBJECT = RECOVERY.subject.with_parameters(DEFAULTS)


def recovery_state(owners, used_mib: int = 90_000) -> dict:
    gpus = tuple(
        GpuRecord(
            index=i,
            minor_number=i,
            memory_used_mib=used_mib,
            memory_total_mib=97_887,
            persistence_mode="Enabled",
        )
        for i in range(8)
    )
    memory = Memory(total_bytes=449 * 2**30, available_bytes=440 * 2**30, used_bytes=9 * 2**30)
    return {
        "holders": owners,
        "gpus": gpus,
        "memory": memory,
        "xids": (),
        "processes": (),
        "shm": (),
        "server_log": (),
        "stopped_units": (),
        "running_gpu_services": (),
        "stopped_gpu_services": (),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.booleans())
def test_every_destructive_decision_acts_only_on_what_is_ours_and_broken(host, gate):
    text, _truth, (status, stdout) = host
    records = parse_owners(text)
    results = [
        ownership.judge_probe(p, status, stdout, "")
        for p in ownership.probes(RECOVERY_SUBJECT, records)
    ]
    owners = ownership.classify(RECOVERY_SUBJECT, records, results)
    rows = by_pid(owners)
    state = recovery_state(owners)
    for step in RECOVERY.steps:
        if not step.destructive:
            continue
        decision = decide.decide(
            RECOVERY, DEFAULTS, state, {}, step, subject=RECOVERY_SUBJECT, allow_node_wide=gate
        )
        if decision.verdict is not decide.Verdict.RUN:
            continue
        for item in decision.items:
            if step.affects == "process":
                assert rows[item.pid].disposition == "act", (step.id, rows[item.pid])
                assert rows[item.pid].owner in {"ours", "orphaned-ours"}
            if step.affects == "gpu":
                held = [r for r in owners if r.minor_number == item.minor_number]
                assert all(r.disposition == "act" or r.owner == "infrastructure" for r in held)
        if step.affects == "node" and not gate:
            assert not any(r.owner == "another-owner" and r.holds_gpu for r in owners)


def test_a_decision_on_a_destructive_step_without_the_owners_is_blocked():
    state = recovery_state(Unavailable("ps: unknown format specifier 'cgroup'"))
    step = RECOVERY.step("reset-gpus")
    decision = decide.decide(RECOVERY, DEFAULTS, state, {}, step, subject=RECOVERY_SUBJECT)
    assert decision.verdict is decide.Verdict.BLOCKED
    assert "cannot tell" in decision.message


def test_the_decision_reads_only_what_observations_needed_names():
    step = RECOVERY.step("stop-server")
    needed = decide.observations_needed(RECOVERY, step)
    assert "holders" in needed  # ownership's evidence, for every destructive step
    state = {name: value for name, value in recovery_state(()).items() if name in needed}
    decision = decide.decide(RECOVERY, DEFAULTS, state, {}, step, subject=RECOVERY_SUBJECT)
    assert decision.verdict is not decide.Verdict.BLOCKED, decision.message


def test_another_users_server_of_the_same_kind_is_theirs_not_ours():
    """Ours runs in sglang.service as root; bob started an SGLang server from his login on
    GPUs 4-7. Both are broken: only ours is acted on."""
    text = listing(
        [
            (
                4101,
                1,
                "root",
                3600,
                "Sl",
                "0::/system.slice/sglang.service",
                "python3 -m sglang.launch_server --tp-size 4 --port 30000",
            ),
            (
                4120,
                4101,
                "root",
                3600,
                "Sl",
                "0::/system.slice/sglang.service",
                "sglang::scheduler_TP0",
            ),
            (
                5101,
                5000,
                "bob",
                3600,
                "Sl",
                "0::/user.slice/user-1002.slice/session-5.scope",
                "python3 -m sglang.launch_server --tp-size 4 --port 30001",
            ),
            (
                5120,
                5101,
                "bob",
                3600,
                "Sl",
                "0::/user.slice/user-1002.slice/session-5.scope",
                "sglang::scheduler_TP0",
            ),
        ],
        fuser_lines({4120: [0], 5120: [4]}, {5120: "bob"}),
    )
    records = parse_owners(text)
    results = [ownership.judge_probe(p, 28, "", "") for p in ownership.probes(SUBJECT, records)]
    rows = by_pid(ownership.classify(SUBJECT, records, results))
    assert rows[4120].disposition == "act"
    assert rows[5120].owner == "another-owner"
    assert "run by user bob" in rows[5120].evidence
    allowed = guard.permitted(
        SUBJECT, "process", [Pid(4120), Pid(5120), Pid(5101)], tuple(rows.values())
    )
    assert {item.pid for item in allowed.allowed} == {4120}


def test_the_real_ps_of_this_machine_parses_and_leaves_out_kernel_threads():
    """The observation's own command, run by this machine's procps, through the parser."""
    import os
    import subprocess

    command = RECOVERY.observations["holders"].command.source
    listing_ps = command.split("; echo '@@ fuser'")[0]
    done = subprocess.run(["sh", "-c", listing_ps], capture_output=True, text=True, check=True)
    records = parse_owners(done.stdout + "@@ fuser\n@@ end\n")
    pids = {r.pid for r in records}
    assert os.getpid() in pids  # this test's process, with its tree
    me = next(r for r in records if r.pid == os.getpid())
    assert me.ppid == os.getppid()
    assert all(r.ppid != 2 for r in records)  # no kernel thread


def test_show_says_what_the_runbook_may_act_on(capsys):
    from runbook_runner.cli import main

    assert main(["show", "gpu-oom-recovery"]) == 0
    out = capsys.readouterr()[0]
    assert "Acts only on what is its subject's, and broken:" in out
    assert (
        "launcher: sglang\\.launch_server|vllm serve|vllm\\.entrypoints  (--set server_pattern=...)"
        in out
    )
    assert "health: GET /health on the launcher's --port" in out


def test_a_subject_pattern_that_backtracks_matches_nothing_instead_of_hanging():
    """A --set pattern meets host text (process command lines): bounded as matches() is,
    and failing closed: nothing is taken for the subject's."""
    slow = Subject(description="s", launcher="(a+)+$")
    assert not slow.launcher_matches("a" * 40 + "b")
    assert not Subject(description="s", launcher="(").launcher_matches("python3 (")


def _loading(age: int, workers: bool, grace: float | None = None):
    rows = [
        (
            4101,
            1,
            "root",
            age,
            "Sl",
            "0::/",
            "python3 -m sglang.launch_server --model-path m --tp-size 2",
        )
    ]
    if workers:
        rows.append((4120, 4101, "root", age, "Rl", "0::/", "sglang::scheduler_TP0"))
    records = parse_owners(listing(rows, fuser_lines({4120: [0]} if workers else {}, {})))
    subject = (
        SUBJECT if grace is None else Subject(**{**SUBJECT.__dict__, "startup_grace_s": grace})
    )
    (probe,) = ownership.probes(subject, records)
    refused = ownership.judge_probe(probe, 7, "", "curl: (7) Failed to connect")
    return by_pid(ownership.classify(subject, records, [refused]))[4101]


def test_starting_is_judged_on_evidence_and_bounded_by_the_grace():
    # loading: its workers live, within the grace
    assert _loading(600, workers=True).disposition == "leave"
    assert "1 of its workers live" in _loading(600, workers=True).reason
    # its workers gone, past the seconds a launcher takes to start them: broken, grace or not
    gone = _loading(93, workers=False)
    assert gone.disposition == "act"
    assert "none of its workers lives" in gone.reason
    assert _loading(20, workers=False).disposition == "leave"  # not started them yet
    # past the grace, a closed port is broken whatever lives
    late = _loading(1900, workers=True)
    assert late.disposition == "act"
    assert "past the startup grace of 1800 s" in late.reason
    assert _loading(1900, workers=True, grace=7200).disposition == "leave"


def test_the_recovery_runbook_takes_its_startup_grace_from_a_parameter():
    runbook = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
    params = {name: p.default for name, p in runbook.parameters.items()}
    assert runbook.subject.with_parameters(params).startup_grace_s == 1800
    params["startup_grace_s"] = 600
    assert runbook.subject.with_parameters(params).startup_grace_s == 600
