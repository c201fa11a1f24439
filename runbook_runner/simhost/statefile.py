"""A simulated host described in a small YAML file, for ``runbook test --state FILE``.

Every key is optional; what is not given is the incident's server (8 GPUs with
97,887 MiB each, 449 GiB of RAM, nvidia-persistenced running, a 1.7 TiB root
filesystem and /dev/shm)::

    gpus: 8                          # or a list: [{index: 0, orphaned_mib: 96410}, ...]
                                     # a sick GPU: {index: 6, lost: true} or
                                     #   {index: 5, fault: reset-required | unknown-error}
                                     # MIG: {index: 1, mig_enabled: true, mig: [{gi: 1, ci: 0,
                                     #   profile: 3g.48gb, profile_id: 9, placement: "4:4"}]}
    processes:                       # what ps, nvidia-smi, fuser, curl and kill see
      - {pid: 4120, cmdline: "sglang::scheduler_TP0", gpu_mib: {0: 90112}, host_bytes: 38 GiB,
         ppid: 4100, pgid: 4100, sid: 4100, user: svc, unit: sglang.service,
         cgroup: /system.slice/sglang.service, state: S, environ: {CUDA_VISIBLE_DEVICES: "0"},
         exe: /usr/bin/python3.12}  # /proc/PID/exe (default: a path its command starts with)
                                     # a server: listens: 30000, health: ok | error | hung,
                                     #   livelocked: 12 (requests wait, /metrics stands still)
                                     # on a MIG GPU: mig_gi, mig_ci (the instance it runs in)
    services:                        # systemctl; MainPID, NRestarts, journalctl's lines
      - {name: sglang, active: true, main_pid: 4100, restarts: 0, log: ["..."]}
    shm:                             # /dev/shm: size, owner, age, the PID that holds it
      - {path: /dev/shm/sglang_hicache_0, size: 40 GiB, owner: root, age_s: 900, holder: null}
    memory: {total: 449 GiB, used: 9 GiB, buff_cache: 2 GiB}
    filesystems:                     # what df reports
      - {mounted_on: /tmp, size: 20 GiB, used: 19.5 GiB, filesystem: tmpfs, fstype: tmpfs}
    files: {/proc/sys/kernel/pid_max: "4194304\\n"}   # what cat prints
    kernel_messages: ["NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus."]
    driver_loaded: true
    library_version: "595.10.02"     # the installed library, when not the loaded module's
    module_missing: false            # true: modprobe finds no NVIDIA module for the kernel

A process's ``state`` is S (the default: running or sleeping) or D (uninterruptible: no
signal ends it); its ``pgid`` and ``sid`` default to its own PID.

Sizes are bytes, or a number with a unit (``512 MiB``, ``1.5 GiB``, ``2 GB``). Pure:
a mapping in, a :class:`SimHost` out, :class:`StateFileError` for anything else.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from decimal import Decimal, InvalidOperation
from typing import Any

from runbook_runner.simhost.hosts import START
from runbook_runner.simhost.model import (
    SHM_DIR,
    SimFilesystem,
    SimGpu,
    SimHost,
    SimProcess,
    SimService,
    SimShm,
    eight_gpu_server,
)


class StateFileError(ValueError):
    pass


_GPU_FAULTS = ("", "unknown-error", "reset-required")  # what a GPU's fields can answer
MAX_GPUS = 256  # the largest servers have 16 GPUs; 10,000,000 took 18 s and 2.8 GB


_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGTP]i?B|B)?\s*$")
_UNITS = {"B": 1, **{f"{p}iB": 1024 ** (i + 1) for i, p in enumerate("KMGTP")}}
_UNITS.update({f"{p}B": 1000 ** (i + 1) for i, p in enumerate("KMGTP")})
_TOP = (
    "gpus",
    "processes",
    "services",
    "memory",
    "filesystems",
    "files",
    "kernel_messages",
    "driver_loaded",
    "library_version",
    "module_missing",
    "shm",
)
_MEMORY = {
    "total": "memory_total_bytes",
    "used": "memory_base_used_bytes",
    "buff_cache": "buff_cache_bytes",
    "shared": "shared_bytes",
    "leaked": "leaked_host_bytes",
}


def size(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise StateFileError(f"{where}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if match is None:
        raise StateFileError(f"{where}: {value!r} is not a size (bytes, or e.g. '1.5 GiB')")
    try:
        return int(Decimal(match["num"]) * _UNITS[match["unit"] or "B"])
    except InvalidOperation:
        raise StateFileError(f"{where}: {value!r} is not a size") from None


def _keys(data: Any, known: tuple[str, ...] | list[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise StateFileError(f"{where}: expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            raise StateFileError(f"{where}: unknown key {key!r}{hint}")
    return data


def _record(cls: type, data: Any, where: str, sizes: dict[str, str]) -> Any:
    """A dataclass from a mapping: its fields, plus ``size``-style aliases of byte fields.
    Each value must have its field's type: a wrong one is an error here, not a crash of
    the simulated host in the middle of a run."""
    fields = [f.name for f in dataclasses.fields(cls)]
    data = dict(_keys(data, [*fields, *sizes], where))
    for alias, name in sizes.items():
        if alias in data:
            data[name] = size(data.pop(alias), f"{where}.{alias}")
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name in sizes.values() and isinstance(value, str):
            data[name] = size(value, f"{where}.{name}")
        elif not _has_type(value, hints.get(name, Any)):
            raise StateFileError(
                f"{where}.{name}: expected {_type_name(hints[name])}, got {value!r}"
            )
    try:
        return cls(**data)
    except TypeError as error:
        raise StateFileError(f"{where}: {error}") from None


def _has_type(value: Any, hint: Any) -> bool:
    """Whether a value read from YAML fits a field's annotation (the simple kinds the
    simulated host's records use; anything else is let through)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if origin is list or hint is list:
        return isinstance(value, list)
    return True


def _type_name(hint: Any) -> str:
    names = {int: "an integer", float: "a number", str: "text", bool: "true or false"}
    arms = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    origin = typing.get_origin(arms[0])
    if origin is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return " or ".join(names.get(a, getattr(a, "__name__", str(a))) for a in arms)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise StateFileError(f"{key}: expected a list, got {value!r}")
    return value


def host_from_state(data: Any) -> SimHost:
    if data is None:
        data = {}
    data = _keys(data, _TOP, "state")
    host = eight_gpu_server()
    gpus = data.get("gpus", 8)
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        if not 0 <= gpus <= MAX_GPUS:
            raise StateFileError(f"gpus: {gpus} GPUs (a host has 0 to {MAX_GPUS})")
        host.gpus = [SimGpu(index=i) for i in range(gpus)]
    elif isinstance(gpus, list):
        if len(gpus) > MAX_GPUS:
            raise StateFileError(f"gpus: {len(gpus)} GPUs (a host has 0 to {MAX_GPUS})")
        host.gpus = [
            _record(SimGpu, {"index": i, **g} if isinstance(g, dict) else g, f"gpus[{i}]", {})
            for i, g in enumerate(gpus)
        ]
    else:
        raise StateFileError("gpus: expected a count or a list of GPUs")
    for i, gpu in enumerate(host.gpus):
        if gpu.fault not in _GPU_FAULTS:
            raise StateFileError(
                f"gpus[{i}].fault: {gpu.fault!r} (one of: {', '.join(_GPU_FAULTS[1:])})"
            )
    for i, p in enumerate(_list(data, "processes")):
        p = _process_state(p, f"processes[{i}]")
        process = _record(SimProcess, p, f"processes[{i}]", {"host_memory": "host_bytes"})
        try:
            process.gpu_mib = {str(k): int(v) for k, v in (process.gpu_mib or {}).items()}
        except (TypeError, ValueError):
            raise StateFileError(
                f"processes[{i}].gpu_mib: expected GPU index: MiB, got {process.gpu_mib!r}"
            ) from None
        host.processes.append(process)
    if "services" in data:
        host.services = [
            _record(SimService, s, f"services[{i}]", {})
            for i, s in enumerate(_list(data, "services"))
        ]
    for key, value in _keys(data.get("memory") or {}, list(_MEMORY), "memory").items():
        setattr(host, _MEMORY[key], size(value, f"memory.{key}"))
    if "filesystems" in data:
        host.filesystems = [
            _record(
                SimFilesystem, f, f"filesystems[{i}]", {"size": "size_bytes", "used": "used_bytes"}
            )
            for i, f in enumerate(_list(data, "filesystems"))
        ]
        if not any(f.mounted_on == "/" for f in host.filesystems):
            host.filesystems.insert(0, SimFilesystem("/", 1_920_383_410_176, 412 * 1024**3))
    host.shm = [_segment(seg, f"shm[{i}]") for i, seg in enumerate(_list(data, "shm"))]
    files = data.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise StateFileError("files: expected a mapping of path: text")
    host.files = {str(k): v for k, v in files.items()}
    host.kernel_messages = [str(m) for m in _list(data, "kernel_messages")]
    host.driver_loaded = bool(data.get("driver_loaded", True))
    host.library_version = str(data.get("library_version") or "")
    host.module_missing = bool(data.get("module_missing", False))
    return host


def _process_state(data: Any, where: str) -> Any:
    """``state: D`` is a process no signal ends (``stuck``); S and R are the default."""
    if not isinstance(data, dict) or "state" not in data:
        return data
    data = dict(data)
    state = data.pop("state")
    if state not in ("S", "R", "D"):
        raise StateFileError(f"{where}.state: expected S, R or D, got {state!r}")
    if state == "D":
        data["stuck"] = True
    return data


_SHM_KEYS = ("name", "path", "size", "size_bytes", "owner", "age_s", "mtime", "holder")


def _segment(data: Any, where: str) -> SimShm:
    """A /dev/shm file: ``path`` (or ``name``), ``size``, ``owner``, ``age_s`` (seconds
    old when the simulated host starts) and ``holder`` (the PID that has it open)."""
    data = dict(_keys(data, _SHM_KEYS, where))
    path = data.pop("path", None)
    if path is not None:
        if not isinstance(path, str) or not path.startswith(SHM_DIR + "/"):
            raise StateFileError(f"{where}.path: expected a file in {SHM_DIR}, got {path!r}")
        data.setdefault("name", path.removeprefix(SHM_DIR + "/"))
    name = data.get("name")
    if not isinstance(name, str) or not name or "/" in name or name in {".", ".."}:
        raise StateFileError(f"{where}: expected a file name (name: or path:), got {name!r}")
    if "size" in data:
        data["size_bytes"] = data.pop("size")
    data["size_bytes"] = size(data.get("size_bytes", 0), f"{where}.size")
    if "age_s" in data:
        age = data.pop("age_s")
        if isinstance(age, bool) or not isinstance(age, int | float) or age < 0:
            raise StateFileError(f"{where}.age_s: expected seconds, got {age!r}")
        data["mtime"] = START - float(age)
    segment: SimShm = _record(SimShm, data, where, {})
    return segment
