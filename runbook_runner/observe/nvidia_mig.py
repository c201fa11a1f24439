"""Parsers for a GPU in MIG mode: ``nvidia-smi -L``, ``nvidia-smi mig -lgi`` and ``-lci``.

A GPU in MIG (Multi-Instance GPU) mode is split into GPU instances (GIs), each holding one
or more compute instances (CIs); a process runs in one CI, and ``nvidia-smi -L`` lists each
GI/CI pair as a MIG device under its GPU (NVIDIA's MIG user guide,
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/). Formats, from real output
(tests/fixtures/nvidia-smi/)::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)
      MIG 3g.40gb     Device  0: (UUID: MIG-00000000-0000-0000-0000-000000000000)

    |   0  MIG 3g.20gb       9        1          4:4     |        (-lgi: GPU, name,
                                                                 profile ID, GI ID, placement)
    |   0      1       MIG 1c.3g.20gb       0         0     |    (-lci: GPU, GI ID, name,
                                                                 profile ID, CI ID[, placement])

"No MIG-enabled devices found." and "No GPU/compute instances found" are empty lists: a host
without MIG, or a MIG GPU with nothing configured. Other nvidia-smi failures raise.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.nvidia_smi import detect_failure
from runbook_runner.observe.state import ComputeInstance, GpuInstance, MigDevice

_GPU_LINE = re.compile(r"^GPU (?P<gpu>\d+): (?P<name>.*?) \(UUID: (?P<uuid>[^)]+)\)\s*$")
_MIG_LINE = re.compile(
    r"^\s+MIG (?P<name>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>[^)]+)\)\s*$"
)
_GI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG (?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<id>\d+)"
    r"\s+(?P<placement>\d+:\d+)\s*\|$"
)
_CI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG (?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<id>\d+)"
    r"(?:\s+\d+:\d+)?\s*\|$"
)
_NONE = re.compile(r"^No (?:MIG-enabled devices|GPU instances|compute instances) found", re.M)
_FRAME = re.compile(r"^(?:\+[-=+]*\+|\|[=]+\||\|.*\|)$")


def _check(text: str, exit_status: int) -> bool:
    """Raise nvidia-smi's own failures; True when the output says there is nothing."""
    if _NONE.search(text):
        return True
    failure = detect_failure(text, exit_status)
    if failure is not None:
        raise failure
    return False


def parse_list(text: str, exit_status: int = 0) -> tuple[MigDevice, ...]:
    """``nvidia-smi -L`` -> each GPU, and each of its MIG devices after it."""
    if _check(text, exit_status):
        return ()
    found: list[MigDevice] = []
    gpu: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if (match := _GPU_LINE.match(line)) is not None:
            gpu = int(match["gpu"])
            found.append(MigDevice(gpu, match["name"], match["uuid"]))
        elif (match := _MIG_LINE.match(line)) is not None and gpu is not None:
            found.append(MigDevice(gpu, match["name"], match["uuid"], int(match["index"])))
        else:
            raise ParseError(
                f"nvidia-smi -L line {number} is neither a GPU nor a MIG device: {line[:100]!r}"
            )
    return tuple(found)


def _table_rows(text: str, what: str) -> list[str]:
    rows = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if not _FRAME.match(line):
            raise ParseError(
                f"nvidia-smi mig {what} line {number} is not part of its table: {line[:100]!r}"
            )
        if line.startswith("|") and re.match(r"^\|\s*\d", line):
            rows.append(line)
    return rows


def parse_gpu_instances(text: str, exit_status: int = 0) -> tuple[GpuInstance, ...]:
    """``nvidia-smi mig -lgi`` -> one record per GPU instance."""
    if _check(text, exit_status):
        return ()
    found = []
    for line in _table_rows(text, "-lgi"):
        match = _GI_ROW.match(line)
        if match is None:
            raise ParseError(f"nvidia-smi mig -lgi row not understood: {line[:100]!r}")
        found.append(
            GpuInstance(
                int(match["gpu"]),
                f"MIG {match['name']}",
                int(match["profile"]),
                int(match["id"]),
                match["placement"],
            )
        )
    return tuple(found)


def parse_compute_instances(text: str, exit_status: int = 0) -> tuple[ComputeInstance, ...]:
    """``nvidia-smi mig -lci`` -> one record per compute instance."""
    if _check(text, exit_status):
        return ()
    found = []
    for line in _table_rows(text, "-lci"):
        match = _CI_ROW.match(line)
        if match is None:
            raise ParseError(f"nvidia-smi mig -lci row not understood: {line[:100]!r}")
        found.append(
            ComputeInstance(
                int(match["gpu"]),
                int(match["gi"]),
                f"MIG {match['name']}",
                int(match["profile"]),
                int(match["id"]),
            )
        )
    return tuple(found)
