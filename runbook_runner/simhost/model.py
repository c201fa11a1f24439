"""The state of a simulated GPU server, and the rules by which it changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


@dataclass
class SimGpu:
    index: int
    name: str = BLACKWELL
    memory_total_mib: int = 97887
    idle_mib: int = 3  # what the GPU reports with nothing on it
    orphaned_mib: int = 0  # held with no process left: only a reset (or reboot) frees it
    resets_that_fail: int = 0  # resets refused before one works, whatever the holders
    temperature_c: int = 34
    persistence: bool = True
    minor: int | None = None  # N of /dev/nvidiaN; None: the index (not always so on real hosts)
    draining_mib_per_read: int = 0  # orphaned memory that falls by this much each time it is read

    @property
    def minor_number(self) -> int:
        return self.index if self.minor is None else self.minor

    @property
    def uuid(self) -> str:
        return f"GPU-5a1e0000-0000-4000-8000-{self.index:012d}"

    @property
    def bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


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
    exits_at: float | None = None  # simulated time at which it is gone


@dataclass
class SimService:
    name: str
    active: bool = True
    enabled: bool = True
    holds_gpus: bool = True  # nvidia-persistenced, DCGM, exporters keep /dev/nvidia* open


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
    driver_version: str = "590.48.01"
    cuda_version: str = "13.1"
    kernel_messages: list[str] = field(default_factory=list)
    filesystems: list[SimFilesystem] = field(default_factory=_filesystems)
    files: dict[str, str] = field(default_factory=dict)  # what cat prints for these paths
    # The host's default locale (/etc/default/locale), e.g. "de_DE.UTF-8": commands that
    # are translated (free) speak it unless LC_ALL overrides it. "" is English, always.
    locale: str = ""
    missing_commands: list[str] = field(default_factory=list)  # answer 127, as if not installed

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

    def used_mib(self, gpu: SimGpu) -> int:
        held = sum(p.gpu_mib.get(str(gpu.index), 0) for p in self.processes)
        return gpu.idle_mib + gpu.orphaned_mib + held

    def holders(self, gpu: SimGpu) -> list[str]:
        """What keeps a GPU in use: its processes, and running services that open every GPU."""
        names = [f"process {p.pid}" for p in self.processes if str(gpu.index) in p.gpu_mib]
        names += [s.name for s in self.services if s.active and s.holds_gpus]
        return names

    def reset(self, gpu: SimGpu) -> str | None:
        """Reset one GPU; returns why it was refused, or None when it worked."""
        holders = self.holders(gpu)
        if holders:
            return "In use by another client"
        if gpu.resets_that_fail > 0:
            gpu.resets_that_fail -= 1
            return "Unknown Error"
        gpu.orphaned_mib = 0
        return None

    def host_used_bytes(self) -> int:
        pinned = sum(p.host_bytes for p in self.processes)
        return self.memory_base_used_bytes + pinned + self.leaked_host_bytes

    def host_available_bytes(self) -> int:
        return max(0, self.memory_total_bytes - self.host_used_bytes())

    def reboot(self) -> None:
        """What a reboot does to the GPUs and memory; the caller ends the processes."""
        self.processes.clear()
        self.leaked_host_bytes = 0
        for gpu in self.gpus:
            gpu.orphaned_mib = 0
            gpu.resets_that_fail = 0
        for service in self.services:
            service.active = service.enabled
        self.driver_loaded = True
        self.module_held_by = ""
        self.boots += 1

    def filesystem_of(self, path: str) -> SimFilesystem | None:
        """The filesystem a path is on: the longest mount point that contains it."""
        path = "/" + path.strip("/")
        mounts = [
            f
            for f in self.filesystems
            if path == f.mounted_on or path.startswith(f.mounted_on.rstrip("/") + "/")
        ]
        return max(mounts, key=lambda f: len(f.mounted_on), default=None)

    def service(self, name: str) -> SimService | None:
        for service in self.services:
            if service.name == name or service.name == name.removesuffix(".service"):
                return service
        return None

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
