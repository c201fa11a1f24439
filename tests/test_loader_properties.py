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


# -- ladders: a grouping of the file, never of the run -------------------------------------

LADDER_HEAD = """\
name: x
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
checks:
  held: {description: d, every: gpus, expect: memory_used_mib <= 10}
  other: {description: d, expect: '1 == 1'}
goal: [held]
steps:
"""


@st.composite
def ladder_runbook(draw):
    """Steps with random keys, written flat and grouped into random ladders (with random
    ladder defaults and a random share of 'runs' blocks): (flat text, ladder text)."""
    count = draw(st.integers(1, 7))
    steps = []
    for i in range(count):
        step = {"id": f"s{i}", "title": f"S{i}", "run": '[nvidia-smi, -r, -i, "{{ item.index }}"]'}
        step["for_each_failing"] = "held"
        if draw(st.booleans()):
            step["fixes"] = draw(st.sampled_from(["[held]", "goal", "[held, other]"]))
        if draw(st.booleans()):
            step["skip_if"] = draw(st.sampled_from(["goal", "[other]"]))
        if draw(st.booleans()):
            step["on_failure"] = draw(st.sampled_from(["stop", "continue"]))
        if draw(st.booleans()):
            step["root"] = draw(st.sampled_from(["true", "false"]))
        steps.append(step)
    cuts = sorted(draw(st.sets(st.integers(1, count), max_size=3)) | {count})
    flat, grouped, start = [], [], 0
    for number, cut in enumerate(cuts):
        group = steps[start:cut]
        start = cut
        in_ladder = draw(st.booleans())
        root = draw(st.sampled_from([None, "true", "false"])) if in_ladder else None
        stop = draw(st.booleans()) if in_ladder else False
        first, indent = ("      - ", "        ") if in_ladder else ("  - ", "    ")
        if in_ladder:
            grouped.append(f"  - ladder: l{number}")
            if root is not None:
                grouped.append(f"    root: {root}")
            if stop:
                grouped.append("    on_failure: stop")
            grouped.append("    rungs:")
        for step in group:
            effective = dict(step)
            if in_ladder:
                effective.setdefault("on_failure", "stop" if stop else "continue")
                if root is not None:
                    effective.setdefault("root", root)
            flat.append("  - " + "\n    ".join(f"{k}: {v}" for k, v in effective.items()))
            when = {k: step[k] for k in ("for_each_failing", "fixes", "skip_if") if k in step}
            rest = {k: v for k, v in step.items() if k not in when}
            lines = [f"{k}: {v}" for k, v in rest.items()]
            if draw(st.booleans()):
                lines.append("runs: {" + ", ".join(f"{k}: {v}" for k, v in when.items()) + "}")
            else:
                lines += [f"{k}: {v}" for k, v in when.items()]
            grouped.append(first + f"\n{indent}".join(lines))
    return LADDER_HEAD + "\n".join(flat) + "\n", LADDER_HEAD + "\n".join(grouped) + "\n"


def _without_ladders(runbook):
    from dataclasses import replace

    return tuple(replace(step, ladder="") for step in runbook.steps)


@settings(max_examples=80, deadline=4000, suppress_health_check=[HealthCheck.too_slow])
@given(pair=ladder_runbook())
def test_ladders_and_runs_blocks_load_into_the_flat_steps_they_group(pair):
    """Whatever the grouping, the engine reads the same flat, ordered steps: same ids, same
    attributes; a rung's on_failure is its ladder's unless it says otherwise."""
    flat_text, grouped_text = pair
    flat = loads(flat_text.encode(), "x.yaml", stem="x")
    grouped = loads(grouped_text.encode(), "x.yaml", stem="x")
    assert _without_ladders(grouped) == flat.steps
    assert [s.id for s in grouped.steps] == [f"s{i}" for i in range(len(flat.steps))]
