"""A value against a parameter's spec (type, min/max, choices, pattern): a default when the
runbook is loaded, a ``--set`` value before a run."""

from __future__ import annotations

import re
from typing import Any

from runbook_runner.format import expr
from runbook_runner.format.expreval import is_number

PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
}


def is_type(value: Any, kind: str) -> bool:
    if kind in {"integer", "number"} and isinstance(value, bool):
        return False
    return isinstance(value, PYTHON_TYPES[kind])


def value_problem(spec: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` does not suit a parameter spec, or ``None`` if it does (None: unset)."""
    kind = spec.get("type", "string")
    if value is None:
        return None
    if not is_type(value, kind):
        return f"expected {kind}"
    if is_number(value):
        if is_number(spec.get("min")) and value < spec["min"]:
            return f"must be at least {spec['min']}"
        if is_number(spec.get("max")) and value > spec["max"]:
            return f"must be at most {spec['max']}"
    choices = spec.get("choices")
    if isinstance(choices, list) and choices and value not in choices:
        return "must be one of: " + ", ".join(str(c) for c in choices)
    pattern = spec.get("pattern")
    if isinstance(value, str) and isinstance(pattern, str):
        import regex  # loaded when a pattern is used

        try:
            if regex.fullmatch(pattern, value, timeout=expr.REGEX_TIMEOUT_S) is None:
                return f"must match {pattern}"
        except (regex.error, re.error):
            return None
        except TimeoutError:
            return f"took too long to match {pattern} (a pattern that backtracks)"
    return None
