"""The meaning of a runbook, checked after its structure: names and references.

Runs on the raw document (even one with schema errors, so that every error is
reported in one go), so it reads defensively: anything of the wrong shape was
already reported by the schema and is skipped here.

The checks' rules are in :mod:`checkmeaning`, names and expressions in :mod:`names`, a
parameter's value against its spec in :mod:`paramspec`, and the warnings about a
destructive step's reach in :mod:`blastradius`; this module checks the rest (the name,
parameters, lets, goal, steps, templates and subject) and runs them all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from runbook_runner.format import expr
from runbook_runner.format.actions import Action, ActionKind
from runbook_runner.format.blastradius import blast_radius_warnings
from runbook_runner.format.checkmeaning import CheckMeaning
from runbook_runner.format.expreval import is_number
from runbook_runner.format.names import mapping, mistyped
from runbook_runner.format.paramspec import PYTHON_TYPES, is_type, value_problem
from runbook_runner.format.suggest import suggest as _suggest
from runbook_runner.format.template import Template, list_form_of, word_problems
from runbook_runner.format.yamlsource import Path, Problem, Source, format_path
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import field_names, has_field

__all__ = ["blast_radius_warnings", "check_meaning", "value_problem"]


def check_meaning(
    source: Source,
    stem: str | None,
    actions: Sequence[Action],
    *,
    string_placeholders: bool = False,
) -> list[Problem]:
    """Every problem of meaning (``actions``: each step's, in order: format/actions.py).
    ``string_placeholders`` lets a command string hold placeholders, as runbooks written
    before the list form did: only for ``runbook compare``, which runs an old runbook on
    the simulated hosts, never on a real one."""
    semantics = _Semantics(source, stem)
    semantics.string_placeholders = string_placeholders
    semantics.actions = actions
    return semantics.run()


class _Semantics(CheckMeaning):
    """The whole document's meaning: :meth:`run` checks every part in turn."""

    string_placeholders = False
    actions: Sequence[Action] = ()

    def run(self) -> list[Problem]:
        name = self.data.get("name")
        if self.stem is not None and isinstance(name, str) and name != self.stem:
            self.error(("name",), f"{name!r} differs from the file name; expected {self.stem!r}")
        self.parameter_defaults()
        for obs_name, spec in self.observations.items():
            for key in ("command", "text"):
                if isinstance(spec.get(key), str) or (
                    key == "command" and isinstance(spec.get(key), list)
                ):
                    self.template(
                        ("observations", obs_name, key),
                        spec[key],
                        item_type=None,
                        shell=key == "command",
                    )
        for let_name, text in mapping(self.data.get("let")).items():
            if let_name in self.parameters or let_name in self.observations:
                self.error(
                    ("let", let_name), f"{let_name!r} is already a parameter or observation name"
                )
            elif isinstance(text, str):
                self.let_kinds[let_name] = self.expression(("let", let_name), text, None, want=None)
            self.lets.append(let_name)
        for check_name, spec in self.checks.items():
            if isinstance(spec, dict):
                self.check(check_name, spec)
        self.check_list(("goal",), self.data.get("goal"))
        self.steps()
        self.subject()
        return self.found

    def subject(self) -> None:
        """A subject's patterns compile, and some observation lists the process owners."""
        spec = mapping(self.data.get("subject"))
        if not spec:
            return
        for key in ("launcher", "workers", "unit"):
            text = spec.get(key)
            if not isinstance(text, str):
                continue
            names = re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", text)
            for name in names:
                if name not in self.parameters:
                    self.error(("subject", key), f"{{{{ {name} }}}} is not a parameter")
            problem = None if names else expr.pattern_problem(text)
            if problem:
                self.error(("subject", key), problem)
        health = mapping(spec.get("health"))
        for pattern in mapping(health.get("ports")):
            problem = expr.pattern_problem(pattern)
            if problem:
                self.error(("subject", "health", "ports", pattern), problem)
        if not any(
            isinstance(o, dict) and o.get("parser") == "process-owners"
            for o in self.observations.values()
        ):
            self.error(
                ("subject",),
                "a subject needs an observation with 'parser: process-owners' (the processes "
                "and who owns them); 'runbook show --parsers' shows its command",
            )

    # -- parameters ---------------------------------------------------------

    def parameter_defaults(self) -> None:
        for name, spec in self.parameters.items():
            if not isinstance(spec, dict) or spec.get("type") not in PYTHON_TYPES:
                continue
            path: Path = ("parameters", name)
            if name in self.observations:
                self.error(path, f"parameter {name!r} has the name of an observation")
            kind = spec["type"]
            numeric = kind in {"integer", "number"}
            for bound in ("min", "max"):
                if bound in spec and not numeric:
                    self.error((*path, bound), f"{bound} applies to integer and number parameters")
            if "pattern" in spec and kind != "string":
                self.error((*path, "pattern"), "pattern applies to string parameters")
            if "pattern" in spec and isinstance(spec["pattern"], str):
                try:
                    re.compile(spec["pattern"])
                except re.error as error:
                    self.error((*path, "pattern"), f"not a valid regular expression: {error}")
            for i, choice in enumerate(spec.get("choices") or []):
                if not is_type(choice, kind):
                    self.error((*path, "choices", i), f"choice {choice!r} is not of type {kind}")
            if "default" in spec:
                problem = value_problem(spec, spec["default"])
                if problem:
                    self.error((*path, "default"), f"default {spec['default']!r}: {problem}")

    # -- checks and expressions ----------------------------------------------

    # -- steps ---------------------------------------------------------------

    def steps(self) -> None:
        seen: dict[str, str] = {}
        for entry, action in zip(self.step_specs, self.actions, strict=True):
            spec, path, at = entry.spec, entry.path, entry.at
            if spec.get("destructive") is True and action.kind is ActionKind.UNKNOWN:
                self.error(
                    (*path, "run"),
                    "a destructive step's command must be one whose reach the runner can "
                    "tell (kill, pkill, systemctl stop/start, nvidia-smi --gpu-reset or -pm, "
                    "rm, modprobe, rmmod, reboot: see runbook-format.md); a wrapper is not",
                )
            owner_blind = action.owner_blind_without_items and "for_each_failing" not in spec
            if spec.get("destructive") is True and owner_blind and not self.string_placeholders:
                self.error(
                    (*path, "run"),
                    f"an owner-blind {action.kind}: a destructive step acts on observed items "
                    "('for_each_failing: CHECK', e.g. [kill, -TERM, '{{ item.pid }}']), whose "
                    "owner can be checked, never on a name or a pattern",
                )
            for key in entry.twice:
                self.error(
                    (*path, key), f"'{key}' is given twice: in 'runs' and beside it; say it once"
                )
            step_id = spec.get("id")
            if isinstance(step_id, str):
                if step_id in seen:
                    self.error(
                        (*path, "id"), f"step id {step_id!r} is already used by {seen[step_id]}"
                    )
                seen.setdefault(step_id, format_path(path))
            if "run" not in spec and "wait" not in spec and not mistyped(spec, "step"):
                self.error(path, "a step needs 'run' (a command) or 'wait' (a state to wait for)")
            if spec.get("destructive") is True and "affects" not in spec:
                self.error(
                    path,
                    "a destructive step must say what it 'affects': process, service, gpu or node",
                )
            if spec.get("destructive") is True and not spec.get("fixes"):
                self.error(
                    path,
                    "a destructive step must name the checks it 'fixes': it runs only while "
                    "one of them is failing",
                )
            self.check_list(at("fixes"), spec.get("fixes"))
            if isinstance(spec.get("when"), str):
                self.expression(at("when"), spec["when"], None)
            reboot_ok = spec.get("destructive") is True and spec.get("affects") == "node"
            if spec.get("reboots") is True and not reboot_ok:
                self.error(
                    (*path, "reboots"), "a step that reboots is destructive and affects the node"
                )
            self.check_list(at("skip_if"), spec.get("skip_if"))
            self.seconds((*path, "timeout"), spec.get("timeout"))
            wait = spec.get("wait")
            if isinstance(wait, dict):
                self.check_list((*path, "wait", "until"), wait.get("until"))
                self.seconds((*path, "wait", "timeout"), wait.get("timeout"))
                self.seconds((*path, "wait", "interval"), wait.get("interval"))
                self.seconds((*path, "wait", "settle"), wait.get("settle"))
                self.check_list((*path, "wait", "nothing_left"), wait.get("nothing_left"))
                interval, timeout = wait.get("interval", 5), wait.get("timeout")
                if is_number(interval) and is_number(timeout) and interval > timeout:
                    self.error(
                        (*path, "wait", "interval"), "the interval is longer than the timeout"
                    )
            item_type = self.for_each(at("for_each_failing"), spec.get("for_each_failing"))
            if isinstance(spec.get("run"), str | list):
                named = "for_each_failing" in spec  # an unknown check is reported once, there
                self.template((*path, "run"), spec["run"], item_type, items_named=named)

    def seconds(self, path: Path, value: Any) -> None:
        """A duration given as an expression may read parameters only (it is known before the run)."""
        if not isinstance(value, str):
            return
        try:
            tree = expr.parse(value)
        except expr.ExprError as error:
            self.error(path, f"in expression: {error}", error.offset)
            return
        for offset, problem in expr.constant_problems(tree):
            self.error(path, f"in expression: {problem}", offset)
        for node in expr.names(tree):
            if node.path not in self.parameters:
                known = list(self.parameters)
                self.error(
                    path,
                    f"a duration may use parameters only: {node.path!r}{_suggest(node.path, known)}",
                    node.start,
                )

    def for_each(self, path: Path, name: Any) -> type | None:
        """``path`` is where 'for_each_failing' is written."""
        if not isinstance(name, str):
            return None
        check = self.checks.get(name)
        if not isinstance(check, dict):
            self.error(
                path,
                f"unknown check {name!r}{_suggest(name, list(self.checks))}",
            )
            return None
        over = check.get("every", check.get("none"))
        if not isinstance(over, str):
            self.error(
                path,
                f"check {name!r} has no 'every' or 'none': there are no items to act on",
            )
            return None
        spec = self.observations.get(over)
        return PARSERS[spec["parser"]].record_type if spec else None

    def template(
        self,
        path: Path,
        value: str | list[Any],
        item_type: type | None,
        *,
        shell: bool = True,
        items_named: bool = False,
    ) -> None:
        """A command (``shell``) or a text parsed here: its placeholders name parameters or
        item fields; a command string holds none (the list form carries values)."""
        if isinstance(value, list):
            if not all(isinstance(w, str | int | float) for w in value):
                return  # the schema says each word is a string
            template = Template.of(value)
            words = template.words or ()
            for index, offset, message in word_problems(words):
                self.error((*path, index), message, offset)
            self.option_defaults(path, template)
        else:
            template = Template(value)
            if shell and template.placeholders and not self.string_placeholders:
                first = template.placeholders[0]
                self.error(
                    path,
                    "a placeholder in a command string: its value would be read by the shell; "
                    f"write the command as a list of words, one value a word: "
                    f"{list_form_of(value)}",
                    first.offset,
                )
                return
        loose = template.malformed()
        if loose is not None:
            word, offset = loose
            where = path if word is None else (*path, word)
            self.error(where, "'{{' or '}}' that is not a {{ name }} placeholder", offset)
        for placeholder in template.placeholders:
            name = placeholder.name
            where = path if placeholder.word is None else (*path, placeholder.word)
            if name.startswith("item."):
                field = name[5:]
                if item_type is None and items_named:
                    continue
                if item_type is None:
                    self.error(
                        where, f"{{{{ {name} }}}} needs 'for_each_failing'", placeholder.offset
                    )
                elif not has_field(item_type, field):
                    fields = list(field_names(item_type))
                    self.error(
                        where,
                        f"items have no field {field!r}{_suggest(field, fields)}",
                        placeholder.offset,
                    )
            elif name not in self.parameters:
                self.error(
                    where,
                    f"unknown parameter {name!r}{_suggest(name, list(self.parameters))}",
                    placeholder.offset,
                )

    def option_defaults(self, path: Path, template: Template) -> None:
        """A parameter whose default begins with '-' where the command reads options."""
        for name in template.option_placeholders():
            spec = self.parameters.get(name)
            default = spec.get("default") if isinstance(spec, dict) else None
            if isinstance(default, str) and default.startswith("-"):
                self.error(
                    path,
                    f"the default of {name!r} ({default!r}) begins with '-' where "
                    f"{template.words[0] if template.words else 'the command'} reads options: "
                    "put '--' before it",
                )
