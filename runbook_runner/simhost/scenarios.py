"""The scenario matrix: incidents an on-call engineer meets on an 8-GPU inference server.

One table, in code: each row builds the host's state (GPUs, processes with their GPU and
state, host RAM, /dev/shm, kernel messages, services), and says what an expert does (the
minimal set of actions, by blast radius), the ideal time to recovery in simulated seconds,
the lesson, and the site page that explains it. ``runbook drill --scenario NAME`` plays a
row; tests/test_scenarios.py proves the runbook does what the expert would on every row;
the docs site renders the table (its drills page).

Actions are written as the simulated host records them (model.SimHost.act):
``SIGTERM 4120``, ``reset GPU 2``, ``persistence off GPU 2``, ``stop sglang``,
``remove /dev/shm/NAME``, ``load the driver``, ``reboot``.

Xid codes and what to do about them follow NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the column
"Resolution Bucket (Immediate Action)"); see observe/xid.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runbook_runner.simhost.hosts import (
    RANKS,
    container_holds_gpu2,
    crash_loop_on_leaked_shm,
    crash_loop_unknown_cause,
    daemon_holds_gpu,
    daemons_hold_every_gpu,
    defunct_holder,
    driver_asks_reboot,
    driver_not_built_for_kernel,
    driver_not_loaded,
    driver_upgraded_under_healthy_server,
    driver_upgraded_under_module,
    ecc_recurring,
    flat_cgroups_other_team,
    flat_cgroups_reset_refused,
    flat_cgroups_told_by_environment,
    gpu6_unknown_error,
    gpu_service_impostor,
    healthy_server,
    hopper_nvswitch_stranger_gpu5,
    host_ram_leak,
    host_ram_unpinning,
    leaked_shm,
    livelocked_behind_health,
    mig_gpu1_in_use,
    mps_client_hung,
    mps_daemon_unreachable,
    nccl_rank_died,
    nohup_job_beside_orphans,
    nvidia_smi_missing,
    nvlink_fault,
    oom_crash,
    orphans_after_slurm_job,
    other_team_on_gpu5,
    pattern_mismatch,
    persistence_blocks_reset,
    port_from_config,
    ray_cluster_beside,
    row_remap_failed,
    seed_launcher_alive,
    seed_launcher_doomed,
    shared_kv_cache_server,
    slow_teardown,
    stuck_d_state,
    supervisor_restarts_server,
    two_servers_one_broken,
    user_unit_named_like_production,
    volta_nvswitch_all_ours,
    volta_nvswitch_stranger_gpu5,
    wedged_server,
    xid_79,
    xid_95_on_gpu5,
)
from runbook_runner.simhost.model import SimHost

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
# nvidia-smi(1), -r/--gpu-reset: which GPUs must be reset in the same command (plan/fabric.py).
GPU_RESET_MAN = "https://man.archlinux.org/man/extra/nvidia-utils/nvidia-smi.1.en"


@dataclass(frozen=True)
class Scenario:
    name: str
    teaches: str  # the drill's headline: what the scenario is named for
    build: Callable[[], SimHost]
    wrong: str = ""  # what is wrong on the host
    expert: str = ""  # what an expert does, in words
    actions: tuple[str, ...] = ()  # the expert's minimal set of actions
    ideal_s: float = 60.0  # the expert's time to recovery (or to stopping), simulated
    lesson: str = ""
    page: str = "pitfalls/orphaned-gpu-memory.md"  # the site page (under docs/) that explains it
    ends: str = "goal"  # 'goal': the goal holds at the end; 'stopped': the run stops, as it should
    exit_code: int = 0
    message: str = ""  # what the run says when it stops
    params: tuple[tuple[str, str], ...] = ()  # --set NAME=VALUE the operator passes
    allow_reboot: bool = False  # the row is played with --allow-reboot
    left_alone: tuple[int, ...] = ()  # PIDs the run must name as left alone (not ours, healthy)
    runbook: str = "gpu-oom-recovery"
    # PIDs whose owner cannot be told: never touched, named with how to look at them, and
    # holding back only what could reach them (their GPU's reset, every node-wide rung)
    cannot_tell: tuple[int, ...] = ()
    thread: str = ""  # a public thread where the pattern is met and what the expert does

    @property
    def docs_page(self) -> str:
        return self.page


def _pids(*pids: int, signal: str = "SIGTERM") -> tuple[str, ...]:
    return tuple(f"{signal} {pid}" for pid in pids)


MATRIX: tuple[Scenario, ...] = (
    Scenario(
        "oom-crash",
        "the incident: after the server dies, GPUs 0 and 2 keep their memory; "
        "waiting does not help, a reset of just those two does",
        oom_crash,
        wrong="orphaned memory on GPUs 0 and 2 (96,413 MiB each), no process left",
        expert="wait briefly for the memory to move; it does not: reset GPUs 0 and 2 only",
        actions=("reset GPU 0", "reset GPU 2"),
        ideal_s=40,
        lesson="memory with no process left is orphaned: reset exactly the GPUs that hold it",
        page="pitfalls/orphaned-gpu-memory.md",
    ),
    Scenario(
        "slow-teardown",
        "pinned host memory takes half a minute to be released after the kill: "
        "waiting is the fix, killing harder is not",
        slow_teardown,
        wrong="the server was just killed; its processes are in D state, unpinning, memory falling",
        expert="wait while the memory falls; touch nothing",
        actions=(),
        ideal_s=35,
        lesson="a process in D state ignores every signal; memory that still falls needs time",
        page="pitfalls/host-memory-after-kill.md#1-pinned-memory-still-being-torn-down",
    ),
    Scenario(
        "wedged-server",
        "a server that is running but wedged stops on SIGTERM; SIGKILL is only for one that "
        "ignores it",
        wedged_server,
        wrong="the SGLang server runs and holds every GPU; its /health never answers",
        expert="its health check times out: it is broken; SIGTERM the server's processes, "
        "wait for them to exit; SIGKILL only if needed",
        actions=_pids(4101, *RANKS),
        ideal_s=20,
        lesson="the gentlest signal first: a clean exit frees pinned and GPU memory itself",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
    ),
    Scenario(
        "pattern-mismatch",
        "a vLLM server's API process died and its workers live on: orphans of a dead "
        "server, SIGTERM first",
        pattern_mismatch,
        wrong="vLLM's VLLM::Worker_TPn processes hold all eight GPUs, reparented to PID 1: "
        "the API server that started them is gone",
        expert="the workers' launcher is gone, so nothing serves: SIGTERM the eight workers",
        actions=_pids(*(6120 + rank for rank in range(8))),
        ideal_s=15,
        lesson="a worker whose launcher is gone is the remains of a dead server: end it",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
    ),
    Scenario(
        "other-team-gpu5",
        "another team's job on GPU 5 while our server crashed on GPUs 0-3: recover 0-3, never "
        "touch GPU 5 or its process",
        other_team_on_gpu5,
        wrong="orphaned memory on GPUs 0-3; alice's training job runs on GPU 5 from her own "
        "login session",
        expert="reset GPUs 0-3; leave GPU 5 and its process alone (not the server's: its "
        "cgroup is alice's session)",
        actions=("reset GPU 0", "reset GPU 1", "reset GPU 2", "reset GPU 3"),
        ideal_s=40,
        lesson="act only on what is the server's: the cgroup says whose a process is",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
        left_alone=(7001,),
    ),
    Scenario(
        "persistence-blocks-reset",
        "the reset of GPU 2 is refused while it is in persistence mode: take only that GPU "
        "out of persistence, reset it, put it back",
        persistence_blocks_reset,
        wrong="orphaned memory on GPU 2; nvidia-persistenced keeps GPU 2 open, so its reset is "
        "refused (GPU 5 is out of persistence mode on purpose, and stays so)",
        expert="nvidia-smi -i 2 -pm 0 (the daemon honours it), reset GPU 2, nvidia-smi -i 2 -pm 1; "
        "stop the daemon only if that fails",
        actions=("reset GPU 2", "persistence off GPU 2", "persistence on GPU 2"),
        ideal_s=45,
        lesson="the smallest blast radius that works: one GPU out of persistence, not the daemon",
        page="pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset",
        left_alone=(9001, 9002),
    ),
    Scenario(
        "daemon-holds-gpu",
        "GPU 2 will not leave persistence mode, so its reset is refused until the GPU services "
        "are stopped: stop them, reset GPU 2, start again exactly the ones stopped",
        daemon_holds_gpu,
        wrong="orphaned memory on GPU 2; nvidia-persistenced holds it and refuses -pm 0; "
        "nvidia-dcgm was stopped on purpose before, and stays so",
        expert="stop nvidia-persistenced and dcgm-exporter, reset GPU 2 (not a driver reload: "
        "that is every GPU), start the two services again",
        actions=(
            "reset GPU 2",
            "stop nvidia-persistenced",
            "stop dcgm-exporter",
            "start nvidia-persistenced",
            "start dcgm-exporter",
        ),
        ideal_s=50,
        lesson="stop what holds /dev/nvidia* and retry the reset before reloading the driver; "
        "start again only what you stopped",
        page="pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset",
    ),
    Scenario(
        "supervisor-restarts-server",
        "a systemd unit with Restart=always brings the server back mid-recovery: stop the unit "
        "first, recover, start it again",
        supervisor_restarts_server,
        wrong="the server runs under sglang.service (Restart=always) and holds every GPU; "
        "sglang-canary.service was stopped on purpose before, and stays so",
        expert="systemctl stop sglang, wait for the GPUs to be released, systemctl start sglang",
        actions=("stop sglang", "start sglang"),
        ideal_s=25,
        lesson="kill a supervised server and its supervisor starts it again: stop the unit",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
    ),
    Scenario(
        "nccl-rank-died",
        "one rank died and the other seven spin in NCCL: the job is the unit, stop every rank",
        nccl_rank_died,
        wrong="rank 3 segfaulted; the launcher and seven ranks spin in a collective, GPUs busy",
        expert="SIGTERM every process of the job; the spinning ranks ignore it: SIGKILL them",
        actions=_pids(4101, *(p for p in RANKS if p != 4123))
        + _pids(*(p for p in RANKS if p != 4123), signal="SIGKILL"),
        ideal_s=60,
        lesson="a collective never finishes without its dead rank: no teardown to wait for",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
    ),
    Scenario(
        "stuck-d-state",
        "a process stuck in D state ignores every signal and blocks reset and driver unload: "
        "only a reboot helps, and the runbook asks for --allow-reboot",
        stuck_d_state,
        wrong="scheduler 4123 is stuck in the driver (D state) holding GPU 3; no Xid logged",
        expert="send it one SIGKILL (queued for when the kernel lets go), then the reboot "
        "rung, which asks and needs --allow-reboot; no reset or driver unload while it lives",
        actions=("SIGKILL 4123",),
        ideal_s=45,
        lesson="D state + memory that does not move = stuck: only a reboot, and it is asked for",
        page="pitfalls/host-memory-after-kill.md#3-processes-in-d-state",
        ends="stopped",
        exit_code=1,
        message="needs --allow-reboot",
    ),
    Scenario(
        "xid-79",
        "Xid 79: GPU 3 fell off the bus; NVIDIA's catalog says reboot (RESTART_BM): "
        "straight to the reboot rung",
        xid_79,
        wrong="NVRM: Xid 79 on 0000:48:00 (GPU 3); nvidia-smi cannot reach GPU 3",
        expert="skip every rung that cannot work; reboot (with --allow-reboot)",
        actions=("reboot",),
        ideal_s=110,
        lesson="read the kernel log first: an Xid's catalog action decides the rung",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        allow_reboot=True,
    ),
    Scenario(
        "leaked-shm",
        "host RAM held by /dev/shm segments of the dead server: remove only those no live "
        "process holds; no GPU action",
        leaked_shm,
        wrong="120 GiB in three /dev/shm segments nobody holds; a database holds its own segment",
        expert="list segments with size, owner, age; remove the three nobody holds (fuser), "
        "leave the held one and the seconds-old one",
        actions=tuple(f"remove /dev/shm/sglang_hicache_{i}" for i in range(3)),
        ideal_s=10,
        lesson="a /dev/shm file is RAM until removed; the holders decide, not the name",
        page="pitfalls/host-memory-after-kill.md",
    ),
    Scenario(
        "host-ram-unpinning",
        "host RAM only, the kernel still unpinning a dead process's pool: wait",
        host_ram_unpinning,
        wrong="GPUs clean; one exiting process (D state) still unpins 240 GiB, falling",
        expert="wait while it falls; no GPU rung, no signal",
        actions=(),
        ideal_s=45,
        lesson="host RAM and GPU memory are separate ladders; unpinning takes tens of seconds",
        page="pitfalls/host-memory-after-kill.md#1-pinned-memory-still-being-torn-down",
    ),
    Scenario(
        "host-ram-leak",
        "120 GiB of host RAM held while every GPU is clean and no /dev/shm file explains it: "
        "no GPU rung may run for a host-memory problem; the last resort asks",
        host_ram_leak,
        wrong="120 GiB of host RAM used by nothing the runbook can see; GPUs clean",
        expert="no GPU action; look where the memory is (Shmem, slabs); a reboot only if asked",
        actions=(),
        ideal_s=45,
        lesson="a host-RAM problem never climbs the GPU ladder",
        page="pitfalls/host-memory-after-kill.md",
        ends="stopped",
        exit_code=1,
        message="needs --allow-reboot",
    ),
    Scenario(
        "nvidia-smi-missing",
        "nvidia-smi is not installed: nothing can be told, so nothing is done",
        nvidia_smi_missing,
        wrong="nvidia-smi: command not found",
        expert="stop: cannot tell; install nvidia-smi (or fix PATH) and look again",
        actions=(),
        ideal_s=5,
        lesson="not knowing is not failing: cannot tell stops, it never escalates",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
        ends="stopped",
        exit_code=6,
        message="cannot tell",
    ),
    Scenario(
        "driver-not-loaded",
        "the NVIDIA driver is not loaded: the rung meant for it loads it, nothing else",
        driver_not_loaded,
        wrong="nvidia-smi: couldn't communicate with the NVIDIA driver (modules not loaded)",
        expert="load the driver (modprobe nvidia, nvidia_uvm) and look again",
        actions=("load the driver",),
        ideal_s=10,
        lesson="a typed failure is evidence: act on that condition, not on a generic failure",
        page="pitfalls/orphaned-gpu-memory.md#driver-reload-preconditions",
    ),
    Scenario(
        "container-holds-gpu2",
        "our server in a container, which nvidia-smi does not list, hangs on GPU 2: the "
        "device file and its cgroup find it",
        container_holds_gpu2,
        wrong="GPU 2 holds 71,003 MiB and nvidia-smi lists no process; the server in Docker "
        "container 7d3f0a9c41be does not answer /health",
        expert="fuser -v /dev/nvidia2 finds PID 8812, ps shows it is the SGLang launcher in "
        "that container and its health times out: SIGTERM it, nothing else",
        actions=("SIGTERM 8812",),
        ideal_s=10,
        lesson="the device file knows every holder, whatever the PID namespace; the cgroup "
        "says whose it is",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
    ),
    Scenario(
        "healthy-server",
        "the server holds every GPU and answers /health: it is not broken, and nothing is touched",
        healthy_server,
        wrong="nothing: the SGLang server runs on all eight GPUs and /health answers 200",
        expert="ask its health first; it is healthy: leave it alone and say so",
        actions=(),
        ideal_s=5,
        lesson="memory in use is not a fault: evidence of a broken server comes before any signal",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
        left_alone=(4101, *RANKS),
    ),
    Scenario(
        "two-servers-one-broken",
        "two servers of ours under their own units, one hung and one serving: stop the hung "
        "one's unit only",
        two_servers_one_broken,
        wrong="sglang-a.service (GPUs 0-3) does not answer /health; sglang-b.service "
        "(GPUs 4-7) serves",
        expert="stop sglang-a at its supervisor, let its GPUs come back, start it again; "
        "leave sglang-b and GPUs 4-7 alone",
        actions=("stop sglang-a", "start sglang-a"),
        ideal_s=25,
        lesson="the subject is an instance, not a name: judge each server by its own health",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        left_alone=(20006, 20007, 20008, 20009, 20010),
    ),
    Scenario(
        "orphans-after-slurm-job",
        "a Slurm job's launcher died and its schedulers live on under PID 1, in the job's "
        "cgroup: they are the job's, whatever their command line, and are left to it",
        orphans_after_slurm_job,
        wrong="four sglang::scheduler processes of alice's job 4242 hold GPUs 0-3, reparented "
        "to PID 1: their launcher is gone, the job's cgroup still holds them",
        expert="signal nothing: the job's cgroup outranks the name; say whose they are, and "
        "that Slurm ends its job's processes (scancel 4242)",
        actions=(),
        ideal_s=30,
        lesson="positive evidence of another owner (a Slurm job) outranks a command line "
        "that looks like the server's",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        ends="stopped",
        exit_code=6,
        message="Slurm job 4242",
        left_alone=(4120, 4121, 4122, 4123),
    ),
    Scenario(
        "daemons-hold-every-gpu",
        "nvidia-persistenced, the DCGM host engine and its exporter hold every /dev/nvidiaN: "
        "GPU infrastructure is never signalled",
        daemons_hold_every_gpu,
        wrong="orphaned memory on GPUs 0 and 2; nvidia-persistenced, nv-hostengine and "
        "dcgm-exporter keep every /dev/nvidia* open, as on any node",
        expert="reset GPUs 0 and 2; never signal the GPU services (stop them as units only "
        "if a reset needs it)",
        actions=("reset GPU 0", "reset GPU 2"),
        ideal_s=40,
        lesson="a holder is not a culprit: the GPU services hold every device on every node",
        page="pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset",
        left_alone=(9001, 9002, 9003),
    ),
    Scenario(
        "crash-loop-on-leaked-shm",
        "a server that systemd restarts every few seconds, dying on SIGBUS because its own "
        "leaked segments fill /dev/shm: stop the unit, remove the segments, start it",
        crash_loop_on_leaked_shm,
        wrong="sglang.service restarted 14 times; each start dies with 'Bus error' writing to "
        "/dev/shm, which three unheld 10 GiB segments fill; host RAM looks fine",
        expert="stop the unit (the supervisor first), remove the three unheld segments (the "
        "cause, from the log), start the unit again",
        actions=(
            "stop sglang",
            *(f"remove /dev/shm/sglang_hicache_{i}" for i in range(3)),
            "start sglang",
        ),
        ideal_s=30,
        lesson="a crash loop has a cause in its log: fix the cause, then restart; /dev/shm "
        "can be full while host RAM looks fine",
        page="pitfalls/host-memory-after-kill.md",
    ),
    Scenario(
        "crash-loop-unknown-cause",
        "a crash loop whose log names no cause the runbook removes: stop it at the "
        "supervisor and leave it stopped, saying why; never restart it unchanged",
        crash_loop_unknown_cause,
        wrong="sglang.service restarted 9 times; its log shows a CUDA illegal memory access",
        expert="stop the unit; do not start it again unchanged; read its log and fix the cause",
        actions=("stop sglang",),
        ideal_s=30,
        lesson="a crash loop is a symptom: restarting it unchanged only loops again",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        ends="stopped",
        exit_code=1,
        message="crash-loop",
    ),
    Scenario(
        "ecc-recurring",
        "GPU 4's memory errors recur (Xid 63, 94, 94): never reported as recovered, drained "
        "instead",
        ecc_recurring,
        wrong="the server died; GPU 4 logged a row remapping and two contained memory errors "
        "since boot",
        expert="do not reset it and put it back: drain GPU 4 and follow NVIDIA's "
        "row-remapping and ECC guidance",
        actions=(),
        ideal_s=5,
        lesson="memory released is not a healthy GPU: recurring DRAM errors mean drain",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        ends="stopped",
        exit_code=1,
        message="drain",
    ),
    Scenario(
        "nvlink-fault",
        "an NVLink Xid (74) on GPU 1: the memory may look fine, the node is not",
        nvlink_fault,
        wrong="the server died in a collective; the driver logged Xid 74 (NVLink error) on GPU 1",
        expert="keep the node out of service; read the NVLink state and the Fabric Manager "
        "log; follow NVIDIA's NVLink workflow",
        actions=(),
        ideal_s=5,
        lesson="an NVLink fault breaks every collective across it, whatever the memory shows",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        ends="stopped",
        exit_code=1,
        message="NVLink",
    ),
    Scenario(
        "gpu6-unknown-error",
        "one GPU answers 'Unknown Error' while seven answer: that GPU is a fact about that GPU, "
        "not 'cannot tell' for the node: recover the others, leave it to a person",
        gpu6_unknown_error,
        wrong="orphaned memory on GPUs 0 and 2; nvidia-smi prints 'Unable to determine the "
        "device handle for GPU0000:78:00.0: Unknown Error' for GPU 6 and answers for the rest; "
        "no Xid names a rung for GPU 6",
        expert="reset GPUs 0 and 2; GPU 6 has no Xid to go by: a person looks at it (reseat, "
        "nvidia-bug-report.sh), as in "
        "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/387 (one of four GPUs, "
        "'Unable to determine the device handle ... Unknown Error': fixed by reseating it)",
        actions=("reset GPU 0", "reset GPU 2"),
        ideal_s=40,
        lesson="nvidia-smi reports per GPU: one sick GPU is one GPU, and its own evidence "
        "picks its rung",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        ends="stopped",
        exit_code=1,
        message="a person looks at it",
    ),
    Scenario(
        "xid-95-gpu5",
        "an uncontained memory error (Xid 95) on GPU 5, which now answers '[GPU requires "
        "reset]': NVIDIA's catalog says reset that GPU, and only that GPU",
        xid_95_on_gpu5,
        wrong="NVRM: Xid 95 on 0000:68:00 (GPU 5); GPU 5 answers '[GPU requires reset]' in "
        "its fields, the other seven answer",
        expert="reset GPU 5 alone (the catalog's RESET_GPU for Xid 95); nothing else, as "
        "https://github.com/leptonai/gpud/pull/1133 has gpud suggest for NVML's 'GPU requires "
        "reset'",
        actions=("reset GPU 5",),
        ideal_s=15,
        lesson="an Xid belongs to one GPU: its catalog action is that GPU's rung",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
    ),
    Scenario(
        "mig-gpu1-in-use",
        "GPU 1 is in MIG mode and one of its instances is in use: recover our GPUs, never "
        "reset a GPU whose MIG instances are in use",
        mig_gpu1_in_use,
        wrong="orphaned memory on GPUs 0 and 2; GPU 1 is split into two MIG 3g.48gb "
        "instances and bob's notebook runs in GPU instance 1",
        expert="reset GPUs 0 and 2; leave GPU 1 and bob's process alone: a reset needs the "
        "GPU idle and destroys every MIG instance (nvidia-smi(1) -r; NVIDIA's MIG user guide), "
        "as in https://github.com/NVIDIA/gpu-operator/pull/2603 (a MIG reset only once the "
        "GPU is idle)",
        actions=("reset GPU 0", "reset GPU 2"),
        ideal_s=40,
        lesson="in MIG mode a GPU is shared by its instances: a reset is everyone's, so it "
        "waits until none is in use",
        page="pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset",
        left_alone=(7301,),
    ),
)

MATRIX += (
    Scenario(
        "flat-cgroups-stranger-gpu5",
        "every process shares one cgroup and a job nobody can attribute runs on GPU 5, while "
        "our server crashed on GPUs 0-3: reset 0-3; the stranger holds back only its own GPU",
        flat_cgroups_other_team,
        wrong="orphaned memory on GPUs 0-3; on GPU 5 a training job runs in the same cgroup "
        "as everything else (no pam_systemd): nothing says whose it is",
        expert="reset GPUs 0-3; do not touch GPU 5 or its process; ask around whose it is "
        "(ps -o pid,user,lstart,args -p 7001); no node-wide rung while it runs; say that "
        "GPU 5 cannot be told (the crashed server left no process to say it was not its)",
        actions=("reset GPU 0", "reset GPU 1", "reset GPU 2", "reset GPU 3"),
        ideal_s=40,
        lesson="cannot tell holds back what could reach the stranger, and nothing else",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        cannot_tell=(7001,),
        ends="stopped",
        exit_code=6,  # nothing says GPU 5 is not the crashed server's: not "goal holds"
        message="GPU 5: cannot tell",
        thread="https://forums.developer.nvidia.com/t/memory-on-gpu-not-freed-after-the-program-is-killed/62311",
    ),
    Scenario(
        "flat-cgroups-reset-refused",
        "the same flat node, but GPU 3 will not come back from a reset: the next rungs reach "
        "every GPU, the stranger's too, so the run stops before them and says why",
        flat_cgroups_reset_refused,
        wrong="orphaned memory on GPUs 0-3, GPU 3's reset fails every time; a job nobody can "
        "attribute runs on GPU 5",
        expert="reset GPUs 0-3, retry GPU 3 out of persistence mode; then stop: stopping the "
        "GPU services or reloading the driver would reach GPU 5's job: find its owner first",
        actions=(
            "reset GPU 0",
            "reset GPU 1",
            "reset GPU 2",
            "reset GPU 3",
            "persistence off GPU 3",
            "persistence on GPU 3",
        ),
        ideal_s=30,
        lesson="a node-wide rung cannot be scoped past a holder nobody can attribute",
        page="pitfalls/ours-and-broken.md#which-rung-the-fault-picks",
        ends="stopped",
        exit_code=6,
        message="cannot tell who holds",
        cannot_tell=(7001,),
        thread="https://forums.developer.nvidia.com/t/memory-on-gpu-not-freed-after-the-program-is-killed/62311",
    ),
    Scenario(
        "volta-nvswitch-stranger-gpu5",
        "the flat node on V100s on an NVSwitch fabric: before Ampere a GPU is reset only with "
        "every GPU NVLinked to it, so GPUs 0-3 cannot be reset without GPU 5's stranger",
        volta_nvswitch_stranger_gpu5,
        wrong="orphaned memory on GPUs 0-3 of eight Tesla V100-SXM3 on one NVSwitch fabric "
        "(topo -m: NV6 between every pair); a job nobody can attribute runs on GPU 5",
        expert="reset nothing: nvidia-smi(1) says GPUs before Ampere are reset together with "
        "every GPU NVLinked to them, so a reset of GPU 0 reaches GPU 5; say so, name GPU 5's "
        "holder (ps -o pid,user,lstart,args -p 7001) and stop before the node-wide rungs",
        actions=(),
        ideal_s=30,
        lesson="a fabric-wide reset is as wide as its fabric: cannot tell holds back every "
        "reset that reaches the stranger's GPU",
        page="pitfalls/ours-and-broken.md#which-rung-the-fault-picks",
        ends="stopped",
        exit_code=6,
        message="cannot tell who holds",
        cannot_tell=(7001,),
        thread=GPU_RESET_MAN,
    ),
    Scenario(
        "volta-nvswitch-all-ours",
        "our TP8 server crashed on eight V100s of one NVSwitch fabric: before Ampere a GPU is "
        "reset only in the same command as every GPU NVLinked to it, so the eight are reset "
        "together, once, not one by one",
        volta_nvswitch_all_ours,
        wrong="orphaned memory on all eight Tesla V100-SXM3 of one NVSwitch fabric (topo -m: "
        "NV6 between every pair), no process left, nobody else on the node",
        expert="reset the eight GPUs in one command, nvidia-smi --gpu-reset -i 0,1,2,3,4,5,6,7 "
        "(nvidia-smi(1): pre-Ampere NVLink peers are reset in the same command; a reset of one "
        "is refused with the GPUs it lacks named)",
        actions=("reset GPUs 0,1,2,3,4,5,6,7 together",),
        ideal_s=40,
        lesson="a fabric-wide reset is one command: name the whole NVLink group with -i, once",
        page="pitfalls/orphaned-gpu-memory.md#a-reset-that-reaches-more-than-its-gpu",
        thread=GPU_RESET_MAN,
    ),
    Scenario(
        "hopper-nvswitch-stranger-gpu5",
        "the same flat node on H100s on an NVSwitch fabric: from Hopper on each GPU is reset "
        "individually, so GPUs 0-3 are reset and the stranger's GPU 5 is not touched",
        hopper_nvswitch_stranger_gpu5,
        wrong="orphaned memory on GPUs 0-3 of eight H100 SXM on one NVSwitch fabric (topo -m: "
        "NV18 between every pair); a job nobody can attribute runs on GPU 5",
        expert="reset GPUs 0-3 one by one (Hopper and later NVSwitch systems reset each GPU "
        "individually, nvidia-smi(1)); do not touch GPU 5 or its process",
        actions=("reset GPU 0", "reset GPU 1", "reset GPU 2", "reset GPU 3"),
        ideal_s=40,
        lesson="NVLink alone does not widen a reset: the architecture and Fabric Manager say",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        cannot_tell=(7001,),
        ends="stopped",
        exit_code=6,  # nothing says GPU 5 is not the crashed server's: not "goal holds"
        message="GPU 5: cannot tell",
        thread=GPU_RESET_MAN,
    ),
    Scenario(
        "seed-launcher-alive",
        "the seed: the launcher lives on with its port closed and its schedulers dead: it is "
        "not starting, it is broken; end it and reset GPUs 0 and 2",
        seed_launcher_alive,
        wrong="SGLang's launcher (up 93 s) holds /dev/nvidia0 and never opened port 30000; "
        "its eight schedulers were OOM-killed; GPUs 0 and 2 keep 96,413 MiB each",
        expert="a launcher whose workers are all gone loads nothing: SIGTERM it; reset GPUs "
        "0 and 2, whose memory no process holds",
        actions=("SIGTERM 4101", "reset GPU 0", "reset GPU 2"),
        ideal_s=50,
        lesson="starting is not for ever: a closed port with no worker left is broken",
        page="pitfalls/ours-and-broken.md#broken-before-destructive",
        thread="https://github.com/vllm-project/vllm/issues/35547",
    ),
    Scenario(
        "ray-cluster-beside",
        "another team's Ray cluster trains on GPUs 4-7 of a flat node while our server "
        "crashed on GPUs 0-3: Ray restarts its actors, so they are the cluster's owner's",
        ray_cluster_beside,
        wrong="orphaned memory on GPUs 0-3; four ray::RayTrainWorker actors under a raylet "
        "hold GPUs 4-7, all in one cgroup",
        expert="reset GPUs 0-3; leave the Ray actors and their GPUs alone (killing an actor "
        "only makes Ray restart it); its owner stops the cluster with ray stop",
        actions=("reset GPU 0", "reset GPU 1", "reset GPU 2", "reset GPU 3"),
        ideal_s=40,
        lesson="a supervisor owns what it restarts: Ray's actors, like systemd's units",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(7510, 7511, 7512, 7513),
        thread="https://github.com/ray-project/ray/issues/54364",
    ),
    Scenario(
        "nohup-job-beside-orphans",
        "a vLLM server's workers outlived it under PID 1, and so did a job started with "
        "nohup: parent PID 1 is not ours; the workers are, by their command line",
        nohup_job_beside_orphans,
        wrong="four VLLM::Worker_TPn processes hold GPUs 0-3, reparented to PID 1; carol's "
        "nohup finetune.py holds GPU 6, its parent PID 1 too, in her login's cgroup",
        expert="SIGTERM the four orphaned workers; leave carol's job and GPU 6 alone",
        actions=_pids(6120, 6121, 6122, 6123),
        ideal_s=15,
        lesson="an orphan is ours by what it is, not by having PID 1 for a parent",
        page="pitfalls/orphaned-gpu-memory.md#how-to-tell-what-holds-the-memory",
        left_alone=(7301,),
        thread="https://derrekito.github.io/posts/nohup-background-processes-automation/",
    ),
    Scenario(
        "shared-kv-cache-server",
        "our hung server shares a KV-cache server with another team's healthy one: stop ours, "
        "leave the cache server and its other client alone",
        shared_kv_cache_server,
        wrong="the SGLang server on GPUs 0-3 never answers /health; an LMCache server "
        "(lmcache.service) holds GPU 7 and 64 GiB for it and for dave's vLLM on GPUs 4-7",
        expert="SIGTERM our launcher and its four schedulers; the cache server and dave's "
        "vLLM serve on: never stop them for our fault",
        actions=_pids(4101, 4120, 4121, 4122, 4123),
        ideal_s=20,
        lesson="a shared service is its owner's: a client's fault is the client's",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(7601, 7701),
        thread="https://github.com/LMCache/LMCache/issues/651",
    ),
)

MATRIX += (
    Scenario(
        "flat-cgroups-owners-told",
        "on a flat node, five other owners' jobs hold GPUs 4-7 and their cgroups say nothing: "
        "their environment, mounts, login and sshd say whose they are; our GPUs 0-3 are reset",
        flat_cgroups_told_by_environment,
        wrong="orphaned memory on GPUs 0-3; on GPUs 4-7, in the same cgroup as everything "
        "else: a Slurm job step (SLURM_JOB_ID=81422), a pod's container sharing the host's "
        "PID namespace, bob's job under his SSH login and a Ray worker (RAY_RAYLET_PID) on "
        "GPU 6, carol's nohup job (loginuid 1007)",
        expert="reset GPUs 0-3; leave the five jobs and GPUs 4-7 alone, each named with whose "
        "it is (the job's, the pod's, bob's, the Ray cluster's, carol's login): ask them, do "
        "not kill them (a Ray worker killed is only restarted)",
        actions=("reset GPU 0", "reset GPU 1", "reset GPU 2", "reset GPU 3"),
        ideal_s=40,
        lesson="where the cgroup says nothing, /proc/PID/environ, mountinfo and loginuid "
        "still name an owner; each only ever proves a process someone else's",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(7001, 7002, 7003, 7004, 7005),
        thread="https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/73",
    ),
    Scenario(
        "mps-client-hung",
        "two servers of ours share the GPUs through NVIDIA MPS and one hangs: its clients are "
        "ended by the MPS control daemon's terminate_client, never signalled first",
        mps_client_hung,
        wrong="an MPS control daemon and server hold every GPU; the SGLang server on GPUs 0-3 "
        "(port 30000) never answers /health; the one on GPUs 4-7 (port 30001) serves, a "
        "client of the same MPS server",
        expert="terminate_client each of the hung server's four schedulers (echo "
        "'terminate_client 7801 PID' | nvidia-cuda-mps-control), then SIGTERM its launcher, "
        "which holds no GPU; never signal an MPS client with work outstanding (it can leave "
        "the server and the healthy server's clients undefined), never the MPS daemons",
        actions=(
            "terminate_client 4120",
            "terminate_client 4121",
            "terminate_client 4122",
            "terminate_client 4123",
            "SIGTERM 4101",
        ),
        ideal_s=20,
        lesson="an MPS client is ended through its server, so the server's other clients "
        "are not hurt",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(4201, 4220, 4221, 4222, 4223),
        thread="https://github.com/sgl-project/sglang-omni/pull/1635",
    ),
    Scenario(
        "port-from-config",
        "two vLLM servers started from config files, neither with --port: the port each "
        "listens on (ss -ltnp) is where its health is asked, not vLLM's default",
        port_from_config,
        wrong="vLLM on GPUs 0-3 listens on 8100 (its config file) and hangs; vLLM on GPUs "
        "4-7 listens on 8000 and serves; asked on port 8000 alone, both answer 200",
        expert="ask each server on the port it listens on: the one on 8100 times out, SIGTERM "
        "it and its four workers; leave the one on 8000 alone",
        actions=_pids(5101, 5120, 5121, 5122, 5123),
        ideal_s=20,
        lesson="a server's health is asked on the socket it listens on: a default port may "
        "be another server's",
        page="pitfalls/ours-and-broken.md#broken-before-destructive",
        left_alone=(5201, 5220, 5221, 5222, 5223),
        thread="https://github.com/mostlygeek/llama-swap/issues/279",
    ),
    Scenario(
        "driver-upgraded-under-module",
        "an upgrade replaced the driver's libraries under the loaded module: nvidia-smi fails "
        "(driver/library version mismatch), no GPU rung can be told; straight to the reboot",
        driver_upgraded_under_module,
        wrong="nvidia-smi: Failed to initialize NVML: Driver/library version mismatch (library "
        "595.10, module 590.48.01); the crashed server left memory on GPUs 0 and 2",
        expert="no GPU can be read, so no reset or kill can be aimed: reboot (with "
        "--allow-reboot) so the installed module loads, which also frees the memory",
        actions=("reboot",),
        ideal_s=110,
        lesson="a driver/library mismatch is the finding: every CUDA start fails until the "
        "installed module is loaded",
        page="pitfalls/orphaned-gpu-memory.md#the-driver-upgraded-under-a-loaded-module",
        allow_reboot=True,
        thread="https://github.com/lyulyul/shine-cluster/issues/30",
    ),
    Scenario(
        "driver-upgraded-healthy-server",
        "the same upgrade under a server that still serves: it runs on the module it loaded, "
        "so the reboot would end a healthy server; left alone, and said so",
        driver_upgraded_under_healthy_server,
        wrong="nvidia-smi: Failed to initialize NVML: Driver/library version mismatch; the "
        "SGLang server on all eight GPUs answers /health",
        expert="leave the serving server alone; reboot in a maintenance window, once it is drained",
        actions=(),
        ideal_s=5,
        lesson="a node-wide cure waits while a healthy server of ours uses the node",
        page="pitfalls/orphaned-gpu-memory.md#the-driver-upgraded-under-a-loaded-module",
        ends="stopped",
        exit_code=6,
        message="healthy",
        allow_reboot=True,
        left_alone=(4101, *RANKS),
        thread="https://github.com/lyulyul/shine-cluster/issues/30",
    ),
    Scenario(
        "driver-not-built-for-kernel",
        "the host booted a kernel with no NVIDIA module (DKMS did not build it): loading the "
        "driver fails, and nothing else is tried on GPUs nobody can read",
        driver_not_built_for_kernel,
        wrong="nvidia-smi: couldn't communicate with the NVIDIA driver; modprobe nvidia: Module "
        "nvidia not found in directory /lib/modules/6.8.0-49-generic",
        expert="try to load the driver; there is no module for this kernel: stop, touch no GPU; "
        "install the driver for the running kernel (dkms status, dkms autoinstall) or boot the "
        "kernel it was built for",
        actions=(),
        ideal_s=10,
        lesson="a driver that cannot load is a finding for a person: no rung after it can "
        "read a GPU",
        page="pitfalls/orphaned-gpu-memory.md#a-kernel-with-no-nvidia-module",
        ends="stopped",
        exit_code=6,
        message="cannot tell",
        thread="https://github.com/NVIDIA/nvidia-docker/issues/365",
    ),
    Scenario(
        "driver-asks-reboot",
        "the driver's word bounds the ladder: GPU 2's recovery action is a node reboot, so "
        "its orphaned memory is not reset but rebooted away",
        driver_asks_reboot,
        wrong="orphaned memory on GPUs 0 and 2; nvidia-smi -q says GPU 2's recovery action "
        "is Reboot",
        expert="never try a reset the driver says will not do: reboot the node (nvidia-smi "
        "-q, GPU Recovery Action; NVML's nvmlDeviceGpuRecoveryAction_t)",
        actions=("reboot",),
        ideal_s=120,
        lesson="the driver says what recovers a GPU: read it before picking a rung",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        allow_reboot=True,
        thread="https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",
    ),
    Scenario(
        "row-remap-failed",
        "GPU 2's row remapping failed: out of service, never reset and returned; GPU 0 is "
        "reset as usual",
        row_remap_failed,
        wrong="orphaned memory on GPUs 0 and 2; nvidia-smi -q says GPU 2's row remapping "
        "failed (Remapping Failure Occurred: Yes)",
        expert="reset GPU 0; leave GPU 2 as it is and drain it: a GPU whose remapping failed "
        "goes to NVIDIA's row-remapping guidance (RMA), not back into service",
        actions=("reset GPU 0",),
        ideal_s=30,
        lesson="a GPU whose row remapping failed is out of service, whatever a reset frees",
        page="pitfalls/orphaned-gpu-memory.md#the-escalation-ladder",
        ends="stopped",
        exit_code=1,
        message="row remapping failed",
        thread="https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
    ),
    Scenario(
        "user-unit-named-like-production",
        "a user's own unit named like production's (systemd-run --user --unit=sglang) answers "
        "503: it is that user's, and production's healthy unit is left alone",
        user_unit_named_like_production,
        wrong="sglang.service (a system unit, GPUs 0-3) serves; bob's user unit sglang.service "
        "(his service manager's, --port 31337) holds GPU 5 and answers 503",
        expert="ask production's health on its own port: healthy, leave it; bob's server is "
        "his (user@1666.service's unit), leave it and GPU 5 alone",
        actions=(),
        ideal_s=5,
        lesson="a unit's name is not its owner: only a system unit is the system's",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(3001, 20001),
    ),
    Scenario(
        "gpu-service-impostor",
        "a user's program named nvidia-persistenced holds GPU 5: a name any user can give a "
        "program is not GPU infrastructure; the orphaned GPUs 0 and 2 are reset",
        gpu_service_impostor,
        wrong="orphaned memory on GPUs 0 and 2; mallory's /home/mallory/bin/nvidia-persistenced "
        "holds GPU 5",
        expert="reset GPUs 0 and 2; leave mallory's process and GPU 5 alone (it is hers, "
        "whatever its name)",
        actions=("reset GPU 0", "reset GPU 2"),
        ideal_s=40,
        lesson="GPU infrastructure is known by its unit or its installed program, never by a name",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        left_alone=(7101,),
    ),
    Scenario(
        "seed-launcher-doomed",
        "the seed's launcher alive 50 s with its port closed and its schedulers orphaned: its "
        "own launch line cannot fit the host, so it is doomed, not starting",
        seed_launcher_doomed,
        wrong="SGLang's launcher (up 50 s, --tp-size 8 --hicache-size 300 on a 449 GiB host) "
        "holds /dev/nvidia0 with port 30000 closed; its eight schedulers are orphans of an "
        "earlier start; GPUs 0 and 2 keep their memory once those are gone",
        expert="a launch that pins 8 x 300 GB of a 449 GiB host never loads: end it with its "
        "orphaned schedulers, then reset GPUs 0 and 2",
        actions=(*_pids(4101), *_pids(*RANKS), "reset GPU 0", "reset GPU 2"),
        ideal_s=60,
        lesson="starting is judged on evidence: a launch that cannot fit the host is doomed",
        page="pitfalls/ours-and-broken.md#broken-before-destructive",
        thread="https://github.com/sgl-project/sglang/issues/38156",
    ),
    Scenario(
        "mps-daemon-unreachable",
        "the hung server's schedulers are MPS clients (nvidia-smi: M+C) and the control daemon "
        "cannot be found: they are never signalled; whether that is safe cannot be told",
        mps_daemon_unreachable,
        wrong="the MPS host of mps-client-hung, its control daemon in a container's PID "
        "namespace (pgrep finds none); nvidia-smi -q -d PIDS lists the schedulers as M+C",
        expert="leave the four MPS clients alone and say why: terminate_client cannot be asked "
        "and a signal could leave the MPS server and the healthy server's clients undefined; "
        "SIGTERM the launcher, which is no client; a person ends the clients through the daemon",
        actions=("SIGTERM 4101",),
        ideal_s=20,
        lesson="an MPS client is ended only through its control daemon: no daemon, no signal",
        page="pitfalls/ours-and-broken.md#who-owns-a-process",
        ends="stopped",
        exit_code=1,
        message="MPS control daemon could not be asked",
        left_alone=(4201,),
    ),
    Scenario(
        "livelocked-behind-health-200",
        "an API process answers /health 200 while its engine generates nothing: healthy takes "
        "two witnesses, and requests waiting with no token generated is broken",
        livelocked_behind_health,
        wrong="the SGLang server (--enable-metrics) holds every GPU and /health answers 200, "
        "while its /metrics says 12 requests wait and its token counter stands still",
        expert="read its own /metrics twice a few seconds apart: 12 waiting, 0 tokens: it is "
        "ours and broken; SIGTERM the server's processes, reset nothing else",
        actions=_pids(4101, *RANKS),
        ideal_s=30,  # the expert too waits out the window between two reads of the counters
        lesson="a 200 from /health is one witness: the engine's own counters must move too",
        page="pitfalls/ours-and-broken.md#healthy-on-two-witnesses",
        thread="https://github.com/sgl-project/sglang/issues/4191",
    ),
    Scenario(
        "defunct-holder",
        "the crashed launcher is defunct (Zl) on GPUs 0-3 and its parent is alice's login "
        "shell: no signal and no reset frees them; its parent reaps it",
        defunct_holder,
        wrong="python3 -m sglang.launch_server (--tp-size 4), defunct with its threads alive, "
        "holds GPUs 0-3; its parent is alice's -bash",
        expert="touch nothing: a zombie is ended by its parent (a reset is refused while it "
        "holds the GPU, and the GPU services and driver reload reach the whole node); ask "
        "alice to end or wait on her shell's job, or kill the shell if she agrees",
        actions=(),
        ideal_s=30,  # the teardown wait shows the memory is not falling
        lesson="a defunct holder ends through its parent, never through resets",
        page="pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset",
        ends="stopped",
        exit_code=1,
        message="its parent must reap it",
        thread="https://forums.developer.nvidia.com/t/gpu-memory-not-released-zombie-process/",
    ),
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in MATRIX}


def matrix_table(link: Callable[[str], str] = lambda page: page) -> str:
    """The matrix as a Markdown table for the site (docs/hooks.py): each row's state, what an
    expert does and their actions, the ideal time, how the run must end, and the lesson with
    its page (``link`` turns a page path into the link the site needs)."""
    lines = [
        "| scenario | what is wrong | what an expert does | actions | ideal | ends | lesson |",
        "|---|---|---|---|---:|---|---|",
    ]
    for s in MATRIX:
        actions = ", ".join(f"`{a}`" for a in s.actions) or "none"
        ends = "goal reached" if s.ends == "goal" else f"stops, exit {s.exit_code}: {s.message}"
        lesson = f"{s.lesson} ([read]({link(s.page)}))"
        cells = [f"`{s.name}`", s.wrong, s.expert, actions, f"{s.ideal_s:.0f} s", ends, lesson]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        f"Xid actions follow NVIDIA's Xid catalog: <{XID_CATALOG}>.",
    ]
    return "\n".join(lines) + "\n"
