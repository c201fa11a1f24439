"""gpu-oom-recovery's rungs for one sick GPU and for a GPU in MIG mode, decided on states
no host has to produce (the checks are pure)."""

from __future__ import annotations

from conftest import REPO
from runbook_runner.expect import evaluate_check
from runbook_runner.observe.state import Gpu
from runbook_runner.observe.xid import parse_xid
from runbook_runner.runbook import load

RUNBOOK = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
PARAMS = {name: p.default for name, p in RUNBOOK.parameters.items()}


def gpu(index: int, used: int | None = 3, **fields: object) -> Gpu:
    bus = f"00000000:{0x18 + 0x10 * index:02X}:00.0"
    return Gpu(index=index, pci_bus_id=bus, minor_number=index, memory_used_mib=used, **fields)  # type: ignore[arg-type]


def check(name: str, gpus: tuple[Gpu, ...], dmesg: str = ""):
    state = {"gpus": gpus, "holders": (), "xids": parse_xid(dmesg)}
    return evaluate_check(RUNBOOK.checks[name], RUNBOOK, state, PARAMS)


def failing_indexes(result) -> list[int]:
    return [item.index for item in result.failing]


def test_a_sick_gpu_is_not_cannot_tell_for_the_others():
    gpus = (gpu(0, 96_413), gpu(1, None, fault="unknown-error"), gpu(2, 96_413))
    released = check("gpu-memory-released", gpus)
    assert not released.cannot_tell
    assert failing_indexes(released) == [0, 2]  # the others' rung goes ahead
    answer = check("gpus-answer", gpus)
    assert failing_indexes(answer) == [1]  # and GPU 1 is named, as itself


def test_a_sick_gpu_is_reset_only_when_its_own_xid_asks_for_it():
    gpus = (gpu(0), gpu(5, None, fault="reset-required"), gpu(6, None, fault="unknown-error"))
    gpu5_xid = "NVRM: Xid (PCI:0000:68:00): 95, pid=7702, Uncontained: FBHUB. RST: Yes\n"
    assert failing_indexes(check("sick-gpus-reset", gpus, gpu5_xid)) == [5]
    assert failing_indexes(check("sick-gpus-reset", gpus, "")) == []  # no Xid: a person
    other = "NVRM: Xid (PCI:0000:18:00): 95, pid=1, Uncontained\n"  # GPU 0's, not GPU 5's
    assert failing_indexes(check("sick-gpus-reset", gpus, other)) == []
    lost = (gpu(3, None, fault="gpu-lost"),)
    assert failing_indexes(check("sick-gpus-reset", lost, gpu5_xid.replace("68", "48"))) == []


def test_a_gpu_whose_mig_instances_are_in_use_is_never_in_the_reset_scope():
    """Even where no holder of its device file is seen: the instances in use are read from
    nvidia-smi -q itself (a reset needs the GPU idle and destroys every instance)."""
    gpus = (
        gpu(0, 96_413),
        gpu(1, 60_000, mig_mode="Enabled", mig_devices=2, mig_processes=1),
        gpu(2, 96_413, mig_mode="Enabled", mig_devices=2, mig_processes=0),
    )
    assert failing_indexes(check("gpu-memory-released", gpus)) == [0, 2]
    assert failing_indexes(check("mig-gpus-in-use", gpus)) == [1]
    sick_in_use = (gpu(1, None, fault="reset-required", mig_processes=1),)
    xid = "NVRM: Xid (PCI:0000:28:00): 95, pid=1, Uncontained\n"
    assert failing_indexes(check("sick-gpus-reset", sick_in_use, xid)) == []


def test_node_health_judges_the_gpus_that_answer_and_names_the_sick_one():
    health = load(REPO / "runbooks" / "gpu-node-health.yaml")
    params = {name: p.default for name, p in health.parameters.items()}
    gpus = (
        Gpu(index=0, persistence_mode="Enabled"),
        Gpu(index=1, fault="unknown-error"),
        Gpu(index=2, persistence_mode="Disabled"),
    )
    state = {"gpus": gpus}
    persistence = evaluate_check(health.checks["persistence-mode-on"], health, state, params)
    assert not persistence.cannot_tell
    assert failing_indexes(persistence) == [2]
    answer = evaluate_check(health.checks["gpus-answer"], health, state, params)
    assert failing_indexes(answer) == [1]


def test_a_state_file_describes_a_sick_gpu_and_a_mig_gpu_with_a_process_in_an_instance():
    import yaml

    from runbook_runner.simhost.statefile import host_from_state

    host = host_from_state(
        yaml.safe_load(
            """
gpus:
  - {index: 0, fault: reset-required}
  - {index: 1, mig_enabled: true, mig: [{gi: 1, ci: 0, profile: 3g.48gb, placement: "4:4"}]}
processes:
  - {pid: 7301, cmdline: "python3 nb.py", gpu_mib: {1: 3000}, mig_gi: 1, mig_ci: 0}
"""
        )
    )
    assert host.gpu(0).fault == "reset-required"
    assert host.gpu(1).mig[0]["gi"] == 1
    assert (host.processes[0].mig_gi, host.processes[0].mig_ci) == (1, 0)
