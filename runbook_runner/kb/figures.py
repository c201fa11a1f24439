"""An incident's figures: one data file, every measured number with its unit and source, and
the derived numbers computed from them (pure: a mapping in, text out).

The knowledge base quotes figures through placeholders that the site's hook expands:

    {{ fig.NAME }}        the value with its unit, e.g. "8.16 GB (7.60 GiB)"
    {{ fig.NAME.short }}  the value with its unit, without the second unit
    {{ fig.NAME.value }}  the number alone, e.g. "8.16"
    {{ calc.NAME }}       a derived figure's arithmetic: "(512 + 64) × 2 B × 61 = 70,272 B"

Units are explicit: GB, MB, KB, TB are powers of 10 (10^9 bytes); GiB, MiB, KiB, TiB are
powers of 2 (2^30 bytes). A derived figure is computed in base units (bytes, tokens,
seconds) and shown in the unit its entry names, so the arithmetic crosses GB and GiB
without a silent conversion.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SCALE: dict[str, float] = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
}
# Units that are plain counts: the value is its own base.
COUNTS = {"", "tokens", "s", "×", "ranks", "segments", "layers"}
STATUSES = {"observed", "inferred", "unknown", "configured", "reference", "example", "derived"}
PLACEHOLDER = re.compile(r"\{\{\s*(fig|calc)\.([a-z][a-z0-9_]*)(?:\.(value|short))?\s*\}\}")
# A number followed by a unit of memory or tokens: what a page may state only from the data.
FIGURE_IN_TEXT = re.compile(
    r"(?<![\w.^])(\d[\d,]*(?:\.\d+)?)\s?(TiB|GiB|MiB|KiB|TB|GB|MB|KB|kB|B|tokens)(?![\w/])"
)


class FigureError(ValueError):
    pass


@dataclass(frozen=True)
class Figure:
    name: str
    base: float  # in bytes for memory units, else the value itself
    unit: str
    digits: int
    status: str
    source: str
    note: str = ""
    also: str = ""  # a second unit to show, e.g. GiB next to GB
    also_digits: int = 2
    expr: str = ""  # for derived figures

    def in_unit(self, unit: str | None = None) -> float:
        unit = self.unit if unit is None else unit
        return self.base / SCALE.get(unit, 1)

    def number(self, unit: str | None = None, digits: int | None = None) -> str:
        value = self.in_unit(unit)
        places = self.digits if digits is None else digits
        return f"{value:,.{places}f}"

    def short(self) -> str:
        if self.unit in ("", "×"):
            return self.number() + ("×" if self.unit == "×" else "")
        return f"{self.number()} {self.unit}"

    def text(self) -> str:
        if self.also:
            return f"{self.short()} ({self.number(self.also, self.also_digits)} {self.also})"
        return self.short()


def _scale(unit: str) -> float:
    if unit in SCALE:
        return SCALE[unit]
    if unit in COUNTS:
        return 1.0
    raise FigureError(f"unknown unit {unit!r} (known: {', '.join([*SCALE, *sorted(COUNTS)])})")


_FUNCS = {"floor": math.floor, "ceil": math.ceil, "min": min, "max": max}
_OPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}


def _evaluate(node: ast.AST, values: Mapping[str, float], name: str) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values, name)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise FigureError(f"{name}: uses {node.id!r}, which is not a figure defined above it")
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return float(
            _OPS[type(node.op)](
                _evaluate(node.left, values, name), _evaluate(node.right, values, name)
            )
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, values, name)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        args = [_evaluate(a, values, name) for a in node.args]
        return float(_FUNCS[node.func.id](*args))  # type: ignore[operator]
    raise FigureError(f"{name}: only + - * / **, numbers, figures and floor/ceil/min/max")


def load(data: Mapping[str, Any]) -> dict[str, Figure]:
    """The figures of one data document: ``figures`` (measured or sourced), then ``derived``."""
    figures: dict[str, Figure] = {}
    for name, entry in (data.get("figures") or {}).items():
        if not isinstance(entry, Mapping) or "value" not in entry:
            raise FigureError(f"{name}: needs a value")
        unit = str(entry.get("unit", ""))
        status = str(entry.get("status", ""))
        if status not in STATUSES - {"derived"}:
            raise FigureError(
                f"{name}: status must be one of " + ", ".join(sorted(STATUSES - {"derived"}))
            )
        if not entry.get("source"):
            raise FigureError(f"{name}: needs a source")
        value = float(entry["value"])
        figures[name] = Figure(
            name=name,
            base=value * _scale(unit),
            unit=unit,
            digits=int(
                entry.get(
                    "digits", 0 if value == int(value) else len(str(entry["value"]).split(".")[1])
                )
            ),
            status=status,
            source=str(entry["source"]),
            note=str(entry.get("note", "")),
            also=str(entry.get("also", "")),
            also_digits=int(entry.get("also_digits", 2)),
        )
    for name, entry in (data.get("derived") or {}).items():
        if name in figures:
            raise FigureError(f"{name}: defined twice")
        expr = str(entry.get("expr", ""))
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError:
            raise FigureError(f"{name}: {expr!r} is not an expression") from None
        base = _evaluate(tree, {n: f.base for n, f in figures.items()}, name)
        unit = str(entry.get("unit", ""))
        _scale(unit)
        figures[name] = Figure(
            name=name,
            base=base,
            unit=unit,
            digits=int(entry.get("digits", 0)),
            status="derived",
            source=str(entry.get("source", "computed from the figures it names")),
            note=str(entry.get("note", "")),
            also=str(entry.get("also", "")),
            also_digits=int(entry.get("also_digits", 2)),
            expr=expr,
        )
    return figures


_SYMBOLS = {"*": "×", "/": "÷", "-": "−"}


def arithmetic(figure: Figure, figures: Mapping[str, Figure]) -> str:
    """A derived figure's expression with each figure's value in place, and its result."""
    if not figure.expr:
        return figure.text()

    def word(match: re.Match[str]) -> str:
        word_ = match.group(0)
        if word_ in figures:
            return figures[word_].short()
        if word_ in _SYMBOLS:
            return _SYMBOLS[word_]
        if word_ == "**":
            return "^"
        return word_

    shown = re.sub(r"\*\*|[A-Za-z_][A-Za-z0-9_]*|[*/-]", word, figure.expr)
    shown = re.sub(r"\s+", " ", shown).strip()
    return f"{shown} = {figure.text()}"


def expand(text: str, figures: Mapping[str, Figure]) -> tuple[str, list[str]]:
    """The text with every placeholder filled in, and the names it could not find."""
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        kind, name, part = match.group(1), match.group(2), match.group(3)
        figure = figures.get(name)
        if figure is None:
            missing.append(name)
            return match.group(0)
        if kind == "calc":
            return arithmetic(figure, figures)
        if part == "value":
            return figure.number()
        if part == "short":
            return figure.short()
        return figure.text()

    return PLACEHOLDER.sub(fill, text), missing


def stated(text: str) -> list[tuple[float, str, str]]:
    """Every number with a memory or token unit in a text: (value, unit, as written)."""
    return [
        (float(m.group(1).replace(",", "")), m.group(2), m.group(0))
        for m in FIGURE_IN_TEXT.finditer(text)
    ]


def backed(value: float, unit: str, written: str, figures: Mapping[str, Figure]) -> bool:
    """Whether a stated number is one of the figures, in that unit, at the precision written."""
    unit = "KB" if unit == "kB" else unit
    number = written.split()[0] if " " in written else re.sub(r"[A-Za-z]+$", "", written)
    places = len(number.split(".")[1]) if "." in number else 0
    for figure in figures.values():
        for candidate in {figure.unit, figure.also} - {""}:
            if candidate != unit:
                continue
            if round(figure.in_unit(candidate), places) == round(value, places):
                return True
    return False
