"""Pure parsers: command output in, typed state out. No I/O happens here.

:data:`PARSERS` names each parser a runbook may use, with the record type it
produces and whether it produces a list of records or a single one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe import (
    df,
    free,
    fuser,
    meminfo,
    memlimit,
    number,
    nvidia_fabric,
    nvidia_mig,
    nvidia_smi,
    nvidia_smi_q,
    proctree,
    ps,
    sglang,
    shm,
    systemd,
    table,
    vllm,
    xid,
)
from runbook_runner.observe.state import (
    ComputeInstance,
    DeviceHolder,
    Filesystem,
    Gpu,
    GpuFabric,
    GpuInstance,
    GpuProcess,
    HostProcess,
    LaunchConfig,
    MemInfo,
    Memory,
    MemoryLimit,
    MigDevice,
    Number,
    ProcessOwner,
    ShmSegment,
    TableRow,
    TextLine,
    UnitProperties,
    VllmLaunchConfig,
    XidEvent,
)


@dataclass(frozen=True)
class Parser:
    record_type: type
    is_list: bool
    parse: Callable[[str, int, str], Any]  # (stdout, exit status, command) -> state
    description: str
    tool: str  # what reports the values, for "not reported by nvidia-smi"


def _gpus(text: str, status: int, command: str) -> Any:
    query = nvidia_smi.query_from_command(command)
    return nvidia_smi.parse_gpus(text, query.fields if query else None, status)


def _gpu_processes(text: str, status: int, command: str) -> Any:
    query = nvidia_smi.query_from_command(command)
    return nvidia_smi.parse_compute_apps(text, query.fields if query else None, status)


def _gpus_detail(text: str, status: int, command: str) -> Any:
    return nvidia_smi_q.parse_query(text, status)


def _gpu_processes_detail(text: str, status: int, command: str) -> Any:
    return nvidia_smi_q.parse_processes(text, status)


def _gpu_fabric(text: str, status: int, command: str) -> Any:
    return nvidia_fabric.parse_fabric(text, status)


def _gpu_list(text: str, status: int, command: str) -> Any:
    return nvidia_mig.parse_list(text, status)


def _gpu_instances(text: str, status: int, command: str) -> Any:
    return nvidia_mig.parse_gpu_instances(text, status)


def _compute_instances(text: str, status: int, command: str) -> Any:
    return nvidia_mig.parse_compute_instances(text, status)


def _holders(text: str, status: int, command: str) -> Any:
    return fuser.parse_fuser(text)


def _free(text: str, status: int, command: str) -> Any:
    return free.parse_free(text, free.units_from_command(command))


def _processes(text: str, status: int, command: str) -> Any:
    return ps.parse_ps(text)


def _owners(text: str, status: int, command: str) -> Any:
    return proctree.parse_owners(text)


def _launch(text: str, status: int, command: str) -> Any:
    return sglang.parse_launch(text)


def _vllm_launch(text: str, status: int, command: str) -> Any:
    return vllm.parse_launch(text)


def _lines(text: str, status: int, command: str) -> Any:
    return tuple(TextLine(line.rstrip("\r")) for line in text.split("\n") if line.strip())


def _df(text: str, status: int, command: str) -> Any:
    return df.parse_df(text, command)


def _meminfo(text: str, status: int, command: str) -> Any:
    return meminfo.parse_meminfo(text)


def _systemctl_show(text: str, status: int, command: str) -> Any:
    return systemd.parse_show(text)


def _memory_limit(text: str, status: int, command: str) -> Any:
    return memlimit.parse_limits(text)


def _number(text: str, status: int, command: str) -> Any:
    return number.parse_number(text)


def _table(text: str, status: int, command: str) -> Any:
    return table.parse_table(text)


def _xid(text: str, status: int, command: str) -> Any:
    return xid.parse_xid(text)


def _shm(text: str, status: int, command: str) -> Any:
    return shm.parse_shm(text)


PARSERS: dict[str, Parser] = {
    "xid-events": Parser(
        XidEvent, True, _xid, "dmesg: NVRM Xid lines, with NVIDIA's catalog action", "dmesg"
    ),
    "shm-segments": Parser(
        ShmSegment,
        True,
        _shm,
        "date +%s, then SIZE OWNER MTIME held|free PATH per /dev/shm file",
        "the /dev/shm listing",
    ),
    "gpus": Parser(Gpu, True, _gpus, "nvidia-smi --query-gpu=... --format=csv", "nvidia-smi"),
    "gpu-processes": Parser(
        GpuProcess,
        True,
        _gpu_processes,
        "nvidia-smi --query-compute-apps=... --format=csv",
        "nvidia-smi",
    ),
    "gpus-detail": Parser(
        Gpu, True, _gpus_detail, "nvidia-smi -q (adds each GPU's minor number)", "nvidia-smi"
    ),
    "gpu-processes-detail": Parser(
        GpuProcess,
        True,
        _gpu_processes_detail,
        "nvidia-smi -q -d PIDS: each process with its GPU and, in MIG mode, its GPU and "
        "compute instance",
        "nvidia-smi",
    ),
    "gpu-fabric": Parser(
        GpuFabric,
        True,
        _gpu_fabric,
        "echo '@@ topo'; nvidia-smi topo -m; echo '@@ fabric-manager'; systemctl is-active "
        "nvidia-fabricmanager; echo '@@ query'; nvidia-smi -q: each GPU with its NVLink "
        "peers, architecture and fabric state (what a reset of it reaches: plan/fabric.py)",
        "nvidia-smi",
    ),
    "gpu-list": Parser(
        MigDevice,
        True,
        _gpu_list,
        "nvidia-smi -L: each GPU, then each of its MIG devices",
        "nvidia-smi",
    ),
    "mig-gpu-instances": Parser(
        GpuInstance, True, _gpu_instances, "nvidia-smi mig -lgi: the GPU instances", "nvidia-smi"
    ),
    "mig-compute-instances": Parser(
        ComputeInstance,
        True,
        _compute_instances,
        "nvidia-smi mig -lci: the compute instances",
        "nvidia-smi",
    ),
    "device-holders": Parser(
        DeviceHolder, True, _holders, "fuser -v /dev/nvidia* 2>&1 (ok_exit: [0, 1])", "fuser"
    ),
    "free": Parser(
        Memory, False, _free, "free (procps-ng, procps, BusyBox), any unit flag", "free"
    ),
    "processes": Parser(HostProcess, True, _processes, "ps -eo pid,stat,args", "ps"),
    "process-owners": Parser(
        ProcessOwner,
        True,
        _owners,
        "ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args; echo '@@ fuser'; "
        "fuser -v /dev/nvidia* 2>&1; then, optional, '@@ proc' (PID KEY=VALUE: environment, "
        "loginuid, exe, mount), '@@ listening' (ss -ltnp), '@@ mps' (server S, client S C); "
        "echo '@@ end' (classified by the runbook's subject)",
        "ps and fuser",
    ),
    "lines": Parser(TextLine, True, _lines, "one item per non-empty line", "the command"),
    "sglang-launch": Parser(
        LaunchConfig, False, _launch, "an sglang.launch_server command line", "the launch command"
    ),
    "vllm-launch": Parser(
        VllmLaunchConfig, False, _vllm_launch, "a vllm serve command line", "the launch command"
    ),
    "df": Parser(
        Filesystem,
        True,
        _df,
        "df -B1 --output=..., df -P, df [-h]: one item per filesystem, sizes in bytes",
        "df",
    ),
    "meminfo": Parser(
        MemInfo,
        False,
        _meminfo,
        "cat /proc/meminfo, or any 'Key: value [unit]' file: sizes in bytes",
        "the file",
    ),
    "systemctl-show": Parser(
        UnitProperties,
        False,
        _systemctl_show,
        "systemctl show -p Prop,... UNIT: Key=value lines of one unit",
        "systemctl",
    ),
    "memory-limit": Parser(
        MemoryLimit,
        False,
        _memory_limit,
        "PATH=VALUE of the cgroup v2/v1 memory files and container markers, then df -B1 "
        "--output=target,size,avail /dev/shm (the preflights' command)",
        "the cgroup files",
    ),
    "number": Parser(Number, False, _number, "a number alone on one line", "the command"),
    "table": Parser(
        TableRow,
        True,
        _table,
        "a whitespace table with a header line (lsblk, ps -o ...): one item per row",
        "the command",
    ),
}

# What ``NAME.condition`` can be: 'ok', the runner's reasons an observation could not be
# made, and the failures nvidia-smi prints (nvidia_smi._FAILURES).
CONDITIONS: tuple[str, ...] = (
    "ok",
    "failed",
    "not-found",
    "timed-out",
    "unparsable",
    *nvidia_smi.CONDITIONS,
)
