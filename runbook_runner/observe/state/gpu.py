"""GPU state: the GPUs and their compute processes (nvidia-smi), who holds each device
file (fuser), the Xid kernel messages of a GPU fault, and a MIG GPU's instances."""

from __future__ import annotations

from dataclasses import dataclass, field

from runbook_runner.observe.state.fields import reported

# What one GPU answered instead of its values (Gpu.fault), while the others answer:
# NVML's errors as nvidia-smi prints them in that GPU's fields or in place of its row.
FAULTS = ("unknown-error", "gpu-lost", "reset-required", "timed-out")

# The recovery the driver says a GPU needs (Gpu.recovery_action): NVML's
# nvmlDeviceGpuRecoveryAction_t (NVIDIA/go-nvml gen/nvml/nvml.h at 2f9e261fe40a), in the
# order of its values 0-5: no action needed; reset the GPU; reboot the node; drain P2P
# (quiesce peer-to-peer traffic, then ask again); drain P2P and reset the GPU; recover the
# IMEX domain. nvidia-smi -q prints it as "GPU Recovery Action" (None, Reset, Reboot, ...).
RECOVERY_ACTIONS = (
    "none",
    "gpu-reset",
    "node-reboot",
    "drain-p2p",
    "drain-and-reset",
    "recover-imex-domain",
)


def _word(label: str, default: str = "") -> str:
    """A field that is always reported: '' when there is nothing to say."""
    result: str = field(default=default, metadata={"label": label, "unit": ""})
    return result


def _count(label: str) -> int:
    result: int = field(default=0, metadata={"label": label, "unit": ""})
    return result


@dataclass(frozen=True)
class Gpu:
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int | None = reported("index")
    name: str | None = reported("name")
    uuid: str | None = reported("uuid")
    pci_bus_id: str | None = reported("pci.bus_id")
    memory_used_mib: int | None = reported("memory.used", "MiB")
    memory_total_mib: int | None = reported("memory.total", "MiB")
    memory_free_mib: int | None = reported("memory.free", "MiB")
    utilization_gpu_pct: float | None = reported("utilization.gpu", "%")
    temperature_c: float | None = reported("temperature.gpu", "°C")
    persistence_mode: str | None = reported("persistence_mode")
    minor_number: int | None = reported("minor number")  # N of /dev/nvidiaN (not always the index)
    # What a node-health check in the field looks at (None where the GPU does not report it):
    pcie_gen_current: int | None = reported("pcie.link.gen.current")
    pcie_gen_max: int | None = reported("pcie.link.gen.max")
    pcie_width_current: int | None = reported("pcie.link.width.current")
    pcie_width_max: int | None = reported("pcie.link.width.max")
    clocks_event_reasons: int | None = reported("clocks_event_reasons.active")  # a bit mask
    ecc_uncorrected_volatile: int | None = reported("ecc.errors.uncorrected.volatile.total")
    retired_pages_pending: str | None = reported("retired_pages.pending")  # Yes / No
    remapped_rows_pending: str | None = reported("remapped_rows.pending")  # Yes / No
    # Yes: a row remapping failed in the past (NVML nvmlDeviceGetRemappedRows failureOccurred;
    # nvidia-smi -q 'Remapping Failure Occurred'): the GPU's memory can no longer be repaired
    # in place. None: not printed (before Ampere, or MIG with active instances).
    remapped_rows_failure: str | None = reported("remapped_rows.failure")
    # RECOVERY_ACTIONS: what the driver says this GPU needs (nvidia-smi -q, driver 570+); a
    # value not among them is kept as printed, lower case and hyphenated; None: not printed.
    recovery_action: str | None = reported("GPU recovery action")
    # '' when the GPU answers; else what it answered instead (FAULTS): a fact about this GPU
    # alone, never about the node ("Unknown Error", "GPU is lost", "[GPU requires reset]",
    # or no answer within the per-GPU timeout).
    fault: str = _word("fault")
    mig_mode: str | None = reported("MIG mode")  # Enabled / Disabled (nvidia-smi -q)
    mig_devices: int = _count("MIG devices")  # its MIG devices (GPU + compute instance pairs)
    mig_processes: int = _count("processes in MIG instances")  # instances in use: a reset waits
    # Its PCI address as the kernel's Xid lines write it (XidEvent.pci: "0000:48:00", lower
    # case): a check scoped to a GPU's Xids matches on it. Derived from pci_bus_id.
    pci: str | None = reported("pci")

    def __post_init__(self) -> None:
        if self.pci is None and self.pci_bus_id and self.pci_bus_id.count(":") == 2:
            domain, bus, device = self.pci_bus_id.split(":")
            object.__setattr__(self, "pci", f"{domain[-4:]}:{bus}:{device.split('.')[0]}".lower())

    def describe(self) -> str:
        name = f"GPU {self.index}" if self.index is not None else f"GPU {self.pci_bus_id or '?'}"
        return f"{name} ({self.fault})" if self.fault else name

    def target(self) -> str:
        """What a confirmation names: index, bus id and device file."""
        device = f", /dev/nvidia{self.minor_number}" if self.minor_number is not None else ""
        return f"{self.describe()} ({self.pci_bus_id or 'bus id ?'}{device})"


@dataclass(frozen=True)
class GpuProcess:
    """One compute process as ``nvidia-smi --query-compute-apps`` reports it."""

    pid: int | None = reported("pid")
    process_name: str | None = reported("process_name")
    used_memory_mib: int | None = reported("used_gpu_memory", "MiB")
    gpu_uuid: str | None = reported("gpu_uuid")
    gpu_bus_id: str | None = reported("gpu_bus_id")
    gpu_instance_id: int | None = reported("GPU instance ID")  # MIG: None on a whole GPU
    compute_instance_id: int | None = reported("compute instance ID")

    def describe(self) -> str:
        return f"process {self.pid} ({self.process_name or '?'})"

    def target(self) -> str:
        return f"PID {self.pid} ({self.process_name or '?'}) on GPU {self.gpu_bus_id or self.gpu_uuid or '?'}"


@dataclass(frozen=True)
class DeviceHolder:
    """One process holding one NVIDIA device file, as ``fuser -v /dev/nvidia*`` lists it.

    ``minor_number`` is N of ``/dev/nvidiaN`` (one GPU); it is ``None`` for the files every
    CUDA process opens (``/dev/nvidiactl``, ``/dev/nvidia-uvm``...), whose holders are
    ``node_wide``: signalling them reaches every GPU of the node.
    """

    device: str | None = reported("device")
    minor_number: int | None = reported("minor number")
    node_wide: bool | None = reported("node-wide device")
    pid: int | None = reported("pid")
    user: str | None = reported("user")
    access: str | None = reported("access")
    command: str | None = reported("command")

    def describe(self) -> str:
        return f"process {self.pid} ({self.command or '?'}) on {self.device or '?'}"

    def target(self) -> str:
        return f"PID {self.pid} ({self.command or '?'}, {self.user or '?'}) holding {self.device}"


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid (PCI:...): CODE, ...`` kernel message, with the catalog's action."""

    pci: str | None = reported("pci")
    code: int | None = reported("xid")
    pid: int | None = reported("pid")
    message: str | None = reported("message")
    action: str | None = reported("action")  # RESTART_APP, RESET_GPU, RESTART_BM, ... or LOOK_IT_UP
    meaning: str | None = reported("meaning")
    memory_errors: int | None = reported("memory-error Xids of its GPU")  # 48, 63, 64, 94, 95

    def describe(self) -> str:
        return f"Xid {self.code} on {self.pci} ({self.action}: {self.meaning})"

    def target(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class MigDevice:
    """One line of ``nvidia-smi -L``: a GPU, or (``mig_index`` set) one of its MIG devices."""

    gpu: int | None = reported("GPU")
    name: str | None = reported("name")  # the GPU's product, or the MIG profile (3g.40gb)
    uuid: str | None = reported("uuid")
    mig_index: int | None = reported("MIG device")

    def describe(self) -> str:
        if self.mig_index is None:
            return f"GPU {self.gpu} ({self.name or '?'})"
        return f"MIG {self.name or '?'} device {self.mig_index} of GPU {self.gpu}"

    def target(self) -> str:
        return f"{self.describe()} {self.uuid or ''}".strip()


@dataclass(frozen=True)
class GpuInstance:
    """One row of ``nvidia-smi mig -lgi``: a GPU instance (GI) of a GPU in MIG mode."""

    gpu: int | None = reported("GPU")
    profile: str | None = reported("profile")  # MIG 3g.40gb
    profile_id: int | None = reported("profile ID")
    instance_id: int | None = reported("GPU instance ID")
    placement: str | None = reported("placement")  # start:size in memory slices

    def describe(self) -> str:
        return f"GPU instance {self.instance_id} ({self.profile or '?'}) of GPU {self.gpu}"

    def target(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class ComputeInstance:
    """One row of ``nvidia-smi mig -lci``: a compute instance (CI) inside a GPU instance."""

    gpu: int | None = reported("GPU")
    gpu_instance_id: int | None = reported("GPU instance ID")
    profile: str | None = reported("profile")
    profile_id: int | None = reported("profile ID")
    instance_id: int | None = reported("compute instance ID")

    def describe(self) -> str:
        return (
            f"compute instance {self.instance_id} of GPU instance {self.gpu_instance_id} "
            f"on GPU {self.gpu}"
        )

    def target(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class GpuFabric:
    """One GPU as a reset would reach it: its index and ``/dev/nvidiaN``, its architecture,
    the GPUs it has NVLinks to (``nvidia-smi topo -m``: an ``NV#`` cell), its fabric state
    (``nvidia-smi -q``, section Fabric) and whether Fabric Manager runs. What a reset of
    it reaches is decided from these by plan/fabric.py."""

    index: int | None = reported("GPU")
    minor_number: int | None = reported("minor number")
    pci_bus_id: str | None = reported("pci.bus_id")
    name: str | None = reported("name")
    architecture: str | None = reported("architecture")  # -q 'Product Architecture' (535+)
    # The indexes of the GPUs it has NVLinks to; None: topo -m did not say.
    nvlink_peers: tuple[int, ...] | None = reported("NVLink peers")
    nvlinks: int | None = reported("NVLinks to a peer")  # the largest NV# of its row
    fabric_state: str | None = reported("fabric state")  # Completed, In Progress, N/A ...
    fabric_manager: str | None = reported("Fabric Manager")  # systemctl is-active: active ...

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name or '?'})"

    def target(self) -> str:
        return str(self.index)
