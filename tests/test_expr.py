"""The expression language: parsed at load time, evaluated without eval()."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbook_runner.format import expr

VALUES = {
    "tp_size": 8,
    "hicache_size_gb": 300,
    "memory.available_bytes": 437 * 1024**3,
    "name": "H200",
}


def run(source: str, values=VALUES):
    return expr.evaluate(expr.parse(source), values.__getitem__)


@pytest.mark.parametrize(
    ("source", "result"),
    [
        ("tp_size * hicache_size_gb * 1e9", 2.4e12),
        ("memory.available_bytes >= tp_size * hicache_size_gb * 1e9", False),
        ("1_024 // 3 + 10 % 4", 343),
        ("10 * 2**30", 10737418240),
        ("-2 ** 2", -4),
        ("2 ** 3 ** 2", 512),
        ("-(1 + 2) * 3", -9),
        ("min(1, 2, 3) + max(4, 5) + abs(-2)", 8),
        ("name == 'H200' and not tp_size != 8", True),
        ('name == "A100" or tp_size == 8', True),
        ("true and false", False),
    ],
)
def test_evaluates(source, result):
    assert run(source) == result


def test_precedence_comparison_binds_looser_than_arithmetic():
    assert run("1 + 2 * 3 == 7")


def test_count_of_a_list():
    assert expr.evaluate(expr.parse("count(gpus) == 2"), {"gpus": (1, 2)}.__getitem__)


def test_names_lists_every_name_with_its_offset():
    tree = expr.parse("a.b >= c * 2 and count(d)")
    assert [(n.path, n.start) for n in expr.names(tree)] == [("a.b", 0), ("c", 7), ("d", 23)]


def test_missing_value_is_its_own_error():
    with pytest.raises(expr.MissingValue) as raised:
        run("x > 1", {"x": None})
    assert raised.value.name == "x"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("'a' + 1", "needs numbers"),
        ("'a' < 1", "cannot compare"),
        ("1 / 0", "division by zero"),
        ("1 and true", "expected true or false"),
        ("10 ** 10 ** 10", "beyond the largest number"),  # must fail at once, not compute for hours
        ("(-8) ** 0.5", "not a real number"),
    ],
)
def test_type_errors_are_eval_errors(source, message):
    with pytest.raises(expr.EvalError, match=message):
        run(source)


@pytest.mark.parametrize(
    ("source", "offset"),
    [("1 +", 3), ("__import__('os')", 0), ("a; b", 1), ("(1", 2), ("", 0)],
)
def test_rejected_with_an_offset(source, offset):
    with pytest.raises(expr.ExprError) as raised:
        expr.parse(source)
    if source:
        assert raised.value.offset == offset


def test_dunder_names_are_just_names_never_attributes():
    # "a.__class__" would be attribute access in Python; here it is a name the
    # loader rejects as undefined, and evaluation only asks the resolver.
    asked = []
    expr.evaluate(expr.parse("x.__class__ == 1"), lambda name: asked.append(name) or 1)
    assert asked == ["x.__class__"]


@given(st.text(max_size=60))
def test_any_text_parses_or_raises_expr_error(source):
    with contextlib.suppress(expr.ExprError):
        expr.parse(source)
