"""Typed host state: what the parsers produce and the checks read.

Every value a host may fail to report is ``None``. Field metadata gives the
label and unit that check messages use (``memory.used 96,413 MiB``).

The records live by what they describe: :mod:`.gpu`, :mod:`.host` (memory and storage),
:mod:`.process`, :mod:`.launch` (a server's flags) and :mod:`.generic` (any command's
output); :mod:`.fields` holds what they are made of. This module names them all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe.state.fields import (
    OpenRecord,
    field_kinds,
    field_label,
    field_names,
    has_field,
    open_type,
    snake,
)
from runbook_runner.observe.state.generic import Number, TableRow, TextLine
from runbook_runner.observe.state.gpu import (
    ComputeInstance,
    DeviceHolder,
    Gpu,
    GpuFabric,
    GpuInstance,
    GpuProcess,
    MigDevice,
    XidEvent,
)
from runbook_runner.observe.state.host import Filesystem, MemInfo, Memory, ShmSegment
from runbook_runner.observe.state.launch import LaunchConfig, VllmLaunchConfig
from runbook_runner.observe.state.limits import MemoryLimit
from runbook_runner.observe.state.process import HostProcess, ProcessOwner, UnitProperties

__all__ = [
    "ComputeInstance",
    "DeviceHolder",
    "Filesystem",
    "Gpu",
    "GpuFabric",
    "GpuInstance",
    "GpuProcess",
    "HostProcess",
    "LaunchConfig",
    "MemInfo",
    "Memory",
    "MemoryLimit",
    "MigDevice",
    "Number",
    "OpenRecord",
    "ProcessOwner",
    "Record",
    "ShmSegment",
    "TableRow",
    "TextLine",
    "Unavailable",
    "UnitProperties",
    "VllmLaunchConfig",
    "XidEvent",
    "field_kinds",
    "field_label",
    "field_names",
    "has_field",
    "open_type",
    "snake",
    "to_json",
]


@dataclass(frozen=True)
class Unavailable:
    """An observation that produced no state: the command or its parser failed."""

    reason: str
    condition: str = "failed"


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


def to_json(record: Record) -> dict[str, Any]:
    return dataclasses.asdict(record)
