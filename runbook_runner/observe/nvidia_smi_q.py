"""Parser for ``nvidia-smi -q`` (the text report): one :class:`Gpu` per ``GPU <bus id>`` block.

It is the one nvidia-smi report that gives each GPU's **minor number**, the N of its
``/dev/nvidiaN`` file, which is not always nvidia-smi's index; a runbook needs it to find
the processes that hold a given GPU (``fuser -v /dev/nvidia*``). GPUs appear in index order.
Memory is read from the ``FB Memory Usage`` section only (BAR1 and others have a ``Used``
line too). Failures nvidia-smi prints instead of a report become :class:`NvidiaSmiFailure`.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.nvidia_smi import detect_failure, integer
from runbook_runner.observe.state import Gpu

_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*:\s(?P<value>.*)$")
_TOP_KEYS = {
    "Product Name": "name",
    "GPU UUID": "uuid",
    "Minor Number": "minor_number",
    "Persistence Mode": "persistence_mode",
}
_MEMORY_KEYS = {"Total": "memory_total_mib", "Used": "memory_used_mib", "Free": "memory_free_mib"}
_NUMBERS = {"minor_number", "memory_total_mib", "memory_used_mib", "memory_free_mib"}


def parse_query(text: str, exit_status: int = 0) -> tuple[Gpu, ...]:
    failure = detect_failure(text, exit_status)
    if failure is not None:
        raise failure
    blocks: list[dict[str, object]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        start = _GPU.match(line)
        if start is not None:
            blocks.append({"pci_bus_id": start["bus"]})
            section = ""
            continue
        if not blocks or not line.strip():
            continue
        match = _KEY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if match is None:
            if indent == 4:
                section = line.strip()
            continue
        key, value = match["key"].strip(), match["value"].strip()
        field = None
        if indent == 4:
            section = ""
            field = _TOP_KEYS.get(key)
        elif indent == 8 and section == "FB Memory Usage":
            field = _MEMORY_KEYS.get(key)
        if field is None:
            continue
        if value.startswith("N/A") or value.startswith("["):
            blocks[-1][field] = None
        elif field in _NUMBERS:
            blocks[-1][field] = integer(value, key)
        else:
            blocks[-1][field] = value
    if not blocks:
        raise ParseError("no 'GPU <bus id>' block in the nvidia-smi -q output")
    return tuple(Gpu(index=i, **block) for i, block in enumerate(blocks))  # type: ignore[arg-type]
