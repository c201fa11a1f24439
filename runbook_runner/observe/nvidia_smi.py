"""Parsers for ``nvidia-smi --query-gpu`` and ``--query-compute-apps`` CSV output.

Columns are mapped by header name (or by the query's field list when the output
has no header), never by position: the field sets differ between drivers.
Bracketed placeholders (``[N/A]``, ``[Not Supported]``, ...) become ``None``.
nvidia-smi prints its failures on stdout; they become :class:`NvidiaSmiFailure`
naming the condition.

One sick GPU is one GPU: nvidia-smi reports per GPU, so a GPU whose fields answer
``[Unknown Error]``, ``[GPU is lost]`` or ``[GPU requires reset]`` (NVML's
NVML_ERROR_UNKNOWN, _GPU_IS_LOST, _RESET_REQUIRED), or that prints ``Unable to determine
the device handle for GPU<bus id>: ...`` in place of its row while the others answer, is
a :class:`Gpu` whose ``fault`` names it; only output with no GPU answering is a failure
of the whole command. A line ``@@ timed-out <bus id>`` (written by a runbook's per-GPU
retry, ``timeout N nvidia-smi -i <bus id> ...``) is a GPU that did not answer in time.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import Gpu, GpuProcess

# (condition, pattern, what the operator should know) -- the patterns are the
# messages real drivers print, see tests/fixtures/nvidia-smi/error-*.txt.
_FAILURES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "driver-not-loaded",
        re.compile(r"couldn't communicate with the NVIDIA driver"),
        "the NVIDIA driver is not loaded",
    ),
    (
        "driver-library-mismatch",
        re.compile(r"Driver/library version mismatch"),
        "the loaded kernel driver and the NVML library differ (upgrade without reboot?)",
    ),
    ("no-devices", re.compile(r"^No devices were found", re.M), "no GPU is visible"),
    (
        "gpu-lost",
        re.compile(r"Unable to determine the device handle", re.I),
        "a GPU does not answer (fallen off the bus?)",
    ),
    (
        "reset-refused",
        re.compile(r"could not be reset"),
        "the GPU reset was refused: another client still uses the GPU",
    ),
    (
        "nvml-missing",
        re.compile(r"couldn't find libnvidia-ml\.so", re.I),
        "the NVML library (libnvidia-ml.so) is missing: the driver is not (fully) installed",
    ),
    (
        "bad-field",
        re.compile(r"is not a valid field to query", re.I),
        "nvidia-smi does not know a field of the query (an older driver?)",
    ),
    (
        "not-installed",
        re.compile(r"nvidia-smi: (?:command )?not found", re.I),
        "nvidia-smi is not installed (or not on PATH)",
    ),
    ("bad-option", re.compile(r"^ERROR: ", re.M), "nvidia-smi rejected its arguments"),
    ("nvml-failed", re.compile(r"^Failed to initialize NVML", re.M), "NVML failed to start"),
)


CONDITIONS = tuple(condition for condition, _, _ in _FAILURES)

# The placeholders one GPU prints in its own fields when NVML cannot read it.
_FIELD_FAULTS = (
    ("gpu-lost", "[GPU is lost]"),
    ("reset-required", "[GPU requires reset]"),
    ("unknown-error", "[Unknown Error]"),
)
# "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error" (newer drivers
# write no space after "GPU"; tests/fixtures/nvidia-smi/error-unable-device-handle-*).
_DEVICE_HANDLE = re.compile(
    r"^Unable to determine the device handle for GPU ?"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]): (?P<why>.*)$"
)
_TIMED_OUT = re.compile(
    r"^@@ timed-out (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$"
)
_RETRY_NOTE = re.compile(r"^@@ ")


def bus_id(text: str) -> str:
    """A PCI bus id in nvidia-smi's query form: 8-digit domain, upper case (00000000:18:00.0)."""
    domain, rest = text.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def field_fault(text: str) -> str:
    """The fault a GPU's own fields name ('' when they name none)."""
    for fault, marker in _FIELD_FAULTS:
        if marker in text:
            return fault
    return ""


def _handle_fault(why: str) -> str:
    if "GPU is lost" in why:
        return "gpu-lost"
    if "requires reset" in why.lower():
        return "reset-required"
    return "unknown-error"


def split_faults(text: str) -> tuple[str, dict[str, str]]:
    """Take out the lines where one GPU answered with a fault instead of its report:
    the text left, and {bus id: fault} of the GPUs that did."""
    kept, faults = [], {}
    for line in text.split("\n"):
        bare = line.rstrip("\r").strip()
        if (match := _DEVICE_HANDLE.match(bare)) is not None:
            faults[bus_id(match["bus"])] = _handle_fault(match["why"])
        elif (match := _TIMED_OUT.match(bare)) is not None:
            faults[bus_id(match["bus"])] = "timed-out"
        elif not _RETRY_NOTE.match(bare):
            kept.append(line)
    return "\n".join(kept), faults


def indexed_by_bus(gpus: list[Gpu]) -> list[Gpu]:
    """GPUs in PCI bus order, which is the order nvidia-smi numbers them in: a GPU that did
    not report its index gets its place there, when every GPU that did agrees with it."""
    ordered = sorted(gpus, key=lambda g: g.pci_bus_id or "")
    told = [(i, g.index) for i, g in enumerate(ordered) if g.index is not None]
    if any(g.pci_bus_id is None for g in ordered) or any(i != index for i, index in told):
        return gpus
    return [
        g if g.index is not None else dataclasses.replace(g, index=i) for i, g in enumerate(ordered)
    ]


class NvidiaSmiFailure(ParseError):
    """nvidia-smi reported a failure instead of data."""

    def __init__(self, condition: str, explanation: str, output: str) -> None:
        first_line = next((ln.strip() for ln in output.splitlines() if ln.strip()), "")
        super().__init__(f"nvidia-smi failed: {explanation} ({first_line})")
        self.condition = condition
        self.explanation = explanation
        self.output = output


def detect_failure(text: str, exit_status: int = 0) -> NvidiaSmiFailure | None:
    """Recognise the failure texts nvidia-smi prints; ``None`` when there is none."""
    for condition, pattern, explanation in _FAILURES:
        if pattern.search(text):
            return NvidiaSmiFailure(condition, explanation, text)
    if exit_status == 127:  # the shell's "command not found"
        return NvidiaSmiFailure(
            "not-installed", "nvidia-smi is not installed (or not on PATH)", text
        )
    if exit_status != 0:
        return NvidiaSmiFailure("failed", f"exit status {exit_status}", text)
    return None


_HEADER_CELL = re.compile(r"^(?P<name>[a-z][A-Za-z0-9_.]*)(?: \[(?P<unit>[^\]]+)\])?$")
_NUMBER = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)(?: ?(?P<unit>[A-Za-z%°/]+))?$")


@dataclass(frozen=True)
class Query:
    """What a ``nvidia-smi --query-*`` command asked for."""

    kind: str  # "gpu" or "compute-apps"
    fields: tuple[str, ...]
    header: bool
    units: bool


def query_from_command(command: str) -> Query | None:
    """Read the query kind, field list and format flags out of a command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    kind = fields = None
    fmt: list[str] = []
    for i, word in enumerate(words):
        for flag, name in (("--query-gpu", "gpu"), ("--query-compute-apps", "compute-apps")):
            if word == flag and i + 1 < len(words):
                kind, fields = name, words[i + 1]
            elif word.startswith(flag + "="):
                kind, fields = name, word.split("=", 1)[1]
        if word.startswith("--format="):
            fmt = word.split("=", 1)[1].split(",")
        elif word == "--format" and i + 1 < len(words):
            fmt = words[i + 1].split(",")
    if kind is None or fields is None:
        return None
    names = tuple(f.strip() for f in fields.split(",") if f.strip())
    return Query(kind, names, header="noheader" not in fmt, units="nounits" not in fmt)


def _split_row(line: str, width: int, free_text_column: int | None) -> list[str]:
    cells = line.split(", ")
    if len(cells) > width and free_text_column is not None:
        # A process path may itself contain ", ": give the extra cells back to it.
        extra = len(cells) - width
        merged = ", ".join(cells[free_text_column : free_text_column + extra + 1])
        cells = [*cells[:free_text_column], merged, *cells[free_text_column + extra + 1 :]]
    return cells


def _clean(value: str) -> str | None:
    value = value.strip()
    if not value or value == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def parse_csv(
    text: str,
    fields: tuple[str, ...] | None = None,
    exit_status: int = 0,
    free_text: tuple[str, ...] = (),
) -> list[dict[str, str | None]]:
    """Parse ``--format=csv`` output into one dict per row, keyed by field name.

    ``fields`` is the query's field list, needed when the output has no header.
    Units are left on the values; :func:`number` strips them.
    """
    failure = detect_failure(text, exit_status)
    if failure is not None:
        raise failure
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    lines = [ln for ln in lines if ln.strip()]
    columns: list[str] | None = None
    if lines:
        # A line of field names is a header even when a field list was given: it is
        # what the host printed, and data rows never consist of field names.
        header = _parse_header(lines[0])
        if header is not None:
            columns = header
            lines = lines[1:]
    if columns is None:
        if fields is None:
            raise ParseError("CSV output has no header line and no field list was given")
        columns = list(fields)
    free_text_column = next((columns.index(c) for c in free_text if c in columns), None)
    rows = []
    for number, line in enumerate(lines, start=1):
        cells = _split_row(line, len(columns), free_text_column)
        if len(cells) != len(columns):
            raise ParseError(
                f"CSV row {number} has {len(cells)} values but there are {len(columns)} "
                f"columns: {line[:120]!r}"
            )
        rows.append({name: _clean(cell) for name, cell in zip(columns, cells, strict=True)})
    return rows


def _parse_header(line: str) -> list[str] | None:
    names = []
    for cell in line.split(", "):
        match = _HEADER_CELL.match(cell.strip())
        if match is None:
            return None
        names.append(match["name"])
    return names


def _numeric_text(value: str, what: str) -> str:
    match = _NUMBER.match(value)
    if match is None or len(match["num"]) > 30:
        raise ParseError(f"{what}: expected a number, got {value[:60]!r}")
    return match["num"]


def number(value: str | None, what: str) -> float | None:
    """A numeric cell with its unit stripped (``"52 %"`` -> 52.0)."""
    if value is None:
        return None
    result = float(_numeric_text(value, what))
    if not math.isfinite(result):
        raise ParseError(f"{what}: {value[:60]!r} is out of range")
    return result


def integer(value: str | None, what: str) -> int | None:
    """A whole-number cell with its unit stripped (``"96413 MiB"`` -> 96413)."""
    if value is None:
        return None
    text = _numeric_text(value, what)
    return int(text) if text.lstrip("+-").isdigit() else int(float(text))


def _pick(row: Mapping[str, str | None], *names: str) -> str | None:
    for name in names:
        if name in row:
            return row[name]
    return None


def _build(
    row: Mapping[str, str | None],
    spec: Mapping[str, tuple[tuple[str, ...], Callable[[str | None, str], Any] | None]],
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr, (names, convert) in spec.items():
        raw = _pick(row, *names)
        values[attr] = raw if convert is None else convert(raw, names[0])
    return values


_GPU_SPEC: dict[str, tuple[tuple[str, ...], Callable[[str | None, str], Any] | None]] = {
    "index": (("index",), integer),
    "name": (("name", "gpu_name"), None),
    "uuid": (("uuid", "gpu_uuid"), None),
    "pci_bus_id": (("pci.bus_id", "gpu_bus_id"), None),
    "memory_used_mib": (("memory.used",), integer),
    "memory_total_mib": (("memory.total",), integer),
    "memory_free_mib": (("memory.free",), integer),
    "utilization_gpu_pct": (("utilization.gpu",), number),
    "temperature_c": (("temperature.gpu",), number),
    "persistence_mode": (("persistence_mode",), None),
    "pcie_gen_current": (("pcie.link.gen.current",), integer),
    "pcie_gen_max": (("pcie.link.gen.max",), integer),
    "pcie_width_current": (("pcie.link.width.current",), integer),
    "pcie_width_max": (("pcie.link.width.max",), integer),
    "clocks_event_reasons": (
        ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
        lambda value, what: bit_mask(value, what),
    ),
    "ecc_uncorrected_volatile": (("ecc.errors.uncorrected.volatile.total",), integer),
    "retired_pages_pending": (("retired_pages.pending",), None),
    "remapped_rows_pending": (("remapped_rows.pending",), None),
}


def bit_mask(value: str | None, what: str) -> int | None:
    """A hexadecimal bit mask (``0x0000000000000001``), as the clocks reasons are printed."""
    if value is None:
        return None
    try:
        return int(value.strip(), 16)
    except ValueError:
        raise ParseError(f"{what}: {value[:40]!r} is not a hexadecimal bit mask") from None


_PROCESS_SPEC: dict[str, tuple[tuple[str, ...], Callable[[str | None, str], Any] | None]] = {
    "pid": (("pid",), integer),
    "process_name": (("process_name", "name"), None),
    "used_memory_mib": (("used_gpu_memory", "used_memory"), integer),
    "gpu_uuid": (("gpu_uuid",), None),
    "gpu_bus_id": (("gpu_bus_id",), None),
}


def parse_gpus(
    text: str, fields: tuple[str, ...] | None = None, exit_status: int = 0
) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` -> GPUs.

    A GPU whose fields name a fault, or that answered with a fault line instead of its
    row, is a GPU with that ``fault``; the command failed as a whole only when no GPU
    answered at all.
    """
    rest, faults = split_faults(text)
    if faults and not rest.strip():
        raise detect_failure(text, exit_status) or NvidiaSmiFailure(
            "failed", "no GPU answered within its timeout", text
        )
    status = 0 if faults else exit_status
    lines = [ln for ln in rest.split("\n") if ln.strip()]
    rows = parse_csv(rest, fields, status, free_text=("name", "gpu_name"))
    data_lines = lines[len(lines) - len(rows) :]
    gpus = [
        Gpu(**_build(row, _GPU_SPEC), fault=field_fault(line))
        for row, line in zip(rows, data_lines, strict=True)
    ]
    answered = {g.pci_bus_id for g in gpus}
    gpus += [Gpu(pci_bus_id=bus, fault=f) for bus, f in faults.items() if bus not in answered]
    return tuple(indexed_by_bus(gpus) if faults else gpus)


def parse_compute_apps(
    text: str, fields: tuple[str, ...] | None = None, exit_status: int = 0
) -> tuple[GpuProcess, ...]:
    """``nvidia-smi --query-compute-apps=... --format=csv`` -> processes.

    A header with no rows means that no compute process is running.
    """
    rows = parse_csv(text, fields, exit_status, free_text=("process_name", "name"))
    return tuple(GpuProcess(**_build(row, _PROCESS_SPEC)) for row in rows)
