"""What a simulated host prints: nvidia-smi (query CSV, table, reset, errors), free, df, meminfo.

Formats follow real captures (tests/fixtures/): CSV fields joined by ", ",
units in the header as " [MiB]" and on the values as " MiB", the 590-driver
table 91 columns wide, procps-ng 4.x ``free`` columns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from runbook_runner.simhost.model import EPOCH, SimFilesystem, SimGpu, SimHost, SimProcess

DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)


def library_mismatch(host: SimHost) -> str:
    """What nvidia-smi prints (exit 18) when the library is not the loaded module's
    version: the second line, on newer drivers, names the library's major.minor."""
    short = ".".join(host.library_version.split(".")[:2])
    return f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {short}\n"


# query field -> (unit, value)
_GPU_FIELDS: dict[str, tuple[str, Callable[[SimHost, SimGpu], str]]] = {
    "index": ("", lambda h, g: str(g.index)),
    "name": ("", lambda h, g: g.name),
    "gpu_name": ("", lambda h, g: g.name),
    "uuid": ("", lambda h, g: g.uuid),
    "gpu_uuid": ("", lambda h, g: g.uuid),
    "pci.bus_id": ("", lambda h, g: g.bus_id),
    "gpu_bus_id": ("", lambda h, g: g.bus_id),
    "memory.used": ("MiB", lambda h, g: str(h.used_mib(g))),
    "memory.total": ("MiB", lambda h, g: str(g.memory_total_mib)),
    "memory.free": ("MiB", lambda h, g: str(max(0, g.memory_total_mib - h.used_mib(g)))),
    "persistence_mode": ("", lambda h, g: "Enabled" if g.persistence else "Disabled"),
    "temperature.gpu": ("", lambda h, g: str(g.temperature_c)),
    "utilization.gpu": ("%", lambda h, g: "0"),
    "driver_version": ("", lambda h, g: h.driver_version),
    "count": ("", lambda h, g: str(len(h.gpus))),
    "pcie.link.gen.current": ("", lambda h, g: "5"),
    "pcie.link.gen.max": ("", lambda h, g: "5"),
    "pcie.link.width.current": ("", lambda h, g: str(g.pcie_width)),
    "pcie.link.width.max": ("", lambda h, g: "16"),
    "clocks_event_reasons.active": ("", lambda h, g: f"0x{g.clocks_reasons:016x}"),
    "clocks_throttle_reasons.active": ("", lambda h, g: f"0x{g.clocks_reasons:016x}"),
    "ecc.errors.uncorrected.volatile.total": ("", lambda h, g: str(g.ecc_uncorrected)),
    "retired_pages.pending": ("", lambda h, g: "[N/A]"),
    "remapped_rows.pending": ("", lambda h, g: "Yes" if g.rows_pending else "No"),
}

_APP_FIELDS: dict[str, tuple[str, Callable[[SimHost, SimGpu, SimProcess], str]]] = {
    "pid": ("", lambda h, g, p: str(p.pid)),
    "process_name": ("", lambda h, g, p: p.cmdline.split()[0] if p.cmdline else "[Unknown]"),
    "name": ("", lambda h, g, p: p.cmdline.split()[0] if p.cmdline else "[Unknown]"),
    "used_gpu_memory": ("MiB", lambda h, g, p: str(p.gpu_mib[str(g.index)])),
    "used_memory": ("MiB", lambda h, g, p: str(p.gpu_mib[str(g.index)])),
    "gpu_uuid": ("", lambda h, g, p: g.uuid),
    "gpu_bus_id": ("", lambda h, g, p: g.bus_id),
    "gpu_name": ("", lambda h, g, p: g.name),
    "gpu_serial": ("", lambda h, g, p: g.serial),
    "timestamp": ("", lambda h, g, p: clock(h, "%Y/%m/%d %H:%M:%S.000")),
}


class QueryError(Exception):
    """nvidia-smi refused the query; ``str()`` is what it prints."""


# What a GPU with a fault prints in every field that needs the GPU to answer (NVML's
# NVML_ERROR_UNKNOWN and NVML_ERROR_RESET_REQUIRED as nvidia-smi words them).
FAULT_TEXT = {"unknown-error": "[Unknown Error]", "reset-required": "[GPU requires reset]"}
# What it can still tell without the GPU answering: the driver knows these.
_IDENTITY = {"index", "name", "gpu_name", "uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id", "count"}
_IDENTITY |= {"driver_version"}


def device_handle_lost(gpu: SimGpu) -> str:
    """What nvidia-smi prints for a GPU that fell off the bus, in place of its report
    (tests/fixtures/nvidia-smi/error-unable-device-handle-unknown-error.txt: a 4-digit domain,
    no space after "GPU")."""
    return f"Unable to determine the device handle for GPU{gpu.bus_id[4:]}: Unknown Error\n"


def selected(host: SimHost, ids: list[int] | None) -> list[SimGpu]:
    return [g for g in host.gpus if ids is None or g.index in ids]


def _header_cell(name: str, unit: str) -> str:
    return f"{name} [{unit}]" if unit else name


def _value_cell(value: str, unit: str, units: bool) -> str:
    return f"{value} {unit}" if unit and units and not value.startswith("[") else value


def _check_fields(fields: list[str], known: Mapping[str, object]) -> None:
    for name in fields:
        if name not in known:
            raise QueryError(f'Field "{name}" is not a valid field to query.\n\n')


def query_gpu(
    host: SimHost, fields: list[str], header: bool, units: bool, ids: list[int] | None = None
) -> str:
    _check_fields(fields, _GPU_FIELDS)
    lines = []
    if header:
        lines.append(", ".join(_header_cell(f, _GPU_FIELDS[f][0]) for f in fields))
    for gpu in selected(host, ids):
        if gpu.lost:
            lines.append(device_handle_lost(gpu).rstrip("\n"))
            continue
        fault = FAULT_TEXT.get(gpu.fault)
        cells = [
            _value_cell(
                fault if fault and f not in _IDENTITY else _GPU_FIELDS[f][1](host, gpu),
                _GPU_FIELDS[f][0],
                units,
            )
            for f in fields
        ]
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def query_compute_apps(
    host: SimHost, fields: list[str], header: bool, units: bool, ids: list[int] | None = None
) -> str:
    """``--query-compute-apps``: one row per process and GPU it uses, only the GPUs of
    ``-i`` when given; a GPU in MIG mode lists its processes under the GPU itself (no
    instance columns: tests/fixtures/nvidia-smi/csv-compute-apps-590.48.01-h200-mig-load.txt)."""
    _check_fields(fields, _APP_FIELDS)
    lines = []
    if header:
        lines.append(", ".join(_header_cell(f, _APP_FIELDS[f][0]) for f in fields))
    for gpu in selected(host, ids):
        if gpu.lost or gpu.fault:
            continue
        for process in host.processes:
            if str(gpu.index) in process.gpu_mib and not process.hidden:
                cells = [
                    _value_cell(_APP_FIELDS[f][1](host, gpu, process), _APP_FIELDS[f][0], units)
                    for f in fields
                ]
                lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


SECTIONS = ("MEMORY", "PIDS", "ECC", "ROW_REMAPPER")  # the -q -d sections answered


def query_detail(
    host: SimHost, ids: list[int] | None = None, sections: tuple[str, ...] = ()
) -> str:
    """``nvidia-smi -q [-i N] [-d SECTION,...]``: the lines the parsers read, in the 590
    driver's layout (tests/fixtures/nvidia-smi/q-590.48.01-h200-load.txt, and
    q-590.48.01-h200-mig-idle.txt for MIG), the rest left out. With ``-d`` only the
    sections asked for follow each GPU's line, as the real one prints them."""

    def row(indent: int, key: str, value: str) -> str:
        return f"{' ' * indent}{key:<{55 - indent}}: {value}\n"

    parts = [
        "\n==============NVSMI LOG==============\n\n",
        row(0, "Timestamp", "Mon Nov 30 14:02:11 2026"),
        row(0, "Driver Version", host.driver_version),
        row(0, "CUDA Version", host.cuda_version),
        "\n",
        row(0, "Attached GPUs", str(len(host.gpus))),
    ]
    full = not sections
    for gpu in selected(host, ids):
        if gpu.lost:
            parts.append(device_handle_lost(gpu))
            continue
        fault = FAULT_TEXT.get(gpu.fault, "").strip("[]")
        used = host.used_mib(gpu)
        parts.append(f"GPU {gpu.bus_id}\n")
        if full:
            parts += [
                row(4, "Product Name", gpu.name),
                row(4, "Product Architecture", gpu.architecture),
                row(4, "Persistence Mode", "Enabled" if gpu.persistence else "Disabled"),
                row(4, "GPU Recovery Action", fault or gpu.recovery_action),
                "    MIG Mode\n",
                row(8, "Current", fault or ("Enabled" if gpu.mig_enabled else "Disabled")),
                row(8, "Pending", fault or ("Enabled" if gpu.mig_enabled else "Disabled")),
            ]
            for number, instance in enumerate(gpu.mig if not fault else ()):
                parts += [
                    "    MIG Device\n",
                    row(8, "Index", str(number)),
                    row(8, "GPU Instance ID", str(instance.get("gi"))),
                    row(8, "Compute Instance ID", str(instance.get("ci"))),
                ]
            parts += [
                row(4, "GPU UUID", gpu.uuid),
                row(4, "Minor Number", str(gpu.minor_number)),
                "    PCI\n",
                row(8, "Bus", f"0x{gpu.bus_id.split(':')[1]}"),
                row(8, "Bus Id", gpu.bus_id),
            ]
        if full or "MEMORY" in sections:
            parts += [
                "    FB Memory Usage\n",
                row(8, "Total", f"{gpu.memory_total_mib} MiB"),
                row(8, "Reserved", "0 MiB"),
                row(8, "Used", fault or f"{used} MiB"),
                row(8, "Free", fault or f"{max(0, gpu.memory_total_mib - used)} MiB"),
                "    BAR1 Memory Usage\n",
                row(8, "Total", "131072 MiB"),
                row(8, "Used", "1 MiB"),
                row(8, "Free", "131071 MiB"),
            ]
        if "ECC" in sections:
            parts += [
                "    ECC Errors\n",
                "        Volatile\n",
                row(12, "SRAM Correctable", fault or "0"),
                row(12, "SRAM Uncorrectable", fault or "0"),
                row(12, "DRAM Correctable", fault or "0"),
                row(12, "DRAM Uncorrectable", fault or str(gpu.ecc_uncorrected)),
            ]
        if full or "ROW_REMAPPER" in sections:
            parts += [
                "    Remapped Rows\n",
                row(8, "Correctable Error", fault or "0"),
                row(8, "Uncorrectable Error", fault or "0"),
                row(8, "Pending", fault or ("Yes" if gpu.rows_pending else "No")),
                row(
                    8,
                    "Remapping Failure Occurred",
                    fault or ("Yes" if gpu.rows_remap_failed else "No"),
                ),
            ]
        if full:
            registered = host.nvswitch_links and gpu.architecture in ("Hopper", "Blackwell")
            parts += [
                "    Fabric\n",
                row(8, "State", "Completed" if registered else "N/A"),
                row(8, "Status", "Success" if registered else "N/A"),
            ]
        if full or "PIDS" in sections:
            parts += (
                _processes_detail(host, gpu, row) if not fault else [row(4, "Processes", fault)]
            )
        parts.append("\n")
    return "".join(parts)


def _processes_detail(host: SimHost, gpu: SimGpu, row: Callable[[int, str, str], str]) -> list[str]:
    shown = [p for p in host.processes if str(gpu.index) in p.gpu_mib and not p.hidden]
    if not shown:
        return [row(4, "Processes", "None")]
    parts = ["    Processes\n"]
    for process in shown:
        mig = gpu.mig_enabled and process.mig_gi is not None
        parts += [
            row(8, "GPU instance ID", str(process.mig_gi) if mig else "N/A"),
            row(8, "Compute instance ID", str(process.mig_ci) if mig else "N/A"),
            row(8, "Process ID", str(process.pid)),
            row(12, "Type", "C"),
            row(12, "Name", process.cmdline.split()[0] if process.cmdline else ""),
            row(12, "Used GPU Memory", f"{process.gpu_mib[str(gpu.index)]} MiB"),
        ]
    return parts


def topology(host: SimHost) -> str:
    """``nvidia-smi topo -m``: the GPU matrix (NV# between GPUs on the NVSwitch fabric,
    else PCIe paths: NODE within a CPU socket's half, SYS across), then the legend."""
    count = len(host.gpus)
    half = max(1, count // 2)
    lines = [
        "\t"
        + "\t".join(f"GPU{g.index}" for g in host.gpus)
        + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    ]
    for gpu in host.gpus:
        cells = []
        for other in host.gpus:
            if other.index == gpu.index:
                cells.append(" X ")
            elif host.nvswitch_links:
                cells.append(f"NV{host.nvswitch_links}")
            else:
                cells.append("NODE" if gpu.index // half == other.index // half else "SYS")
        numa = gpu.index // half
        lines.append(
            f"GPU{gpu.index}\t"
            + "\t".join(cells)
            + f"\t{numa * 56}-{numa * 56 + 55}\t{numa}\t\tN/A"
        )
    legend = (
        "\nLegend:\n\n"
        "  X    = Self\n"
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
        "  PIX  = Connection traversing at most a single PCIe bridge\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    )
    return "".join(line + "\n" for line in lines) + legend


def gpu_list(host: SimHost, ids: list[int] | None = None) -> str:
    """``nvidia-smi -L``: each GPU, then its MIG devices (list-590.48.01-h100-mig.txt)."""
    lines = []
    for gpu in selected(host, ids):
        if gpu.lost:
            lines.append(device_handle_lost(gpu).rstrip("\n"))
            continue
        lines.append(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        for number, instance in enumerate(gpu.mig if gpu.mig_enabled else ()):
            profile = f"MIG {instance.get('profile', '1g.12gb')}"
            uuid = (
                f"MIG-5a1e{gpu.index:04d}-{int(instance.get('gi', 0)):04d}-4000-8000-{number:012d}"
            )
            lines.append(f"  {profile:<16}Device {number:>2}: (UUID: {uuid})")
    return "".join(line + "\n" for line in lines)


NO_MIG = "No MIG-enabled devices found.\n"


def gpu_instances(host: SimHost, ids: list[int] | None = None) -> str:
    """``nvidia-smi mig -lgi``, in the layout of tests/fixtures/nvidia-smi/mig-lgi-*.txt."""
    gpus = [g for g in selected(host, ids) if g.mig_enabled and not g.lost]
    if not gpus:
        return NO_MIG
    rule = "+" + "-" * 52 + "+"
    lines = [
        rule,
        f"| {'GPU instances:':<51}|",
        "| GPU   Name          Profile  Instance   Placement  |",
        "|                       ID       ID       Start:Size |",
        "|" + "=" * 52 + "|",
    ]
    for gpu in gpus:
        seen: set[int] = set()
        for instance in gpu.mig:
            gi = int(instance.get("gi", 0))
            if gi in seen:
                continue
            seen.add(gi)
            name = f"MIG {instance.get('profile', '1g.12gb')}"
            cells = f"{gpu.index:>4}  {name:<14}{instance.get('profile_id', 19):>5}{gi:>9}"
            placement = str(instance.get("placement", "0:1"))
            lines += [f"|{cells}{placement:>13}     |", rule]
    return "".join(line + "\n" for line in lines)


def compute_instances(host: SimHost, ids: list[int] | None = None) -> str:
    """``nvidia-smi mig -lci``, in the layout of tests/fixtures/nvidia-smi/mig-lci-*.txt."""
    gpus = [g for g in selected(host, ids) if g.mig_enabled and not g.lost]
    if not gpus:
        return NO_MIG
    rule = "+" + "-" * 55 + "+"
    lines = [
        rule,
        f"| {'Compute instances:':<54}|",
        "| GPU     GPU       Name             Profile   Instance |",
        "|       Instance                       ID        ID     |",
        "|         ID                                            |",
        "|" + "=" * 55 + "|",
    ]
    for gpu in gpus:
        for instance in gpu.mig:
            name = f"MIG {instance.get('profile', '1g.12gb')}"
            ci_profile = int(instance.get("ci_profile_id", 0))
            cells = (
                f"{gpu.index:>4}{int(instance.get('gi', 0)):>7}       {name:<20}"
                f"{ci_profile:>2}{int(instance.get('ci', 0)):>10}"
            )
            lines += [f"|{cells:<55}|", rule]
    return "".join(line + "\n" for line in lines)


def reset_succeeded(gpu: SimGpu) -> str:
    return f"GPU {gpu.bus_id} was successfully reset.\n"


def reset_refused(gpu: SimGpu, reason: str) -> str:
    return (
        "The following GPUs could not be reset:\n"
        f"  GPU {gpu.bus_id}: {reason}\n\n"
        "1 device is currently being used by one or more other processes (e.g. Fabric Manager, "
        "CUDA application, graphics application such as an X server, or a monitoring application "
        "such as another instance of nvidia-smi). Please first kill all processes using this "
        "device and all compute applications running in the system.\n"
    )


_RULE = (
    "+-----------------------------------------+------------------------+----------------------+"
)
_WIDE = "+" + "-" * 89 + "+"


def clock(host: SimHost, layout: str, now: float | None = None) -> str:
    """The host's clock as its tools print it (UTC): its simulated time, never this machine's,
    so one command answers the same whenever it runs (a drill's clock moves only on a wait)."""
    return time.strftime(layout, time.gmtime(EPOCH + host.now if now is None else now))


def table(host: SimHost, now: float | None = None) -> str:
    """The default nvidia-smi view, in the 590-driver layout (91 columns)."""
    stamp = clock(host, "%a %b %e %H:%M:%S %Y", now)
    head = f"NVIDIA-SMI {host.driver_version}"
    driver = f"Driver Version: {host.driver_version}"
    cuda = f"CUDA Version: {host.cuda_version}"
    lines = [
        f"{stamp}       ",
        _WIDE,
        f"| {head:<34}{driver:<31}{cuda:<23}|",
        _RULE,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for gpu in host.gpus:
        name = gpu.name if len(gpu.name) <= 27 else gpu.name[:24] + "..."
        persistence = "On" if gpu.persistence else "Off"
        memory = f"{host.used_mib(gpu)}MiB / {gpu.memory_total_mib}MiB"
        lines += [
            f"| {gpu.index:>3}  {name:<{33 - len(persistence)}}{persistence}  |"
            f"   {gpu.bus_id} Off |{'Off':>21} |",
            f"| 30%   {gpu.temperature_c}C    P8             22W /  600W |{memory:>23} |"
            f"{'0%':>8}{'Default':>13} |",
            f"|                                         |                        |"
            f"{'Enabled' if gpu.mig_enabled else 'N/A':>21} |",
            _RULE,
        ]
    lines += [
        "",
        _WIDE,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    rows = [
        (gpu.index, process, mib)
        for gpu in host.gpus
        for process in host.processes
        if (mib := process.gpu_mib.get(str(gpu.index))) and not process.hidden
    ]
    if not rows:
        lines.append("|  No running processes found" + " " * 61 + "|")
    for index, process, mib in rows:
        name = process.cmdline.split()[0] if process.cmdline else ""
        name = name if len(name) <= 36 else "..." + name[-33:]  # nvidia-smi cuts on the left
        mig = host.gpu(index).mig_enabled and process.mig_gi is not None
        gi, ci = (f"{process.mig_gi:>4}", f"{process.mig_ci:>4}") if mig else (" N/A", " N/A")
        lines.append(f"|{index:>5}  {gi} {ci} {process.pid:>15}      C   {name:<36}{mib:>7}MiB |")
    lines.append(_WIDE)
    return "\n".join(lines) + "\n"


# -- free ---------------------------------------------------------------------------


def _human(value: int) -> str:
    """procps-ng 4.x -h: binary suffixes, one decimal below 10, zero as 0B."""
    if value == 0:
        return "0B"
    for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
        scaled = value / 1024**power
        if scaled >= 1:
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{round(scaled)}{suffix}"
    return f"{value}B"


# procps-ng's translations of the header and the row labels (de.po, fr.po).
_FREE_LANGUAGES = {
    "de": (
        ("gesamt", "benutzt", "frei", "gemns.", "Puffer/Cache", "verfügbar"),
        "Speicher:",
        "Auslager:",
    ),
    "fr": (
        ("total", "utilisé", "libre", "partagé", "tamp/cache", "disponible"),
        "Mem:",
        "Partition d'échange:",
    ),
}


def free(host: SimHost, divisor: int = 1024, human: bool = False, language: str = "C") -> str:
    """``free`` as procps-ng 4.x prints it (used = total - available), in ``language``."""
    total = host.memory_total_bytes
    available = host.host_available_bytes()
    used = total - available
    buff_cache = min(host.buff_cache_bytes, available)
    free_bytes = max(0, total - used - buff_cache)
    values = [total, used, free_bytes, host.shared_bytes, buff_cache, available]

    def cell(value: int) -> str:
        return _human(value) if human else str(value // divisor)

    names, mem_label, swap_label = _FREE_LANGUAGES.get(
        language,
        (("total", "used", "free", "shared", "buff/cache", "available"), "Mem:", "Swap:"),
    )
    header = f"{'':<9}{names[0]:>11}" + "".join(f" {name:>11}" for name in names[1:])
    mem = f"{mem_label:<9}{cell(values[0]):>11}" + "".join(f" {cell(v):>11}" for v in values[1:])
    swap = f"{swap_label:<9}{cell(0):>11}" + "".join(f" {cell(0):>11}" for _ in range(2))
    return f"{header}\n{mem}\n{swap}\n"


def meminfo(host: SimHost) -> str:
    """``/proc/meminfo``, the lines that agree with :func:`free` (kB, meaning KiB)."""
    total = host.memory_total_bytes
    available = host.host_available_bytes()
    buff_cache = min(host.buff_cache_bytes, available)
    free_bytes = max(0, total - (total - available) - buff_cache)
    rows = [
        ("MemTotal", total),
        ("MemFree", free_bytes),
        ("MemAvailable", available),
        ("Buffers", 0),
        ("Cached", buff_cache),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("Shmem", host.shared_bytes),
    ]
    lines = [f"{key + ':':<16}{value // 1024:>8} kB" for key, value in rows]
    lines += ["HugePages_Total:       0", "HugePages_Free:        0", "Hugepagesize:       2048 kB"]
    return "\n".join(lines) + "\n"


# GNU df --output field -> (header, value)
DF_FIELDS = {
    "source": "Filesystem",
    "fstype": "Type",
    "size": "1B-blocks",
    "used": "Used",
    "avail": "Avail",
    "pcent": "Use%",
    "file": "File",
    "target": "Mounted on",
}


def _df_human(value: int) -> str:
    """GNU df -h: one decimal below 10, suffix without "i", rounded up."""
    for suffix, power in (("T", 4), ("G", 3), ("M", 2), ("K", 1)):
        scaled = value / 1024**power
        if scaled >= 1:
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{-(-value // 1024**power)}{suffix}"
    return str(value)


def df(
    host: SimHost,
    paths: list[str],
    output: list[str] | None = None,
    block: int = 1024,
    human: bool = False,
    posix: bool = False,
) -> tuple[str, list[str]]:
    """What df prints for these paths (all filesystems when none), and its complaints."""
    errors: list[str] = []
    chosen: list[tuple[str, SimFilesystem]] = []
    for path in paths or [f.mounted_on for f in host.filesystems]:
        found = host.filesystem_of(path)
        if found is None:
            errors.append(f"df: {path}: No such file or directory\n")
        else:
            chosen.append((path, found))
    fields = output or ["source", "size", "used", "avail", "pcent", "target"]
    size_header = "Size" if human else ("1B-blocks" if block == 1 else f"{block // 1024}K-blocks")
    if posix and not human:
        size_header = f"{block}-blocks"

    def header(name: str) -> str:
        if name == "size":
            return size_header
        if posix and name == "avail":
            return "Available"
        if posix and name == "pcent":
            return "Capacity"
        if not output and name == "avail" and not human:
            return "Available"
        return DF_FIELDS[name]

    def cell(name: str, path: str, fs: SimFilesystem) -> str:
        sizes = {"size": fs.size_bytes, "used": fs.used_bytes, "avail": fs.available_bytes}
        if name in sizes:
            return _df_human(sizes[name]) if human else str(-(-sizes[name] // block))
        if name == "pcent":
            used = fs.used_bytes + fs.available_bytes
            return f"{-(-fs.used_bytes * 100 // used) if used else 0}%"
        return {
            "source": fs.filesystem,
            "fstype": fs.fstype,
            "file": path,
            "target": fs.mounted_on,
        }[name]

    rows = [[header(f) for f in fields]] + [[cell(f, p, fs) for f in fields] for p, fs in chosen]
    widths = [max(len(r[i]) for r in rows) for i in range(len(fields))]
    text_fields = {"source", "fstype", "file", "target"}
    lines = []
    for row in rows:
        cells = []
        for i, (name, value) in enumerate(zip(fields, row, strict=True)):
            last = i == len(fields) - 1
            if name in text_fields:
                cells.append(value if last else value.ljust(widths[i]))
            else:
                cells.append(value.rjust(widths[i]))
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines) + "\n", errors
