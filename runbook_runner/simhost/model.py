"""The state of a simulated GPU server, and the rules by which it changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
SHM_DIR = "/dev/shm"  # noqa: S108 -- a simulated folder: no file is ever made there
# The cgroup memory files and container markers the preflights read (observe/memlimit.py):
# cat answers them from the state file's files, else as absent, never from the real machine.
CONTAINER_FILES = (
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory.current",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/memory/memory.usage_in_bytes",
    "/.dockerenv",
    "/run/.containerenv",
)
EPOCH = 1_796_000_000  # simulated time 0 as a Unix time (the drill's clock starts at 1000)
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


@dataclass
class SimGpu:
    index: int
    name: str = BLACKWELL
    architecture: str = "Blackwell"  # nvidia-smi -q 'Product Architecture'
    memory_total_mib: int = 97887
    idle_mib: int = 3  # what the GPU reports with nothing on it
    orphaned_mib: int = 0  # held with no process left: only a reset (or reboot) frees it
    resets_that_fail: int = 0  # resets refused before one works, whatever the holders
    temperature_c: int = 34
    persistence: bool = True
    minor: int | None = None  # N of /dev/nvidiaN; None: the index (not always so on real hosts)
    draining_mib_per_read: int = 0  # orphaned memory that falls by this much each time it is read
    lost: bool = (
        False  # fallen off the bus (Xid 79): nvidia-smi cannot reach it; only a reboot helps
    )
    persistence_blocks_reset: bool = (
        False  # a reset is refused while this GPU is in persistence mode
    )
    persistence_locked: bool = False  # `nvidia-smi -i N -pm 0` is refused (the daemon holds it)
    pcie_width: int = 16  # the link trained at this width (x16 at most)
    clocks_reasons: int = 0x1  # clocks_event_reasons.active: 0x1 is GPU idle
    ecc_uncorrected: int = 0  # volatile uncorrected ECC errors since the driver loaded
    rows_pending: bool = False  # a row remapping waits for the next reset
    rows_remap_failed: bool = False  # a row remapping failed: out of service (RMA)
    # What the driver says this GPU needs (nvidia-smi -q, GPU Recovery Action, as printed:
    # None, Reset, Reboot, Drain P2P, Drain and Reset); a reset clears Reset, a reboot all.
    recovery_action: str = "None"
    # What this GPU answers in its fields instead of values, while the others answer:
    # 'unknown-error' ([Unknown Error]) or 'reset-required' ([GPU requires reset]). A reset
    # (or a reboot) clears it. ('' : it answers.)
    fault: str = ""
    # MIG mode: its GPU and compute instances, each {gi, ci, profile, profile_id, placement}
    # (e.g. {gi: 1, ci: 0, profile: 3g.48gb, profile_id: 9, placement: "4:4"}); a process
    # runs in one (SimProcess.mig_gi / mig_ci). A reset destroys them all.
    mig_enabled: bool = False
    mig: list[dict[str, Any]] = field(default_factory=list)

    @property
    def minor_number(self) -> int:
        return self.index if self.minor is None else self.minor

    @property
    def uuid(self) -> str:
        return f"GPU-5a1e0000-0000-4000-8000-{self.index:012d}"

    @property
    def bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"

    @property
    def serial(self) -> str:
        """Its board serial: 13 digits, as a data-centre GPU's (q-535.161.08-8x-h100.txt)."""
        return f"{1_650_124_000_000 + self.index}"


@dataclass
class SimProcess:
    pid: int
    cmdline: str
    gpu_mib: dict[str, int] = field(default_factory=dict)  # GPU index (as text) -> MiB
    host_bytes: int = 0  # pinned host memory
    orphan_gpu_memory: bool = False  # on exit, its GPU memory stays held (the incident)
    # For simulated processes (the drill); the tests' real processes ignore these.
    teardown_s: float = 0.0  # after a fatal signal, seconds in D state before it is gone
    ignores_term: bool = False
    stuck: bool = False  # in D state for good: no signal ends it
    # Defunct with threads still alive (ps: Zl): no signal reaches it, and it keeps its GPU
    # memory until its parent reaps it (the parent's exit hands it to init, which does).
    defunct: bool = False
    exits_at: float | None = None  # simulated time at which it is gone
    user: str = "root"
    hidden: bool = False  # in another PID namespace (a container): not in ps or nvidia-smi's list
    starts_at: float = 0.0  # loading: holds no GPU or pinned memory before this simulated time
    unit: str = ""  # the systemd unit that started it
    ppid: int = 1  # its parent (1: started by systemd, or reparented after its parent died)
    cgroup: str = ""  # /proc/PID/cgroup's path; "" derives it from the unit or the user
    listens: int | None = None  # the TCP port its HTTP server listens on (its health endpoint)
    health: str = "ok"  # what that endpoint does: ok (200), error (503), hung (no answer)
    # Its engine livelocked behind that endpoint: this many requests wait, none runs, and its
    # token counter stands still (/metrics); 0: it serves, its counter advancing.
    livelocked: int = 0
    born: float = -3600.0  # simulated time it was started (ps etimes)
    start_ticks: int = 0  # a real stand-in server's start time (/proc/PID/stat), 0: none
    pgid: int = 0  # its process group (0: its own, as a process that called setsid)
    sid: int = 0  # its session (0: its own)
    environ: dict[str, str] = field(default_factory=dict)  # /proc/PID/environ
    mig_gi: int | None = None  # the MIG GPU and compute instance it runs in (MIG mode only)
    mig_ci: int | None = None
    loginuid: int | None = None  # /proc/PID/loginuid; None: unset (4294967295), as for a daemon
    mountinfo: str = ""  # /proc/PID/mountinfo (a container's binds its /etc/hostname)
    exe: str = ""  # /proc/PID/exe; "": its command's first word if a path, else python3's
    mps_server: int | None = None  # the MPS server (its PID) this process is a client of

    def cgroup_path(self) -> str:
        if self.cgroup:
            return self.cgroup
        if self.unit:
            return f"/system.slice/{self.unit.removesuffix('.service')}.service"
        return f"/user.slice/user-{uid_of(self.user)}.slice/session-4.scope"


def uid_of(user: str) -> int:
    """A user's uid on the simulated host (root 0; others stable, from the name)."""
    if user == "root":
        return 0
    if user.isdigit():
        return int(user)
    return 1000 + sum(map(ord, user)) % 1000


DAEMON_PID = 9001  # the first GPU service's main PID (fuser and ps agree on it)
DAEMON_COMMANDS = {
    "nvidia-persistenced": (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
        "nvidia-persistenced",
    ),
    "nvidia-dcgm": ("/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", "nvidia-dcgm"),
    "dcgm": ("/usr/bin/nv-hostengine -n", "root"),
    "dcgm-exporter": ("/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv", "root"),
    "nvidia-fabricmanager": (
        "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
        "root",
    ),
}


@dataclass
class SimShm:
    """A file in /dev/shm: host RAM that stays used until the file is removed."""

    name: str
    size_bytes: int
    owner: str = "root"
    mtime: float = 0.0  # simulated time of its last change
    holder: int | None = None  # the PID that has it open or mapped, if any

    @property
    def path(self) -> str:
        return f"{SHM_DIR}/{self.name}"


@dataclass
class SimService:
    name: str
    active: bool = True
    enabled: bool = True
    holds_gpus: bool = True  # nvidia-persistenced, DCGM, exporters keep /dev/nvidia* open
    restart: str = "no"  # Restart=: 'always' brings its processes back after they exit
    runs: list[dict[str, Any]] = field(default_factory=list)  # SimProcess fields it starts
    restart_s: float = 5.0  # RestartSec=
    startup_s: float = 120.0  # what it takes a started server to load before it holds memory
    died_at: float | None = None
    restarts: int = 0  # NRestarts: automatic restarts since it was last started by hand
    log: list[str] = field(default_factory=list)  # what journalctl -u shows for it
    # A server that needs this much free /dev/shm at start crashes (SIGBUS) without it,
    # crash_after_s after it starts: a crash loop under Restart=always.
    shm_needed_bytes: int = 0
    crash_after_s: float = 20.0
    main_pid: int = 0  # MainPID= as given by a state file (0: the simulator's own answer)


@dataclass
class SimFilesystem:
    """A mounted filesystem, as df reports it."""

    mounted_on: str
    size_bytes: int
    used_bytes: int = 0
    filesystem: str = "/dev/nvme0n1p2"
    fstype: str = "ext4"

    @property
    def available_bytes(self) -> int:
        return max(0, self.size_bytes - self.used_bytes)


def _filesystems() -> list[SimFilesystem]:
    return [
        SimFilesystem("/", 1_920_383_410_176, 412 * GIB),
        SimFilesystem("/dev/shm", 224 * GIB + 512 * 1024**2, 0, "tmpfs", "tmpfs"),  # noqa: S108
    ]


@dataclass
class SimHost:
    gpus: list[SimGpu]
    processes: list[SimProcess] = field(default_factory=list)
    services: list[SimService] = field(default_factory=list)
    memory_total_bytes: int = 449 * GIB
    memory_base_used_bytes: int = 9 * GIB
    buff_cache_bytes: int = 2 * GIB
    shared_bytes: int = 64 * 1024**2
    leaked_host_bytes: int = 0  # pinned memory of dead processes, still being torn down
    driver_loaded: bool = True
    module_held_by: str = ""  # e.g. "Xorg": nvidia_drm stays in use, so the driver cannot unload
    boots: int = 1  # how many times the host has booted (a reboot adds one)
    driver_version: str = "590.48.01"  # the loaded kernel module's
    # The installed user-space driver (libnvidia-ml.so), when an upgrade replaced it under
    # the loaded module ("" is the module's own): NVML refuses to start until they match.
    library_version: str = ""
    # The running kernel has no NVIDIA module: a kernel upgrade DKMS did not build it for.
    module_missing: bool = False
    kernel_release: str = "6.8.0-49-generic"
    cuda_version: str = "13.1"
    kernel_messages: list[str] = field(default_factory=list)
    filesystems: list[SimFilesystem] = field(default_factory=_filesystems)
    files: dict[str, str] = field(default_factory=dict)  # what cat prints for these paths
    # The host's default locale (/etc/default/locale), e.g. "de_DE.UTF-8": commands that
    # are translated (free) speak it unless LC_ALL overrides it. "" is English, always.
    locale: str = ""
    missing_commands: list[str] = field(default_factory=list)  # answer 127, as if not installed
    shm: list[SimShm] = field(default_factory=list)
    now: float = 0.0  # the simulated time of the command being answered (set by the drill)
    actions: list[tuple[float, str]] = field(default_factory=list)  # what changed the host, when
    happened: list[tuple[float, str]] = field(default_factory=list)  # what the host did by itself
    timeline: list[tuple[float, str, bool]] = field(default_factory=list)  # both, in order
    next_pid: int = 20_000
    boot_messages: list[str] = field(default_factory=list)  # the kernel log after a reboot
    # Every GPU on one NVSwitch fabric with this many NVLinks to each other GPU (topo -m
    # prints NV#); 0: no NVLink (PCIe only).
    nvswitch_links: int = 0

    # -- what the drill judges ---------------------------------------------------------

    def act(self, action: str) -> None:
        """Record an action that changes (or tries to change) the host."""
        self.actions.append((self.now, action))
        self.timeline.append((self.now, action, False))

    def note(self, event: str) -> None:
        """Record what the host did by itself (a refusal, a restart by its supervisor)."""
        self.happened.append((self.now, event))
        self.timeline.append((self.now, event, True))

    # -- rules -------------------------------------------------------------------

    def forget_dead(self, alive: Callable[[int], bool]) -> None:
        """Processes that exited release their memory, except GPU memory marked orphaned."""
        for process in [p for p in self.processes if not alive(p.pid)]:
            if process.orphan_gpu_memory:
                for index, mib in process.gpu_mib.items():
                    self.gpu(int(index)).orphaned_mib += mib
            self.processes.remove(process)

    def gpu(self, index: int) -> SimGpu:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(index)

    def share(self, process: SimProcess) -> float:
        """How much of its memory a process still holds: none while loading, falling while
        it tears down (exits_at set), all of it otherwise."""
        if self.now < process.starts_at:
            return 0.0
        if process.exits_at is None or process.stuck or process.teardown_s <= 0:
            return 1.0
        left = (process.exits_at - self.now) / process.teardown_s
        return min(1.0, max(0.0, left))

    def used_mib(self, gpu: SimGpu) -> int:
        held = sum(
            int(p.gpu_mib.get(str(gpu.index), 0) * self.share(p))
            for p in self.processes
            if not (p.orphan_gpu_memory and p.exits_at is not None)
        )
        orphaned = sum(
            p.gpu_mib.get(str(gpu.index), 0)
            for p in self.processes
            if p.orphan_gpu_memory and p.exits_at is not None
        )
        return gpu.idle_mib + gpu.orphaned_mib + held + orphaned

    def holders(self, gpu: SimGpu) -> list[str]:
        """What keeps a GPU in use: its processes, and running services that open every GPU."""
        names = [f"process {p.pid}" for p in self.processes if str(gpu.index) in p.gpu_mib]
        if gpu.persistence and gpu.persistence_blocks_reset:
            names += [s.name for s in self.services if s.active and s.holds_gpus]
        return names

    def reset_group(self, gpu: SimGpu) -> list[int]:
        """The GPUs a reset of this one must name in the same command (nvidia-smi(1), -r):
        on the NVSwitch fabric, every GPU, when it is older than Ampere, or Ampere while
        Fabric Manager does not run; else itself alone."""
        if not self.nvswitch_links:
            return [gpu.index]
        manager = any(s.name == "nvidia-fabricmanager" and s.active for s in self.services)
        older = gpu.architecture in ("Kepler", "Maxwell", "Pascal", "Volta", "Turing")
        if older or (gpu.architecture == "Ampere" and not manager):
            return [g.index for g in self.gpus]
        return [gpu.index]

    def reset_together(self, gpus: list[SimGpu]) -> tuple[SimGpu, str] | None:
        """Reset the GPUs of one group in one command: all of them or none (every one
        must be free first); recorded as one action. Returns the GPU that refused, and
        why; None when it worked."""
        named = ",".join(str(g.index) for g in gpus)
        self.act(f"reset GPUs {named} together")
        for gpu in gpus:
            refusal = (
                "GPU is lost"
                if gpu.lost
                else "In use by another client"
                if self.holders(gpu)
                else None
            )
            if refusal is not None:
                self.note(f"the reset of GPUs {named} was refused: GPU {gpu.index}: {refusal}")
                return gpu, refusal
        for gpu in gpus:
            gpu.orphaned_mib = 0
            gpu.fault = ""
            gpu.mig = []
        return None

    def reset(self, gpu: SimGpu) -> str | None:
        """Reset one GPU; returns why it was refused, or None when it worked."""
        holders = self.holders(gpu)
        self.act(f"reset GPU {gpu.index}")
        refusal = "GPU is lost" if gpu.lost else "In use by another client" if holders else None
        if refusal is not None:
            self.note(f"the reset of GPU {gpu.index} was refused: {refusal}")
            return refusal
        if gpu.resets_that_fail > 0:
            gpu.resets_that_fail -= 1
            return "Unknown Error"
        gpu.orphaned_mib = 0
        gpu.fault = ""
        if gpu.recovery_action == "Reset":
            gpu.recovery_action = "None"
        if gpu.mig:  # the GPU and compute instances do not survive a reset
            self.note(f"the reset of GPU {gpu.index} destroyed its {len(gpu.mig)} MIG instances")
            gpu.mig = []
        return None

    def host_used_bytes(self) -> int:
        pinned = sum(int(p.host_bytes * self.share(p)) for p in self.processes)
        shm = sum(segment.size_bytes for segment in self.shm)
        return self.memory_base_used_bytes + pinned + self.leaked_host_bytes + shm

    def shm_free_bytes(self) -> int:
        """What is left on the /dev/shm tmpfs."""
        shm = self.filesystem_of(SHM_DIR)
        size = shm.size_bytes if shm is not None else self.memory_total_bytes // 2
        return max(0, size - sum(segment.size_bytes for segment in self.shm))

    def host_available_bytes(self) -> int:
        return max(0, self.memory_total_bytes - self.host_used_bytes())

    def reboot(self) -> None:
        """What a reboot does to the GPUs and memory; the caller ends the processes."""
        self.act("reboot")
        self.processes.clear()
        self.leaked_host_bytes = 0
        self.shm.clear()  # /dev/shm is a tmpfs
        self.kernel_messages = list(self.boot_messages)
        for gpu in self.gpus:
            gpu.orphaned_mib = 0
            gpu.resets_that_fail = 0
            gpu.lost = False
            gpu.fault = ""
            gpu.mig = []  # MIG mode persists across a reboot; its instances do not
            gpu.persistence = True
            gpu.recovery_action = "None"
        for service in self.services:
            service.active = service.enabled
            if service.active:
                self.start_service(service, loading=True)
        self.load_driver()
        self.module_held_by = ""
        self.boots += 1

    @property
    def library_mismatch(self) -> bool:
        """The loaded module is not the installed library's version (nvidia-smi exits 18)."""
        return self.driver_loaded and self.library_version not in ("", self.driver_version)

    def load_driver(self) -> None:
        """modprobe (or a boot) loads the module that is installed: the library's version."""
        self.driver_loaded = True
        if self.library_version:
            self.driver_version = self.library_version

    def filesystem_of(self, path: str) -> SimFilesystem | None:
        """The filesystem a path is on: the longest mount point that contains it."""
        path = "/" + path.strip("/")
        mounts = [
            f
            for f in self.filesystems
            if path == f.mounted_on or path.startswith(f.mounted_on.rstrip("/") + "/")
        ]
        return max(mounts, key=lambda f: len(f.mounted_on), default=None)

    def daemons(self) -> list[tuple[int, str, str, str]]:
        """The running GPU services' main processes: (pid, command line, user, cgroup)."""
        found = []
        for number, service in enumerate(self.services):
            if service.active and service.holds_gpus:
                command, user = DAEMON_COMMANDS.get(
                    service.name, (f"/usr/bin/{service.name}", "root")
                )
                cgroup = f"/system.slice/{service.name}.service"
                found.append((DAEMON_PID + number, command, user, cgroup))
        return found

    def service(self, name: str) -> SimService | None:
        for service in self.services:
            if service.name == name or service.name == name.removesuffix(".service"):
                return service
        return None

    def start_service(self, service: SimService, loading: bool = True) -> None:
        """Start a unit's processes (a server loads for ``startup_s`` before it holds memory)."""
        service.active = True
        service.died_at = None
        main_pid: int | None = None
        for spec in service.runs:
            self.next_pid += 1
            fields = dict(spec, pid=self.next_pid, unit=service.name)
            fields.setdefault("born", self.now)
            if main_pid is not None:
                fields.setdefault("ppid", main_pid)  # the unit's main process started it
            main_pid = main_pid or self.next_pid
            if loading:
                fields["starts_at"] = self.now + service.startup_s
            process = SimProcess(**fields)
            if service.shm_needed_bytes and self.shm_free_bytes() < service.shm_needed_bytes:
                process.exits_at = self.now + service.crash_after_s
                process.teardown_s = 0.0
                service.log.append(
                    f"{process.cmdline.split()[0]}[{process.pid}]: Bus error (core dumped): "
                    f"writing its host cache to {SHM_DIR}: No space left on device"
                )
            self.processes.append(process)

    def tick(self, alive: Callable[[int], bool]) -> None:
        """What happens by itself as time passes: a unit with Restart= brings its server back."""
        for service in self.services:
            if not service.runs or not service.active:
                continue
            running = [p for p in self.processes if p.unit == service.name and alive(p.pid)]
            if running:
                continue
            if service.died_at is None:
                service.died_at = self.now
            if service.restart == "always" and self.now >= service.died_at + service.restart_s:
                self.note(f"{service.name} restarted the server (Restart=always)")
                service.restarts += 1
                self.start_service(service)

    # -- persistence ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SimHost:
        data = dict(data)
        data["gpus"] = [SimGpu(**g) for g in data["gpus"]]
        data["processes"] = [SimProcess(**p) for p in data.get("processes", [])]
        data["services"] = [SimService(**s) for s in data.get("services", [])]
        if "filesystems" in data:
            data["filesystems"] = [SimFilesystem(**f) for f in data["filesystems"]]
        data["shm"] = [SimShm(**s) for s in data.get("shm", [])]
        data["actions"] = [tuple(a) for a in data.get("actions", [])]
        data["happened"] = [tuple(a) for a in data.get("happened", [])]
        data["timeline"] = [tuple(a) for a in data.get("timeline", [])]
        return cls(**data)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> SimHost:
        return cls.from_json(json.loads(path.read_text()))


def eight_gpu_server(**overrides: Any) -> SimHost:
    """The incident's server: 8 x RTX PRO 6000 Blackwell (97,887 MiB), 449 GiB of RAM."""
    host = SimHost(
        gpus=[SimGpu(index=i) for i in range(8)],
        services=[SimService("nvidia-persistenced")],
    )
    for key, value in overrides.items():
        setattr(host, key, value)
    return host
