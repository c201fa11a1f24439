"""Parser for the NVIDIA driver's Xid lines in the kernel log (``dmesg``), with the catalog's action.

    NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). ...
    NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)

Each Xid line becomes one :class:`XidEvent` with the code's immediate action from NVIDIA's
Xid catalog for Ampere and newer GPUs (CATALOG_URL, column "Resolution Bucket (Immediate
Action)"; the rows were read from that page's table as generated on 2025-10-29 and
cross-checked with leptonai/gpud's copy of NVIDIA's spreadsheet). Xid 154 carries the
driver's own verdict on another Xid ("GPU recovery action changed ... to 0x2 (Node Reboot
Required)"): its action is taken from that text. Every other code is ``LOOK_IT_UP``: read
the catalog, never guess.
"""

from __future__ import annotations

import dataclasses
import re

from runbook_runner.observe.state import XidEvent

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# code -> (the catalog's immediate action, what it is, in our words). Extend only from the
# catalog. The buckets: RESTART_APP (restart the application), RESET_GPU, RESTART_BM
# (reboot the node), IGNORE (informational), CONTACT_SUPPORT, and WORKFLOW_* (the catalog
# describes a procedure for that code).
CATALOG: dict[int, tuple[str, str]] = {
    8: ("RESTART_APP", "GPU stopped processing (channel idle timeout)"),
    13: ("RESTART_APP", "graphics engine exception (often an application bug: bad address)"),
    31: ("RESTART_APP", "GPU memory page fault (often an application bug: illegal access)"),
    43: ("IGNORE", "GPU stopped processing a channel (the application was stopped)"),
    45: ("WORKFLOW_XID_45", "preemptive cleanup after an earlier error: follow the other Xid"),
    48: ("WORKFLOW_XID_48", "double-bit ECC error (DBE): drain the GPU and reset it"),
    62: ("RESET_GPU", "internal micro-controller halt"),
    63: ("IGNORE", "GPU memory row remapping event (takes effect at the next reset)"),
    64: ("RESET_GPU", "GPU memory row remapping failure"),
    68: ("RESTART_APP", "video decoder (NVDEC0) exception"),
    69: ("RESTART_APP", "graphics engine class error"),
    74: ("WORKFLOW_NVLINK_ERR", "NVLink error"),
    79: ("RESTART_BM", "GPU has fallen off the bus: reboot the node (bare metal)"),
    92: ("IGNORE", "high single-bit ECC error rate"),
    94: ("RESTART_APP", "contained memory error: restart the application that hit it"),
    95: ("RESET_GPU", "uncontained memory error: reset the GPU before applications restart"),
    109: ("RESET_GPU", "context switch timeout"),
    119: ("RESET_GPU", "GSP RPC timeout (the GPU System Processor did not answer)"),
    120: ("RESET_GPU", "GSP error"),
    121: ("IGNORE", "C2C (chip-to-chip) link error"),
    136: ("RESET_GPU", "link training failed"),
    140: ("RESET_GPU", "unrecovered ECC error"),
    143: ("RESET_GPU", "GPU initialization error"),
    **{
        code: ("WORKFLOW_NVLINK5_ERR", f"NVLink5 {part} error")
        for code, part in zip(
            range(144, 151),
            ("SAW", "RLW", "TLW", "TREX", "NVLPW_CTRL", "NETIR", "MSE"),
            strict=True,
        )
    },
}
LOOK_IT_UP = "LOOK_IT_UP"
RECOVERY_ACTION_CHANGED = 154
# Xid 154's "to 0xN (LABEL)": the recovery the driver now asks for, as an action bucket.
# Every action NVML names (nvmlDeviceGpuRecoveryAction_t: NONE 0, GPU_RESET 1, NODE_REBOOT 2,
# DRAIN_P2P 3, DRAIN_AND_RESET 4, RECOVER_IMEX_DOMAIN 5, BUS_RESET 6, SYSTEM_REBOOT 7;
# https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html).
# Drain P2P and Recover IMEX Domain are procedures of their own (quiesce peer traffic; the
# IMEX domain's recovery): read them in NVIDIA's guide, never guess a rung for them.
RECOVERY_ACTIONS = {
    "none": "IGNORE",
    "gpu reset required": "RESET_GPU",
    "gpu reset": "RESET_GPU",
    "drain and reset": "RESET_GPU",
    "drain p2p and reset gpu": "RESET_GPU",
    "node reboot required": "RESTART_BM",
    "node reboot": "RESTART_BM",
    "os reboot": "RESTART_BM",
    "system reboot": "RESTART_BM",
    # A PCIe bus reset is more than a GPU reset; of the ladder's rungs, the reboot does it.
    "bus reset": "RESTART_BM",
    "drain p2p": LOOK_IT_UP,
    "recover imex domain": LOOK_IT_UP,
}

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)(?:\s[^)]*)?\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'?[\w<>/-]+'?))?(?:, name=[^,]*)?,?\s*(?P<text>.*)$"
)
_RECOVERY = re.compile(r"recovery action changed from .* to (?:0x[0-9A-Fa-f]+ )?\((?P<to>[^)]*)\)")


# Memory errors of the GPU's own DRAM: double-bit ECC (48), row remapping (63, 64),
# contained and uncontained errors (94, 95).
MEMORY_ERROR_XIDS = frozenset({48, 63, 64, 94, 95})


def _action(code: int, text: str) -> tuple[str, str]:
    if code == RECOVERY_ACTION_CHANGED:
        found = _RECOVERY.search(text)
        label = found["to"].strip() if found else ""
        action = RECOVERY_ACTIONS.get(label.lower(), LOOK_IT_UP)
        return action, f"the driver's recovery action is now: {label or 'not stated'}"
    return CATALOG.get(code, (LOOK_IT_UP, f"not mapped here: see {CATALOG_URL}"))


def parse_xid(text: str) -> tuple[XidEvent, ...]:
    """Every Xid line; other lines (the rest of the kernel log) are not Xid events."""
    events = []
    for raw in text.splitlines():
        match = _XID.search(raw.rstrip("\r"))
        if match is None:
            continue
        code = int(match["code"])
        action, meaning = _action(code, match["text"])
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
    # A GPU whose memory errors recur is drained, not put back (NVIDIA's DBE workflow and
    # row-remapping guidance): each event says how many such events its GPU logged.
    counts: dict[str | None, int] = {}
    for event in events:
        if event.code in MEMORY_ERROR_XIDS:
            counts[event.pci] = counts.get(event.pci, 0) + 1
    return tuple(
        dataclasses.replace(event, memory_errors=counts.get(event.pci, 0)) for event in events
    )
