"""The runbook model and its loader.

Loading validates the whole file before anything runs and reports every
error as ``runbooks/NAME.yaml:LINE:COL: path.to.field: message``: YAML syntax,
duplicate keys, the JSON Schema (unknown keys, types, required fields), then
the meaning (undefined names, expressions, placeholders, a name that is not
the file name).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runbook_runner import localfile
from runbook_runner.errors import RunbookRunnerError
from runbook_runner.format import expr, schema, yamlsource
from runbook_runner.format.actions import LOOK, REACH, Action, action_of
from runbook_runner.format.ladders import step_specs
from runbook_runner.format.semantics import blast_radius_warnings, check_meaning
from runbook_runner.format.template import Interpolated, Template
from runbook_runner.format.yamlsource import Problem
from runbook_runner.observe import PARSERS
from runbook_runner.observe.commands import OWN_COMMANDS
from runbook_runner.status import OnFailure


class RunbookInvalid(RunbookRunnerError):
    """A runbook file with errors; ``lines`` are ready to print."""

    def __init__(self, filename: str, problems: list[Problem]) -> None:
        self.filename = filename
        self.problems = sorted(problems)
        self.lines = [p.format(filename) for p in self.problems]
        super().__init__("\n".join(self.lines))


@dataclass(frozen=True)
class Expression:
    source: str
    tree: expr.Node


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    description: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] = ()
    pattern: str | None = None
    secret: bool = False
    required: bool = False  # no default at all: --set must give it (a null default is optional)


@dataclass(frozen=True)
class Observation:
    """A command run on the host (or a text rendered here) and the parser of its output."""

    name: str
    command: Template | None
    parser: str
    description: str = ""
    timeout: float = 30.0
    root: bool = False
    text: Template | None = None
    alone: bool = False  # never run at the same time as the other observations of a set
    ok_exit: tuple[int, ...] = (0,)  # statuses whose output is data; others: cannot tell
    own_command: bool = False  # the command is its parser's own (observe/commands.py)

    @property
    def source(self) -> str:
        """What to show: the command, or the text that is parsed locally."""
        template = self.command or self.text
        return template.source if template else ""

    @property
    def record_type(self) -> type:
        return PARSERS[self.parser].record_type

    @property
    def is_list(self) -> bool:
        return PARSERS[self.parser].is_list


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    every: str | None = None
    none: str | None = None
    expect: Expression | None = None
    where: Expression | None = None
    hint: str = ""
    explain: Interpolated | None = None  # replaces the generic message
    empty_ok: bool = False  # an empty list is the expected state (else: cannot tell)
    within: Within | None = None  # only the items that match an item failing another check
    without: Within | None = None  # less the items that match an item failing another check

    @property
    def over(self) -> str | None:
        """The list observation this check quantifies over, if any."""
        return self.every or self.none

    def names(self) -> set[str]:
        """The first part of every name this check reads: observations, lets, parameters."""
        used = {self.over} if self.over else set()
        expressions = [e.tree for e in (self.expect, self.where) if e is not None]
        if self.explain is not None:
            expressions += [part[1] for part in self.explain.parts if not isinstance(part, str)]
        for tree in expressions:
            used |= {n.path.split(".")[0] for n in expr.names(tree)}
        return used


@dataclass(frozen=True)
class Within:
    """Scope a check to the items whose ``match`` field equals that of an item failing the
    check ``failing``, or (``changed_by``) of an item the step ``changed_by`` sent a command
    for earlier in this run: what a restoring step may put back is what the run took out."""

    failing: str | None
    match: str
    changed_by: str | None = None

    def describe(self) -> str:
        if self.changed_by is not None:
            return f"items step {self.changed_by} acted on in this run, by {self.match}"
        return f"items matching a failing {self.failing} by {self.match}"

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> Within:
        return cls(spec.get("failing"), spec["match"], spec.get("changed_by"))


Seconds = float | Expression  # a number, or an expression over parameters


@dataclass(frozen=True)
class Wait:
    until: tuple[str, ...]
    timeout: Seconds
    interval: Seconds = 5.0
    settle: Seconds | None = None  # no change for this long (and nothing_left holds): stop
    nothing_left: tuple[str, ...] = ()  # checks that hold when nothing can release the memory


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    why: str = ""
    run: Template | None = None
    destructive: bool = False
    affects: str | None = None
    root: bool = False
    timeout: Seconds = 60.0
    ok_exit: tuple[int, ...] = (0,)
    skip_if: tuple[str, ...] = ()
    wait: Wait | None = None
    for_each_failing: str | None = None
    on_failure: OnFailure = OnFailure.STOP
    reboots: bool = False  # asked even with --yes unless --allow-reboot; SSH drops and returns
    fixes: tuple[str, ...] = ()  # runs only when one of these checks is failing
    when: Expression | None = None  # must be true (NAME.condition reads typed failures)
    ladder: str = ""  # the ladder the file groups it under ('ladder: gpu'); '' outside one
    action: Action = LOOK  # what its command does, from its words (format/actions.py)


PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_PORT_FLAG = re.compile(r"(?:^|\s)--port(?:=|\s+)(?P<port>\d{1,5})(?:\s|$)")


@dataclass(frozen=True)
class Subject:
    """What a runbook is about: the server, as the host shows it.

    ``launcher`` and ``workers`` are regular expressions over a process's full command
    line; ``unit`` over systemd unit names. ``ports`` maps a regular expression over the
    launcher's command line to the port it listens on when its command line gives none.
    """

    description: str
    launcher: str = ""
    workers: str = ""
    unit: str = ""
    health_path: str = ""
    ports: tuple[tuple[str, int], ...] = ()
    health_timeout_s: float = 5.0
    # The server's own Prometheus metrics on the same port, read twice this far apart: the
    # second witness of its health (plan/health.py); "" asks /health alone.
    metrics_path: str = ""
    metrics_window_s: float = 5.0
    # How long a live launcher whose port is closed may still be loading (plan/ownership.py):
    # a number, or '{{ NAME }}' of a parameter (filled in by with_parameters).
    startup_grace: str = ""
    startup_grace_s: float = 1800.0

    def with_parameters(self, params: Mapping[str, Any]) -> Subject:
        """The patterns with their ``{{ NAME }}`` parameters filled in (raw: regexes)."""

        def fill(text: str) -> str:
            return PLACEHOLDER.sub(lambda m: str(params.get(m[1], "")), text)

        grace = self.startup_grace_s
        with contextlib.suppress(ValueError):  # a parameter's type is checked elsewhere
            grace = float(fill(self.startup_grace)) if self.startup_grace else grace
        return replace(
            self,
            launcher=fill(self.launcher),
            workers=fill(self.workers),
            unit=fill(self.unit),
            startup_grace_s=grace,
        )

    def launcher_matches(self, command: str) -> bool:
        return _matches(self.launcher, command)

    def worker_matches(self, command: str) -> bool:
        return _matches(self.workers, command)

    def unit_matches(self, unit: str) -> bool:
        return _matches(self.unit, unit)

    def port_of(self, command: str) -> int | None:
        flag = _PORT_FLAG.search(command)
        if flag is not None and 0 < int(flag["port"]) < 65536:
            return int(flag["port"])
        for pattern, port in self.ports:
            if _matches(pattern, command):
                return port
        return None


def _matches(pattern: str, text: str) -> bool:
    """A subject pattern against host text, bounded in time as ``matches()`` is: a pattern
    that backtracks (or is no regex) matches nothing, so nothing is taken for the subject's."""
    if not pattern or not text:
        return False
    try:
        return expr.search(pattern, text)
    except expr.EvalError:
        return False


@dataclass(frozen=True)
class Runbook:
    name: str
    title: str
    summary: str
    parameters: Mapping[str, Parameter]
    observations: Mapping[str, Observation]
    checks: Mapping[str, Check]
    goal: tuple[str, ...]
    steps: tuple[Step, ...]
    when: str = ""
    let: Mapping[str, Expression] = field(default_factory=dict)
    docs: tuple[str, ...] = ()
    next: tuple[str, ...] = ()  # what a person does once the run ended (the verdict's "next")
    tags: tuple[str, ...] = ()
    path: str = ""
    sha256: str = ""
    warnings: tuple[str, ...] = ()  # FILE:LINE:COL: lines validate prints (blast radius)
    subject: Subject | None = None  # what its destructive steps may act on (plan/ownership.py)

    @property
    def destructive(self) -> bool:
        return any(step.destructive for step in self.steps)

    @property
    def blast_radius(self) -> str:
        """The most a run can affect, from its destructive steps."""
        touched = [s.affects or "process" for s in self.steps if s.destructive]
        return max(touched, key=REACH.index, default="none")

    def observations_of(self, check_names: Iterable[str]) -> list[str]:
        """The observations the checks read, directly or through ``let`` names, in order."""
        checks, queue = [], list(check_names)
        while queue:  # a check scoped 'within' another reads that one's observations too
            name = queue.pop()
            if name not in checks:
                checks.append(name)
                for scope in (self.checks[name].within, self.checks[name].without):
                    if scope is not None and scope.failing is not None:
                        queue.append(scope.failing)
        return self._observations_through_lets(
            [n for check in checks for n in sorted(self.checks[check].names())]
        )

    def observations_read_by(self, expression: Expression) -> list[str]:
        """The observations an expression reads, directly or through ``let`` names."""
        return self._observations_through_lets(
            [n.path.split(".")[0] for n in expr.names(expression.tree)]
        )

    def _observations_through_lets(self, pending: list[str]) -> list[str]:
        """The observations among ``pending`` names and the ``let`` names they lead to."""
        seen: set[str] = set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.let:
                pending += [n.path.split(".")[0] for n in expr.names(self.let[name].tree)]
        return [name for name in self.observations if name in seen]

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)


def display_name(path: Path) -> str:
    """The path as the user would type it: relative to the working folder if inside it."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def load(path: Path) -> Runbook:
    """Load and fully validate a runbook file; raises :class:`RunbookInvalid`."""
    filename = display_name(path)
    try:
        raw = localfile.read_bytes(path, localfile.RUNBOOK_LIMIT)
    except OSError as error:
        raise RunbookInvalid(
            filename, [_problem((), f"cannot read the file: {error.strerror}")]
        ) from None
    return loads(raw, filename, stem=path.stem)


def loads(
    raw: bytes, filename: str, stem: str | None = None, *, string_placeholders: bool = False
) -> Runbook:
    """:func:`load` of bytes. ``string_placeholders``: a runbook written before the list
    form (for ``runbook compare`` on the simulated hosts only; see check_meaning).

    A runbook is a frozen value of its bytes: the same bytes load once per process (a
    fleet, ``runbook compare`` and the drills load one file many times)."""
    return _loads(raw, filename, stem, string_placeholders)


@functools.lru_cache(maxsize=32)
def _loads(raw: bytes, filename: str, stem: str | None, string_placeholders: bool) -> Runbook:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RunbookInvalid(
            filename, [_problem((), f"not UTF-8 text (byte {error.start})")]
        ) from None
    source, problems = yamlsource.load(text)
    if source.data is not None and not isinstance(source.data, dict):
        problems.append(_problem((), "a runbook is a mapping of keys (name, title, steps, ...)"))
    if problems:
        raise RunbookInvalid(filename, problems)
    digest = hashlib.sha256(raw).hexdigest()
    problems = schema.validate_once(source, digest)
    # What each step's command does: read once, here, from its words.
    actions = [action_of(entry.spec.get("run")) for entry in step_specs(source.data)]
    problems += check_meaning(source, stem, actions, string_placeholders=string_placeholders)
    if problems:
        raise RunbookInvalid(filename, problems)
    runbook = _build(source.data, actions)
    found = blast_radius_warnings(source, actions)
    warnings = tuple(p.format(filename) for p in sorted(found))
    runbook = replace(runbook, warnings=warnings)
    own = tuple(o.source for o in runbook.observations.values() if o.own_command)
    return _with_origin(runbook, filename, runbook_digest(raw, own))


def runbook_digest(raw: bytes, own_commands: tuple[str, ...] = ()) -> str:
    """The runbook's SHA-256 as it runs: its bytes, and the parsers' own commands it runs
    (a tool whose own command changed runs another runbook: a saved plan or a journal of
    the old one is refused). With no own command, the file's plain SHA-256."""
    if not own_commands:
        return hashlib.sha256(raw).hexdigest()
    added = "".join(f"\n# own command: {text}" for text in own_commands)
    return hashlib.sha256(raw + added.encode()).hexdigest()


def _problem(path: yamlsource.Path, message: str) -> Problem:
    return Problem(yamlsource.Mark(1, 1), path, message)


def _with_origin(runbook: Runbook, filename: str, digest: str) -> Runbook:
    return replace(runbook, path=filename, sha256=digest)


def _checks_ref(value: Any) -> tuple[str, ...]:
    return ("goal",) if value == "goal" else tuple(value or ())


def _seconds(value: float | str) -> Seconds:
    return Expression(value, expr.parse(value)) if isinstance(value, str) else float(value)


def seconds_text(value: Seconds) -> str:
    return value.source if isinstance(value, Expression) else f"{value:g}s"


def _expression(text: str | None) -> Expression | None:
    return None if text is None else Expression(text, expr.parse(text))


def _observation(name: str, spec: dict[str, Any]) -> Observation:
    """An observation; one with neither ``command`` nor ``text`` runs its parser's own
    command (validation made sure it has one), described as the parser describes it."""
    own = None if "command" in spec or "text" in spec else OWN_COMMANDS[spec["parser"]]
    if "command" in spec:
        command: Template | None = Template.of(spec["command"])
    else:
        command = Template(own.text) if own else None
    return Observation(
        name=name,
        command=command,
        text=Template(spec["text"]) if "text" in spec else None,
        parser=spec["parser"],
        description=spec.get("description", own.description if own else ""),
        timeout=spec.get("timeout", 30.0),
        root=spec.get("root", False),
        alone=spec.get("alone", False),
        ok_exit=tuple(spec.get("ok_exit", (0,))),
        own_command=own is not None,
    )


def _build(data: dict[str, Any], actions: Sequence[Action]) -> Runbook:
    """Dataclasses from a document that already passed validation (``actions``: each
    step's, in order)."""
    goal = tuple(data["goal"])

    def expand(names: tuple[str, ...]) -> tuple[str, ...]:
        return goal if names == ("goal",) else names

    parameters = {
        name: Parameter(
            name=name,
            type=spec["type"],
            description=spec["description"],
            default=spec.get("default"),
            required="default" not in spec,
            min=spec.get("min"),
            max=spec.get("max"),
            choices=tuple(spec.get("choices", ())),
            pattern=spec.get("pattern"),
            secret=spec.get("secret", False),
        )
        for name, spec in (data.get("parameters") or {}).items()
    }
    observations = {name: _observation(name, spec) for name, spec in data["observations"].items()}
    checks = {
        name: Check(
            name=name,
            description=spec["description"],
            every=spec.get("every"),
            none=spec.get("none"),
            expect=_expression(spec.get("expect")),
            where=_expression(spec.get("where")),
            hint=" ".join(spec.get("hint", "").split()),
            explain=Interpolated.parse(spec["explain"]) if "explain" in spec else None,
            empty_ok=spec.get("empty") == "ok",
            within=Within.parse(spec["within"]) if "within" in spec else None,
            without=Within.parse(spec["without"]) if "without" in spec else None,
        )
        for name, spec in data["checks"].items()
    }
    steps = tuple(
        Step(
            id=spec["id"],
            title=spec["title"],
            why=spec.get("why", ""),
            run=Template.of(spec["run"]) if "run" in spec else None,
            destructive=spec.get("destructive", False),
            affects=spec.get("affects"),
            root=spec.get("root", False),
            timeout=_seconds(spec.get("timeout", 60.0)),
            ok_exit=tuple(spec.get("ok_exit", (0,))),
            skip_if=expand(_checks_ref(spec.get("skip_if"))),
            wait=Wait(
                until=expand(_checks_ref(spec["wait"]["until"])),
                timeout=_seconds(spec["wait"]["timeout"]),
                interval=_seconds(spec["wait"].get("interval", 5.0)),
                settle=_seconds(spec["wait"]["settle"]) if "settle" in spec["wait"] else None,
                nothing_left=expand(_checks_ref(spec["wait"].get("nothing_left"))),
            )
            if "wait" in spec
            else None,
            for_each_failing=spec.get("for_each_failing"),
            on_failure=OnFailure(spec.get("on_failure", OnFailure.STOP)),
            reboots=spec.get("reboots", False),
            fixes=expand(_checks_ref(spec.get("fixes"))),
            when=_expression(spec.get("when")),
            ladder=entry.ladder,
            action=action,
        )
        for entry, action in zip(step_specs(data), actions, strict=True)
        for spec in (entry.spec,)
    )
    return Runbook(
        name=data["name"],
        title=data["title"],
        summary=data["summary"].strip(),
        when=data.get("when", "").strip(),
        let={
            name: Expression(text, expr.parse(text))
            for name, text in (data.get("let") or {}).items()
        },
        docs=tuple(data.get("docs", ())),
        next=tuple(" ".join(str(text).split()) for text in data.get("next", ())),
        tags=tuple(data.get("tags", ())),
        parameters=parameters,
        observations=observations,
        checks=checks,
        goal=goal,
        steps=steps,
        subject=_subject(data.get("subject")),
    )


def _subject(spec: Mapping[str, Any] | None) -> Subject | None:
    if not spec:
        return None
    health = spec.get("health") or {}
    return Subject(
        description=" ".join(spec["description"].split()),
        launcher=spec.get("launcher", ""),
        workers=spec.get("workers", ""),
        unit=spec.get("unit", ""),
        health_path=health.get("path", ""),
        ports=tuple((pattern, int(port)) for pattern, port in (health.get("ports") or {}).items()),
        health_timeout_s=float(health.get("timeout", 5.0)),
        metrics_path=health.get("metrics", ""),
        metrics_window_s=float(health.get("window", 5.0)),
        startup_grace=str(health.get("startup_grace", "")),
    )
