"""What a GPU reset reaches: the GPU alone, or every GPU reset with it. Pure.

nvidia-smi(1), option ``-r, --gpu-reset``, as the driver's man page says it
(https://man.archlinux.org/man/extra/nvidia-utils/nvidia-smi.1.en):

- "Starting with the NVIDIA Ampere architecture, GPUs with NVLink connections can be
  individually reset. On Ampere NVSwitch systems, Fabric Manager is required to
  facilitate reset. On Hopper and later NVSwitch systems, the dependency on Fabric
  Manager to facilitate reset is removed."
- "If Fabric Manager is not running, or if any of the GPUs being reset are based on an
  architecture preceding the NVIDIA Ampere architecture, any GPUs with NVLink connections
  to a GPU being reset must also be reset in the same command."
- Its tables: NVSwitch systems, pre-Ampere: all peer-connected GPUs reset in the same
  command, with or without Fabric Manager; Ampere and later: each GPU individually when
  Fabric Manager runs, else all peer-connected GPUs. Direct NVLink: pre-Ampere, all peer
  connected; Ampere and later, each GPU individually.

So a reset of a GPU with no NVLink reaches that GPU; one of a GPU of Hopper or later
reaches that GPU; one of an Ampere GPU with NVLinks reaches it alone while Fabric Manager
runs, and its whole NVLink group (the GPUs joined to it by NVLinks, directly or through
others: each of them must be in the command, and so must theirs) while it does not (a
direct-NVLink Ampere pair is reset alone even then: this rule, which cannot tell an
NVSwitch from a bridge in ``topo -m``, holds more back than the reset reaches, never
less); one of an older GPU with NVLinks reaches its whole NVLink group. Whatever cannot be
told (no report, an architecture not known here, Fabric Manager's state not read) is
"cannot tell": the reset is treated as node-wide.

A group's reset is one command. The same page: "any GPUs with NVLink connections to a GPU
being reset must also be reset in the same command. This can be done either by omitting
the -i switch, or using the -i switch to specify the GPUs to be reset. If the -i option
does not specify a complete set of NVLink GPUs to reset, this command will issue an error
identifying the additional GPUs that must be included in the reset command." So where
every GPU a reset reaches may be reset (none is left alone: plan/permission.py), the
GPUs of one group become one target, :class:`GpuGroup`, whose ``index`` is the -i list
(``0,1,2,3,4,5,6,7``, one word): the rung's ``nvidia-smi --gpu-reset -i {{ item.index }}``
then names the whole group once (:func:`together`). The -i list, not -r alone: it resets
that group and nothing else (on a node of two groups, the other one), and nvidia-smi
refuses it, rather than reaching further, if the list is not the whole group.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe.state import GpuFabric

MAN_PAGE = "https://man.archlinux.org/man/extra/nvidia-utils/nvidia-smi.1.en"

# Generations in order; Ada Lovelace came after Ampere (both "Ampere+" for a reset).
_ORDER = (
    "Kepler",
    "Maxwell",
    "Pascal",
    "Volta",
    "Turing",
    "Ampere",
    "Ada Lovelace",
    "Hopper",
    "Blackwell",
    "Rubin",
)
AMPERE = _ORDER.index("Ampere")
HOPPER = _ORDER.index("Hopper")

# A product name's architecture, for drivers whose -q has no 'Product Architecture'.
_BY_NAME = (
    (re.compile(r"\b(GB|B)[123]00\b|Blackwell|RTX PRO \d+"), "Blackwell"),
    (re.compile(r"\bG?H(100|200|800|20)\b"), "Hopper"),
    (re.compile(r"\bL(4|40S?|20)\b|RTX \d000 Ada|RTX 40\d\d"), "Ada Lovelace"),
    (re.compile(r"\bA(100|800|30|40|10|16|2)\b|RTX A\d+|RTX 30\d\d"), "Ampere"),
    (re.compile(r"\bT4\b|RTX 20\d\d|Quadro RTX"), "Turing"),
    (re.compile(r"\bV100\b|TITAN V\b"), "Volta"),
    (re.compile(r"\bP(100|40|4)\b|GTX 10\d\d"), "Pascal"),
)


@dataclass(frozen=True)
class Reach:
    """What a reset of one GPU reaches, by minor number (``/dev/nvidiaN``); ``gpus`` None:
    cannot tell, treated as node-wide. ``why`` says which rule, for what is held back."""

    gpus: frozenset[int] | None
    why: str

    @property
    def alone(self) -> bool:
        return self.gpus is not None and len(self.gpus) == 1


@dataclass(frozen=True)
class GpuGroup:
    """The GPUs one reset command must name together (nvidia-smi(1), -r), as one target.
    ``index``: nvidia-smi's ``-i`` list (``0,1,2,3``), what the rung's
    ``{{ item.index }}`` renders, one word; ``minor_numbers``: their /dev/nvidiaN, the
    same way; ``why``: the rule that binds them."""

    index: str
    minor_numbers: str
    why: str = ""

    @property
    def minors(self) -> frozenset[int]:
        return frozenset(int(m) for m in self.minor_numbers.split(",") if m.isdigit())

    def describe(self) -> str:
        return f"GPUs {self.index} together"

    def target(self) -> str:
        """What a confirmation names: the GPUs, their device files, and why together."""
        devices = ", ".join(f"/dev/nvidia{m}" for m in sorted(self.minors))
        return f"GPUs {self.index} in one command ({devices}): {self.why}"


def together(items: Sequence[Any], fabric: Sequence[GpuFabric]) -> tuple[Any, ...]:
    """The targets of a GPU reset's commands: each item (a GPU) alone where its reset
    reaches only it (or what it reaches cannot be told: it is sent as it was), and one
    :class:`GpuGroup` per NVLink group whose reset is fabric-wide, once, in the place of
    its first GPU; the group names every GPU the reset reaches, those not among the
    items too (nvidia-smi refuses a list that is not the whole group). Only for items
    already permitted (plan/permission.py): none of the group is left alone."""
    by_minor = {_minor(g): g for g in fabric}
    targets: list[Any] = []
    seen: set[frozenset[int]] = set()
    for item in items:
        minor = item_minor(item)
        reached = reset_reach(minor, fabric) if minor is not None else None
        if reached is None or reached.gpus is None or reached.alone:
            targets.append(item)
            continue
        if reached.gpus in seen:
            continue
        members = [by_minor.get(m) for m in sorted(reached.gpus)]
        indexes = sorted(g.index for g in members if g is not None and g.index is not None)
        if len(indexes) != len(reached.gpus):
            targets.append(item)  # a GPU of the group has no index: cannot be named
            continue
        seen.add(reached.gpus)
        targets.append(
            GpuGroup(
                index=",".join(str(i) for i in indexes),
                minor_numbers=",".join(str(m) for m in sorted(reached.gpus)),
                why=reached.why,
            )
        )
    return tuple(targets)


def item_minor(item: Any) -> int | None:
    """A GPU item's /dev/nvidiaN: its minor number, else its index (a GPU that answered
    with a fault reports no minor number)."""
    minor = getattr(item, "minor_number", None)
    if isinstance(minor, int):
        return minor
    index = getattr(item, "index", None)
    return index if isinstance(index, int) else None


def generation(gpu: GpuFabric) -> int | None:
    """The GPU's architecture as a place in :data:`_ORDER`; None when it cannot be told."""
    named = (gpu.architecture or "").strip()
    for place, arch in enumerate(_ORDER):
        if named.lower() == arch.lower() or (arch == "Ada Lovelace" and named.lower() == "ada"):
            return place
    for pattern, arch in _BY_NAME:
        if gpu.name and pattern.search(gpu.name):
            return _ORDER.index(arch)
    return None


def reset_reach(minor: int, fabric: Sequence[GpuFabric]) -> Reach:
    """What ``nvidia-smi --gpu-reset -i <that GPU>`` reaches (see the module's rule)."""
    by_minor = {_minor(g): g for g in fabric}
    gpu = by_minor.get(minor)
    if gpu is None:
        return Reach(None, f"/dev/nvidia{minor} is not in the GPU fabric report")
    place = generation(gpu)
    arch = gpu.architecture or gpu.name or "?"
    # What the architecture alone decides needs no topology: a failed topo -m narrows
    # nothing it would not have shown (Hopper and later: each GPU alone, whatever links it).
    if place is not None and place >= HOPPER:
        return Reach(
            frozenset({minor}), f"{arch} (Hopper or later): each GPU is reset individually"
        )
    if place is not None and place >= AMPERE and gpu.fabric_manager == "active":
        return Reach(
            frozenset({minor}),
            f"{arch} (Ampere) with Fabric Manager running: each GPU is reset individually",
        )
    if gpu.nvlink_peers is None:
        return Reach(
            None, f"nvidia-smi topo -m did not say which GPUs /dev/nvidia{minor} has NVLinks to"
        )
    if not gpu.nvlink_peers:
        return Reach(frozenset({minor}), "no NVLink: the reset reaches this GPU alone")
    if place is None:
        return Reach(None, f"the architecture of {arch} is not known here, and it has NVLinks")
    if place >= AMPERE:
        manager = gpu.fabric_manager
        if not manager:
            return Reach(
                None, f"{arch} (Ampere) with NVLinks, and whether Fabric Manager runs was not read"
            )
        why = f"{arch} (Ampere) with NVLinks and Fabric Manager {manager}"
    else:
        why = f"{arch} (before Ampere) with NVLinks"
    group = _group(gpu, fabric)
    if group is None:
        return Reach(None, why + ", and its NVLink peers are not all in the report")
    return Reach(
        group,
        why + ": every GPU NVLinked to it is reset in the same command (nvidia-smi(1), -r)",
    )


def _minor(gpu: GpuFabric) -> int | None:
    return gpu.minor_number if gpu.minor_number is not None else gpu.index


def _group(gpu: GpuFabric, fabric: Sequence[GpuFabric]) -> frozenset[int] | None:
    """The minor numbers of the GPUs joined to this one by NVLinks, directly or not."""
    by_index = {g.index: g for g in fabric}
    seen: set[int] = set()
    todo = [gpu.index]
    while todo:
        index = todo.pop()
        if index is None or index in seen:
            continue
        peer = by_index.get(index)
        if peer is None:
            return None
        seen.add(index)
        todo.extend(peer.nvlink_peers or ())
    minors = {_minor(by_index[i]) for i in seen}
    return frozenset(m for m in minors if m is not None)
