"""The expression type checker: the kind of every part of a runbook's expression.

Pure: a runbook's names (parameters, observations, ``let`` values) come in through
:class:`Names`; :mod:`semantics` reports what it finds with the document's positions.
"""

from __future__ import annotations

from typing import Any, Protocol

from runbook_runner.format import expr
from runbook_runner.format.suggest import suggest as _suggest
from runbook_runner.observe import CONDITIONS, PARSERS
from runbook_runner.observe.state import field_kinds, field_names

_PARAMETER_KINDS = {
    "integer": "number",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
}
_NUMERIC_FUNCTIONS = {"min", "max", "abs", "round", "floor", "gib", "gb"}


class Names(Protocol):
    """What an expression can name: the runbook's parameters, observations and lets."""

    parameters: dict[str, Any]
    observations: dict[str, Any]
    let_kinds: dict[str, str | None]


class ExpressionTypes:
    """The kind of each part of an expression: 'number', 'string', 'boolean', 'list' or None.

    Problems (a string compared with a number, a condition name that does not exist) are
    collected in :attr:`problems` as (offset, message).
    """

    def __init__(self, semantics: Names, item_type: type | None, source: str) -> None:
        self.semantics, self.item_type, self.source = semantics, item_type, source
        self.problems: list[tuple[int, str]] = []

    def text(self, node: expr.Node) -> str:
        return expr.source_of(node, self.source).strip()

    def problem(self, node: expr.Node, message: str) -> None:
        self.problems.append((node.start, message))

    def name(self, path: str) -> str | None:
        sem = self.semantics
        head, _, field = path.partition(".")
        if not field:
            if self.item_type is not None and path in field_names(self.item_type):
                return field_kinds(self.item_type).get(path)
            if path in sem.let_kinds:
                return sem.let_kinds[path]
            spec = sem.parameters.get(path)
            if isinstance(spec, dict):
                return _PARAMETER_KINDS.get(str(spec.get("type")))
            if path in sem.observations:
                return "list" if PARSERS[sem.observations[path]["parser"]].is_list else None
            return None
        if field == "condition" and head in sem.observations:
            return "string"
        spec = sem.observations.get(head)
        if spec is None:
            return None
        return field_kinds(PARSERS[spec["parser"]].record_type).get(field)

    def need(self, node: expr.Node, kind: str | None, wanted: str, what: str) -> None:
        if kind is not None and kind != wanted and kind != "any":
            self.problem(node, f"{what} needs a {wanted}, but {self.text(node)} is a {kind}")

    def kind(self, node: expr.Node) -> str | None:
        if isinstance(node, expr.Literal):
            value = node.value
            if isinstance(value, bool):
                return "boolean"
            return "number" if isinstance(value, (int, float)) else "string"
        if isinstance(node, expr.Name):
            return self.name(node.path)
        if isinstance(node, expr.Unary):
            inner = self.kind(node.operand)
            if node.op == "not":
                self.need(node.operand, inner, "boolean", "'not'")
                return "boolean"
            self.need(node.operand, inner, "number", f"'{node.op}'")
            return "number"
        if isinstance(node, expr.Binary):
            left, right = self.kind(node.left), self.kind(node.right)
            if node.op in {"and", "or"}:
                self.need(node.left, left, "boolean", f"'{node.op}'")
                self.need(node.right, right, "boolean", f"'{node.op}'")
                return "boolean"
            if node.op in {"==", "!=", "<", "<=", ">", ">="}:
                self.condition_names(node)
                known = {left, right} - {None, "any"}
                if len(known) == 2:
                    self.problem(
                        node,
                        f"cannot compare {self.text(node.left)} (a {left}) with "
                        f"{self.text(node.right)} (a {right})",
                    )
                return "boolean"
            self.need(node.left, left, "number", f"'{node.op}'")
            self.need(node.right, right, "number", f"'{node.op}'")
            return "number"
        if isinstance(node, expr.Call):
            return self.call(node)
        return None

    def condition_names(self, node: expr.Binary) -> None:
        """``gpus.condition == 'gpu-lots'`` is a typo: name the conditions there are."""
        for name, other in ((node.left, node.right), (node.right, node.left)):
            if (
                isinstance(name, expr.Name)
                and name.path.endswith(".condition")
                and isinstance(other, expr.Literal)
                and isinstance(other.value, str)
                and other.value not in CONDITIONS
            ):
                self.problem(
                    other,
                    f"no observation condition is called {other.value!r}"
                    + _suggest(other.value, list(CONDITIONS)),
                )

    def call(self, node: expr.Call) -> str | None:
        function = node.function
        if function in expr.AGGREGATES:
            arg = node.args[0]
            if isinstance(arg, expr.Name):
                head, _, field = arg.path.partition(".")
                spec = self.semantics.observations.get(head)
                if spec is not None:
                    kind = field_kinds(PARSERS[spec["parser"]].record_type).get(field)
                    self.need(arg, kind, "number", f"{function}()")
            return "number"
        kinds = [self.kind(arg) for arg in node.args]
        if function == "count":
            self.need(node.args[0], kinds[0], "list", "count()")
            return "number"
        if function in {"matches", "contains"}:
            for arg, kind in zip(node.args, kinds, strict=True):
                self.need(arg, kind, "string", f"{function}()")
            return "boolean"
        if function in _NUMERIC_FUNCTIONS:
            for arg, kind in zip(node.args, kinds, strict=True):
                self.need(arg, kind, "number", f"{function}()")
            return "number"
        if function == "coalesce":
            return next((k for k in kinds if k is not None), None)
        return None
