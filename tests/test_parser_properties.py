"""Any text either parses or raises the parser's own error: never a stray exception."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, fixture_index
from runbook_runner.errors import ParseError
from runbook_runner.observe import PARSERS

INDEX = fixture_index()
REAL = {name: (FIXTURES / name).read_text() for name in INDEX}
COMMANDS = {
    "gpus": "nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv",
    "gpus-noheader": "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits",
    "gpu-processes": "nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory --format=csv",
    "free": "free -b",
    "free-h": "free -h",
    "processes": "ps -eo pid,stat,args",
    "lines": "dmesg",
    "gpus-detail": "nvidia-smi -q",
    "device-holders": "fuser -v /dev/nvidia* 2>&1",
    "df": "df -B1 --output=target,avail /tmp",
    "df-h": "df -h",
    "meminfo": "cat /proc/meminfo",
    "systemctl-show": "systemctl show -p ActiveState nvidia-persistenced",
    "number": "nproc",
    "table": "lsblk",
}
PARSER_OF = {
    key: key.split("-noheader")[0].replace("free-h", "free").replace("df-h", "df")
    for key in COMMANDS
}

# Text built from the pieces real output is made of, so that the parsers get past
# their first line often enough to be exercised.
pieces = st.sampled_from(
    [
        ", ",
        ",",
        "\n",
        "\r\n",
        " ",
        "[N/A]",
        "[Not Supported]",
        "MiB",
        " MiB",
        "%",
        "0",
        "96413",
        "-1",
        "1e400",
        "99999999999999999999999",
        "index",
        "memory.used [MiB]",
        "pid",
        "name",
        "Mem:",
        "Swap:",
        "total",
        "used",
        "free",
        "available",
        "buff/cache",
        "-/+ buffers/cache:",
        "23Gi",
        "0B",
        "3.7G",
        "PID",
        "STAT",
        "COMMAND",
        "D",
        "Z+",
        "\x00",
        "\xff",
        "é",
        "  ",
    ]
)
texty = st.one_of(st.text(max_size=300), st.lists(pieces, max_size=60).map("".join))


def run_parser(kind: str, text: str, status: int = 0) -> None:
    with contextlib.suppress(ParseError):
        PARSERS[PARSER_OF[kind]].parse(text, status, COMMANDS[kind])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(sorted(COMMANDS)), text=texty, status=st.sampled_from([0, 1, 9, 255]))
def test_any_text_parses_or_raises_parse_error(kind, text, status):
    run_parser(kind, text, status)


@st.composite
def mutated_fixture(draw):
    name = draw(st.sampled_from(sorted(REAL)))
    text = REAL[name]
    mutation = draw(
        st.sampled_from(["truncate", "crlf", "extra-column", "junk", "huge-number", "drop-line"])
    )
    if mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation == "crlf":
        text = text.replace("\n", "\r\n")
    elif mutation == "extra-column":
        text = text.replace("\n", ", extra\n", 1)
    elif mutation == "junk":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(min_size=1, max_size=20)) + text[at:]
    elif mutation == "huge-number":
        text = text.replace("0", "9" * 400, 1)
    else:
        lines = text.split("\n")
        del lines[draw(st.integers(0, len(lines) - 1))]
        text = "\n".join(lines)
    return name, text


@settings(max_examples=300, deadline=None)
@given(case=mutated_fixture())
def test_mutated_real_fixtures_parse_or_raise_parse_error(case):
    name, text = case
    kind = "free" if name.startswith("free/") else "gpus"
    if "compute-apps" in name:
        kind = "gpu-processes"
    if name.startswith("fuser/"):
        kind = "device-holders"
    if name.startswith("nvidia-smi/q-"):
        kind = "gpus-detail"
    with contextlib.suppress(ParseError):
        PARSERS[kind].parse(text, 0, INDEX[name]["command"])
