"""Pure checks: (check, observed state, parameters) -> results.

Each result says what was expected, what was found, and one line a tired
person understands: ``GPU 0: memory.used 96,413 MiB, expected <= 1,024 MiB``.

A check has three outcomes: ok, failing, or *cannot tell* (with the reason). An
observation that could not be made, a value the host did not report, an
expression that cannot be evaluated, and ``every``/``none`` over an empty list
(unless the check says ``empty: ok``) give *cannot tell*: never failing, never ok.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.format import expr
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import Unavailable, field_label, field_names, has_field
from runbook_runner.runbook import Check, Expression, Runbook, Within
from runbook_runner.status import CheckStatus, Condition

State = Mapping[str, Any]  # observation name -> record, tuple of records, or Unavailable


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    expected: str
    found: str
    message: str
    failing: tuple[Any, ...] = ()  # the items that fail, for steps that act per item
    cannot_tell: bool = False  # neither ok nor failing: what it needs could not be observed

    @property
    def status(self) -> CheckStatus:
        """'ok', 'failing' or 'cannot-tell'."""
        if self.ok:
            return CheckStatus.OK
        return CheckStatus.CANNOT_TELL if self.cannot_tell else CheckStatus.FAILING

    @property
    def is_failing(self) -> bool:
        return not self.ok and not self.cannot_tell

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "status": self.status,
            "expected": self.expected,
            "found": self.found,
            "message": self.message,
        }


class _Unavailable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def format_number(value: Any, unit: str = "") -> str:
    """``96413`` -> ``96,413 MiB``; bytes in GiB; floats without noise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(str(value)) if isinstance(value, str) else str(value)  # an enum's word
    if unit == "bytes":
        return format_bytes(value)
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".rstrip() if unit else text


def format_bytes(value: float) -> str:
    if abs(value) >= 1024**3:
        return f"{value / 1024**3:,.1f} GiB"
    if abs(value) >= 1024**2:
        return f"{value / 1024**2:,.1f} MiB"
    return f"{value:,.0f} bytes"


class _Context:
    """Name resolution for one check, optionally on one item of a list."""

    def __init__(self, runbook: Runbook, state: State, params: Mapping[str, Any], item: Any = None):
        self.runbook, self.state, self.params, self.item = runbook, state, params, item
        self._lets: dict[str, Any] = {}

    def observed(self, name: str) -> Any:
        value = self.state.get(name)
        if isinstance(value, Unavailable):
            raise _Unavailable(value.reason)
        if value is None:
            raise _Unavailable(f"{name} was not observed")
        return value

    def resolve(self, name: str) -> Any:
        if self.item is not None and name in field_names(type(self.item)):
            return getattr(self.item, name)
        if self.item is not None and _own_column(self.runbook, self.item, name):
            return getattr(self.item, name)
        head, _, field = name.partition(".")
        if field == "condition" and head in self.runbook.observations:
            # The typed outcome of an observation: evidence even when it failed.
            value = self.state.get(head)
            if value is None:
                raise _Unavailable(f"{head} was not observed")
            return value.condition if isinstance(value, Unavailable) else Condition.OK
        if field:
            return getattr(self.observed(head), field)
        if name in self.runbook.observations:
            return self.observed(name)
        if name in self.runbook.let:
            if name not in self._lets:
                self._lets[name] = expr.evaluate(self.runbook.let[name].tree, self.resolve)
            return self._lets[name]
        return self.params[name]

    def unit_and_label(self, node: expr.Node) -> tuple[str, str] | None:
        """The label and unit of a bare field reference, for messages."""
        if not isinstance(node, expr.Name):
            return None
        head, _, field = node.path.partition(".")
        if self.item is not None and not field and head in field_names(type(self.item)):
            return field_label(type(self.item), head)
        if field and head in self.runbook.observations:
            return field_label(self.runbook.observations[head].record_type, field)
        return None

    def tool(self, name: str) -> str:
        head = name.split(".")[0]
        if self.item is not None and head in field_names(type(self.item)):
            for observation in self.runbook.observations.values():
                if observation.record_type is type(self.item):
                    return PARSERS[observation.parser].tool
        named = self.runbook.observations.get(head)
        return PARSERS[named.parser].tool if named else "the host"


def _own_column(runbook: Runbook, item: Any, name: str) -> bool:
    """A bare name that is a field an open record took from the output (a table column)."""
    taken = name in runbook.parameters or name in runbook.let or name in runbook.observations
    return not taken and has_field(type(item), name)


@dataclass(frozen=True)
class _Verdict:
    ok: bool
    found: str
    expected: str
    message: str
    cannot_tell: bool = False


def _judge(
    expression: Expression, context: _Context, subject: str, explain: bool = True
) -> _Verdict:
    """Evaluate one expression and explain the outcome (a filter's ``where`` needs only
    whether it holds: ``explain=False`` leaves a comparison's figures unformatted)."""
    tree = expression.tree
    try:
        ok = expr.evaluate(tree, context.resolve)
    except expr.MissingValue as missing:
        label = context.unit_and_label(expr.Name(0, 0, missing.name))
        what = label[0] if label else missing.name
        found = f"{what} not reported by {context.tool(missing.name)}"
        return _Verdict(
            False, found, expression.source, f"{subject}: cannot tell: {found}", cannot_tell=True
        )
    except expr.EvalError as error:
        return _Verdict(
            False,
            str(error),
            expression.source,
            f"{subject}: cannot tell: cannot evaluate: {error}",
            cannot_tell=True,
        )
    if not isinstance(ok, bool):
        return _Verdict(
            False, repr(ok), "true", f"{subject}: {expression.source} is not a condition"
        )
    if not explain:
        return _Verdict(ok, "", expression.source, "")
    if isinstance(tree, expr.Binary) and tree.op in {"<", "<=", ">", ">=", "==", "!="}:
        return _explain_comparison(tree, expression, context, subject, ok)
    found = "true" if ok else "false"
    return _Verdict(ok, found, expression.source, f"{subject}: {expression.source} is {found}")


def _explain_comparison(
    tree: expr.Binary, expression: Expression, context: _Context, subject: str, ok: bool
) -> _Verdict:
    left = expr.evaluate(tree.left, context.resolve)
    right = expr.evaluate(tree.right, context.resolve)
    label_unit = context.unit_and_label(tree.left)
    label, unit = label_unit or (expr.source_of(tree.left, expression.source), "")
    found = f"{label} {format_number(left, unit)}"
    expected = f"{tree.op} {format_number(right, unit)}"
    if not isinstance(tree.right, expr.Literal):
        expected += f" ({expr.source_of(tree.right, expression.source)})"
    return _Verdict(ok, found, expected, f"{subject}: {found}, expected {expected}")


Changed = Mapping[str, Sequence[Mapping[str, Any]]]
"""What a run's steps acted on so far: step id -> the fields of each item it sent a command
for (the scope ``within: {changed_by: STEP}`` reads it)."""

NOTHING_CHANGED: Changed = {}


def evaluate_check(
    check: Check,
    runbook: Runbook,
    state: State,
    params: Mapping[str, Any],
    changed: Changed = NOTHING_CHANGED,
) -> CheckResult:
    """Judge one check against observed state (and, for a check scoped by ``changed_by``,
    what this run changed)."""
    context = _Context(runbook, state, params)
    try:
        if check.over is not None:
            items = tuple(context.observed(check.over))
            if not items and not check.empty_ok:
                return _cannot_tell(
                    check, f"{check.over} is empty (no items is not evidence; 'empty: ok' if it is)"
                )
            if check.within is not None:
                items = _within(check.within, runbook, items, state, params, changed)
            if check.without is not None:
                dropped = _within(check.without, runbook, items, state, params, changed)
                items = tuple(item for item in items if item not in dropped)
            if check.every is not None:
                return _every(check, runbook, items, state, params)
            return _none(check, runbook, items, state, params)
    except _Unavailable as missing:
        return _cannot_tell(check, missing.reason)
    assert check.expect is not None
    subject = _subject_of(check, runbook)
    try:
        verdict = _judge(check.expect, context, subject)
    except _Unavailable as missing:
        return CheckResult(
            check.name,
            False,
            check.expect.source,
            missing.reason,
            f"{subject}: cannot tell: {missing.reason}",
            cannot_tell=True,
        )
    if verdict.cannot_tell:
        return CheckResult(
            check.name, False, verdict.expected, verdict.found, verdict.message, cannot_tell=True
        )
    message = explained(check, context) or verdict.message
    return CheckResult(check.name, verdict.ok, verdict.expected, verdict.found, message)


def _cannot_tell(check: Check, reason: str) -> CheckResult:
    return CheckResult(
        check.name,
        False,
        check.description,
        reason,
        f"{check.description}: cannot tell: {reason}",
        cannot_tell=True,
    )


def _within(
    scope: Within,
    runbook: Runbook,
    items: tuple[Any, ...],
    state: State,
    params: Mapping[str, Any],
    changed: Changed,
) -> tuple[Any, ...]:
    """The items whose ``match`` field equals that of an item failing the scope's other
    check, or of an item its step acted on in this run (``within`` keeps these, ``without``
    drops them)."""
    field = scope.match
    if scope.changed_by is not None:
        keys = {record.get(field) for record in changed.get(scope.changed_by, ())} - {None}
        unnamed = [item.describe() for item in items if getattr(item, field) is None]
        if keys and unnamed:
            raise _Unavailable(
                f"{', '.join(unnamed)}: no {field} reported, so whether step "
                f"{scope.changed_by} changed it cannot be told"
            )
        return tuple(item for item in items if getattr(item, field) in keys)
    assert scope.failing is not None
    other = evaluate_check(runbook.checks[scope.failing], runbook, state, params, changed)
    if other.cannot_tell:
        raise _Unavailable(f"which items fail {other.name} cannot be told: {other.found}")
    unmatched = [item.describe() for item in other.failing if getattr(item, field) is None]
    if unmatched:
        raise _Unavailable(
            f"{', '.join(unmatched)}: no {field} reported, so its items cannot be matched"
        )
    keys = {getattr(item, field) for item in other.failing}
    return tuple(item for item in items if getattr(item, field) in keys)


def _subject_of(check: Check, runbook: Runbook) -> str:
    """What a scalar check talks about: 'host memory' for memory.*, else its description
    (also for NAME.condition: that is about the observation, not one of its records)."""
    assert check.expect is not None
    names = [n.path for n in expr.names(check.expect.tree) if "." in n.path]
    heads = {path.split(".")[0] for path in names}
    if len(heads) == 1 and not all(path.endswith(".condition") for path in names):
        observation = runbook.observations[heads.pop()]
        return str(observation.record_type().describe())
    return check.description


def _every(
    check: Check, runbook: Runbook, items: Any, state: State, params: Mapping[str, Any]
) -> CheckResult:
    assert check.expect is not None
    failing, messages, found, unknown = [], [], [], []
    for item in items:
        context = _Context(runbook, state, params, item)
        verdict = _judge(check.expect, context, item.describe())
        found.append(f"{item.describe()}: {verdict.found}")
        if verdict.cannot_tell:
            unknown.append(verdict.message)
        elif not verdict.ok:
            failing.append(item)
            messages.append(explained(check, context) or verdict.message)
    expected = f"every {check.every}: {check.expect.source}"
    if not items:
        return CheckResult(
            check.name,
            True,
            expected,
            f"no {check.every}",
            f"{check.description}: nothing to check",
        )
    if unknown and not failing:
        return CheckResult(
            check.name, False, expected, "; ".join(found), "; ".join(unknown), cannot_tell=True
        )
    if failing:
        return CheckResult(
            check.name, False, expected, "; ".join(found), "; ".join(messages), tuple(failing)
        )
    return CheckResult(
        check.name,
        True,
        expected,
        "; ".join(found),
        f"{check.description}: ok ({len(items)} checked)",
    )


def _none(
    check: Check, runbook: Runbook, items: Any, state: State, params: Mapping[str, Any]
) -> CheckResult:
    matching, unknown = [], []
    for item in items:
        if check.where is None:
            matching.append(item)
            continue
        context = _Context(runbook, state, params, item)
        verdict = _judge(check.where, context, item.describe(), explain=False)
        if verdict.cannot_tell:
            unknown.append(verdict.message)
        elif verdict.ok:
            matching.append(item)
    condition = f" where {check.where.source}" if check.where else ""
    expected = f"no {check.none}{condition}"
    if unknown and not matching:
        return CheckResult(
            check.name, False, expected, "; ".join(unknown), "; ".join(unknown), cannot_tell=True
        )
    if not matching:
        return CheckResult(
            check.name, True, expected, f"none of {len(items)}", f"{check.description}: ok"
        )
    found = ", ".join(item.describe() for item in matching)
    message = f"{found}: expected none ({check.description})"
    return CheckResult(check.name, False, expected, found, message, tuple(matching))


def format_value(value: Any) -> str:
    """A number for a sentence: 2,400 / 47.3 / 0.93; true/false; text as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() or abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return str(value)


def explained(check: Check, context: _Context) -> str | None:
    """The check's own ``explain`` text with its values in, or None (then the generic message)."""
    if check.explain is None:
        return None
    pieces = []
    try:
        for part in check.explain.parts:
            if isinstance(part, str):
                pieces.append(part)
            else:
                pieces.append(format_value(expr.evaluate(part[1], context.resolve)))
    except (expr.EvalError, _Unavailable):
        return None
    text = " ".join("".join(pieces).split())
    return f"{context.item.describe()}: {text}" if context.item is not None else text


def evaluate_when(
    expression: Expression, runbook: Runbook, state: State, params: Mapping[str, Any]
) -> bool | str:
    """A step's ``when``: true or false, or the reason it cannot be told (a string)."""
    context = _Context(runbook, state, params)
    try:
        value = expr.evaluate(expression.tree, context.resolve)
    except _Unavailable as missing:
        return missing.reason
    except expr.MissingValue as missing:
        return f"{missing.name} not reported by {context.tool(missing.name)}"
    except expr.EvalError as error:
        return f"cannot evaluate: {error}"
    if not isinstance(value, bool):
        return f"{expression.source} is not a condition"
    return value


def evaluate_checks(
    names: Iterable[str],
    runbook: Runbook,
    state: State,
    params: Mapping[str, Any],
    changed: Changed = NOTHING_CHANGED,
) -> list[CheckResult]:
    return [evaluate_check(runbook.checks[name], runbook, state, params, changed) for name in names]


def all_ok(results: Iterable[CheckResult]) -> bool:
    return all(result.ok for result in results)


def outcome(results: Iterable[CheckResult]) -> CheckStatus:
    """Of several checks: 'failing' if one fails, else 'cannot-tell' if one cannot be told, else 'ok'."""
    statuses = {result.status for result in results}
    if CheckStatus.FAILING in statuses:
        return CheckStatus.FAILING
    return CheckStatus.CANNOT_TELL if CheckStatus.CANNOT_TELL in statuses else CheckStatus.OK
