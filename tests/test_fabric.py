"""What a GPU reset reaches: the gpu-fabric parser (topo -m, Fabric Manager, -q), the rule
(plan/fabric.py, from nvidia-smi(1) -r) and the permission it feeds: a reset that reaches a
GPU left alone is held back and named, one that reaches only its own GPU goes ahead."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_blast_radius import (
    DEFAULTS,
    RECOVERY,
    answering,
    classified,
    hosts,
    minor,
    observed,
    state_of,
    unattributed,
)

from conftest import fixture_text
from runbook_runner.errors import ParseError
from runbook_runner.observe import PARSERS
from runbook_runner.observe.nvidia_fabric import parse_fabric, parse_topology
from runbook_runner.observe.state import GpuFabric, ProcessOwner
from runbook_runner.plan import decide
from runbook_runner.plan.fabric import GpuGroup, reset_reach, together
from runbook_runner.plan.ownership import Disposition, Owner
from runbook_runner.plan.permission import permitted

H100_Q = "nvidia-smi/q-535.161.08-8x-h100.txt"  # real: 8x H100 80GB HBM3, Fabric Completed
RTX4090_Q = "nvidia-smi/q-535.154.05-8x-rtx4090-procs.txt"  # real: 8x RTX 4090, no NVLink


def _matrix(cell: str, gpus: int = 8, indent: str = "", nics: str = "") -> str:
    """A topo -m GPU matrix in the layout nvidia-smi prints (tab-separated, ' X ' on the
    diagonal, then NIC and affinity columns); constructed, after public outputs."""
    head = "\t".join(f"GPU{i}" for i in range(gpus))
    lines = [f"{indent}\t{head}\t{'NIC0' + chr(9) if nics else ''}CPU Affinity\tNUMA Affinity"]
    for row in range(gpus):
        cells = "\t".join(" X " if col == row else cell for col in range(gpus))
        lines.append(f"{indent}GPU{row}\t{cells}\t{nics + chr(9) if nics else ''}0-55\t0")
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
    ]
    return "\n".join(lines) + "\n"


def _observed(topo: str, manager: str, query: str) -> str:
    return f"@@ topo\n{topo}@@ fabric-manager\n{manager}\n@@ query\n{query}"


def test_an_h100_nvswitch_box_reads_its_peers_architecture_and_fabric_state():
    text = _observed(_matrix("NV18"), "inactive", fixture_text(H100_Q))
    gpus = PARSERS["gpu-fabric"].parse(text, 0, "echo '@@ topo'; nvidia-smi topo -m")
    assert len(gpus) == 8
    assert gpus[5].nvlink_peers == (0, 1, 2, 3, 4, 6, 7)
    assert gpus[5].nvlinks == 18
    assert gpus[5].architecture == "Hopper"
    assert gpus[5].minor_number == 5
    assert gpus[0].fabric_state == "Completed"
    assert gpus[0].fabric_manager == "inactive"
    # Hopper resets each GPU individually, with or without Fabric Manager.
    reach = reset_reach(0, gpus)
    assert reach.gpus == frozenset({0})
    assert "Hopper" in reach.why


def test_no_nvlink_means_a_reset_reaches_its_gpu_alone():
    gpus = parse_fabric(_observed(_matrix("SYS"), "inactive", fixture_text(RTX4090_Q)))
    assert all(g.nvlink_peers == () for g in gpus)
    assert gpus[0].architecture == "Ada Lovelace"
    assert reset_reach(3, gpus).gpus == frozenset({3})


def test_indented_output_and_nic_cells_run_together_are_read_by_their_gpu_columns():
    # vLLM's collect_env indents the matrix; some drivers print 'PIXNODE' in a NIC column.
    topo = parse_topology(_matrix("NV12", indent="    ", nics="PIXNODE").splitlines())
    assert topo[2] == ((0, 1, 3, 4, 5, 6, 7), 12)


def test_a_topo_error_narrows_only_what_topology_decides():
    """A failed topo -m leaves the peers unreported: on an H100 the reset is per GPU
    whatever the topology (nvidia-smi(1), -r), so it still reaches GPU 0 alone; on a V100
    the peers decide, and what they would have shown cannot be told (never 'one group')."""
    error = fixture_text("nvidia-smi/error-591.86-windows-topo-m-rc255.txt")
    gpus = parse_fabric(_observed(error, "inactive", fixture_text(H100_Q)))
    assert gpus[0].nvlink_peers is None
    assert reset_reach(0, gpus).gpus == frozenset({0})
    volta = [
        dataclasses.replace(g, architecture="Volta", name="Tesla V100-SXM2-32GB") for g in gpus
    ]
    reach = reset_reach(0, volta)
    assert reach.gpus is None
    assert "topo -m" in reach.why


def test_fewer_gpu_blocks_than_attached_gpus_cannot_say_which_index_is_which():
    query = fixture_text(H100_Q)
    cut = query.index("GPU 00000000:3B:00.0")  # the second GPU's block onwards is gone
    with pytest.raises(ParseError, match="8 GPUs attached but 1 answered"):
        parse_fabric(_observed(_matrix("NV18"), "active", query[:cut]))
    with pytest.raises(ParseError, match="@@ query"):
        parse_fabric("@@ topo\n" + _matrix("NV18"))


def _box(architecture: str, name: str, peers: dict[int, tuple[int, ...]], manager: str | None):
    return tuple(
        GpuFabric(
            index=i,
            minor_number=i,
            name=name,
            architecture=architecture,
            nvlink_peers=peers.get(i, ()),
            nvlinks=6 if peers.get(i) else 0,
            fabric_manager=manager,
        )
        for i in range(8)
    )


ALL_TO_ALL = {i: tuple(j for j in range(8) if j != i) for i in range(8)}


@pytest.mark.parametrize(
    ("architecture", "name", "manager", "alone"),
    [
        ("Volta", "Tesla V100-SXM3-32GB", "active", False),  # pre-Ampere: peers, FM or not
        ("Volta", "Tesla V100-SXM3-32GB", "inactive", False),
        ("Ampere", "NVIDIA A100-SXM4-80GB", "active", True),  # Ampere + FM: individually
        ("Ampere", "NVIDIA A100-SXM4-80GB", "inactive", False),  # Ampere, no FM: peers
        ("Hopper", "NVIDIA H100 80GB HBM3", "inactive", True),  # Hopper: individually
        ("Blackwell", "NVIDIA B200", None, True),
    ],
)
def test_the_man_pages_table(architecture, name, manager, alone):
    reach = reset_reach(2, _box(architecture, name, ALL_TO_ALL, manager))
    assert reach.gpus == (frozenset({2}) if alone else frozenset(range(8))), reach.why


def test_an_architecture_or_fabric_manager_state_not_told_is_node_wide():
    assert reset_reach(0, _box("", "Some Future GPU", ALL_TO_ALL, "active")).gpus is None
    assert reset_reach(0, _box("Ampere", "NVIDIA A100-SXM4-80GB", ALL_TO_ALL, None)).gpus is None
    assert reset_reach(9, _box("Hopper", "NVIDIA H100", ALL_TO_ALL, None)).gpus is None
    # Without 'Product Architecture' (older drivers) the name tells it.
    named = _box("", "Tesla V100-SXM2-16GB", ALL_TO_ALL, None)
    assert reset_reach(0, named).gpus == frozenset(range(8))


def test_a_pre_ampere_group_is_every_gpu_joined_by_nvlinks_directly_or_not():
    # Two separate NVLink rings of four (0-1-2-3, 4-5-6-7), as on a two-quad V100 box.
    rings = {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (2, 0), 4: (5, 7), 5: (4, 6), 6: (5, 7), 7: (6, 4)}
    gpus = _box("Volta", "Tesla V100-SXM2-32GB", rings, None)
    assert reset_reach(0, gpus).gpus == frozenset({0, 1, 2, 3})
    assert reset_reach(6, gpus).gpus == frozenset({4, 5, 6, 7})


def _holder(pid: int, minor: int, disposition: Disposition, owner: Owner) -> ProcessOwner:
    return ProcessOwner(
        pid=pid,
        command="python3 train.py",
        minor_number=minor,
        holds_gpu=True,
        owner=str(owner),
        evidence="cgroup /",
        disposition=str(disposition),
        reason="its owner cannot be told" if disposition == Disposition.CANNOT_TELL else "x",
    )


class _Item:
    def __init__(self, index: int) -> None:
        self.index = index
        self.minor_number = index


STRANGER = [_holder(7001, 5, Disposition.CANNOT_TELL, Owner.UNKNOWN)]
SUBJECT = RECOVERY.subject.with_parameters(DEFAULTS)


def _reset(gpus, owners=STRANGER):
    return permitted(
        SUBJECT,
        "gpu",
        [_Item(i) for i in range(4)],
        owners,
        reach=lambda minor: reset_reach(minor, gpus),
    )


def test_a_fabric_wide_reset_reaching_the_strangers_gpu_is_held_back_and_named():
    allowed = _reset(_box("Volta", "Tesla V100-SXM3-32GB", ALL_TO_ALL, "active"))
    assert allowed.allowed == ()
    assert [h.what for h in allowed.held_back] == [f"GPU /dev/nvidia{i}" for i in range(4)]
    first = allowed.held_back[0]
    assert first.cannot_tell
    assert "/dev/nvidia5" in first.whose
    assert "PID 7001" in first.whose
    assert "before Ampere" in first.why
    assert first.look.startswith("ps -o pid,user,lstart,args -p 7001")


def test_a_per_gpu_reset_goes_ahead_beside_the_stranger():
    allowed = _reset(_box("Hopper", "NVIDIA H100 80GB HBM3", ALL_TO_ALL, None))
    assert [item.index for item in allowed.allowed] == [0, 1, 2, 3]
    assert allowed.held_back == ()


def test_a_reach_that_cannot_be_told_holds_back_every_reset_while_a_stranger_holds_a_gpu():
    unknown = _box("", "Some Future GPU", ALL_TO_ALL, None)
    assert _reset(unknown).allowed == ()
    # ... and nothing, with no holder left alone anywhere on the node.
    ours = [_holder(4120, 0, Disposition.ACT, Owner.OURS)]
    assert len(_reset(unknown, ours).allowed) == 4


def test_a_group_that_does_not_reach_the_stranger_goes_ahead():
    rings = {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (2, 0), 4: (5, 7), 5: (4, 6), 6: (5, 7), 7: (6, 4)}
    allowed = _reset(_box("Volta", "Tesla V100-SXM2-32GB", rings, None))
    assert [item.index for item in allowed.allowed] == [0, 1, 2, 3]


def test_without_a_reach_a_reset_is_judged_by_its_own_gpu_as_before():
    allowed = permitted(SUBJECT, "gpu", [_Item(i) for i in range(6)], STRANGER)
    assert [item.index for item in allowed.allowed] == [0, 1, 2, 3, 4]


def test_a_fabric_wide_group_all_ours_is_one_target_naming_every_gpu_of_it():
    # nvidia-smi(1), -r: NVLink peers of a pre-Ampere GPU "must also be reset in the same
    # command"; the -i list names them all, those that hold no memory too.
    volta = _box("Volta", "Tesla V100-SXM3-32GB", ALL_TO_ALL, "active")
    ours = [_holder(4120, 0, Disposition.ACT, Owner.OURS)]
    allowed = _reset(volta, ours)
    assert len(allowed.allowed) == 4
    [group] = together(allowed.allowed, volta)
    assert isinstance(group, GpuGroup)
    assert group.index == "0,1,2,3,4,5,6,7"
    assert group.minors == frozenset(range(8))
    assert "before Ampere" in group.why
    # One GPU of the group is a stranger's: nothing is grouped, every reset is held back.
    assert together(_reset(volta).allowed, volta) == ()


def test_each_group_once_and_a_per_gpu_reset_stays_one_gpu():
    rings = {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (2, 0), 4: (5, 7), 5: (4, 6), 6: (5, 7), 7: (6, 4)}
    two = _box("Volta", "Tesla V100-SXM2-32GB", rings, None)
    targets = together([_Item(i) for i in (0, 2, 5)], two)
    assert [t.index for t in targets] == ["0,1,2,3", "4,5,6,7"]
    hopper = _box("Hopper", "NVIDIA H100 80GB HBM3", ALL_TO_ALL, None)
    assert [t.index for t in together([_Item(0), _Item(2)], hopper)] == [0, 2]
    unknown = _box("", "Some Future GPU", ALL_TO_ALL, None)  # cannot tell: sent as it was
    assert [t.index for t in together([_Item(0)], unknown)] == [0]


def test_the_reset_rung_targets_the_group_once_and_the_command_names_it_all():
    volta = _box("Volta", "Tesla V100-SXM3-32GB", ALL_TO_ALL, "active")
    state = {**state_of((), answering((30_000,) * 8)), "gpu_fabric": volta}
    step = next(s for s in RECOVERY.steps if s.id == "reset-gpus")
    made = decide.decide(RECOVERY, DEFAULTS, state, {}, step, subject=SUBJECT)
    assert made.verdict is decide.Verdict.RUN
    [group] = made.items
    assert step.run is not None
    line = step.run.render(lambda name: getattr(group, name.removeprefix("item.")))
    assert line == "nvidia-smi --gpu-reset -i 0,1,2,3,4,5,6,7"
    # persistence mode is not grouped: restore-persistence matches it by index
    off = next(s for s in RECOVERY.steps if s.id == "persistence-off")
    assert not any(
        isinstance(i, GpuGroup)
        for i in decide.decide(RECOVERY, DEFAULTS, state, {}, off, subject=SUBJECT).items
    )


# -- the property, over the blast-radius test's generated hosts ----------------------------

FABRICS = {
    "pcie": _box("Blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition", {}, None),
    "volta-nvswitch": _box("Volta", "Tesla V100-SXM3-32GB", ALL_TO_ALL, "active"),
    "volta-two-rings": _box(
        "Volta",
        "Tesla V100-SXM2-32GB",
        {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (2, 0), 4: (5, 7), 5: (4, 6), 6: (5, 7), 7: (6, 4)},
        None,
    ),
    "ampere-no-fabric-manager": _box("Ampere", "NVIDIA A100-SXM4-80GB", ALL_TO_ALL, "failed"),
    "hopper-nvswitch": _box("Hopper", "NVIDIA H100 80GB HBM3", ALL_TO_ALL, None),
    "unknown": _box("", "Some Future GPU", ALL_TO_ALL, None),
    "unobserved": (),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts(), st.sampled_from(sorted(FABRICS)))
def test_no_reset_reaches_a_gpu_whose_holder_nobody_can_attribute(host, kind):
    owners = classified(host)
    strangers = {r.minor_number for r in owners if unattributed(r) and r.minor_number is not None}
    state = {**state_of(owners, observed(host)), "gpu_fabric": FABRICS[kind]}
    if kind == "unobserved":
        del state["gpu_fabric"]
    for step in RECOVERY.steps:
        if not (step.destructive and step.run and "--gpu-reset" in step.run.source):
            continue
        made = decide.decide(
            RECOVERY, DEFAULTS, state, {}, step, subject=SUBJECT, allow_node_wide=True
        )
        for item in made.items:
            if isinstance(item, GpuGroup):  # one command for the group: it reaches them all
                reached = set(item.minors)
            else:
                reach = reset_reach(minor(item), FABRICS[kind]).gpus
                reached = set(range(8)) if reach is None else reach
            assert not reached & strangers, (kind, step.id, item.index, strangers)
