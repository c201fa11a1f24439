"""Typed host state: what the parsers produce and the checks read.

Every value a host may fail to report is ``None``. Field metadata gives the
label and unit that check messages use (``memory.used 96,413 MiB``).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _f(label: str, unit: str = "") -> Any:
    return field(default=None, metadata={"label": label, "unit": unit})


def _extra() -> Any:
    # The values of an open record beyond its declared fields: not a field of its own.
    return field(default=(), metadata={"hidden": True}, repr=False)


_OPEN_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class _Open:
    """A record whose fields also come from the output (a table's header, a file's keys).

    ``open_fields`` is the type of every field beyond the declared ones; they are looked up
    in ``extra`` and are ``None`` when the host did not print them.
    """

    open_fields: ClassVar[str] = "str | None"
    extra: tuple[tuple[str, Any], ...]

    def __getattr__(self, name: str) -> Any:
        if not _OPEN_NAME.match(name) or name == "extra":
            raise AttributeError(name)
        for key, value in self.extra:
            if key == name:
                return value
        return None

    def has(self, name: str) -> bool:
        return name in field_names(type(self)) or any(key == name for key, _ in self.extra)


@dataclass(frozen=True)
class Gpu:
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int | None = _f("index")
    name: str | None = _f("name")
    uuid: str | None = _f("uuid")
    pci_bus_id: str | None = _f("pci.bus_id")
    memory_used_mib: int | None = _f("memory.used", "MiB")
    memory_total_mib: int | None = _f("memory.total", "MiB")
    memory_free_mib: int | None = _f("memory.free", "MiB")
    utilization_gpu_pct: float | None = _f("utilization.gpu", "%")
    temperature_c: float | None = _f("temperature.gpu", "°C")
    persistence_mode: str | None = _f("persistence_mode")
    minor_number: int | None = _f("minor number")  # N of /dev/nvidiaN (not always the index)
    # What a node-health check in the field looks at (None where the GPU does not report it):
    pcie_gen_current: int | None = _f("pcie.link.gen.current")
    pcie_gen_max: int | None = _f("pcie.link.gen.max")
    pcie_width_current: int | None = _f("pcie.link.width.current")
    pcie_width_max: int | None = _f("pcie.link.width.max")
    clocks_event_reasons: int | None = _f("clocks_event_reasons.active")  # a bit mask
    ecc_uncorrected_volatile: int | None = _f("ecc.errors.uncorrected.volatile.total")
    retired_pages_pending: str | None = _f("retired_pages.pending")  # Yes / No
    remapped_rows_pending: str | None = _f("remapped_rows.pending")  # Yes / No

    def describe(self) -> str:
        return f"GPU {self.index}" if self.index is not None else f"GPU {self.pci_bus_id or '?'}"

    def target(self) -> str:
        """What a confirmation names: index, bus id and device file."""
        device = f", /dev/nvidia{self.minor_number}" if self.minor_number is not None else ""
        return f"{self.describe()} ({self.pci_bus_id or 'bus id ?'}{device})"


@dataclass(frozen=True)
class GpuProcess:
    """One compute process as ``nvidia-smi --query-compute-apps`` reports it."""

    pid: int | None = _f("pid")
    process_name: str | None = _f("process_name")
    used_memory_mib: int | None = _f("used_gpu_memory", "MiB")
    gpu_uuid: str | None = _f("gpu_uuid")
    gpu_bus_id: str | None = _f("gpu_bus_id")

    def describe(self) -> str:
        return f"process {self.pid} ({self.process_name or '?'})"

    def target(self) -> str:
        return f"PID {self.pid} ({self.process_name or '?'}) on GPU {self.gpu_bus_id or self.gpu_uuid or '?'}"


@dataclass(frozen=True)
class Memory:
    """Host memory as ``free`` reports it, always in bytes."""

    total_bytes: int | None = _f("total", "bytes")
    used_bytes: int | None = _f("used", "bytes")
    free_bytes: int | None = _f("free", "bytes")
    shared_bytes: int | None = _f("shared", "bytes")
    buff_cache_bytes: int | None = _f("buff/cache", "bytes")
    available_bytes: int | None = _f("available", "bytes")
    swap_total_bytes: int | None = _f("swap total", "bytes")
    swap_used_bytes: int | None = _f("swap used", "bytes")
    swap_free_bytes: int | None = _f("swap free", "bytes")

    def describe(self) -> str:
        return "host memory"


@dataclass(frozen=True)
class HostProcess:
    """One line of ``ps -eo pid,stat,args``."""

    pid: int | None = _f("pid")
    state: str | None = _f("state")  # the first letter of STAT: R S D Z T I ...
    stat: str | None = _f("stat")  # STAT as printed, state and flags ("Dl", "Z+")
    command: str | None = _f("command")

    def describe(self) -> str:
        return f"process {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]})"

    def target(self) -> str:
        return f"PID {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]})"


@dataclass(frozen=True)
class TextLine:
    """One non-empty line of a command's output (kernel messages, holders...)."""

    text: str | None = _f("text")

    def describe(self) -> str:
        return repr(self.text)

    def target(self) -> str:
        return str(self.text)


@dataclass(frozen=True)
class LaunchConfig:
    """The memory-relevant flags of an ``sglang.launch_server`` command line (None: not given)."""

    tp_size: int | None = _f("--tp-size")
    dp_size: int | None = _f("--dp-size")
    hicache_enabled: bool | None = _f("--enable-hierarchical-cache")
    hicache_size_gb: float | None = _f("--hicache-size", "GB")
    hicache_ratio: float | None = _f("--hicache-ratio")
    mem_fraction_static: float | None = _f("--mem-fraction-static")
    model_path: str | None = _f("--model-path")

    def describe(self) -> str:
        return "the launch command"


@dataclass(frozen=True)
class Filesystem:
    """One filesystem as ``df`` reports it (``-B1 --output=...`` or POSIX ``-P``), sizes in bytes."""

    filesystem: str | None = _f("Filesystem")
    fstype: str | None = _f("Type")
    size_bytes: int | None = _f("size", "bytes")
    used_bytes: int | None = _f("Used", "bytes")
    available_bytes: int | None = _f("Avail", "bytes")
    use_pct: int | None = _f("Use%", "%")
    inodes: int | None = _f("Inodes")
    inodes_used: int | None = _f("IUsed")
    inodes_free: int | None = _f("IFree")
    inodes_use_pct: int | None = _f("IUse%", "%")
    file: str | None = _f("File")
    mounted_on: str | None = _f("Mounted on")

    def describe(self) -> str:
        return f"filesystem {self.mounted_on or self.file or self.filesystem or '?'}"


@dataclass(frozen=True)
class MemInfo(_Open):
    """``/proc/meminfo`` (or any ``Key: value [unit]`` file): sizes in bytes.

    Every key becomes a field by one rule: CamelCase to snake_case, ``_bytes`` added when
    the value carries a size unit (``MemAvailable: 123 kB`` -> ``mem_available_bytes``,
    ``HugePages_Free: 0`` -> ``huge_pages_free``). The usual keys are declared below;
    other keys follow the same rule, typed ``int | str | None``.
    """

    open_fields: ClassVar[str] = "int | str | None"

    mem_total_bytes: int | None = _f("MemTotal", "bytes")
    mem_free_bytes: int | None = _f("MemFree", "bytes")
    mem_available_bytes: int | None = _f("MemAvailable", "bytes")
    buffers_bytes: int | None = _f("Buffers", "bytes")
    cached_bytes: int | None = _f("Cached", "bytes")
    swap_cached_bytes: int | None = _f("SwapCached", "bytes")
    swap_total_bytes: int | None = _f("SwapTotal", "bytes")
    swap_free_bytes: int | None = _f("SwapFree", "bytes")
    dirty_bytes: int | None = _f("Dirty", "bytes")
    shmem_bytes: int | None = _f("Shmem", "bytes")
    sreclaimable_bytes: int | None = _f("SReclaimable", "bytes")
    mlocked_bytes: int | None = _f("Mlocked", "bytes")
    unevictable_bytes: int | None = _f("Unevictable", "bytes")
    committed_as_bytes: int | None = _f("Committed_AS", "bytes")
    huge_pages_total: int | None = _f("HugePages_Total")
    huge_pages_free: int | None = _f("HugePages_Free")
    hugepagesize_bytes: int | None = _f("Hugepagesize", "bytes")
    vm_rss_bytes: int | None = _f("VmRSS", "bytes")
    vm_hwm_bytes: int | None = _f("VmHWM", "bytes")
    extra: tuple[tuple[str, int | str], ...] = _extra()

    def describe(self) -> str:
        return "meminfo"


@dataclass(frozen=True)
class UnitProperties(_Open):
    """One unit as ``systemctl show -p ...`` prints it (``Key=value`` lines).

    Properties become fields by the same rule as meminfo (``ActiveState`` -> ``active_state``);
    the common ones are typed below, any other is ``str | None``. ``[not set]`` and empty
    values are ``None``.
    """

    id: str | None = _f("Id")
    load_state: str | None = _f("LoadState")
    active_state: str | None = _f("ActiveState")
    sub_state: str | None = _f("SubState")
    unit_file_state: str | None = _f("UnitFileState")
    result: str | None = _f("Result")
    main_pid: int | None = _f("MainPID")
    nrestarts: int | None = _f("NRestarts")
    exec_main_status: int | None = _f("ExecMainStatus")
    memory_current_bytes: int | None = _f("MemoryCurrent", "bytes")
    active_enter_timestamp: str | None = _f("ActiveEnterTimestamp")
    extra: tuple[tuple[str, str], ...] = _extra()

    def describe(self) -> str:
        return f"unit {self.id or '?'}"


@dataclass(frozen=True)
class Number:
    """A number printed on a line of its own (``nproc``, ``cat /proc/sys/...``, ``wc -l``)."""

    value: int | float | None = _f("value")
    unit: str | None = _f("unit")  # a word after the number, as printed ("42 MiB" -> "MiB")

    def describe(self) -> str:
        return "the number"


@dataclass(frozen=True)
class TableRow(_Open):
    """One row of a whitespace table with a header line (``lsblk``, ``ps -o ...``, ``ss``).

    Fields are named from the header (``MOUNTPOINTS`` -> ``mountpoints``, ``%CPU`` -> ``cpu``,
    ``MAJ:MIN`` -> ``maj_min``); every value is text (``str | None``; ``None`` where the
    row has no value in that column), so compare with strings: ``type == 'disk'``.
    """

    extra: tuple[tuple[str, str], ...] = _extra()

    def describe(self) -> str:
        return "row " + " ".join(value for _, value in self.extra)[:80]


@dataclass(frozen=True)
class DeviceHolder:
    """One process holding one NVIDIA device file, as ``fuser -v /dev/nvidia*`` lists it.

    ``minor_number`` is N of ``/dev/nvidiaN`` (one GPU); it is ``None`` for the files every
    CUDA process opens (``/dev/nvidiactl``, ``/dev/nvidia-uvm``...), whose holders are
    ``node_wide``: signalling them reaches every GPU of the node.
    """

    device: str | None = _f("device")
    minor_number: int | None = _f("minor number")
    node_wide: bool | None = _f("node-wide device")
    pid: int | None = _f("pid")
    user: str | None = _f("user")
    access: str | None = _f("access")
    command: str | None = _f("command")

    def describe(self) -> str:
        return f"process {self.pid} ({self.command or '?'}) on {self.device or '?'}"

    def target(self) -> str:
        return f"PID {self.pid} ({self.command or '?'}, {self.user or '?'}) holding {self.device}"


@dataclass(frozen=True)
class ProcessOwner:
    """One process (and one GPU it holds, if any) with what says who it belongs to.

    The parser fills the facts (tree, cgroup, device files); plan/ownership.py, given the
    runbook's subject, fills the verdict: ``owner`` ('ours', 'orphaned-ours',
    'another-owner', 'infrastructure', 'unknown') with its ``evidence``, the subject
    instance it belongs to, that instance's ``health``, and the ``disposition``: 'act'
    (ours and broken), 'leave' (with ``reason``) or 'cannot-tell'.
    """

    pid: int | None = _f("pid")
    ppid: int | None = _f("parent pid")
    pgid: int | None = _f("process group")
    sid: int | None = _f("session")
    user: str | None = _f("user")
    age_s: int | None = _f("age", "s")
    stat: str | None = _f("stat")
    state: str | None = _f("state")
    cgroup: str | None = _f("cgroup")
    owner_kind: str | None = _f("owner kind")  # unit, container, slurm-job, session, ''
    owner_name: str | None = _f("owner name")
    unit: str | None = _f("unit")
    command: str | None = _f("command")
    device: str | None = _f("device")
    minor_number: int | None = _f("minor number")
    node_wide: bool | None = _f("node-wide device")
    holds_gpu: bool | None = _f("holds a GPU")
    in_ps: bool | None = _f("listed by ps")
    owner: str | None = _f("owner")
    evidence: str | None = _f("evidence")
    subject: bool | None = _f("the subject's")
    instance: int | None = _f("instance")
    port: int | None = _f("port")
    health: str | None = _f("health")
    disposition: str | None = _f("disposition")
    reason: str | None = _f("reason")
    healthy_servers: int | None = _f("healthy servers on the host")
    crash_loop: bool | None = _f("its unit crash-loops")

    def describe(self) -> str:
        on = f" on {self.device}" if self.device else ""
        return (
            f"process {self.pid} ({(self.command or '?')[:60]}){on}: {self.owner or 'unclassified'}"
        )

    def target(self) -> str:
        why = f": {self.owner}, {self.reason}" if self.owner else ""
        return f"PID {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]}){why}"


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid (PCI:...): CODE, ...`` kernel message, with the catalog's action."""

    pci: str | None = _f("pci")
    code: int | None = _f("xid")
    pid: int | None = _f("pid")
    message: str | None = _f("message")
    action: str | None = _f("action")  # RESTART_APP, RESET_GPU, RESTART_BM, ... or LOOK_IT_UP
    meaning: str | None = _f("meaning")
    memory_errors: int | None = _f("memory-error Xids of its GPU")  # 48, 63, 64, 94, 95

    def describe(self) -> str:
        return f"Xid {self.code} on {self.pci} ({self.action}: {self.meaning})"

    def target(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class ShmSegment:
    """One file in /dev/shm: its size, owner, age, and whether a live process holds it."""

    path: str | None = _f("path")
    size_bytes: int | None = _f("size", "bytes")
    owner: str | None = _f("owner")
    age_s: int | None = _f("age", "s")
    held: bool | None = _f("held")

    def describe(self) -> str:
        size = f"{(self.size_bytes or 0) / 2**30:.1f} GiB"
        return f"{self.path} ({size}, {self.owner}, {self.age_s} s old, {'held' if self.held else 'held by no process'})"

    def target(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class Unavailable:
    """An observation that produced no state: the command or its parser failed."""

    reason: str
    condition: str = "failed"


@dataclass(frozen=True)
class VllmLaunchConfig:
    """The host-memory flags of a ``vllm serve`` command line (None: not given)."""

    tp_size: int | None = _f("--tensor-parallel-size")
    pp_size: int | None = _f("--pipeline-parallel-size")
    cpu_offload_gib: float | None = _f("--cpu-offload-gb", "GiB per GPU")
    swap_space_gib: float | None = _f("--swap-space", "GiB per GPU")
    kv_offloading_gib: float | None = _f("--kv-offloading-size", "GiB")
    kv_offloading_backend: str | None = _f("--kv-offloading-backend")
    # Which connector holds the KV offload ('native', 'simple', 'lmcache'; None: no offload),
    # and how many times the host pins --kv-offloading-size: 0 once in total (vLLM splits it
    # among the workers), 1 once per worker; None where the launch cannot tell (lmcache).
    kv_offload_path: str | None = _f("KV offload connector")
    kv_offload_each_worker: int | None = _f(
        "the KV offload per worker (under lmcache, LMCache sizes its own pool)"
    )
    gpu_memory_utilization: float | None = _f("--gpu-memory-utilization")
    model: str | None = _f("--model")

    def describe(self) -> str:
        return "the launch command"


Record = (
    Gpu
    | GpuProcess
    | Memory
    | HostProcess
    | TextLine
    | LaunchConfig
    | Filesystem
    | MemInfo
    | UnitProperties
    | Number
    | TableRow
    | VllmLaunchConfig
    | DeviceHolder
    | XidEvent
    | ShmSegment
)


def field_names(record_type: type) -> tuple[str, ...]:
    """The declared fields of a record (an open record has more: see :func:`open_type`)."""
    return tuple(f.name for f in dataclasses.fields(record_type) if not f.metadata.get("hidden"))


def open_type(record_type: type) -> str | None:
    """The type of the fields an open record takes from the output, ``None`` if closed."""
    return getattr(record_type, "open_fields", None) if issubclass(record_type, _Open) else None


def has_field(record_type: type, name: str) -> bool:
    """Whether an expression may read ``name`` on this record (any name, on an open one)."""
    return name in field_names(record_type) or (
        open_type(record_type) is not None and bool(_OPEN_NAME.match(name))
    )


def snake(key: str) -> str:
    """A host's key as a field name: ``MemAvailable`` -> ``mem_available``, ``%CPU`` -> ``cpu``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    return text if text and text[0].isalpha() else f"c_{text}" if text else ""


def field_label(record_type: type, name: str) -> tuple[str, str]:
    """The (label, unit) pair of one field, for messages."""
    for f in dataclasses.fields(record_type):
        if f.name == name:
            return f.metadata.get("label", name), f.metadata.get("unit", "")
    return name, ""


def field_kinds(record_type: type) -> dict[str, str]:
    """Each field's kind for type checks: 'number', 'string' or 'boolean' (from the annotations)."""
    hints = typing.get_type_hints(record_type)
    kinds = {}
    for name in field_names(record_type):
        args = set(typing.get_args(hints[name])) or {hints[name]}
        args.discard(type(None))
        if args <= {int, float}:
            kinds[name] = "number"
        elif args == {bool}:
            kinds[name] = "boolean"
        elif args == {str}:
            kinds[name] = "string"
        else:
            kinds[name] = "any"
    return kinds


def to_json(record: Record) -> dict[str, Any]:
    return dataclasses.asdict(record)
