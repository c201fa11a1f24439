"""The hosts of the scenario matrix: each builds one incident's state on an 8-GPU server
(GPUs, processes with their GPU and state, host RAM, /dev/shm, kernel messages, units).

scenarios.py pairs each with what an expert does; ``runbook sim --scenario`` and
``runbook drill --scenario`` start a host in one of them.
"""

from __future__ import annotations

from typing import Any

from runbook_runner.simhost.model import (
    GIB,
    SimHost,
    SimProcess,
    SimService,
    SimShm,
    eight_gpu_server,
)

LAUNCH = (
    "python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --trust-remote-code "
    "--tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300"
)
RELAUNCH = LAUNCH.replace("--hicache-size 300", "--hicache-size 40")  # fits: 8 x 40 GB
VLLM = "python3 -m vllm.entrypoints.openai.api_server --model /shared/qwen3-235b --tensor-parallel-size 8"
START = 1_000.0  # the drill's clock starts here (simulated.SimClock)


def _server(
    orphaned: tuple[int, ...] = (),
    teardown_s: float = 20.0,
    ranks: tuple[int, ...] = tuple(range(8)),
    launcher: bool = True,
    health: str = "ok",
    **flags: object,
) -> list[SimProcess]:
    """SGLang at TP 8: the launcher (serving /health on port 30000) and one scheduler per
    GPU, each pinning its host pool; without the launcher, its orphans (parent PID 1)."""
    processes = (
        [SimProcess(pid=4101, cmdline=LAUNCH, teardown_s=1.0, listens=30000, health=health)]
        if launcher
        else []
    )
    for rank in ranks:
        processes.append(
            SimProcess(
                pid=4120 + rank,
                ppid=4101 if launcher else 1,
                cmdline=f"sglang::scheduler_TP{rank}",
                gpu_mib={str(rank): 96_410 if rank in orphaned else 90_112},
                host_bytes=38 * GIB,
                orphan_gpu_memory=rank in orphaned,
                teardown_s=teardown_s,
                **flags,  # type: ignore[arg-type]
            )
        )
    return processes


RANKS = tuple(4120 + rank for rank in range(8))


# -- the host states ------------------------------------------------------------------------


def oom_crash() -> SimHost:
    host = eight_gpu_server()
    host.gpu(0).orphaned_mib = 96_410
    host.gpu(2).orphaned_mib = 96_410
    host.kernel_messages = [
        "[Mon Nov 30 14:02:11 2026] Out of memory: Killed process 4127 (sglang::schedul) "
        "total-vm:412000000kB, anon-rss:39845888kB",
    ]
    return host


def slow_teardown() -> SimHost:
    """Killed a moment ago: every process is in D state, unpinning; memory falls for 30 s."""
    host = eight_gpu_server()
    host.processes = _server(teardown_s=30.0)
    for process in host.processes:
        process.teardown_s = 30.0
        process.exits_at = START + 30.0
    return host


def wedged_server() -> SimHost:
    """The server runs and holds every GPU; its /health never answers."""
    host = eight_gpu_server()
    host.processes = _server(teardown_s=15.0, health="hung")
    return host


def healthy_server() -> SimHost:
    """The server runs, holds every GPU and answers /health: nothing is wrong with it."""
    host = eight_gpu_server()
    host.processes = _server(teardown_s=15.0)
    return host


def _unit_spec(
    gpus: range = range(8),
    health: str = "ok",
    port: int | None = None,
    gpu_mib: int = 90_112,
    host_bytes: int = 38 * GIB,
    rank_teardown_s: float = 10.0,
) -> list[dict[str, Any]]:
    """What a server unit starts: the launcher (serving /health) and one scheduler per GPU.
    Its launch line is the relaunch after the postmortem (--hicache-size 40 GB per rank:
    8 x 40 = 320 GB of 449 GiB), one that fits: a unit restarted with the seed's line is
    doomed (plan/evidence.py), as it was on the night."""
    launch = RELAUNCH.replace("--tp-size 8", f"--tp-size {len(gpus)}")
    spec: list[dict[str, Any]] = [
        {
            "cmdline": launch + (f" --port {port}" if port else ""),
            "teardown_s": 1.0,
            "listens": port or 30000,
            "health": health,
        }
    ]
    return spec + [
        {
            "cmdline": f"sglang::scheduler_TP{rank}",
            "gpu_mib": {str(gpu): gpu_mib},
            "host_bytes": host_bytes,
            "teardown_s": rank_teardown_s,
        }
        for rank, gpu in enumerate(gpus)
    ]


def _supervised(host: SimHost, *units: SimService, loading: bool, restarts: int = 0) -> SimHost:
    """The units running at the start of the drill (its clock's start), their start not
    counted as an action."""
    host.now = START
    for unit in units:
        host.services.append(unit)
        host.start_service(unit, loading=loading)
        unit.restarts = restarts
    host.actions.clear()
    return host


def two_servers_one_broken() -> SimHost:
    """Two TP4 servers of ours, each under its own unit: sglang-a (GPUs 0-3) hangs, sglang-b
    (GPUs 4-7) serves."""
    return _supervised(
        eight_gpu_server(),
        SimService("sglang-a", holds_gpus=False, runs=_unit_spec(range(0, 4), "hung", 30000)),
        SimService("sglang-b", holds_gpus=False, runs=_unit_spec(range(4, 8), "ok", 30001)),
        loading=False,
    )


def orphans_after_slurm_job() -> SimHost:
    """A Slurm job's launcher died; its four schedulers live on, reparented to PID 1, in the
    job's cgroup, holding GPUs 0-3."""
    host = eight_gpu_server()
    host.processes = _server(ranks=(0, 1, 2, 3), launcher=False, teardown_s=10.0, user="alice")
    for process in host.processes:
        process.cgroup = (
            f"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_{process.pid % 4}"
        )
    return host


def daemons_hold_every_gpu() -> SimHost:
    """The incident's GPUs 0 and 2, on a node whose persistence daemon, DCGM host engine and
    exporter keep every /dev/nvidiaN open (as they do on a real node)."""
    host = oom_crash()
    host.services += [SimService("nvidia-dcgm"), SimService("dcgm-exporter")]
    return host


def crash_loop_on_leaked_shm() -> SimHost:
    """sglang.service (Restart=always) dies at every start: the segments its earlier
    instances leaked fill the 32 GiB /dev/shm, so it gets SIGBUS writing its own. Host RAM
    looks fine."""
    host = eight_gpu_server()
    for fs in host.filesystems:
        if fs.mounted_on == "/dev/shm":  # noqa: S108 -- a simulated mount
            fs.size_bytes = 32 * GIB
    host.shm = [SimShm(f"sglang_hicache_{i}", 10 * GIB, "root", START - 1800) for i in range(3)]
    unit = SimService(
        "sglang",
        holds_gpus=False,
        restart="always",
        runs=_unit_spec(gpu_mib=2_048, host_bytes=0, rank_teardown_s=1.0),
        shm_needed_bytes=8 * GIB,
        startup_s=60.0,
    )
    return _supervised(host, unit, loading=True, restarts=14)


def crash_loop_unknown_cause() -> SimHost:
    """sglang.service restarts every minute; its log shows a CUDA error this runbook cannot
    fix. Starting it again unchanged would only loop."""
    unit = SimService(
        "sglang",
        holds_gpus=False,
        restart="always",
        runs=_unit_spec(gpu_mib=2_048, host_bytes=0, rank_teardown_s=1.0),
        startup_s=60.0,
    )
    unit.log = [
        "sglang::scheduler_TP3[20005]: RuntimeError: CUDA error: an illegal memory access was "
        "encountered",
    ]
    return _supervised(eight_gpu_server(), unit, loading=True, restarts=9)


def ecc_recurring() -> SimHost:
    """The server died; GPU 4's memory errors recur (row remapping, contained errors)."""
    host = eight_gpu_server()
    pci = "0000:58:00"
    host.kernel_messages = [
        f"[Mon Nov 30 13:58:02 2026] NVRM: Xid (PCI:{pci}): 63, pid=4124, "
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
        f"[Mon Nov 30 14:01:47 2026] NVRM: Xid (PCI:{pci}): 94, pid=4124, "
        "Contained: SM (0x1). RST: No, D-RST: No",
        f"[Mon Nov 30 14:02:09 2026] NVRM: Xid (PCI:{pci}): 94, pid=4124, "
        "Contained: SM (0x1). RST: No, D-RST: No",
    ]
    return host


def nvlink_fault() -> SimHost:
    """The server died in a collective; the driver logged an NVLink error on GPU 1."""
    host = eight_gpu_server()
    host.kernel_messages = [
        "[Mon Nov 30 14:02:10 2026] NVRM: Xid (PCI:0000:28:00): 74, pid=4121, "
        "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    ]
    return host


def pattern_mismatch() -> SimHost:
    """A vLLM server whose API process died; its eight workers still hold the GPUs,
    reparented to PID 1."""
    host = eight_gpu_server()
    host.processes = [
        SimProcess(
            pid=6120 + rank,
            cmdline=f"VLLM::Worker_TP{rank}",
            gpu_mib={str(rank): 88_000},
            host_bytes=20 * GIB,
            teardown_s=10.0,
            user="vllm",
        )
        for rank in range(8)
    ]
    return host


def other_team_on_gpu5() -> SimHost:
    """Our TP4 server crashed on GPUs 0-3 (memory held, no process left); alice trains on
    GPU 5 from her own login session."""
    host = eight_gpu_server()
    for index in range(4):
        host.gpu(index).orphaned_mib = 91_000
    host.processes = [
        SimProcess(
            pid=7001,
            cmdline="python3 train.py --config ablation-12.yaml",
            gpu_mib={"5": 80_000},
            host_bytes=20 * GIB,
            teardown_s=5.0,
            user="alice",
        )
    ]
    return host


def persistence_blocks_reset() -> SimHost:
    host = eight_gpu_server()
    host.services.append(SimService("dcgm-exporter"))
    host.gpu(2).orphaned_mib = 96_402
    host.gpu(2).persistence_blocks_reset = True
    host.gpu(5).persistence = False  # its owner's choice, before the incident: not ours to undo
    return host


def daemon_holds_gpu() -> SimHost:
    """GPU 2's reset is refused in persistence mode, and the daemon refuses -pm 0 for it."""
    host = persistence_blocks_reset()
    host.gpu(2).persistence_locked = True
    # Installed, stopped and disabled before the incident: not this run's to start.
    host.services.append(SimService("nvidia-dcgm", active=False, enabled=False))
    return host


def supervisor_restarts_server() -> SimHost:
    host = eight_gpu_server()
    unit = SimService(
        "sglang",
        holds_gpus=False,
        restart="always",
        runs=_unit_spec(health="hung", rank_teardown_s=15.0),
    )
    # A second server unit, stopped and disabled on purpose before the incident: it matches
    # the pattern, but this run did not stop it, so it does not start it either.
    host.services.append(SimService("sglang-canary", active=False, enabled=False, holds_gpus=False))
    return _supervised(host, unit, loading=False)


def nccl_rank_died() -> SimHost:
    """Rank 3 died; the launcher and seven ranks spin in an NCCL collective that never ends
    (its /health hangs)."""
    host = eight_gpu_server()
    host.processes = _server(ranks=(0, 1, 2, 4, 5, 6, 7), ignores_term=True, health="hung")
    host.kernel_messages = [
        "[Mon Nov 30 14:02:11 2026] sglang::schedul[4123]: segfault at 0 ip 00007f3a1c2b4e10 "
        "sp 00007ffd5c1a2f70 error 4 in libc.so.6[7f3a1c200000+195000]",
    ]
    return host


def stuck_d_state() -> SimHost:
    host = eight_gpu_server()
    host.processes = [
        SimProcess(
            pid=4123,
            cmdline="sglang::scheduler_TP3",
            gpu_mib={"3": 95_870},
            host_bytes=38 * GIB,
            stuck=True,
        )
    ]
    host.kernel_messages = [
        "[Mon Nov 30 14:07:40 2026] INFO: task sglang::schedul:4123 blocked for more than 122 seconds.",
        "[Mon Nov 30 14:07:40 2026] Call Trace: uvm_gpu_wait+0x4c/0xa0 [nvidia_uvm]",
    ]
    return host


def xid_79() -> SimHost:
    host = eight_gpu_server()
    host.gpu(3).lost = True
    host.kernel_messages = [
        "[Mon Nov 30 14:07:41 2026] NVRM: Xid (PCI:0000:48:00): 79, pid=4123, "
        "GPU has fallen off the bus.",
        "[Mon Nov 30 14:07:41 2026] NVRM: GPU 0000:48:00.0: GPU has fallen off the bus.",
    ]
    return host


def leaked_shm() -> SimHost:
    """The server is gone; 120 GiB of its /dev/shm segments are not. A database holds its own."""
    host = eight_gpu_server()
    host.processes = [SimProcess(pid=7101, cmdline="postgres: checkpointer", user="postgres")]
    host.shm = [
        SimShm("sglang_hicache_0", 40 * GIB, "root", START - 900),
        SimShm("sglang_hicache_1", 40 * GIB, "root", START - 900),
        SimShm("sglang_hicache_2", 40 * GIB, "root", START - 900),
        SimShm("PostgreSQL.2131", 2 * GIB, "postgres", START - 86_400, holder=7101),
        SimShm("sem.mp-8f2a", 32, "root", START - 5),  # seconds old: someone is starting up
    ]
    return host


def host_ram_unpinning() -> SimHost:
    """GPUs clean; the dead server's last process still unpins a 240 GiB pool (D state)."""
    host = eight_gpu_server()
    host.processes = [
        SimProcess(
            pid=4120,
            cmdline="sglang::scheduler_TP0",
            host_bytes=240 * GIB,
            teardown_s=40.0,
            exits_at=START + 40.0,
        )
    ]
    return host


def host_ram_leak() -> SimHost:
    host = eight_gpu_server()
    host.leaked_host_bytes = 120 * GIB  # held where no /dev/shm file shows it; every GPU is clean
    return host


def nvidia_smi_missing() -> SimHost:
    host = eight_gpu_server()
    host.missing_commands = ["nvidia-smi"]
    return host


LIBRARY_UPGRADE = "595.10.02"  # what unattended-upgrades installed under the loaded 590.48.01


def _api_mismatch(client: str, module: str) -> list[str]:
    """The kernel's lines when a client of the new library opens the old module."""
    at = "[Mon Nov 30 14:09:03 2026] NVRM:"
    return [
        f"{at} API mismatch: the client has the version {client}, but",
        f"{at} this kernel module has the version {module}.  Please",
        f"{at} make sure that this kernel module and all NVIDIA driver",
        f"{at} components have the same version.",
    ]


def driver_upgraded_under_module() -> SimHost:
    """The incident's crash, a day after unattended-upgrades replaced the driver's libraries
    under the loaded module: nvidia-smi (and every relaunch) fails to initialize NVML, so no
    GPU's memory can be read; only loading the installed module (a reboot) ends it."""
    host = oom_crash()
    host.library_version = LIBRARY_UPGRADE
    host.kernel_messages += _api_mismatch(LIBRARY_UPGRADE, host.driver_version)
    return host


def driver_upgraded_under_healthy_server() -> SimHost:
    """The same upgrade under a server that still serves: it runs on the module it loaded,
    so a reboot would end a healthy server; nothing is touched."""
    host = healthy_server()
    host.library_version = LIBRARY_UPGRADE
    host.kernel_messages = _api_mismatch(LIBRARY_UPGRADE, host.driver_version)
    return host


def driver_not_loaded() -> SimHost:
    host = eight_gpu_server()
    host.driver_loaded = False
    host.services = []
    return host


def driver_not_built_for_kernel() -> SimHost:
    """A boot into an upgraded kernel DKMS built no NVIDIA module for: the driver is not
    loaded, and modprobe cannot load it (there is none for this kernel)."""
    host = driver_not_loaded()
    host.module_missing = True
    return host


def container_holds_gpu2() -> SimHost:
    """Our server in a Docker container on GPU 2: nvidia-smi lists no process for it, ps on
    the host does (its cgroup names the container), and its /health hangs."""
    host = eight_gpu_server()
    host.processes = [
        SimProcess(
            pid=8812,
            ppid=8790,
            cmdline="python3 -m sglang.launch_server --model-path /models/qwen3-32b --port 30000",
            gpu_mib={"2": 71_000},
            host_bytes=8 * GIB,
            teardown_s=5.0,
            hidden=True,
            user="1000",
            listens=30000,
            health="hung",
            cgroup="/system.slice/docker-7d3f0a9c41be2e5f86a1c0d2b3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2.scope",
        )
    ]
    return host


FLAT = (
    "/"  # every process in one cgroup: no pam_systemd, the cgroupfs driver, a shared PID namespace
)


def flat_cgroups_other_team() -> SimHost:
    """A node whose cgroups say nothing (sshd without pam_systemd: every login's processes
    share one cgroup): our TP4 server crashed on GPUs 0-3 (memory held, no process left);
    a training job nobody can attribute runs on GPU 5."""
    host = other_team_on_gpu5()
    for process in host.processes:
        process.cgroup = FLAT
    return host


def flat_cgroups_reset_refused() -> SimHost:
    """The same flat node, but GPU 3 will not come back from a reset: the next rungs (stop
    the GPU services, reload the driver) reach every GPU, the stranger's too."""
    host = flat_cgroups_other_team()
    host.gpu(3).resets_that_fail = 99
    return host


def _on_nvswitch(
    host: SimHost, name: str, architecture: str, total_mib: int, links: int, held_mib: int
) -> SimHost:
    """The same host on an 8-GPU NVSwitch baseboard: every GPU NVLinked to every other
    (topo -m: NV<links>), Fabric Manager running; GPUs and holders sized to the board."""
    host.nvswitch_links = links
    for gpu in host.gpus:
        gpu.name, gpu.architecture, gpu.memory_total_mib = name, architecture, total_mib
        if gpu.orphaned_mib:
            gpu.orphaned_mib = held_mib
    for process in host.processes:
        process.gpu_mib = {gpu: held_mib for gpu in process.gpu_mib}
    host.services.append(SimService("nvidia-fabricmanager", holds_gpus=False))
    return host


def volta_nvswitch_stranger_gpu5() -> SimHost:
    """The flat node of flat_cgroups_other_team on V100s on an NVSwitch fabric (as on an
    HGX-2 baseboard): before Ampere, a GPU is reset only together with every GPU NVLinked
    to it, so GPUs 0-3 cannot be reset without GPU 5, where the stranger's job runs."""
    host = _on_nvswitch(
        flat_cgroups_other_team(), "Tesla V100-SXM3-32GB", "Volta", 32768, 6, 30_000
    )
    host.driver_version, host.cuda_version = "535.161.08", "12.2"
    return host


def volta_nvswitch_all_ours() -> SimHost:
    """Our TP8 server crashed (OOM) on eight V100s on one NVSwitch fabric (as on an HGX-2
    baseboard): every GPU keeps its memory, no process is left, nobody else is on the
    node. Before Ampere a GPU is reset only in the same command as every GPU NVLinked to
    it, so a reset of GPU 0 alone is refused: the eight are reset together, once."""
    host = eight_gpu_server()
    for gpu in host.gpus:
        gpu.orphaned_mib = 91_000
    host.kernel_messages = [
        "[Mon Nov 30 14:02:11 2026] Out of memory: Killed process 4127 (sglang::schedul) "
        "total-vm:412000000kB, anon-rss:39845888kB",
    ]
    host = _on_nvswitch(host, "Tesla V100-SXM3-32GB", "Volta", 32768, 6, 30_000)
    host.driver_version, host.cuda_version = "535.161.08", "12.2"
    return host


def hopper_nvswitch_stranger_gpu5() -> SimHost:
    """The same flat node on H100 SXMs on an NVSwitch fabric: from Hopper on, each GPU is
    reset individually, so GPUs 0-3 are reset and GPU 5 is not touched."""
    return _on_nvswitch(
        flat_cgroups_other_team(), "NVIDIA H100 80GB HBM3", "Hopper", 81559, 18, 78_000
    )


def seed_launcher_alive() -> SimHost:
    """The seed's state: SGLang's launcher lives on (up 93 s) holding /dev/nvidia0, its port
    30000 never opened; its eight schedulers were OOM-killed, and GPUs 0 and 2 keep their
    memory (96,410 MiB each)."""
    host = oom_crash()
    host.processes = [
        SimProcess(
            pid=4101,
            cmdline=LAUNCH,
            gpu_mib={"0": 0},
            teardown_s=1.0,
            listens=None,
            born=START - 93.0,
        )
    ]
    return host


RAYLET = (
    "/usr/local/lib/python3.10/dist-packages/ray/core/src/ray/raylet/raylet "
    "--raylet_socket_name=/tmp/ray/session_latest/sockets/raylet --node_manager_port=0"
)


def ray_cluster_beside() -> SimHost:
    """Our TP4 server crashed on GPUs 0-3 (memory held); another team's Ray cluster trains
    on GPUs 4-7: four ``ray::`` actors under a raylet, on a node with flat cgroups."""
    host = eight_gpu_server()
    for index in range(4):
        host.gpu(index).orphaned_mib = 91_000
    host.processes = [
        SimProcess(pid=7500, cmdline=RAYLET, user="bob", cgroup=FLAT, born=-7200.0),
        *(
            SimProcess(
                pid=7510 + rank,
                ppid=7500,
                cmdline="ray::RayTrainWorker.train_func",
                gpu_mib={str(4 + rank): 70_000},
                host_bytes=8 * GIB,
                teardown_s=5.0,
                user="bob",
                cgroup=FLAT,
            )
            for rank in range(4)
        ),
    ]
    return host


def nohup_job_beside_orphans() -> SimHost:
    """A vLLM server's API process died, its four workers live on under PID 1 (GPUs 0-3);
    beside them a job someone started with nohup, its login long gone (parent PID 1 too),
    trains on GPU 6."""
    host = eight_gpu_server()
    host.processes = [
        SimProcess(
            pid=6120 + rank,
            cmdline=f"VLLM::Worker_TP{rank}",
            gpu_mib={str(rank): 88_000},
            host_bytes=20 * GIB,
            teardown_s=10.0,
            user="vllm",
        )
        for rank in range(4)
    ]
    host.processes.append(
        SimProcess(
            pid=7301,
            cmdline="python3 finetune.py --out /scratch/carol/run7",
            gpu_mib={"6": 60_000},
            host_bytes=10 * GIB,
            teardown_s=5.0,
            user="carol",
            cgroup="/user.slice/user-1003.slice/session-12.scope",
        )
    )
    return host


LMCACHE = "python3 -m lmcache.v1.server 0.0.0.0 65432"


def shared_kv_cache_server() -> SimHost:
    """Our TP4 SGLang server hangs on GPUs 0-3; a KV-cache server (LMCache) it shares with
    another team's healthy vLLM server (GPUs 4-7) holds GPU 7 and 64 GiB of host memory."""
    host = eight_gpu_server()
    host.processes = _server(ranks=(0, 1, 2, 3), teardown_s=10.0, health="hung")
    host.processes[0].cmdline = LAUNCH.replace("--tp-size 8", "--tp-size 4")
    host.processes += [
        SimProcess(
            pid=7601,
            cmdline=LMCACHE,
            gpu_mib={"7": 4_000},
            host_bytes=64 * GIB,
            user="lmcache",
            unit="lmcache.service",
        ),
        SimProcess(
            pid=7701,
            cmdline="vllm serve /models/llama-70b --tensor-parallel-size 4 --port 8001",
            gpu_mib={"4": 70_000, "5": 70_000, "6": 70_000, "7": 70_000},
            host_bytes=16 * GIB,
            user="dave",
            listens=8001,
            cgroup="/user.slice/user-1004.slice/session-21.scope",
        ),
    ]
    return host


# -- the matrix ----------------------------------------------------------------------------


# -- one sick GPU, an Xid on one GPU, MIG (issue 33) ------------------------------------------


def gpu6_unknown_error() -> SimHost:
    """Our server crashed and left its memory on GPUs 0 and 2; GPU 6 has stopped answering
    ("Unable to determine the device handle for GPU0000:78:00.0: Unknown Error") while the
    other seven answer, with no Xid in the log that names a rung for it."""
    host = oom_crash()
    host.gpu(6).lost = True
    return host


def xid_95_on_gpu5() -> SimHost:
    """An uncontained memory error (Xid 95) on GPU 5 killed the job on it: GPU 5 now answers
    "[GPU requires reset]" in its fields; the other seven are fine."""
    host = eight_gpu_server()
    host.gpu(5).fault = "reset-required"
    host.kernel_messages = [
        "[Mon Nov 30 14:05:12 2026] NVRM: Xid (PCI:0000:68:00): 95, pid=7702, name=python3, "
        "Uncontained: FBHUB. RST: Yes, D-RST: No",
    ]
    return host


MIG_INSTANCES = [
    {"gi": 1, "ci": 0, "profile": "3g.48gb", "profile_id": 9, "placement": "4:4"},
    {"gi": 2, "ci": 0, "profile": "3g.48gb", "profile_id": 9, "placement": "0:4"},
]


def mig_gpu1_in_use() -> SimHost:
    """Our server crashed on GPUs 0 and 2 (memory held, no process left); GPU 1 is in MIG
    mode, split into two 3g.48gb instances, and bob's notebook kernel runs in GPU instance 1.
    A reset of GPU 1 would need it idle and would destroy both instances."""
    host = oom_crash()
    gpu = host.gpu(1)
    gpu.mig_enabled = True
    gpu.mig = [dict(instance) for instance in MIG_INSTANCES]
    host.processes = [
        SimProcess(
            pid=7301,
            cmdline="python3 -m ipykernel_launcher -f /run/user/1002/jupyter/kernel-7301.json",
            gpu_mib={"1": 30_200},
            host_bytes=6 * GIB,
            teardown_s=5.0,
            user="bob",
            mig_gi=1,
            mig_ci=0,
        )
    ]
    return host


def flat_cgroups_told_by_environment() -> SimHost:
    """A flat node (every cgroup '/'), our TP4 server crashed on GPUs 0-3 (memory held, no
    process left); five other owners' jobs hold GPUs 4-7, their cgroups saying nothing:
    a Slurm job step (SLURM_JOB_ID in its environment), a pod's container sharing the
    host's PID namespace (its /etc/hostname from the kubelet's pod folder,
    KUBERNETES_SERVICE_HOST), a job bob runs from his SSH login beside a Ray worker whose
    raylet runs in a container (RAY_RAYLET_PID in its environment), and one carol started
    with nohup and logged out (its loginuid still hers)."""
    host = eight_gpu_server()
    for index in range(4):
        host.gpu(index).orphaned_mib = 91_000
    pod = "5f1c2a3b-9d8e-4f70-a1b2-c3d4e5f60718"
    job = dict(host_bytes=8 * GIB, teardown_s=5.0, cgroup=FLAT, born=-7200.0)
    host.processes = [
        SimProcess(
            pid=7001,
            ppid=6990,
            cmdline="python3 train.py --config ablation-12.yaml",
            gpu_mib={"4": 80_000},
            user="alice",
            environ={"SLURM_JOB_ID": "81422", "CUDA_VISIBLE_DEVICES": "4"},
            **job,  # type: ignore[arg-type]
        ),
        SimProcess(
            pid=7002,
            cmdline="python3 -m embeddings.serve --port 9000",
            gpu_mib={"5": 40_000},
            environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": "embed-7c9d-x2k"},
            mountinfo=(
                f"1203 1187 259:2 /var/lib/kubelet/pods/{pod}/etc-hosts /etc/hosts rw,"
                "relatime - ext4 /dev/nvme0n1p2 rw\n"
            ),
            **job,  # type: ignore[arg-type]
        ),
        SimProcess(pid=6980, cmdline="sshd: bob@pts/3", user="root", cgroup=FLAT),
        SimProcess(pid=6981, ppid=6980, cmdline="-bash", user="bob", cgroup=FLAT),
        SimProcess(
            pid=7003,
            ppid=6981,
            cmdline="python3 eval.py --ckpt /scratch/bob/step-9000",
            gpu_mib={"6": 30_000},
            user="bob",
            **job,  # type: ignore[arg-type]
        ),
        SimProcess(
            pid=7005,
            cmdline="python3 -u rollout_worker.py",
            gpu_mib={"6": 20_000},
            user="dave",
            environ={"RAY_RAYLET_PID": "6411", "RAY_NODE_ID": "a1b2c3d4e5f6"},
            **job,  # type: ignore[arg-type]
        ),
        SimProcess(
            pid=7004,
            cmdline="python3 finetune.py --lr 2e-5",
            gpu_mib={"7": 60_000},
            user="carol",
            loginuid=1007,
            **job,  # type: ignore[arg-type]
        ),
    ]
    return host


MPS_CONTROL = "nvidia-cuda-mps-control -d"
MPS_SERVER = "nvidia-cuda-mps-server"


def mps_client_hung() -> SimHost:
    """GPUs shared through NVIDIA MPS: the control daemon and its server (which holds every
    GPU) are infrastructure. Two SGLang servers of ours are its clients: the one on GPUs 0-3
    (port 30000) hangs, the one on GPUs 4-7 (port 30001) serves."""
    host = eight_gpu_server()
    daemon = SimProcess(pid=7800, cmdline=MPS_CONTROL, born=-86_400.0)
    server = SimProcess(
        pid=7801,
        ppid=7800,
        cmdline=MPS_SERVER,
        gpu_mib={str(i): 0 for i in range(8)},
        born=-86_000.0,
    )
    processes = [daemon, server]
    for launcher, port, health, gpus in (
        (4101, 30000, "hung", range(4)),
        (4201, 30001, "ok", range(4, 8)),
    ):
        command = LAUNCH.replace("--tp-size 8", "--tp-size 4") + f" --port {port}"
        processes.append(
            SimProcess(pid=launcher, cmdline=command, teardown_s=1.0, listens=port, health=health)
        )
        for rank, gpu in enumerate(gpus):
            processes.append(
                SimProcess(
                    pid=launcher + 19 + rank,
                    ppid=launcher,
                    cmdline=f"sglang::scheduler_TP{rank}",
                    gpu_mib={str(gpu): 90_112},
                    host_bytes=38 * GIB,
                    teardown_s=10.0,
                    mps_server=7801,
                )
            )
    host.processes = processes
    return host


def port_from_config() -> SimHost:
    """Two vLLM servers of ours started from config files, so no --port on either command
    line: the one on GPUs 0-3 listens on 8100 and hangs; the one on GPUs 4-7 listens on
    8000 (vLLM's default) and serves. Asked on the default port alone, both look healthy."""
    host = eight_gpu_server()
    processes: list[SimProcess] = []
    for launcher, model, port, health, gpus in (
        (5101, "llama-3.1-70b", 8100, "hung", range(4)),
        (5201, "qwen3-32b", 8000, "ok", range(4, 8)),
    ):
        processes.append(
            SimProcess(
                pid=launcher,
                cmdline=f"/usr/bin/python3 /usr/local/bin/vllm serve --config /etc/vllm/{model}.yaml",
                teardown_s=1.0,
                listens=port,
                health=health,
            )
        )
        for rank, gpu in enumerate(gpus):
            processes.append(
                SimProcess(
                    pid=launcher + 19 + rank,
                    ppid=launcher,
                    cmdline=f"VLLM::Worker_TP{rank}",
                    gpu_mib={str(gpu): 88_000},
                    host_bytes=20 * GIB,
                    teardown_s=8.0,
                )
            )
    host.processes = processes
    return host


def driver_asks_reboot() -> SimHost:
    """The seed's crash (memory held on GPUs 0 and 2, no process left), but GPU 2's driver
    says only a node reboot recovers it (nvidia-smi -q, GPU Recovery Action: Reboot): the
    reset the orphaned memory alone would call for will not do."""
    host = oom_crash()
    host.gpu(2).recovery_action = "Reboot"
    return host


def row_remap_failed() -> SimHost:
    """The seed's crash on GPUs 0 and 2; GPU 2's row remapping failed (Remapped Rows:
    Remapping Failure Occurred: Yes): its memory cannot be trusted, whatever a reset frees."""
    host = oom_crash()
    host.gpu(2).rows_remap_failed = True
    return host


def user_unit_named_like_production() -> SimHost:
    """Production's sglang.service (a system unit) serves on GPUs 0-3; bob started his own
    `systemd-run --user --unit=sglang ... --port 31337` on GPU 5, which answers 503: a unit
    of his service manager, named like production's, in his own cgroup."""
    host = _supervised(
        eight_gpu_server(),
        SimService("sglang", holds_gpus=False, runs=_unit_spec(range(0, 4), "ok", 30000)),
        loading=False,
    )
    host.processes.insert(  # listed first, as ps lists the lower PID
        0,
        SimProcess(
            pid=3001,
            cmdline=LAUNCH.replace("--tp-size 8", "--tp-size 1") + " --port 31337",
            gpu_mib={"5": 60_000},
            teardown_s=2.0,
            user="bob",
            cgroup="/user.slice/user-1666.slice/user@1666.service/app.slice/sglang.service",
            listens=31337,
            health="error",
        ),
    )
    return host


def gpu_service_impostor() -> SimHost:
    """The incident's GPUs 0 and 2, and mallory's own program named nvidia-persistenced
    (run from her home folder, in her login) holding GPU 5."""
    host = oom_crash()
    host.processes.append(
        SimProcess(
            pid=7101,
            cmdline="nvidia-persistenced --verbose",
            gpu_mib={"5": 40_000},
            teardown_s=2.0,
            user="mallory",
            exe="/home/mallory/bin/nvidia-persistenced",
        )
    )
    return host


def seed_launcher_doomed() -> SimHost:
    """The seed as the issue found it: SGLang's launcher alive for 50 s with its port
    closed, its launch line the seed's (--tp-size 8 --hicache-size 300 on a 449 GiB host),
    its eight schedulers orphaned (parent PID 1) from an earlier incarnation, and GPUs 0
    and 2 keeping their memory once those are gone."""
    host = oom_crash()
    host.gpu(0).orphaned_mib = host.gpu(2).orphaned_mib = 0
    host.processes = [
        SimProcess(pid=4101, cmdline=LAUNCH, gpu_mib={"0": 0}, teardown_s=1.0, born=START - 50.0),
        *_server(orphaned=(0, 2), launcher=False),
    ]
    return host


def mps_daemon_unreachable() -> SimHost:
    """The MPS host of mps_client_hung, but its control daemon runs in another PID
    namespace (a container's): pgrep cannot find it, so terminate_client cannot be asked,
    while nvidia-smi still lists the hung server's schedulers as MPS clients (Type M+C)."""
    host = mps_client_hung()
    host.processes = [p for p in host.processes if p.pid != 7800]  # not in this namespace
    return host


def livelocked_behind_health() -> SimHost:
    """The SGLang server, launched with --enable-metrics, holds every GPU and its /health
    answers 200, while its engine is livelocked: 12 requests wait, none runs, and its token
    counter stands still (sglang/sglang#4191: /health 200, generation hung)."""
    host = eight_gpu_server()
    host.processes = _server(teardown_s=15.0)
    host.processes[0].cmdline = LAUNCH + " --enable-metrics"
    host.processes[0].livelocked = 12
    return host


def defunct_holder() -> SimHost:
    """SGLang started by hand from alice's shell crashed: its launcher is defunct with its
    threads still alive (ps: Zl) and holds GPUs 0-3 until its parent, her login shell,
    reaps it; the shell is hers, not the server's."""
    host = eight_gpu_server()
    host.processes = [
        SimProcess(pid=6980, cmdline="sshd: alice@pts/2", born=-7200.0),
        SimProcess(pid=6981, ppid=6980, cmdline="-bash", user="alice", born=-7200.0),
        SimProcess(
            pid=4101,
            ppid=6981,
            cmdline=LAUNCH.replace("--tp-size 8", "--tp-size 4"),
            gpu_mib={str(gpu): 88_000 for gpu in range(4)},
            user="alice",
            defunct=True,
        ),
    ]
    return host
