"""Parser for ``fuser -v /dev/nvidia* 2>&1`` (psmisc): who holds which NVIDIA device file.

    /dev/nvidia0:        root       4120 F...m python3
                         root       4121 F...m python3
    /dev/nvidiactl:      root       4120 F...m python3

A line with no file name continues the file above. ``/dev/nvidiaN`` is one GPU (minor N);
every other file (``nvidiactl``, ``nvidia-uvm``, ``nvidia-modeset``, ``nvidia-caps/...``) is
node-wide. Empty output means no process holds any (fuser then exits 1). A line fuser prints
about a file that does not exist (the driver is not loaded) is rejected: not evidence.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import DeviceHolder

_HEADER = re.compile(r"^\s+USER\s+PID\s+ACCESS\s+COMMAND\s*$")
_ROW = re.compile(
    r"^(?:(?P<device>/\S+?):)?\s+(?P<user>\S+)\s+(?P<pid>kernel|\d+)\s+(?P<access>[.a-zA-Z]{1,6})\s+(?P<command>.*)$"
)
_GPU_FILE = re.compile(r"^/dev/nvidia(?P<minor>\d+)$")


def parse_fuser(text: str) -> tuple[DeviceHolder, ...]:
    holders = []
    device: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or _HEADER.match(line):
            continue
        match = _ROW.match(line)
        if match is None:
            raise ParseError(f"not a line of fuser -v: {line[:100]!r}")
        if match["device"]:
            device = match["device"]
        if device is None:
            raise ParseError(f"fuser -v line without a file: {line[:100]!r}")
        if match["pid"] == "kernel":
            continue  # a kernel user (mount, swap): no process to act on
        gpu = _GPU_FILE.match(device)
        holders.append(
            DeviceHolder(
                device=device,
                minor_number=int(gpu["minor"]) if gpu else None,
                node_wide=gpu is None,
                pid=int(match["pid"]),
                user=match["user"],
                access=match["access"],
                command=match["command"].strip(),
            )
        )
    return tuple(holders)
