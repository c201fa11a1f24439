"""Any file either loads or is rejected with file:line:col errors: never a traceback, never a hang."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from runbook_runner.runbook import RunbookInvalid, loads

SHIPPED = {p.name: p.read_bytes() for p in (REPO / "runbooks").glob("*.yaml")}
POSITION = re.compile(r"^x\.yaml:\d+:\d+: ")

yaml_pieces = st.sampled_from(
    [
        "name: x\n",
        "title: t\n",
        "summary: s\n",
        "steps:\n",
        "  - id: a\n",
        "    run: echo\n",
        "goal: [c]\n",
        "checks:\n",
        "  c: {description: d, expect: '1 == 1'}\n",
        "observations:\n",
        "  m: {command: free -b, parser: free}\n",
        ": :\n",
        "- - -\n",
        "{{{\n",
        "&a [*a]\n",
        "!!python/object:os.system\n",
        "\t",
        "\x00",
        "'unclosed\n",
        "key: &anchor value\nother: *anchor\n",
        "<<: {a: 1}\n",
        "?\n",
        "%YAML 1.1\n---\n",
    ]
)
documents = st.one_of(
    st.binary(max_size=400), st.lists(yaml_pieces, max_size=25).map(lambda p: "".join(p).encode())
)


def load_or_reject(raw: bytes) -> None:
    lines: list[str] = []
    try:
        loads(raw, "x.yaml", stem="x")
    except RunbookInvalid as error:
        lines = error.lines
        assert lines
    assert all(POSITION.match(line) for line in lines), lines


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(raw=documents)
def test_any_bytes_load_or_are_rejected_with_positions(raw):
    load_or_reject(raw)


@st.composite
def mutated_runbook(draw):
    raw = SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))]
    at = draw(st.integers(0, len(raw)))
    kind = draw(st.sampled_from(["cut", "insert", "delete"]))
    if kind == "cut":
        return raw[:at]
    if kind == "insert":
        return raw[:at] + draw(st.binary(min_size=1, max_size=12)) + raw[at:]
    return raw[:at] + raw[at + draw(st.integers(1, 40)) :]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(raw=mutated_runbook())
def test_mutated_shipped_runbooks_load_or_are_rejected_with_positions(raw):
    load_or_reject(raw)


def test_a_billion_laughs_document_is_rejected_quickly():
    bomb = b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n".encode()
        for i in range(10)
    )
    with pytest.raises(RunbookInvalid) as raised:
        loads(bomb, "x.yaml", stem="x")
    assert any("expands to more than 100,000 values" in line for line in raised.value.lines)


def test_a_recursive_alias_is_an_error_with_its_position():
    with pytest.raises(RunbookInvalid) as raised:
        loads(b"name: x\nsteps: &a [*a]\n", "x.yaml", stem="x")
    assert "x.yaml:2:" in raised.value.lines[0]
    assert "refers to itself" in "\n".join(raised.value.lines)


def test_a_nul_byte_is_an_error_with_its_position():
    with pytest.raises(RunbookInvalid) as raised:
        loads(b"name: x\ntitle: a\x00b\n", "x.yaml", stem="x")
    assert raised.value.lines == ["x.yaml:2:9: character U+0000 is not allowed in YAML"]
