"""The meaning of a runbook's checks: every/none over a list, expect/where, and the
within/without scopes that tie one check's items to another check's or a step's."""

from __future__ import annotations

from typing import Any

from runbook_runner.format.names import RunbookNames, mistyped
from runbook_runner.format.suggest import suggest as _suggest
from runbook_runner.format.template import Interpolated
from runbook_runner.format.yamlsource import Path
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import field_names, open_type


class CheckMeaning(RunbookNames):
    """The checks of :class:`RunbookNames`' document: :meth:`check` each one."""

    def check(self, name: str, spec: dict[str, Any]) -> None:
        path: Path = ("checks", name)
        every, none = spec.get("every"), spec.get("none")
        if every is not None and none is not None:
            self.error(path, "a check takes 'every' or 'none', not both")
            return
        quantified = every if every is not None else none
        item_type = None
        if isinstance(quantified, str):
            key = "every" if every is not None else "none"
            item_type = self.list_observation((*path, key), quantified)
        if every is not None and "expect" not in spec:
            self.error(path, "'every' needs 'expect': what must hold for each item")
        if none is not None and "expect" in spec:
            self.error(
                (*path, "expect"), "with 'none', say which items must not exist with 'where'"
            )
        if "where" in spec and none is None:
            self.error((*path, "where"), "'where' goes with 'none'")
        if every is None and none is None and "expect" not in spec and not mistyped(spec, "check"):
            self.error(path, "a check needs 'expect' (or 'every'/'none' over a list observation)")
        for key in ("expect", "where"):
            if isinstance(spec.get(key), str):
                self.expression((*path, key), spec[key], item_type)
        if isinstance(spec.get("explain"), str):
            for text, offset in Interpolated.expressions(spec["explain"]):
                self.expression((*path, "explain"), text, item_type, offset, want=None)
        if "empty" in spec and quantified is None:
            self.error((*path, "empty"), "'empty' goes with 'every' or 'none'")
        for key in ("within", "without"):
            within = spec.get(key)
            if not isinstance(within, dict):
                continue
            given = [k for k in ("failing", "changed_by") if k in within]
            if len(given) != 1:
                self.error(
                    (*path, key),
                    f"'{key}' takes 'failing' (a check) or 'changed_by' (a step), "
                    + ("not both" if given else "and 'match'"),
                )
            elif isinstance(within.get("failing"), str):
                self.within((*path, key), name, within, item_type)
            elif isinstance(within.get("changed_by"), str):
                self.changed_by((*path, key), within, item_type)

    def changed_by(self, path: Path, within: dict[str, Any], item_type: type | None) -> None:
        """``within: {changed_by: STEP, match: FIELD}``: STEP acts on items (it has
        ``for_each_failing``), and FIELD is a field of its items and of this check's."""
        step_name = within["changed_by"]
        steps = [s.spec for s in self.step_specs]
        step = next((s for s in steps if s.get("id") == step_name), None)
        if step is None:
            known = [str(s.get("id")) for s in steps if isinstance(s.get("id"), str)]
            self.error(
                (*path, "changed_by"), f"unknown step {step_name!r}{_suggest(step_name, known)}"
            )
            return
        acted_on = self.checks.get(str(step.get("for_each_failing")))
        over = acted_on.get("every", acted_on.get("none")) if isinstance(acted_on, dict) else None
        if not isinstance(over, str) or over not in self.observations:
            self.error(
                (*path, "changed_by"),
                f"step {step_name!r} acts on no items: it needs 'for_each_failing' over a list",
            )
            return
        if item_type is None:
            self.error(path, "'within' goes with 'every' or 'none'")
            return
        self._shared_field(path, within.get("match"), item_type, over)

    def _shared_field(self, path: Path, match: Any, item_type: type, over: str) -> None:
        other_type = PARSERS[self.observations[over]["parser"]].record_type
        shared = sorted(set(field_names(item_type)) & set(field_names(other_type)))
        # An open record (a table's header names its fields) may have any field.
        if open_type(item_type) is not None and match in field_names(other_type):
            return
        if open_type(other_type) is not None and match in field_names(item_type):
            return
        if isinstance(match, str) and match not in shared:
            self.error(
                (*path, "match"),
                f"{match!r} is not a field of both {item_type.__name__} and "
                f"{other_type.__name__}{_suggest(match, shared)}",
            )

    def within(self, path: Path, name: str, within: dict[str, Any], item_type: type | None) -> None:
        other_name = within["failing"]
        other = self.checks.get(other_name)
        if other_name == name or not isinstance(other, dict):
            known = [c for c in self.checks if c != name]
            self.error(
                (*path, "failing"), f"unknown check {other_name!r}{_suggest(other_name, known)}"
            )
            return
        over = other.get("every", other.get("none"))
        if not isinstance(over, str) or over not in self.observations:
            self.error((*path, "failing"), f"check {other_name!r} must have 'every' or 'none'")
            return
        if self._scopes_reach(other_name, name):
            self.error((*path, "failing"), f"check {other_name!r} is scoped by {name!r}: a cycle")
            return
        if item_type is None:
            self.error(path, "'within' goes with 'every' or 'none'")
            return
        self._shared_field(path, within.get("match"), item_type, over)

    def _scopes_reach(self, start: str, target: str) -> bool:
        """Does ``start`` (through its within/without) depend on ``target``?"""
        seen, queue = set(), [start]
        while queue:
            current = queue.pop()
            if current == target:
                return True
            if current in seen:
                continue
            seen.add(current)
            spec = self.checks.get(current)
            if isinstance(spec, dict):
                for key in ("within", "without"):
                    scope = spec.get(key)
                    if isinstance(scope, dict) and isinstance(scope.get("failing"), str):
                        queue.append(scope["failing"])
        return False
