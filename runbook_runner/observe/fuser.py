"""Parser for ``fuser -v /dev/nvidia* 2>&1`` (psmisc): who holds which NVIDIA device file.

    /dev/nvidia0:        root       4120 F...m python3
                         root       4121 F...m python3
    /dev/nvidiactl:      root       4120 F...m python3

A line with no file name continues the file above; a name longer than the 20-character
column stands alone on its line, its holders below (``/dev/nvidia-uvm-tools:``).
``/dev/nvidiaN`` is one GPU (minor N); every other file (``nvidiactl``, ``nvidia-uvm``,
``nvidia-modeset``, ``nvidia-caps/...``) is node-wide. Empty output means no process holds
any (fuser then exits 1). Lines about a file that does not exist (the driver is not loaded)
or a process fuser could not read (not run as root) are rejected: the list would not be
complete, so it is not evidence.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import DeviceHolder

_HEADER = re.compile(r"^\s+USER\s+PID\s+ACCESS\s+COMMAND\s*$")
_ROW = re.compile(
    r"^(?:(?P<device>/\S+?):)?\s+(?P<user>\S+)\s+(?P<pid>kernel|\d+)\s+(?P<access>[.a-zA-Z]{1,6})\s+(?P<command>.*)$"
)
_FILE_ONLY = re.compile(r"^(?P<device>/\S+):\s*$")
_GPU_FILE = re.compile(r"(?:^|/)nvidia(?P<minor>\d+)$")
_INCOMPLETE = (
    (re.compile(r"^Specified filename (?P<what>.*) does not exist"), "no such file: {what}"),
    (
        re.compile(r"^Cannot stat (?:file )?(?P<what>.*)"),
        "fuser could not read {what} (run it as root): the list is incomplete",
    ),
)


def parse_fuser(text: str) -> tuple[DeviceHolder, ...]:
    holders = []
    device: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or _HEADER.match(line):
            continue
        for pattern, message in _INCOMPLETE:
            problem = pattern.match(line)
            if problem is not None:
                raise ParseError(message.format(what=problem["what"].strip()[:100]))
        alone = _FILE_ONLY.match(line)
        if alone is not None:
            device = alone["device"]
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
        gpu = _GPU_FILE.search(device)
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
