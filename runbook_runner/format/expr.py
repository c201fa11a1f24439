"""A small, safe expression language for checks and thresholds.

    memory_used_mib <= idle_mib
    memory.available_bytes >= tp_size * hicache_size_gb * 1e9 + headroom_bytes
    count(gpus) == expected_gpus and not persistence_mode == 'Disabled'

Numbers, strings, true/false, names (``a`` or ``a.b``), ``+ - * / // % **``,
comparisons, ``and or not``, parentheses, and the functions ``count``,
``min``, ``max``, ``abs``, ``round``, ``floor``, ``gib``, ``gb``, ``matches``,
``contains`` and ``coalesce``. Parsed once at load time into a tree and
evaluated by walking it: there is no ``eval`` and no attribute access.

Its parts: :mod:`exprsyntax` (tokens, the tree, the parser and its bounds),
:mod:`expreval` (computing a tree on a host's state) and :mod:`exprtypes` (the type
checker). Callers use the names below, from here.
"""

from __future__ import annotations

from runbook_runner.format.expreval import (
    REGEX_TIMEOUT_S,
    EvalError,
    MissingValue,
    Resolver,
    bounded,
    constant_problems,
    evaluate,
    pattern_problem,
    search,
)
from runbook_runner.format.exprsyntax import (
    AGGREGATES,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_INT,
    MAX_NUMBER_TEXT,
    MAX_TOKENS,
    Binary,
    Call,
    ExprError,
    Literal,
    Name,
    Node,
    Unary,
    calls,
    names,
    parse,
    source_of,
)

__all__ = [
    "AGGREGATES",
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_NUMBER_TEXT",
    "MAX_TOKENS",
    "REGEX_TIMEOUT_S",
    "Binary",
    "Call",
    "EvalError",
    "ExprError",
    "Literal",
    "MissingValue",
    "Name",
    "Node",
    "Resolver",
    "Unary",
    "bounded",
    "calls",
    "constant_problems",
    "evaluate",
    "names",
    "parse",
    "pattern_problem",
    "search",
    "source_of",
]
