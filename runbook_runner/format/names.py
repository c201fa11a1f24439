"""The names a runbook defines, and whether each name and expression in it means something.

:class:`RunbookNames` holds the parameters, observations, checks and ``let`` values of a
raw document and the problems found so far, each at its position; :meth:`expression`
checks one expression's names, then its types (:mod:`exprtypes`). The checks' own rules
are in :mod:`checkmeaning`, the rest of the document's in :mod:`semantics`.
"""

from __future__ import annotations

from typing import Any

from runbook_runner.format import expr
from runbook_runner.format.exprtypes import ExpressionTypes
from runbook_runner.format.ladders import step_specs
from runbook_runner.format.suggest import suggest as _suggest
from runbook_runner.format.yamlsource import Mark, Path, Problem, Source
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import field_names, has_field


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def mistyped(spec: dict[str, Any], kind: str) -> bool:
    """Whether a mapping has a key the schema does not know: reported there ("did you mean").

    A missing 'expect' or 'run' is then most likely that key, mistyped; saying it is
    missing as well only confuses.
    """
    from runbook_runner.format.schema import schema

    known = schema()["$defs"][kind].get("properties", {})
    return any(key not in known for key in spec)


class RunbookNames:
    """The document's names, and the problems found against them (:attr:`found`)."""

    def __init__(self, source: Source, stem: str | None) -> None:
        self.source = source
        self.data = mapping(source.data)
        self.stem = stem
        self.found: list[Problem] = []
        self.parameters = mapping(self.data.get("parameters"))
        self.observations = {
            name: spec
            for name, spec in mapping(self.data.get("observations")).items()
            if isinstance(spec, dict) and spec.get("parser") in PARSERS
        }
        self.checks = mapping(self.data.get("checks"))
        self.step_specs = step_specs(self.data)  # flattened out of their ladders
        self.lets: list[str] = []  # grows as each is checked: a let may use only earlier ones
        self.let_kinds: dict[str, str | None] = {}

    def error(self, path: Path, message: str, offset: int | None = None) -> None:
        mark = self.source.mark_of(path)
        if offset is not None and path in self.source.inline:
            # Only a scalar written on one line lets an offset into its text become a column.
            mark = Mark(mark.line, mark.column + self.source.inline[path] + offset)
        self.found.append(Problem(mark, path, message))

    def list_observation(self, path: Path, name: str) -> type | None:
        lists = [n for n, s in self.observations.items() if PARSERS[s["parser"]].is_list]
        if name not in lists:
            self.error(path, f"{name!r} is not a list observation{_suggest(name, lists)}")
            return None
        return PARSERS[self.observations[name]["parser"]].record_type

    def expression(
        self,
        path: Path,
        text: str,
        item_type: type | None,
        base: int = 0,
        want: str | None = "boolean",
    ) -> str | None:
        """Check names, then types; returns the expression's kind (None: unknown)."""
        try:
            tree = expr.parse(text)
        except expr.ExprError as error:
            self.error(path, f"in expression: {error}", base + error.offset)
            return None
        for offset, problem in expr.constant_problems(tree):
            self.error(path, f"in expression: {problem}", base + offset)
        aggregated = {id(arg) for call in expr.calls(tree, expr.AGGREGATES) for arg in call.args}
        problems = 0
        for node in expr.names(tree):
            if id(node) in aggregated:
                message = self.aggregate_problem(node.path)
            else:
                message = self.name_problem(node.path, item_type)
            if message:
                problems += 1
                self.error(path, message, base + node.start)
        if problems:
            return None
        typing = ExpressionTypes(self, item_type, text)
        kind = typing.kind(tree)
        for offset, message in typing.problems:
            self.error(path, message, base + offset)
        if want is not None and kind is not None and kind != want and not typing.problems:
            self.error(path, f"{text.strip()} is a {kind}, not a condition (true or false)", base)
        return kind

    def aggregate_problem(self, name: str) -> str | None:
        head, _, field = name.partition(".")
        spec = self.observations.get(head)
        if spec is None or not PARSERS[spec["parser"]].is_list:
            lists = [n for n, s in self.observations.items() if PARSERS[s["parser"]].is_list]
            return f"{head!r} is not a list observation{_suggest(head, lists)}"
        fields = list(field_names(PARSERS[spec["parser"]].record_type))
        if not has_field(PARSERS[spec["parser"]].record_type, field):
            return f"{head!r} items have no field {field!r}{_suggest(field, fields)}"
        return None

    def name_problem(self, name: str, item_type: type | None) -> str | None:
        """Why ``name`` means nothing here, or ``None`` if it resolves."""
        head, _, field = name.partition(".")
        if field == "condition" and head in self.observations:
            return None  # the observation's typed outcome: 'ok', 'gpu-lost', ...
        if not field:
            if item_type is not None and name in field_names(item_type):
                if name in self.parameters:
                    return f"{name!r} is both an item field and a parameter: rename the parameter"
                return None
            if name in self.parameters or name in self.observations or name in self.lets:
                return None
            if item_type is not None and has_field(item_type, name):
                return None  # a field an open record takes from the output (a table's column)
            fields = list(field_names(item_type)) if item_type else []
            known = list(self.parameters) + self.lets + fields + list(self.observations)
            return f"unknown name {name!r}{_suggest(name, known)}"
        if head not in self.observations:
            return f"unknown observation {head!r}{_suggest(head, list(self.observations))}"
        parser = PARSERS[self.observations[head]["parser"]]
        if parser.is_list:
            return f"{head!r} is a list: use 'every'/'none' on it, or count({head})"
        fields = list(field_names(parser.record_type))
        if not has_field(parser.record_type, field):
            return f"{head!r} has no field {field!r}{_suggest(field, fields)}"
        return None

    def check_list(self, path: Path, value: Any) -> None:
        if value == "goal" or not isinstance(value, list):
            return
        seen: set[str] = set()
        for i, name in enumerate(value):
            if not isinstance(name, str):
                continue
            if name not in self.checks:
                self.error((*path, i), f"unknown check {name!r}{_suggest(name, list(self.checks))}")
            elif name in seen:
                self.error((*path, i), f"check {name!r} is listed twice")
            seen.add(name)
