"""The driver's word on a GPU (issue 47, item 2): ``GPU Recovery Action`` and the row
remapper's Pending / Remapping Failure Occurred, read from ``nvidia-smi -q`` where the driver
prints them, as typed fields of the Gpu record.

Real captures: driver 590.48.01 (action None, no remap pending or failed; MIG: Remapped Rows
N/A), 535 (no recovery-action line at all). Each other value is a constructed copy of the
590 capture with that one value changed (tests/fixtures/PROVENANCE.md).
"""

from __future__ import annotations

import pytest

from conftest import fixture_text
from runbook_runner.observe import nvidia_smi_q
from runbook_runner.observe.state.gpu import RECOVERY_ACTIONS


def only_gpu(name: str):
    (gpu,) = nvidia_smi_q.parse_query(fixture_text(f"nvidia-smi/{name}"))
    return gpu


@pytest.mark.parametrize(
    ("fixture", "action"),
    [
        ("q-590.48.01-h200-load.txt", "none"),
        ("constructed-q-590.48.01-h200-recovery-reset.txt", "gpu-reset"),
        ("constructed-q-590.48.01-h200-recovery-reboot.txt", "node-reboot"),
        ("constructed-q-590.48.01-h200-recovery-drain-p2p.txt", "drain-p2p"),
        ("constructed-q-590.48.01-h200-recovery-drain-and-reset.txt", "drain-and-reset"),
    ],
)
def test_each_recovery_action_the_driver_prints_is_one_word_of_nvmls_enum(fixture, action):
    gpu = only_gpu(fixture)
    assert gpu.recovery_action == action
    assert action in RECOVERY_ACTIONS
    # The rest of the GPU reads as before: the action is one more fact, not a fault.
    assert (gpu.fault, gpu.memory_used_mib, gpu.minor_number) == ("", 32362, 0)


def test_a_driver_that_does_not_print_the_action_leaves_it_unknown_not_none():
    gpus = nvidia_smi_q.parse_query(fixture_text("nvidia-smi/q-535.161.08-8x-h100.txt"))
    assert {g.recovery_action for g in gpus} == {None}  # not "none": the driver did not say
    assert {(g.remapped_rows_pending, g.remapped_rows_failure) for g in gpus} == {("No", "No")}


@pytest.mark.parametrize(
    ("fixture", "pending", "failure"),
    [
        ("q-590.48.01-h200-load.txt", "No", "No"),
        ("constructed-q-590.48.01-h200-remap-pending.txt", "Yes", "No"),
        ("constructed-q-590.48.01-h200-remap-failed.txt", "No", "Yes"),
        ("q-590.48.01-h200-mig-idle.txt", None, None),  # 'Remapped Rows : N/A' in MIG mode
    ],
)
def test_row_remapping_pending_and_failure_read_from_their_own_section(fixture, pending, failure):
    gpu = only_gpu(fixture)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (pending, failure)


def test_other_sections_pending_lines_are_not_the_row_remappers():
    """-q has other 'Pending' lines (ECC mode: Enabled, DRAM encryption: N/A, ...): only the
    one inside Remapped Rows is read, so ECC mode's 'Pending : Enabled' is no remap."""
    text = fixture_text("nvidia-smi/q-590.48.01-h200-load.txt")
    lines = text.splitlines(keepends=True)
    # Drop the row remapper's own Pending line: nothing else may stand in for it.
    (own,) = [i for i, line in enumerate(lines) if line.strip() == "Pending" + " " * 40 + ": No"]
    gpu = only_gpu_text("".join(lines[:own] + lines[own + 1 :]))
    assert "Pending                                        : Enabled" in text
    assert gpu.remapped_rows_pending is None
    assert gpu.remapped_rows_failure == "No"


@pytest.mark.parametrize(
    ("printed", "word"),
    [
        ("None", "none"),
        ("Reset", "gpu-reset"),
        ("GPU Reset", "gpu-reset"),
        ("Reboot", "node-reboot"),
        ("Node Reboot", "node-reboot"),
        ("Drain P2P", "drain-p2p"),
        ("Drain and Reset", "drain-and-reset"),
        ("Recover IMEX Domain", "recover-imex-domain"),
        ("N/A", None),
        ("[Not Supported]", None),
        ("Bus Reset", "bus-reset"),  # not known here: kept, so it is not taken for "none"
    ],
)
def test_recovery_action_words(printed, word):
    assert nvidia_smi_q.recovery_action(printed) == word


def test_a_gpu_that_answers_with_a_fault_has_no_recovery_action_read_from_it():
    text = fixture_text("nvidia-smi/q-590.48.01-h200-load.txt").replace(
        "GPU Recovery Action                                : None",
        "GPU Recovery Action                                : Unknown Error",
    )
    gpu = only_gpu_text(text)
    assert gpu.fault == "unknown-error"
    assert gpu.recovery_action is None


def only_gpu_text(text: str):
    (gpu,) = nvidia_smi_q.parse_query(text)
    return gpu
