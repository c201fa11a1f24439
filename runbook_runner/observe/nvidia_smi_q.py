"""Parser for ``nvidia-smi -q`` (the text report): one :class:`Gpu` per ``GPU <bus id>`` block.

It is the one nvidia-smi report that gives each GPU's **minor number**, the N of its
``/dev/nvidiaN`` file, which is not always nvidia-smi's index; a runbook needs it to find
the processes that hold a given GPU (``fuser -v /dev/nvidia*``). GPUs appear in index order,
which is PCI bus order. Memory is read from the ``FB Memory Usage`` section only (BAR1 and
others have a ``Used`` line too). A GPU in MIG mode (``MIG Mode`` / ``Current: Enabled``)
gives its ``MIG Device`` blocks and, in ``Processes``, each process's GPU and compute
instance: a process there with an instance ID is an instance in use
(tests/fixtures/nvidia-smi/q-590.48.01-h200-mig-idle.txt, q-590.48.01-h200-load.txt).

What the driver says a GPU needs is read where it prints it: ``GPU Recovery Action`` (driver
570 and later; NVML's ``nvmlDeviceGpuRecoveryAction_t``, see :data:`RECOVERY_ACTIONS` of
the state) and, in ``Remapped Rows``, ``Pending`` (a remapping waits for the GPU's reset:
NVML's ``nvmlDeviceGetRemappedRows`` isPending) and ``Remapping Failure Occurred`` (a
remapping failed in the past: failureOccurred), both Yes / No as the CSV query prints them
(NVIDIA/go-nvml gen/nvml/nvml.h at 2f9e261fe40a). A section printed as ``N/A`` (MIG with
active instances, a GPU before Ampere) or a line not printed (an older driver) is None.

Failures nvidia-smi prints instead of a report become :class:`NvidiaSmiFailure`; a GPU that
answers with a fault (its values ``Unknown Error``, ``GPU is lost``, ``GPU requires reset``,
or a device-handle line in place of its block, or a per-GPU retry's ``@@ timed-out``) while
the others answer is a GPU with that ``fault`` (see :mod:`.nvidia_smi`).
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.nvidia_smi import (
    NvidiaSmiFailure,
    bus_id,
    detect_failure,
    integer,
    split_faults,
)
from runbook_runner.observe.state import Gpu, GpuProcess

_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*:\s(?P<value>.*)$")
_TOP_KEYS = {
    "Product Name": "name",
    "GPU UUID": "uuid",
    "Minor Number": "minor_number",
    "Persistence Mode": "persistence_mode",
}
_MEMORY_KEYS = {"Total": "memory_total_mib", "Used": "memory_used_mib", "Free": "memory_free_mib"}
_REMAP_KEYS = {
    "Pending": "remapped_rows_pending",
    "Remapping Failure Occurred": "remapped_rows_failure",
}
# How nvidia-smi prints each recovery action (letters only, lower case) -> the state's word.
_RECOVERY = {
    "none": "none",
    "reset": "gpu-reset",
    "gpureset": "gpu-reset",
    "reboot": "node-reboot",
    "nodereboot": "node-reboot",
    "drainp2p": "drain-p2p",
    "drainandreset": "drain-and-reset",
    "drainp2pandreset": "drain-and-reset",
    "recoverimexdomain": "recover-imex-domain",
}
_NUMBERS = {"minor_number", "memory_total_mib", "memory_used_mib", "memory_free_mib"}
# What NVML's errors read as in a value of -q (bracketed in CSV, bare or bracketed here).
_VALUE_FAULTS = (
    ("gpu-lost", "GPU is lost"),
    ("reset-required", "GPU requires reset"),
    ("unknown-error", "Unknown Error"),
)


def recovery_action(value: str) -> str | None:
    """``Reboot`` -> ``node-reboot`` (RECOVERY_ACTIONS); N/A or a bracketed error -> None; a
    value nvidia-smi may print one day and this does not know -> itself, hyphenated, so a
    check that wants ``none`` still sees that the driver asks for something."""
    if value.startswith(("N/A", "[")):
        return None
    letters = re.sub(r"[^a-z0-9]", "", value.lower())
    return _RECOVERY.get(letters) or re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


def _value_fault(value: str) -> str:
    bare = value.strip().strip("[]")
    return next((fault for fault, text in _VALUE_FAULTS if bare == text), "")


def _instance_id(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() else None


class _Block:
    """What one ``GPU <bus id>`` block says, read line by line."""

    def __init__(self, bus: str) -> None:
        self.values: dict[str, object] = {"pci_bus_id": bus_id(bus)}
        self.fault = ""
        self.mig_devices = 0
        self.processes: list[dict[str, object]] = []
        self._instance: tuple[int | None, int | None] = (None, None)

    def read(self, section: str, indent: int, key: str, value: str) -> None:
        fault = _value_fault(value)
        if fault and not self.fault:
            self.fault = fault
        field = None
        if indent == 4 and key == "GPU Recovery Action":
            self.values["recovery_action"] = None if fault else recovery_action(value)
        elif indent == 4:
            field = _TOP_KEYS.get(key)
        elif indent == 8 and section == "FB Memory Usage":
            field = _MEMORY_KEYS.get(key)
        elif indent == 8 and section == "Remapped Rows":
            field = _REMAP_KEYS.get(key)
        elif indent == 8 and section == "MIG Mode" and key == "Current":
            self.values["mig_mode"] = None if value.startswith(("N/A", "[")) else value
        elif indent == 8 and section == "Processes":
            self._process(key, value)
        if field is None:
            return
        if value.startswith("N/A") or value.startswith("[") or fault:
            self.values[field] = None
        elif field in _NUMBERS:
            self.values[field] = integer(value, key)
        else:
            self.values[field] = value

    def _process(self, key: str, value: str) -> None:
        gi, ci = self._instance
        if key == "GPU instance ID":
            self._instance = (_instance_id(value), ci)
        elif key == "Compute instance ID":
            self._instance = (gi, _instance_id(value))
        elif key == "Process ID":
            self.processes.append(
                {
                    "pid": integer(value, key),
                    "gpu_bus_id": self.values["pci_bus_id"],
                    "gpu_instance_id": gi,
                    "compute_instance_id": ci,
                }
            )
            self._instance = (None, None)

    def process_detail(self, key: str, value: str) -> None:
        if not self.processes:
            return
        if key == "Name":
            self.processes[-1]["process_name"] = value
        elif key == "Used GPU Memory" and not value.startswith(("N/A", "[")):
            self.processes[-1]["used_memory_mib"] = integer(value, key)

    def gpu(self) -> Gpu:
        in_instances = [p for p in self.processes if p["gpu_instance_id"] is not None]
        return Gpu(
            **self.values,  # type: ignore[arg-type]
            fault=self.fault,
            mig_devices=self.mig_devices,
            mig_processes=len(in_instances),
        )


def _blocks(text: str, exit_status: int) -> tuple[list[_Block], dict[str, str]]:
    rest, faults = split_faults(text)
    failure = detect_failure(rest, 0 if faults else exit_status)
    if failure is not None:
        raise failure
    blocks: list[_Block] = []
    section = ""
    for raw in rest.splitlines():
        line = raw.rstrip("\r")
        start = _GPU.match(line)
        if start is not None:
            blocks.append(_Block(start["bus"]))
            section = ""
            continue
        if not blocks or not line.strip():
            continue
        match = _KEY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if match is None:
            if indent == 4:
                section = line.strip()
                if section == "MIG Device":
                    blocks[-1].mig_devices += 1
            continue
        key, value = match["key"].strip(), match["value"].strip()
        if indent == 4:
            section = ""
        if indent == 12 and section == "Processes":
            blocks[-1].process_detail(key, value)
            continue
        blocks[-1].read(section, indent, key, value)
    return blocks, faults


def parse_query(text: str, exit_status: int = 0) -> tuple[Gpu, ...]:
    """``nvidia-smi -q`` -> one GPU per block, and one per GPU that answered with a fault."""
    blocks, faults = _blocks(text, exit_status)
    if not blocks:
        if faults:
            raise detect_failure(text, exit_status) or NvidiaSmiFailure(
                "failed", "no GPU answered within its timeout", text
            )
        raise ParseError("no 'GPU <bus id>' block in the nvidia-smi -q output")
    gpus = [block.gpu() for block in blocks]
    answered = {g.pci_bus_id for g in gpus}
    gpus += [Gpu(pci_bus_id=bus, fault=f) for bus, f in faults.items() if bus not in answered]
    ordered = sorted(gpus, key=lambda g: g.pci_bus_id or "") if faults else gpus
    return tuple(
        Gpu(**{**_fields(g), "index": i})  # type: ignore[arg-type]
        for i, g in enumerate(ordered)
    )


def _fields(gpu: Gpu) -> dict[str, object]:
    return {name: getattr(gpu, name) for name in gpu.__dataclass_fields__}


def parse_processes(text: str, exit_status: int = 0) -> tuple[GpuProcess, ...]:
    """``nvidia-smi -q -d PIDS`` (or ``-q``) -> every process of every GPU, each with the GPU
    and compute instance it runs in (None on a GPU that is not in MIG mode)."""
    blocks, _ = _blocks(text, exit_status)
    if not blocks:
        raise ParseError("no 'GPU <bus id>' block in the nvidia-smi -q output")
    return tuple(GpuProcess(**process) for b in blocks for process in b.processes)  # type: ignore[arg-type]
