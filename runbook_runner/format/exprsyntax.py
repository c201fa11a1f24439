"""The expression language's syntax: tokens, the tree, the parser, and walks over the tree.

Parsed once at load time; every bound on what a runbook may write (the length of a
number, the nesting, the number of parts) is checked here, with an offset into the text.
The language itself is described in :mod:`runbook_runner.format.expr`.
"""

from __future__ import annotations

import math
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


# Bounds on what a runbook may ask to compute: a check is a comparison of host figures,
# never an unbounded computation. Byte counts of a large server are ~1e13.
MAX_INT = 10**30  # a whole-number result beyond this is an error, not a bignum
MAX_NUMBER_TEXT = 40  # characters in one number literal
MAX_DEPTH = 32  # nested parentheses, signs, 'not' and calls
MAX_TOKENS = 400

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


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    return ()


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


def source_of(node: Node, source: str) -> str:
    return source[node.start : node.end]
