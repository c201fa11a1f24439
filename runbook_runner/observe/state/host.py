"""Host memory and storage state: ``free``, ``/proc/meminfo``, ``df`` and /dev/shm's files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from runbook_runner.observe.state.fields import OpenRecord, extra_values, reported


@dataclass(frozen=True)
class Memory:
    """Host memory as ``free`` reports it, always in bytes."""

    total_bytes: int | None = reported("total", "bytes")
    used_bytes: int | None = reported("used", "bytes")
    free_bytes: int | None = reported("free", "bytes")
    shared_bytes: int | None = reported("shared", "bytes")
    buff_cache_bytes: int | None = reported("buff/cache", "bytes")
    available_bytes: int | None = reported("available", "bytes")
    swap_total_bytes: int | None = reported("swap total", "bytes")
    swap_used_bytes: int | None = reported("swap used", "bytes")
    swap_free_bytes: int | None = reported("swap free", "bytes")

    def describe(self) -> str:
        return "host memory"


@dataclass(frozen=True)
class MemInfo(OpenRecord):
    """``/proc/meminfo`` (or any ``Key: value [unit]`` file): sizes in bytes.

    Every key becomes a field by one rule: CamelCase to snake_case, ``_bytes`` added when
    the value carries a size unit (``MemAvailable: 123 kB`` -> ``mem_available_bytes``,
    ``HugePages_Free: 0`` -> ``huge_pages_free``). The usual keys are declared below;
    other keys follow the same rule, typed ``int | str | None``.
    """

    open_fields: ClassVar[str] = "int | str | None"

    mem_total_bytes: int | None = reported("MemTotal", "bytes")
    mem_free_bytes: int | None = reported("MemFree", "bytes")
    mem_available_bytes: int | None = reported("MemAvailable", "bytes")
    buffers_bytes: int | None = reported("Buffers", "bytes")
    cached_bytes: int | None = reported("Cached", "bytes")
    swap_cached_bytes: int | None = reported("SwapCached", "bytes")
    swap_total_bytes: int | None = reported("SwapTotal", "bytes")
    swap_free_bytes: int | None = reported("SwapFree", "bytes")
    dirty_bytes: int | None = reported("Dirty", "bytes")
    shmem_bytes: int | None = reported("Shmem", "bytes")
    sreclaimable_bytes: int | None = reported("SReclaimable", "bytes")
    mlocked_bytes: int | None = reported("Mlocked", "bytes")
    unevictable_bytes: int | None = reported("Unevictable", "bytes")
    committed_as_bytes: int | None = reported("Committed_AS", "bytes")
    huge_pages_total: int | None = reported("HugePages_Total")
    huge_pages_free: int | None = reported("HugePages_Free")
    hugepagesize_bytes: int | None = reported("Hugepagesize", "bytes")
    vm_rss_bytes: int | None = reported("VmRSS", "bytes")
    vm_hwm_bytes: int | None = reported("VmHWM", "bytes")
    extra: tuple[tuple[str, int | str], ...] = extra_values()

    def describe(self) -> str:
        return "meminfo"


@dataclass(frozen=True)
class Filesystem:
    """One filesystem as ``df`` reports it (``-B1 --output=...`` or POSIX ``-P``), sizes in bytes."""

    filesystem: str | None = reported("Filesystem")
    fstype: str | None = reported("Type")
    size_bytes: int | None = reported("size", "bytes")
    used_bytes: int | None = reported("Used", "bytes")
    available_bytes: int | None = reported("Avail", "bytes")
    use_pct: int | None = reported("Use%", "%")
    inodes: int | None = reported("Inodes")
    inodes_used: int | None = reported("IUsed")
    inodes_free: int | None = reported("IFree")
    inodes_use_pct: int | None = reported("IUse%", "%")
    file: str | None = reported("File")
    mounted_on: str | None = reported("Mounted on")

    def describe(self) -> str:
        return f"filesystem {self.mounted_on or self.file or self.filesystem or '?'}"


@dataclass(frozen=True)
class ShmSegment:
    """One file in /dev/shm: its size, owner, age, and whether a live process holds it."""

    path: str | None = reported("path")
    size_bytes: int | None = reported("size", "bytes")
    owner: str | None = reported("owner")
    age_s: int | None = reported("age", "s")
    held: bool | None = reported("held")

    def describe(self) -> str:
        size = f"{(self.size_bytes or 0) / 2**30:.1f} GiB"
        return f"{self.path} ({size}, {self.owner}, {self.age_s} s old, {'held' if self.held else 'held by no process'})"

    def target(self) -> str:
        return self.describe()
