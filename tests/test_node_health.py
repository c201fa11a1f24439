"""gpu-node-health's field checks: Xid events with the catalog's action, ECC, row remapping,
persistence, PCIe width, throttle reasons; each a typed observation read from real (or
labelled constructed) output. Read-only."""

from __future__ import annotations

import pytest

from conftest import REPO, fixture_text
from runbook_runner.expect import evaluate_check
from runbook_runner.observe.nvidia_smi import parse_gpus
from runbook_runner.observe.xid import CATALOG_URL, LOOK_IT_UP, parse_xid
from runbook_runner.runbook import load

HEALTH = load(REPO / "runbooks" / "gpu-node-health.yaml")


def test_the_real_h200_capture_gives_every_field_typed():
    (gpu,) = parse_gpus(fixture_text("nvidia-smi/csv-query-gpu-590.48.01-h200-load-212cols.txt"))
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.clocks_event_reasons == 0  # clocks_event_reasons.active, the newer name
    assert gpu.ecc_uncorrected_volatile == 0
    assert gpu.retired_pages_pending is None  # [N/A] on H200: rows are remapped instead
    assert gpu.remapped_rows_pending == "No"
    assert gpu.persistence_mode == "Enabled"


def checks_on(text: str) -> dict[str, object]:
    state = {"gpus": parse_gpus(text), "xids": ()}
    params = {p: spec.default for p, spec in HEALTH.parameters.items()}
    names = [
        "no-uncorrected-ecc",
        "no-pending-row-remap",
        "persistence-mode-on",
        "pcie-link-full-width",
        "no-hardware-throttling",
    ]
    return {n: evaluate_check(HEALTH.checks[n], HEALTH, state, params) for n in names}


def test_a_degraded_gpu_fails_each_field_check_and_a_healthy_one_passes():
    results = checks_on(fixture_text("nvidia-smi/constructed-health-query-gpu-degraded.txt"))
    for name, result in results.items():
        assert not result.ok, name
        assert not result.cannot_tell, name
        failing = [g.index for g in result.failing]
        if name == "no-hardware-throttling":
            assert failing == [1, 2]  # HW slowdown (0x8); thermal (0x40) with a power cap
        else:
            assert failing == [1], name
    assert "x8 of x16, gen 1 of 5" in results["pcie-link-full-width"].message
    healthy = checks_on(fixture_text("nvidia-smi/csv-query-gpu-590.48.01-h200-load-212cols.txt"))
    assert all(r.ok for r in healthy.values())


def test_xid_lines_carry_the_catalogs_immediate_action_and_unknown_codes_are_looked_up():
    text = (
        "[Mon Nov 30 14:07:41 2026] NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.\n"
        "[Mon Nov 30 14:07:42 2026] NVRM: GPU 0000:48:00.0: GPU has fallen off the bus.\n"
        "[Mon Nov 30 14:08:00 2026] NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.\n"
        "[Mon Nov 30 14:09:00 2026] NVRM: Xid (PCI:0000:28:00): 119, pid=1234, name=python3, Timeout after 6s of waiting for RPC response from GPU1 GSP!\n"
        "[Mon Nov 30 14:09:01 2026] usb 1-1: new high-speed USB device\n"
    )
    events = parse_xid(text)
    assert [(e.code, e.pci, e.action) for e in events] == [
        (79, "0000:48:00", "RESTART_BM"),
        (48, "0000:18:00", "WORKFLOW_XID_48"),  # the catalog's own procedure for a DBE
        (119, "0000:28:00", "RESET_GPU"),
    ]
    assert events[0].pid == 4123
    assert events[1].pid is None
    (unknown,) = parse_xid("NVRM: Xid (PCI:0000:28:00): 157, pid=1, something new\n")
    assert unknown.action == LOOK_IT_UP  # not mapped here: read the catalog, never guess
    assert CATALOG_URL in unknown.meaning


# Published kernel-log lines (see tests/fixtures/PROVENANCE.md, "dmesg Xid lines, published"):
# each with the catalog's immediate action for its code.
PUBLISHED_XIDS = [
    (
        "kern  :warn  : 2025-01-21T04:41:44,283575+00:00 NVRM: Xid (PCI:0000:38:00): 13, "
        "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 9, TPC 1, SM 1): "
        "Out Of Range Address",
        (13, "0000:38:00", None, "RESTART_APP"),
    ),
    (
        "kern  :warn  : 2025-01-21T04:41:44,287197+00:00 NVRM: Xid (PCI:0000:38:00): 43, "
        "pid=2924364, name=pt_main_thread, Ch 00000008",
        (43, "0000:38:00", 2924364, "IGNORE"),
    ),
    (
        "May 13 17:19:01 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr "
        "10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of "
        "type FAULT_PDE ACCESS_TYPE_READ",
        (31, "0000:08:00", None, "RESTART_APP"),
    ),
    (
        "Oct 03 17:59:47 mnemosyne kernel: NVRM: Xid (PCI:0000:01:00): 45, pid=2171, "
        "name=xdg-desktop-por, channel 0x0000000a",
        (45, "0000:01:00", 2171, "WORKFLOW_XID_45"),
    ),
    (  # a MIG instance: the GPU instance follows the PCI address inside the parentheses
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
        "RST: No, D-RST: No",
        (94, "0000:01:00", 7194, "RESTART_APP"),
    ),
    (
        "NVRM: Xid (PCI:0000:37:00): 95, pid=5171, Uncontained: FBHUB. RST: Yes, D-RST: No",
        (95, "0000:37:00", 5171, "RESET_GPU"),
    ),
    (
        "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, "
        "name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
        "function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
        (119, "0000:9b:00", 2024380, "RESET_GPU"),
    ),
    (  # Xid 154 carries the driver's verdict: the action is read from "to 0xN (...)"
        "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 "
        "(None) to 0x4 (Drain and Reset)",
        (154, "0009:01:00", None, "RESET_GPU"),
    ),
    (
        "Aug 12 01:22:51 err-Stealth-16-AI-Studio-A1VGG kernel: NVRM: Xid (PCI:0000:01:00): 154, "
        "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        (154, "0000:01:00", None, "RESTART_BM"),
    ),
    (
        "[171167.897562] NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 "
        "(Drain and Reset) to 0x3 (Drain P2P)",
        (154, "0019:01:00", None, LOOK_IT_UP),  # a label not mapped here: never guessed
    ),
]


@pytest.mark.parametrize(("line", "expected"), PUBLISHED_XIDS)
def test_published_xid_lines_get_the_catalogs_action(line, expected):
    (event,) = parse_xid(line + "\n")
    assert (event.code, event.pci, event.pid, event.action) == expected
    assert event.meaning


def test_a_node_reboot_asked_by_xid_154_is_a_reboot_for_the_recovery_runbook():
    runbook = load(REPO / "runbook_runner" / "runbooks" / "gpu-oom-recovery.yaml")
    check = runbook.checks["no-xid-needs-reboot"]
    asked = parse_xid(PUBLISHED_XIDS[8][0] + "\n")
    assert not evaluate_check(check, runbook, {"xids": asked}, {}).ok
    cleared = parse_xid(PUBLISHED_XIDS[7][0] + "\n")  # a GPU reset, not a reboot
    assert evaluate_check(check, runbook, {"xids": cleared}, {}).ok


def test_xids_since_boot_fail_the_health_goal_with_their_action():
    state = {
        "xids": parse_xid("NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.\n")
    }
    result = evaluate_check(HEALTH.checks["no-xid-since-boot"], HEALTH, state, {})
    assert not result.ok
    assert "Xid 79 on 0000:48:00 (RESTART_BM" in result.message


def test_node_health_is_read_only():
    assert not any(step.destructive for step in HEALTH.steps)


def _fabric(manager: str, query: str) -> dict[str, object]:
    from runbook_runner.observe.nvidia_fabric import parse_fabric

    observed = f"@@ topo\n@@ fabric-manager\n{manager}\n@@ query\n{query}"
    return {"gpu_fabric": parse_fabric(observed)}


def test_fabric_manager_down_where_the_fabric_is_not_trained_fails_node_health():
    """An NVSwitch node whose Fabric State is not Completed while Fabric Manager does not
    run starts no CUDA program: gpu-node-health says so by name. The real H100 capture
    (Fabric Completed) and an RTX 4090 node (Fabric N/A) pass with it stopped."""
    check = HEALTH.checks["fabric-manager-running"]
    params = {p: spec.default for p, spec in HEALTH.parameters.items()}
    assert "fabric-manager-running" in HEALTH.goal
    h100 = fixture_text("nvidia-smi/q-535.161.08-8x-h100.txt")
    untrained = h100.replace("State                             : Completed", "State : In Progress")
    assert untrained != h100
    down = evaluate_check(check, HEALTH, _fabric("inactive", untrained), params)
    assert not down.ok
    assert not down.cannot_tell
    assert len(down.failing) == 8
    assert evaluate_check(check, HEALTH, _fabric("active", untrained), params).ok
    assert evaluate_check(check, HEALTH, _fabric("inactive", h100), params).ok
    rtx = fixture_text("nvidia-smi/q-535.154.05-8x-rtx4090-procs.txt")
    assert evaluate_check(check, HEALTH, _fabric("inactive", rtx), params).ok
