"""A runbook cannot make the runner spend unbounded memory or time, nor crash it.

Each case was a traceback, a MemoryError or minutes of CPU; each is now a positioned error
at load time, or (where it depends on the host's values) an evaluation error that fails
the check cleanly.
"""

from __future__ import annotations

import re

import pytest
import tomllib

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.format import expr, yamlsource


@pytest.mark.parametrize(
    ("text", "message", "offset"),
    [
        ("(" * 90 + "1" + ")" * 90, "nested more than 32 levels deep", 32),
        ("-" * 200 + "1", "nested more than 32 levels deep", 32),
        ("not " * 60 + "true", "nested more than 32 levels deep", 128),
        ("1" * 5001, "a number of 5001 characters", 0),
        ("x > 1e309", "beyond the largest number", 4),
        ("x > 1" + "0" * 31, "beyond the largest whole number", 4),
        ("+".join(["x"] * 500), "the expression is too long", 400),
    ],
)
def test_expression_bounds_are_positioned_errors(text, message, offset):
    with pytest.raises(expr.ExprError, match=re.escape(message)) as caught:
        expr.parse(text)
    assert caught.value.offset == offset


@pytest.mark.parametrize(
    ("text", "offset"),
    [("x < 10**40", 4), ("x < 1e308 * 10", 4), ("x < 2**32**2 * 2**32**2", 4)],
)
def test_constant_overflow_is_found_at_load_time(text, offset):
    problems = expr.constant_problems(expr.parse(text))
    assert [p[0] for p in problems] == [offset]
    assert "beyond the largest" in problems[0][1]


def test_chained_multiplication_stops_at_the_bound_not_at_memory():
    """What a chain of lets (b: a * a, c: b * b, ...) computes: it stops, fast."""
    square = expr.parse("x * x")
    value = 4294967296
    error = None
    for _ in range(64):  # unbounded, 2**(32 * 2**64): no memory holds it
        try:
            value = expr.evaluate(square, {"x": value}.__getitem__)
        except expr.EvalError as stopped:
            error = stopped
            break
    assert error is not None
    assert "beyond the largest whole number" in str(error)


def test_round_digits_are_bounded():
    with pytest.raises(expr.EvalError, match="digits"):
        expr.evaluate(expr.parse("round(5, x)"), {"x": -(10**20)}.__getitem__)


def test_backtracking_regex_gives_up_with_an_error():
    """(a|aa)+$ against 40 a's and a b backtracks for minutes under Python's re."""
    tree = expr.parse("matches(text, pattern)")
    values = {"text": "a" * 40 + "b", "pattern": "(a|aa)+$"}
    with pytest.raises(expr.EvalError, match="backtracks"):
        expr.evaluate(tree, values.__getitem__)


def test_a_literal_pattern_that_is_no_regex_is_a_load_time_error():
    problems = expr.constant_problems(expr.parse("matches(name, '(')"))
    assert problems[0][0] == 14
    assert "not a regular expression" in problems[0][1]


def _merge_bomb(levels: int = 24) -> str:
    lines = ["name: bomb", "base0: &L0 {k0_0: v0}"]
    for level in range(1, levels + 1):
        lines.append(f"L{level}: &L{level} {{<<: [*L{level - 1}, *L{level - 1}], k{level}: v}}")
    lines.append(f"target: {{<<: [*L{levels}, *L{levels}]}}")
    return "\n".join(lines) + "\n"


def test_merge_key_bomb_is_a_positioned_error():
    _, problems = yamlsource.load(_merge_bomb())
    assert problems
    assert "merge keys (<<) expand this mapping to more than 100,000 values" in problems[0].message
    assert problems[0].mark.line == 18


def test_merges_of_a_normal_size_still_work():
    source, problems = yamlsource.load("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\n")
    assert problems == []
    assert source.data["b"] == {"x": 1, "y": 3}


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 500 + "]" * 500 + "\n",
        "".join("  " * i + f"k{i}:\n" for i in range(500)) + "  " * 500 + "v\n",
        "a: " + "{b: " * 500 + "1" + "}" * 500 + "\n",
    ],
)
def test_deep_nesting_is_a_positioned_error(text):
    _, problems = yamlsource.load(text)
    assert len(problems) == 1
    assert problems[0].message == "nested more than 64 levels deep"
    assert problems[0].mark.line >= 1


@pytest.mark.parametrize(
    "text",
    [
        _merge_bomb(),
        "name: deep\nx: " + "[" * 500 + "]" * 500 + "\n",
        "name: big\ntitle: t\nsummary: s\nobservations: {m: {command: free -b, parser: free}}\n"
        "checks: {c: {description: d, expect: '"
        + "(" * 90
        + "memory.total_bytes > 0"
        + ")" * 90
        + "'}}\ngoal: [c]\nsteps: []\n",
        "name: big\ntitle: t\nsummary: s\nobservations: {m: {command: free -b, parser: free}}\n"
        "checks: {c: {description: d, expect: 'memory.total_bytes > " + "9" * 5001 + "'}}\n"
        "goal: [c]\nsteps: []\n",
        "name: big\ntitle: t\nsummary: s\nobservations: {m: {command: free -b, parser: free}}\n"
        "let: {a: '4294967296 ** 64'}\n"
        "checks: {c: {description: d, expect: 'memory.total_bytes > a'}}\n"
        "goal: [c]\nsteps: []\n",
    ],
    ids=["merge-bomb", "deep-yaml", "deep-parentheses", "long-number", "huge-let"],
)
def test_validate_reports_each_bound_as_one_positioned_line(tmp_path, capsys, text):
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == ExitCode.BAD_INPUT
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert re.search(r"big\.yaml:\d+:\d+: ", out), out


def test_a_merge_under_the_bound_loads_as_yaml_merges_it_whatever_pyyaml_is_installed():
    """The bound on merge keys is the loader's own (MAX_VALUES), not the installed PyYAML's:
    before 6.0.4 PyYAML expands merged pairs 2**n times (yaml/pyyaml#897), from 6.0.4 it
    keeps each once; with either, a document just under the bound loads as YAML 1.1 merges
    it and one just over it is the positioned error (not the version installed here)."""
    under, problems = yamlsource.load(_merge_bomb(levels=14))  # 2 * (2**15 - 1) merged pairs
    assert problems == []
    assert under.data["target"] == {"k0_0": "v0", **{f"k{n}": "v" for n in range(1, 15)}}
    _, problems = yamlsource.load(_merge_bomb(levels=15))  # 2 * (2**16 - 1): over 100,000
    assert [p.message for p in problems] == [
        "merge keys (<<) expand this mapping to more than 100,000 values"
    ]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    floor = next(d for d in project["project"]["dependencies"] if d.startswith("PyYAML"))
    assert floor.startswith("PyYAML>=6.0.4")  # the floor we ask for: linear merges


def test_a_parameter_pattern_that_backtracks_is_refused_not_run_for_minutes():
    from runbook_runner.format.semantics import value_problem

    problem = value_problem({"type": "string", "pattern": "(a|aa)+"}, "a" * 40 + "b")
    assert problem is not None
    assert "too long" in problem


# -- bounds on every local input (issue 28) ------------------------------------------------

_DEEP_JSON = "[" * 100_000 + "]" * 100_000
_DEEP_YAML = "gpus: " + "[" * 5_000 + "]" * 5_000


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("deep.json", _DEEP_JSON, ":1:65: nested more than 64 levels deep"),
        ("deep.yaml", _DEEP_YAML, ":1:70: nested more than 64 levels deep"),
        ("digits.yaml", "gpus: " + "1" * 5_000, ":1:7: gpus: a number of 5,000 characters"),
        ("count.yaml", "gpus: 10000000", ": gpus: 10000000 GPUs (a host has 0 to 256)"),
        ("list.yaml", "gpus: [" + "{}, " * 300 + "]", ": gpus: 300 GPUs"),
        ("negative.yaml", "gpus: -1", ": gpus: -1 GPUs"),
        ("dup.json", '{"gpus": 2, "gpus": 3}', ":1:13: gpus: duplicate key 'gpus'"),
        (
            "nul.yaml",
            'processes: [{pid: 1, cmdline: "a\\0b"}]',
            ":1:31: processes[0].cmdline: a NUL character",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 12 else None,
)
def test_a_state_file_out_of_bounds_is_refused_with_the_field(
    name, text, message, tmp_path, capsys
):
    state = tmp_path / name
    state.write_text(text)
    code = main(["test", "gpu-node-health", "--state", str(state)])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT, err
    assert err.startswith(f"runbook: --state {state}{message}"), err
    assert err.count("\n") == 1


def _runbook_with_default(default: str) -> str:
    return (
        "name: nul\ntitle: t\nsummary: s\n"
        f"parameters:\n  v: {{type: string, default: {default}, description: d}}\n"
        "observations:\n  o: {command: 'true', parser: lines}\n"
        "checks:\n  c: {description: d, none: o}\n"
        'goal: [c]\nsteps:\n  - id: s\n    title: s\n    run: [echo, "{{ v }}"]\n'
    )


@pytest.mark.parametrize(
    ("default", "message"),
    [
        ('"a\\0b"', "nul.yaml:5:30: parameters.v.default: a NUL character"),
        ("1" * 5_000, "nul.yaml:5:30: parameters.v.default: a number of 5,000 characters"),
    ],
    ids=["nul", "digits"],
)
def test_a_runbook_value_out_of_bounds_is_refused_at_load(default, message, tmp_path, capsys):
    runbook = tmp_path / "nul.yaml"
    runbook.write_text(_runbook_with_default(default))
    assert main(["validate", str(runbook)]) == ExitCode.BAD_INPUT
    assert message in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("all:\n  hosts: {a: {}, a: {}}\n", "inv.yaml:2:18: all.hosts.a: duplicate key 'a'"),
        ("all: " + "[" * 5_000 + "]" * 5_000, "inv.yaml:1:69: nested more than 64 levels deep"),
        ("all:\n  vars: {ansible_port: " + "9" * 5_000 + "}", "a number of 5,000 characters"),
    ],
    ids=["duplicate", "deep", "digits"],
)
def test_an_inventory_out_of_bounds_is_one_line_with_the_field(text, message):
    from runbook_runner.fleet.inventory import InventoryError, parse

    with pytest.raises(InventoryError, match=re.escape(message)):
        parse(text, "inv.yaml")
