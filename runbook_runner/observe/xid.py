"""Parser for the NVIDIA driver's Xid lines in the kernel log (``dmesg``), with the catalog's action.

    NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.

Each Xid line becomes one :class:`XidEvent` with the code's immediate action from
NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
"Resolution Bucket (Immediate Action)"). Only codes whose action is known here are mapped;
every other code is ``LOOK_IT_UP``: read the catalog, never guess.
"""

from __future__ import annotations

import re

from runbook_runner.observe.state import XidEvent

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# code -> (the catalog's immediate action, what it is). Extend only from the catalog.
CATALOG: dict[int, tuple[str, str]] = {
    8: ("RESTART_APP", "GPU stopped processing (channel idle timeout)"),
    48: ("RESET_GPU", "double-bit ECC error (DBE): drain the GPU and reset it"),
    79: ("RESTART_BM", "GPU has fallen off the bus: reboot the node (bare metal)"),
}
LOOK_IT_UP = "LOOK_IT_UP"

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:, pid=(?P<pid>'?[\w<>/-]+'?))?"
    r"(?:, name=[^,]*)?,?\s*(?P<text>.*)$"
)


def parse_xid(text: str) -> tuple[XidEvent, ...]:
    """Every Xid line; other lines (the rest of the kernel log) are not Xid events."""
    events = []
    for raw in text.splitlines():
        match = _XID.search(raw.rstrip("\r"))
        if match is None:
            continue
        code = int(match["code"])
        action, meaning = CATALOG.get(code, (LOOK_IT_UP, f"not mapped here: see {CATALOG_URL}"))
        pid_text = (match["pid"] or "").strip("'")
        events.append(
            XidEvent(
                pci=match["pci"],
                code=code,
                pid=int(pid_text) if pid_text.isdigit() else None,
                message=match["text"].strip(),
                action=action,
                meaning=meaning,
            )
        )
    return tuple(events)
