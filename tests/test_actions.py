"""A step's action kind, read once at load from its words (format/actions.py), and what
reads it: the blast-radius warnings and the load-time error for a command of unknown reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from runbook_runner.format.actions import ActionKind, action_of
from runbook_runner.runbook import RunbookInvalid, load, loads

A = ActionKind


@pytest.mark.parametrize(
    ("run", "kind", "needs"),
    [
        (["kill", "-TERM", "{{ item.pid }}"], A.SIGNAL, "process"),
        (["kill", "-0", "42"], A.LOOK, "none"),
        ("timeout 5 pkill -f server", A.SIGNAL, "process"),
        ("fuser -k -9 /dev/nvidia*", A.SIGNAL, "node"),
        ("fuser -v /dev/nvidia* 2>&1", A.LOOK, "none"),
        (["systemctl", "stop", "--", "{{ item.unit }}"], A.UNIT_STOP, "service"),
        (["service", "nvidia-persistenced", "stop"], A.UNIT_STOP, "service"),
        (["systemctl", "start", "x"], A.UNIT_START, "service"),
        (["systemctl", "is-active", "x"], A.LOOK, "none"),
        ("systemctl reboot", A.REBOOT, "node"),
        (["nvidia-smi", "--gpu-reset", "-i", "{{ item.index }}"], A.GPU_RESET, "gpu"),
        ("sudo -n nvidia-smi -r", A.GPU_RESET, "node"),  # no -i: every GPU
        (["nvidia-smi", "-i", "3", "-pm", "0"], A.PERSISTENCE_OFF, "gpu"),
        (["nvidia-smi", "-i", "3", "--persistence-mode=1"], A.PERSISTENCE_ON, "gpu"),
        ("nvidia-smi --query-gpu=index --format=csv", A.LOOK, "none"),
        ("modprobe nvidia && modprobe nvidia_uvm", A.DRIVER_RELOAD, "node"),
        (
            ["sh", "-c", 'fuser -s "$1" || rm -f -- "$1"', "sh", "/dev/shm/x"],
            A.FILE_REMOVAL,
            "files",
        ),
        ("echo ran >> /tmp/marker", A.LOOK, "none"),
        ("touch a; while [ ! -e b ]; do sleep 0.05; done", A.LOOK, "none"),
        ("! { kill -TERM 4; }", A.SIGNAL, "process"),
        ("if true; then\n  rmmod nvidia\nfi", A.DRIVER_RELOAD, "node"),
        ("/opt/site/reset-gpu.sh 3", A.UNKNOWN, "none"),  # a wrapper: its reach is unknown
        ("echo a; /opt/site/reset-gpu.sh 3", A.UNKNOWN, "none"),
        ("echo 'unbalanced", A.UNKNOWN, "none"),
        (None, A.LOOK, "none"),
    ],
)
def test_a_commands_kind_and_least_reach_come_from_its_words(run, kind, needs):
    action = action_of(run)
    assert (action.kind, action.needs) == (kind, needs)


def test_every_destructive_step_shipped_has_a_kind_and_the_step_carries_it():
    recovery = load(Path(REPO / "runbooks" / "gpu-oom-recovery.yaml"))
    kinds = {step.id: step.action.kind for step in recovery.steps}
    assert all(kinds[s.id] is not A.UNKNOWN for s in recovery.steps if s.destructive)
    assert kinds["reset-gpus"] is A.GPU_RESET
    assert kinds["persistence-off"] is A.PERSISTENCE_OFF
    assert kinds["restore-persistence"] is A.PERSISTENCE_ON
    assert kinds["stop-gpu-services"] is A.UNIT_STOP
    assert kinds["restart-gpu-services"] is A.UNIT_START
    assert kinds["reload-driver"] is A.DRIVER_RELOAD  # a shell script: rmmod and modprobe
    assert kinds["remove-leaked-shm"] is A.FILE_REMOVAL
    assert kinds["end-mps-clients"] is A.SIGNAL  # through nvidia-cuda-mps-control
    assert kinds["reboot"] is A.REBOOT


def runbook_with(step: str) -> bytes:
    return (
        "name: w\ntitle: t\nsummary: s\n"
        "observations:\n  gpus: {command: nvidia-smi -q, parser: gpus-detail}\n"
        "checks:\n  released: {description: d, every: gpus, expect: memory_used_mib < 1024}\n"
        f"goal: [released]\nsteps:\n  - {step}\n"
    ).encode()


def test_a_service_stopped_with_service_is_wider_than_a_process():
    """The old regexes saw only 'systemctl stop': 'service X stop' slipped past."""
    runbook = loads(
        runbook_with(
            "{id: s, title: t, run: [service, '{{ item.name }}', stop], destructive: true, "
            "affects: process, fixes: goal, for_each_failing: released}"
        ),
        "w.yaml",
    )
    (warning,) = runbook.warnings
    assert warning.startswith("w.yaml:10:")
    assert "wider than 'affects: process' (it stops a service)" in warning
    assert "declare 'affects: service'" in warning


def test_a_destructive_wrapper_script_is_a_load_error_with_its_position():
    with pytest.raises(RunbookInvalid) as raised:
        loads(
            runbook_with(
                "{id: s, title: t, run: /opt/site/reset-gpu.sh, destructive: true, "
                "affects: gpu, fixes: goal}"
            ),
            "w.yaml",
        )
    (line,) = raised.value.lines
    assert line.startswith("w.yaml:10:")
    assert "whose reach the runner can tell" in line


def test_a_read_only_wrapper_script_loads():
    runbook = loads(runbook_with("{id: s, title: t, run: /opt/site/report.sh}"), "w.yaml")
    assert runbook.steps[0].action.kind is A.UNKNOWN


def test_an_owner_blind_kill_is_a_load_error_and_a_kill_of_observed_items_is_not():
    blind = "{id: k, title: t, run: [pkill, -KILL, -f, sglang], destructive: true, affects: process, fixes: goal}"
    with pytest.raises(RunbookInvalid) as raised:
        loads(runbook_with(blind), "w.yaml")
    (line,) = raised.value.lines
    assert line.startswith("w.yaml:10:")
    assert "an owner-blind signal" in line
    items = (
        "{id: k, title: t, run: [kill, -KILL, '{{ item.index }}'], destructive: true, "
        "affects: process, fixes: goal, for_each_failing: released}"
    )
    assert loads(runbook_with(items), "w.yaml").steps[0].action.kind is A.SIGNAL


def test_a_reboot_needs_no_items():
    reboot = "{id: r, title: t, run: reboot, destructive: true, affects: node, fixes: goal}"
    assert loads(runbook_with(reboot), "w.yaml").steps[0].action.kind is A.REBOOT
