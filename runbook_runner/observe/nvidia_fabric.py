"""Parser for what a GPU reset would reach: ``nvidia-smi topo -m``, Fabric Manager's state
and ``nvidia-smi -q``, in sections (``@@ topo``, ``@@ fabric-manager``, ``@@ query``).

- ``topo -m``: the GPU matrix. A cell ``NV#`` says the two GPUs share a bonded set of #
  NVLinks (the legend nvidia-smi prints); ``X`` is the GPU itself; anything else (PIX,
  PXB, PHB, NODE, SYS) is PCIe. Only the GPU columns are read, which come first (the NIC
  and affinity columns after them are sometimes printed without a tab between cells).
- ``fabric-manager``: what ``systemctl is-active nvidia-fabricmanager`` printed.
- ``query``: ``nvidia-smi -q``, for each GPU's product name, architecture (``Product
  Architecture``, drivers 535 and later), minor number and ``Fabric`` / ``State``.

A section that is missing or says nothing leaves its fields None: what a reset reaches is
then "cannot tell" (plan/fabric.py), never guessed. No I/O happens here.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.nvidia_smi import bus_id
from runbook_runner.observe.state import GpuFabric

_SECTION = re.compile(r"^@@ (?P<name>[a-z-]+)\s*$")
_GPU_BLOCK = re.compile(
    r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$"
)
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*:\s(?P<value>.*)$")
_GPU_COLUMN = re.compile(r"^GPU(?P<index>\d+)$")
_NVLINK = re.compile(r"^NV(?P<links>\d+)$")


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        start = _SECTION.match(line)
        if start is not None:
            current = sections.setdefault(start["name"], [])
            continue
        if current is not None:
            current.append(line)
    return sections


def parse_topology(lines: list[str]) -> dict[int, tuple[tuple[int, ...], int]]:
    """``nvidia-smi topo -m`` -> {GPU index: (the indexes it has NVLinks to, largest NV#)}.
    Empty when no GPU matrix was printed (an error, no GPU, an old driver)."""
    columns: list[int] = []
    links: dict[int, tuple[tuple[int, ...], int]] = {}
    for line in lines:
        words = line.split()
        if not words:
            continue
        if not columns:
            if _is_header(words):
                for word in words:
                    header = _GPU_COLUMN.match(word)
                    if header is None:
                        break
                    columns.append(int(header["index"]))
            continue
        row = _GPU_COLUMN.match(words[0])
        if row is None:
            if words[0] == "Legend:":
                break
            continue
        cells = words[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            raise ParseError(f"nvidia-smi topo -m: row {words[0]} has fewer cells than GPUs")
        peers: list[int] = []
        most = 0
        for column, cell in zip(columns, cells, strict=True):
            nv = _NVLINK.match(cell)
            if nv is not None and column != int(row["index"]):
                peers.append(column)
                most = max(most, int(nv["links"]))
        links[int(row["index"])] = (tuple(peers), most)
    return links


def _is_header(words: list[str]) -> bool:
    """The matrix's header: GPU0 GPU1 ... then NIC0 ... and CPU Affinity (a row's second
    word is a cell: X, NV#, PIX ...)."""
    if _GPU_COLUMN.match(words[0]) is None:
        return False
    return (
        len(words) == 1
        or bool(_GPU_COLUMN.match(words[1]))
        or words[1].startswith(("NIC", "CPU", "mlx"))
    )


def _query(lines: list[str]) -> list[dict[str, object]]:
    """``nvidia-smi -q`` -> per GPU block (in index order): name, architecture, minor
    number, bus id and the Fabric section's State."""
    blocks: list[dict[str, object]] = []
    section = ""
    for line in lines:
        start = _GPU_BLOCK.match(line)
        if start is not None:
            blocks.append({"pci_bus_id": bus_id(start["bus"])})
            section = ""
            continue
        if not blocks or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        match = _KEY.match(line)
        if match is None:
            if indent == 4:
                section = line.strip()
            continue
        key, value = match["key"].strip(), match["value"].strip()
        if indent == 4:
            section = ""
            field = {
                "Product Name": "name",
                "Product Architecture": "architecture",
                "Minor Number": "minor_number",
            }.get(key)
            if field is None or value.startswith(("N/A", "[")):
                continue
            blocks[-1][field] = int(value) if field == "minor_number" and value.isdigit() else value
        elif indent == 8 and section == "Fabric" and key == "State":
            blocks[-1]["fabric_state"] = value
    return blocks


def parse_fabric(text: str, exit_status: int = 0) -> tuple[GpuFabric, ...]:
    """The sections' text -> one :class:`GpuFabric` per GPU of ``nvidia-smi -q``."""
    sections = _sections(text)
    if "query" not in sections:
        raise ParseError("no '@@ query' section (nvidia-smi -q) in the fabric observation")
    blocks = _query(sections["query"])
    if not blocks:
        raise ParseError("no 'GPU <bus id>' block in the nvidia-smi -q section")
    attached = _attached(sections["query"])
    if attached is not None and attached != len(blocks):
        # A GPU that did not answer leaves no block: the others' indexes cannot be told.
        raise ParseError(
            f"nvidia-smi -q: {attached} GPUs attached but {len(blocks)} answered: which GPU "
            "is which index cannot be told"
        )
    topology = parse_topology(sections.get("topo", []))
    manager = next((w.strip() for w in sections.get("fabric-manager", []) if w.strip()), None)
    gpus = []
    for index, block in enumerate(blocks):
        peers, most = topology.get(index, (None, None))
        minor = block.get("minor_number")
        gpus.append(
            GpuFabric(
                index=index,
                minor_number=minor if isinstance(minor, int) else None,
                pci_bus_id=str(block["pci_bus_id"]),
                name=_text(block.get("name")),
                architecture=_text(block.get("architecture")),
                nvlink_peers=peers,
                nvlinks=most,
                fabric_state=_text(block.get("fabric_state")),
                fabric_manager=manager,
            )
        )
    return tuple(gpus)


def _attached(lines: list[str]) -> int | None:
    for line in lines:
        match = _KEY.match(line)
        if match is not None and match["key"].strip() == "Attached GPUs":
            value = match["value"].strip()
            return int(value) if value.isdigit() else None
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
