"""gpu-node-health's field checks: Xid events with the catalog's action, ECC, row remapping,
persistence, PCIe width, throttle reasons; each a typed observation read from real (or
labelled constructed) output. Read-only."""

from __future__ import annotations

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
        (48, "0000:18:00", "RESET_GPU"),
        (119, "0000:28:00", LOOK_IT_UP),  # not mapped here: read the catalog, never guess
    ]
    assert events[0].pid == 4123
    assert events[1].pid is None
    assert CATALOG_URL in events[2].meaning


def test_xids_since_boot_fail_the_health_goal_with_their_action():
    state = {
        "xids": parse_xid("NVRM: Xid (PCI:0000:48:00): 79, pid=4123, GPU has fallen off the bus.\n")
    }
    result = evaluate_check(HEALTH.checks["no-xid-since-boot"], HEALTH, state, {})
    assert not result.ok
    assert "Xid 79 on 0000:48:00 (RESTART_BM" in result.message


def test_node_health_is_read_only():
    assert not any(step.destructive for step in HEALTH.steps)
