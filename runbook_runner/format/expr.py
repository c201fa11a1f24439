"""A small, safe expression language for checks and thresholds.

    memory_used_mib <= idle_mib
    memory.available_bytes >= tp_size * hicache_size_gb * 1e9 + headroom_bytes
    count(gpus) == expected_gpus and not persistence_mode == 'Disabled'

Numbers, strings, true/false, names (``a`` or ``a.b``), ``+ - * / // % **``,
comparisons, ``and or not``, parentheses, and the functions ``count``,
``min``, ``max``, ``abs``, ``round``, ``floor``, ``gib``, ``gb``, ``matches``,
``contains`` and ``coalesce``. Parsed once at load time into a tree and
evaluated by walking it: there is no ``eval`` and no attribute access.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from runbook_runner.errors import RunbookRunnerError


class ExprError(RunbookRunnerError):
    """An expression that does not parse; ``offset`` points into its text."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


class EvalError(RunbookRunnerError):
    """An expression that parsed but cannot be computed on this state."""


class MissingValue(EvalError):
    """A name whose value the host did not report."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} not reported")
        self.name = name


# Bounds on what a runbook may ask to compute: a check is a comparison of host figures,
# never an unbounded computation. Byte counts of a large server are ~1e13.
MAX_INT = 10**30  # a whole-number result beyond this is an error, not a bignum
MAX_NUMBER_TEXT = 40  # characters in one number literal
MAX_DEPTH = 32  # nested parentheses, signs, 'not' and calls
MAX_TOKENS = 400
REGEX_TIMEOUT_S = 0.25  # matches(): a pattern that backtracks longer is an error

FUNCTIONS: dict[str, tuple[int, int]] = {
    "count": (1, 1),  # count(list observation)
    "min": (2, 8),
    "max": (2, 8),
    "abs": (1, 1),
    "round": (1, 2),
    "floor": (1, 1),
    "gib": (1, 1),  # bytes -> GiB (2**30)
    "gb": (1, 1),  # bytes -> GB (10**9)
    "matches": (2, 2),  # matches(text, regex): a regular-expression search
    "contains": (2, 2),  # contains(text, part)
    "coalesce": (2, 8),  # the first argument the host (or the user) gave a value for
    "min_of": (1, 1),  # min_of(gpus.memory_total_mib): over the items of a list observation
    "max_of": (1, 1),
    "sum_of": (1, 1),
}
AGGREGATES = {"min_of", "max_of", "sum_of"}


@dataclass(frozen=True)
class Node:
    start: int
    end: int


@dataclass(frozen=True)
class Literal(Node):
    value: Any


@dataclass(frozen=True)
class Name(Node):
    path: str


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Call(Node):
    function: str
    args: tuple[Node, ...]


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<string>'[^'\n]*'|"[^"\n]*")
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<op>\*\*|<=|>=|==|!=|//|[-+*/%<>(),])
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "true", "false"}
_COMPARISONS = {"<", "<=", ">", ">=", "==", "!="}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    start: int
    end: int


def _tokens(source: str) -> list[_Token]:
    tokens = []
    position = 0
    while position < len(source):
        if not source[position:].strip():
            break
        match = _TOKEN.match(source, position)
        if match is None or match.end() == position:
            offset = position + len(source[position:]) - len(source[position:].lstrip())
            raise ExprError(f"unexpected character {source[offset]!r}", offset)
        kind = match.lastgroup or ""
        text, start = match.group(kind), match.start(kind)
        if kind == "name" and text in _KEYWORDS:
            kind = "keyword"
        tokens.append(_Token(kind, text, start, match.end()))
        position = match.end()
    tokens.append(_Token("end", "", len(source), len(source)))
    return tokens


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = _tokens(source)
        if len(self.tokens) > MAX_TOKENS:
            raise ExprError(
                f"the expression is too long ({len(self.tokens) - 1} parts; at most {MAX_TOKENS})",
                self.tokens[MAX_TOKENS].start,
            )
        self.at = 0
        self.depth = 0

    def deeper(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(
                f"nested more than {MAX_DEPTH} levels deep (parentheses, signs, 'not', calls)",
                token.start,
            )

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.take()
        if token.text != text:
            raise ExprError(
                f"expected {text!r}, found {token.text or 'end of expression'!r}", token.start
            )
        return token

    def parse(self) -> Node:
        node = self.or_()
        token = self.peek()
        if token.kind != "end":
            raise ExprError(f"unexpected {token.text!r}", token.start)
        return node

    def _binary_level(self, ops: set[str], below: Callable[[], Node]) -> Node:
        left = below()
        while self.peek().text in ops and self.peek().kind in {"op", "keyword"}:
            op = self.take().text
            right = below()
            left = Binary(left.start, right.end, op, left, right)
        return left

    def or_(self) -> Node:
        return self._binary_level({"or"}, self.and_)

    def and_(self) -> Node:
        return self._binary_level({"and"}, self.not_)

    def not_(self) -> Node:
        if self.peek().text == "not" and self.peek().kind == "keyword":
            token = self.take()
            self.deeper(token)
            operand = self.not_()
            self.depth -= 1
            return Unary(token.start, operand.end, "not", operand)
        return self.compare()

    def compare(self) -> Node:
        left = self.sum_()
        if self.peek().text in _COMPARISONS:
            op = self.take().text
            right = self.sum_()
            if self.peek().text in _COMPARISONS:
                raise ExprError(
                    "chained comparisons are not supported; use 'and'", self.peek().start
                )
            return Binary(left.start, right.end, op, left, right)
        return left

    def sum_(self) -> Node:
        return self._binary_level({"+", "-"}, self.product)

    def product(self) -> Node:
        return self._binary_level({"*", "/", "//", "%"}, self.unary)

    def unary(self) -> Node:
        if self.peek().text in {"-", "+"}:
            token = self.take()
            self.deeper(token)
            operand = self.unary()
            self.depth -= 1
            return Unary(token.start, operand.end, token.text, operand)
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek().text == "**":  # right-associative, and binds tighter than a sign
            self.deeper(self.take())
            exponent = self.unary()
            self.depth -= 1
            return Binary(base.start, exponent.end, "**", base, exponent)
        return base

    def atom(self) -> Node:
        token = self.take()
        if token.kind == "number":
            return Literal(token.start, token.end, _number(token))
        if token.kind == "string":
            return Literal(token.start, token.end, token.text[1:-1])
        if token.kind == "keyword" and token.text in {"true", "false"}:
            return Literal(token.start, token.end, token.text == "true")
        if token.kind == "name":
            if self.peek().text == "(":
                return self.call(token)
            return Name(token.start, token.end, token.text)
        if token.text == "(":
            self.deeper(token)
            inner = self.or_()
            close = self.expect(")")
            self.depth -= 1
            return _respan(inner, token.start, close.end)
        found = token.text or "end of expression"
        raise ExprError(f"expected a value, found {found!r}", token.start)

    def call(self, name: _Token) -> Node:
        if name.text not in FUNCTIONS:
            known = ", ".join(sorted(FUNCTIONS))
            raise ExprError(f"unknown function {name.text!r} (known: {known})", name.start)
        self.deeper(self.expect("("))
        args = [self.or_()]
        while self.peek().text == ",":
            self.take()
            args.append(self.or_())
        close = self.expect(")")
        self.depth -= 1
        low, high = FUNCTIONS[name.text]
        if not low <= len(args) <= high:
            raise ExprError(f"{name.text}() takes {low}..{high} arguments", name.start)
        if name.text == "count" and not isinstance(args[0], Name):
            raise ExprError("count() takes the name of a list observation", args[0].start)
        if name.text in AGGREGATES and not (isinstance(args[0], Name) and "." in args[0].path):
            raise ExprError(
                f"{name.text}() takes LIST.FIELD, e.g. gpus.memory_total_mib", args[0].start
            )
        return Call(name.start, close.end, name.text, tuple(args))


def _number(token: _Token) -> int | float:
    text = token.text.replace("_", "")
    if len(text) > MAX_NUMBER_TEXT:
        raise ExprError(
            f"a number of {len(text)} characters (at most {MAX_NUMBER_TEXT})", token.start
        )
    if any(c in text for c in ".eE"):
        value = float(text)
        if not math.isfinite(value):
            raise ExprError(
                f"{token.text} is beyond the largest number (about 1.8e308)", token.start
            )
        return value
    whole = int(text)
    if abs(whole) > MAX_INT:
        raise ExprError(f"{token.text} is beyond the largest whole number (10**30)", token.start)
    return whole


def bounded(value: Any) -> Any:
    """``value``, or :class:`EvalError` if it is a number past the bounds."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise EvalError("the result is beyond the largest whole number (10**30)")
    if isinstance(value, float) and not math.isfinite(value):
        raise EvalError("the result is beyond the largest number (about 1.8e308)")
    return value


def _respan(node: Node, start: int, end: int) -> Node:
    fields = {k: getattr(node, k) for k in node.__dataclass_fields__}
    fields.update(start=start, end=end)
    return type(node)(**fields)


def parse(source: str) -> Node:
    """Parse an expression; raises :class:`ExprError` with an offset."""
    if not source.strip():
        raise ExprError("empty expression")
    return _Parser(source).parse()


def names(node: Node) -> Iterator[Name]:
    """Every name the expression reads (``count(x)`` reads ``x`` as a list)."""
    if isinstance(node, Name):
        yield node
    elif isinstance(node, Unary):
        yield from names(node.operand)
    elif isinstance(node, Binary):
        yield from names(node.left)
        yield from names(node.right)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from names(arg)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    return ()


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
        for child in _children(part):
            visit(child)

    visit(node)
    return problems


def calls(node: Node, functions: set[str]) -> Iterator[Call]:
    """Every call of one of ``functions`` in the expression."""
    if isinstance(node, Call):
        if node.function in functions:
            yield node
        for arg in node.args:
            yield from calls(arg, functions)
    elif isinstance(node, Unary):
        yield from calls(node.operand, functions)
    elif isinstance(node, Binary):
        yield from calls(node.left, functions)
        yield from calls(node.right, functions)


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
    import regex  # loaded when a pattern is used: most runs never need it

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
    import regex

    try:
        regex.compile(pattern)
    except (regex.error, re.error) as error:
        return f"not a regular expression: {error}"
    return None


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError(f"expected true or false, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _need_number(value: Any, op: str) -> None:
    if not _is_number(value):
        raise EvalError(f"{op} needs numbers, got {value!r}")


def _need_same_kind(left: Any, right: Any, op: str) -> None:
    if not (
        (_is_number(left) and _is_number(right))
        or (isinstance(left, str) and isinstance(right, str))
    ):
        raise EvalError(f"cannot compare {left!r} {op} {right!r}")


def source_of(node: Node, source: str) -> str:
    return source[node.start : node.end]
