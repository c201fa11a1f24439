"""Computing a parsed expression on a host's state, within bounds.

A value the host did not report fails as :class:`MissingValue`, never as zero; numbers
past the bounds and regular expressions that backtrack too long are errors
(:class:`EvalError`), and so is a part without names that fails on every host
(:func:`constant_problems`, at load time).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

import regex

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.format.exprsyntax import (
    AGGREGATES,
    MAX_INT,
    Binary,
    Call,
    Literal,
    Name,
    Node,
    Unary,
    children,
    names,
)


class EvalError(RunbookRunnerError):
    """An expression that parsed but cannot be computed on this state."""


class MissingValue(EvalError):
    """A name whose value the host did not report."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} not reported")
        self.name = name


REGEX_TIMEOUT_S = 0.25  # matches(): a pattern that backtracks longer is an error


def bounded(value: Any) -> Any:
    """``value``, or :class:`EvalError` if it is a number past the bounds."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise EvalError("the result is beyond the largest whole number (10**30)")
    if isinstance(value, float) and not math.isfinite(value):
        raise EvalError("the result is beyond the largest number (about 1.8e308)")
    return value


def constant_problems(node: Node) -> list[tuple[int, str]]:
    """(offset, message) for each part with no names that cannot be computed.

    ``10**40``, ``1e308 * 10`` or ``matches(x, '(')`` fail the same way on every host:
    they are errors in the runbook, reported when it is loaded.
    """
    problems: list[tuple[int, str]] = []

    def visit(part: Node) -> None:
        if isinstance(part, Call) and part.function == "matches":
            pattern = part.args[1]
            if isinstance(pattern, Literal) and isinstance(pattern.value, str):
                problem = pattern_problem(pattern.value)
                if problem:
                    problems.append((pattern.start, f"matches(): {problem}"))
        if not isinstance(part, Literal) and not any(True for _ in names(part)):
            try:
                evaluate(part, lambda name: None)
            except EvalError as error:
                problems.append((part.start, str(error)))
                return
        for child in children(part):
            visit(child)

    visit(node)
    return problems


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": lambda base, exponent: _power(base, exponent),
}


def _power(base: Any, exponent: Any) -> Any:
    # Whole numbers stay whole only while small: 10**10**10 must fail fast, not run for hours.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and 0 <= exponent <= 64
        and abs(base) <= 2**32
    ):
        return base**exponent
    result = float(base) ** float(exponent)
    if isinstance(result, complex):
        raise EvalError(f"{base} ** {exponent} is not a real number")
    return result


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}

Resolver = Callable[[str], Any]


def evaluate(node: Node, resolve: Resolver) -> Any:
    """Compute the expression; ``resolve`` maps a name to its value.

    A ``None`` value raises :class:`MissingValue`: a check on a value the host
    did not report must fail as such, not compare as if it were zero.
    """
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Name):
        value = resolve(node.path)
        if value is None:
            raise MissingValue(node.path)
        return value
    if isinstance(node, Unary):
        operand = evaluate(node.operand, resolve)
        if node.op == "not":
            return not _truth(operand)
        _need_number(operand, node.op)
        return -operand if node.op == "-" else operand
    if isinstance(node, Call):
        return bounded(_call(node, resolve))
    assert isinstance(node, Binary)
    if node.op in {"and", "or"}:
        left = _truth(evaluate(node.left, resolve))
        if (node.op == "and" and not left) or (node.op == "or" and left):
            return left
        return _truth(evaluate(node.right, resolve))
    left, right = evaluate(node.left, resolve), evaluate(node.right, resolve)
    if node.op in _COMPARE:
        if node.op not in {"==", "!="}:
            _need_same_kind(left, right, node.op)
        return _COMPARE[node.op](left, right)
    _need_number(left, node.op)
    _need_number(right, node.op)
    try:
        return bounded(_ARITHMETIC[node.op](left, right))
    except ZeroDivisionError:
        raise EvalError("division by zero") from None
    except OverflowError:
        raise EvalError(
            f"{node.op}: the result is beyond the largest number (about 1.8e308)"
        ) from None


def _call(node: Call, resolve: Resolver) -> Any:
    if node.function == "count":
        assert isinstance(node.args[0], Name)
        items = resolve(node.args[0].path)
        if not isinstance(items, (list, tuple)):
            raise EvalError(f"count() needs a list, {node.args[0].path} is not one")
        return len(items)
    if node.function in AGGREGATES:
        assert isinstance(node.args[0], Name)
        list_name, _, field = node.args[0].path.partition(".")
        items = resolve(list_name)
        values = (
            [getattr(item, field) for item in items] if isinstance(items, (list, tuple)) else []
        )
        values = [v for v in values if v is not None]
        if not values:
            raise MissingValue(node.args[0].path)
        if node.function == "sum_of":
            return sum(values)
        return min(values) if node.function == "min_of" else max(values)
    if node.function == "coalesce":
        for arg in node.args:
            try:
                return evaluate(arg, resolve)
            except MissingValue:
                continue
        raise MissingValue(" / ".join(n.path for n in names(node)) or "coalesce()")
    values = [evaluate(arg, resolve) for arg in node.args]
    if node.function in {"matches", "contains"}:
        text, pattern = values
        if not isinstance(text, str) or not isinstance(pattern, str):
            raise EvalError(f"{node.function}() needs two strings")
        if node.function == "contains":
            return pattern in text
        return search(pattern, text)
    for value in values:
        _need_number(value, node.function + "()")
    if node.function == "abs":
        return abs(values[0])
    if node.function == "round":
        digits = int(values[1]) if len(values) > 1 else None
        if digits is not None and not -30 <= digits <= 30:
            raise EvalError(f"round(): {digits} digits (between -30 and 30)")
        return round(values[0], digits)
    if node.function == "floor":
        return math.floor(values[0])
    if node.function == "gib":
        return values[0] / 2**30
    if node.function == "gb":
        return values[0] / 10**9
    return min(values) if node.function == "min" else max(values)


def search(pattern: str, text: str) -> bool:
    """``matches()``: a regular-expression search that gives up after REGEX_TIMEOUT_S.

    Python's ``re`` cannot be stopped: ``(a+)+$`` against 30 a's and a b backtracks for
    minutes. The ``regex`` module takes the same syntax and a timeout, so a runbook's
    pattern (or one given with --set) costs a bounded time on any host output.
    """
    try:
        return regex.search(pattern, text, timeout=REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        raise EvalError(
            f"matches(): {pattern!r} took over {REGEX_TIMEOUT_S:g}s on {len(text)} characters "
            "(a pattern that backtracks: avoid nested repeats like (a+)+)"
        ) from None
    except (regex.error, re.error) as error:
        raise EvalError(f"matches(): {pattern!r} is not a regular expression: {error}") from None


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is no regular expression, or None (for load-time checks)."""
    try:
        regex.compile(pattern)
    except (regex.error, re.error) as error:
        return f"not a regular expression: {error}"
    return None


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError(f"expected true or false, got {value!r}")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _need_number(value: Any, op: str) -> None:
    if not is_number(value):
        raise EvalError(f"{op} needs numbers, got {value!r}")


def _need_same_kind(left: Any, right: Any, op: str) -> None:
    if not (
        (is_number(left) and is_number(right)) or (isinstance(left, str) and isinstance(right, str))
    ):
        raise EvalError(f"cannot compare {left!r} {op} {right!r}")
