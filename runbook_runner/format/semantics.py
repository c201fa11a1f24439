"""The meaning of a runbook, checked after its structure: names and references.

Runs on the raw document (even one with schema errors, so that every error is
reported in one go), so it reads defensively: anything of the wrong shape was
already reported by the schema and is skipped here.
"""

from __future__ import annotations

import re
from typing import Any

from runbook_runner.format import expr
from runbook_runner.format.exprtypes import ExpressionTypes
from runbook_runner.format.suggest import suggest as _suggest
from runbook_runner.format.template import Interpolated, Template
from runbook_runner.format.yamlsource import Mark, Path, Problem, Source
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import field_names, has_field, open_type

# Commands whose reach is wider than a process: (pattern, the least 'affects' they need, why).
_WIDE_COMMANDS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"/dev/nvidia(\*|ctl|-uvm)"),
        "node",
        "/dev/nvidiactl and /dev/nvidia-uvm are held by every CUDA process of the node",
    ),
    (
        re.compile(r"\b(rmmod|modprobe|reboot|shutdown)\b"),
        "node",
        "a driver reload or a reboot reaches every GPU",
    ),
    (re.compile(r"--gpu-reset(?!.*-i)"), "node", "a reset without -i resets every GPU"),
    (re.compile(r"\b(killall|pkill)\b"), "process", ""),
    (re.compile(r"\brm\b"), "files", "it removes files"),
    (re.compile(r"\bsystemctl\s+(stop|restart|kill)\b"), "service", "it stops a service"),
    (re.compile(r"--gpu-reset"), "gpu", "it resets a GPU"),
)
_RADIUS = ("none", "process", "files", "service", "gpu", "node")

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
}


def check_meaning(source: Source, stem: str | None) -> list[Problem]:
    return _Semantics(source, stem).run()


def blast_radius_warnings(source: Source) -> list[Problem]:
    """Destructive steps whose command looks wider than the 'affects' they declare."""
    found = []
    steps = source.data.get("steps") if isinstance(source.data, dict) else None
    for i, spec in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(spec, dict) or not isinstance(spec.get("run"), str):
            continue
        declared = spec.get("affects")
        if spec.get("destructive") is not True or declared not in _RADIUS:
            continue
        if declared != "node" and _acts_on_node_wide_holders(source.data, spec):
            found.append(
                Problem(
                    source.mark_of(("steps", i, "for_each_failing")),
                    ("steps", i, "for_each_failing"),
                    f"warning: its items include the holders of /dev/nvidiactl and "
                    f"/dev/nvidia-uvm (every CUDA process of the node), wider than "
                    f"'affects: {declared}': scope the check with 'within' or "
                    "\"where: not node_wide\", or declare 'affects: node'",
                )
            )
            continue
        for pattern, needs, why in _WIDE_COMMANDS:
            if pattern.search(spec["run"]) and _RADIUS.index(needs) > _RADIUS.index(declared):
                found.append(
                    Problem(
                        source.mark_of(("steps", i, "run")),
                        ("steps", i, "run"),
                        f"warning: the command reaches wider than 'affects: {declared}' "
                        f"({why}): declare 'affects: {needs}' or narrow the command",
                    )
                )
                break
    return found


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _mistyped(spec: dict[str, Any], kind: str) -> bool:
    """Whether a mapping has a key the schema does not know: reported there ("did you mean").

    A missing 'expect' or 'run' is then most likely that key, mistyped; saying it is
    missing as well only confuses.
    """
    from runbook_runner.format.schema import schema

    known = schema()["$defs"][kind].get("properties", {})
    return any(key not in known for key in spec)


def _acts_on_node_wide_holders(data: dict[str, Any], step: dict[str, Any]) -> bool:
    """A step per item of a device-holders check that neither scopes nor filters node-wide files."""
    check = _mapping(data.get("checks")).get(str(step.get("for_each_failing")))
    if not isinstance(check, dict) or "within" in check:
        return False
    over = str(check.get("every", check.get("none")))
    observation = _mapping(data.get("observations")).get(over)
    if not isinstance(observation, dict) or observation.get("parser") != "device-holders":
        return False
    where = check.get("where")
    return not (isinstance(where, str) and "node_wide" in where)


class _Semantics:
    def __init__(self, source: Source, stem: str | None) -> None:
        self.source = source
        self.data = _mapping(source.data)
        self.stem = stem
        self.found: list[Problem] = []
        self.parameters = _mapping(self.data.get("parameters"))
        self.observations = {
            name: spec
            for name, spec in _mapping(self.data.get("observations")).items()
            if isinstance(spec, dict) and spec.get("parser") in PARSERS
        }
        self.checks = _mapping(self.data.get("checks"))
        self.lets: list[str] = []  # grows as each is checked: a let may use only earlier ones
        self.let_kinds: dict[str, str | None] = {}

    def error(self, path: Path, message: str, offset: int | None = None) -> None:
        mark = self.source.mark_of(path)
        if offset is not None and path in self.source.inline:
            # Only a scalar written on one line lets an offset into its text become a column.
            mark = Mark(mark.line, mark.column + self.source.inline[path] + offset)
        self.found.append(Problem(mark, path, message))

    def run(self) -> list[Problem]:
        name = self.data.get("name")
        if self.stem is not None and isinstance(name, str) and name != self.stem:
            self.error(("name",), f"{name!r} differs from the file name; expected {self.stem!r}")
        self.parameter_defaults()
        for obs_name, spec in self.observations.items():
            for key in ("command", "text"):
                if isinstance(spec.get(key), str):
                    self.template(
                        ("observations", obs_name, key),
                        spec[key],
                        item_type=None,
                        shell=key == "command",
                    )
        for let_name, text in _mapping(self.data.get("let")).items():
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
        spec = _mapping(self.data.get("subject"))
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
        health = _mapping(spec.get("health"))
        for pattern in _mapping(health.get("ports")):
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
            if not isinstance(spec, dict) or spec.get("type") not in _PYTHON_TYPES:
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
                if not _is_type(choice, kind):
                    self.error((*path, "choices", i), f"choice {choice!r} is not of type {kind}")
            if "default" in spec:
                problem = value_problem(spec, spec["default"])
                if problem:
                    self.error((*path, "default"), f"default {spec['default']!r}: {problem}")

    # -- checks and expressions ----------------------------------------------

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
        if every is None and none is None and "expect" not in spec and not _mistyped(spec, "check"):
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
        steps = [s for s in self.data.get("steps") or [] if isinstance(s, dict)]
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

    # -- steps ---------------------------------------------------------------

    def steps(self) -> None:
        steps = self.data.get("steps")
        if not isinstance(steps, list):
            return
        seen: dict[str, int] = {}
        for i, spec in enumerate(steps):
            if not isinstance(spec, dict):
                continue
            path: Path = ("steps", i)
            step_id = spec.get("id")
            if isinstance(step_id, str):
                if step_id in seen:
                    self.error(
                        (*path, "id"),
                        f"step id {step_id!r} is already used by steps[{seen[step_id]}]",
                    )
                seen.setdefault(step_id, i)
            if "run" not in spec and "wait" not in spec and not _mistyped(spec, "step"):
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
            self.check_list((*path, "fixes"), spec.get("fixes"))
            if isinstance(spec.get("when"), str):
                self.expression((*path, "when"), spec["when"], None)
            reboot_ok = spec.get("destructive") is True and spec.get("affects") == "node"
            if spec.get("reboots") is True and not reboot_ok:
                self.error(
                    (*path, "reboots"), "a step that reboots is destructive and affects the node"
                )
            self.check_list((*path, "skip_if"), spec.get("skip_if"))
            self.seconds((*path, "timeout"), spec.get("timeout"))
            wait = spec.get("wait")
            if isinstance(wait, dict):
                self.check_list((*path, "wait", "until"), wait.get("until"))
                self.seconds((*path, "wait", "timeout"), wait.get("timeout"))
                self.seconds((*path, "wait", "interval"), wait.get("interval"))
                self.seconds((*path, "wait", "settle"), wait.get("settle"))
                self.check_list((*path, "wait", "nothing_left"), wait.get("nothing_left"))
                interval, timeout = wait.get("interval", 5), wait.get("timeout")
                if _is_number(interval) and _is_number(timeout) and interval > timeout:
                    self.error(
                        (*path, "wait", "interval"), "the interval is longer than the timeout"
                    )
            item_type = self.for_each(path, spec.get("for_each_failing"))
            if isinstance(spec.get("run"), str):
                self.template((*path, "run"), spec["run"], item_type)

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
        if not isinstance(name, str):
            return None
        check = self.checks.get(name)
        if not isinstance(check, dict):
            self.error(
                (*path, "for_each_failing"),
                f"unknown check {name!r}{_suggest(name, list(self.checks))}",
            )
            return None
        over = check.get("every", check.get("none"))
        if not isinstance(over, str):
            self.error(
                (*path, "for_each_failing"),
                f"check {name!r} has no 'every' or 'none': there are no items to act on",
            )
            return None
        spec = self.observations.get(over)
        return PARSERS[spec["parser"]].record_type if spec else None

    def template(
        self, path: Path, text: str, item_type: type | None, *, shell: bool = True
    ) -> None:
        template = Template(text)
        loose = template.malformed()
        if loose is not None:
            self.error(path, "'{{' or '}}' that is not a {{ name }} placeholder", loose)
        if shell:
            for offset, message in template.unsafe_placeholders():
                self.error(path, message, offset)
        for placeholder in template.placeholders:
            name = placeholder.name
            if name.startswith("item."):
                field = name[5:]
                if item_type is None:
                    self.error(
                        path, f"{{{{ {name} }}}} needs 'for_each_failing'", placeholder.offset
                    )
                elif not has_field(item_type, field):
                    fields = list(field_names(item_type))
                    self.error(
                        path,
                        f"items have no field {field!r}{_suggest(field, fields)}",
                        placeholder.offset,
                    )
            elif name not in self.parameters:
                self.error(
                    path,
                    f"unknown parameter {name!r}{_suggest(name, list(self.parameters))}",
                    placeholder.offset,
                )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_type(value: Any, kind: str) -> bool:
    if kind in {"integer", "number"} and isinstance(value, bool):
        return False
    return isinstance(value, _PYTHON_TYPES[kind])


def value_problem(spec: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` does not suit a parameter spec, or ``None`` if it does (None: unset)."""
    kind = spec.get("type", "string")
    if value is None:
        return None
    if not _is_type(value, kind):
        return f"expected {kind}"
    if _is_number(value):
        if _is_number(spec.get("min")) and value < spec["min"]:
            return f"must be at least {spec['min']}"
        if _is_number(spec.get("max")) and value > spec["max"]:
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
