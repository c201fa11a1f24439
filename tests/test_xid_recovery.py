"""Xid 154: every recovery action NVML names maps to a rung of the ladder, or to NVIDIA's
guide where it is a procedure of its own (never a guessed rung)."""

from __future__ import annotations

import pytest

from runbook_runner.observe.xid import LOOK_IT_UP, parse_xid

LINE = "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to {to}"


@pytest.mark.parametrize(
    ("to", "action"),
    [
        ("0x0 (None)", "IGNORE"),
        ("0x1 (GPU Reset Required)", "RESET_GPU"),
        ("0x2 (Node Reboot Required)", "RESTART_BM"),
        ("0x3 (Drain P2P)", LOOK_IT_UP),
        ("0x4 (Drain and Reset)", "RESET_GPU"),
        ("0x5 (Recover IMEX Domain)", LOOK_IT_UP),
        ("0x6 (Bus Reset)", "RESTART_BM"),
        ("0x7 (System Reboot)", "RESTART_BM"),
        ("0x9 (Something New)", LOOK_IT_UP),
    ],
)
def test_each_recovery_action_of_xid_154(to, action):
    (event,) = parse_xid(LINE.format(to=to))
    assert event.action == action
