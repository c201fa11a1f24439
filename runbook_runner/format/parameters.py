"""Parameter values from the command line (``--set NAME=VALUE``), typed and checked."""

from __future__ import annotations

import difflib
from typing import Any

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.format.semantics import value_problem
from runbook_runner.runbook import Parameter, Runbook


class ParameterError(RunbookRunnerError):
    """Bad ``--set`` values; ``lines`` holds one message per problem."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _convert(parameter: Parameter, text: str) -> Any:
    if parameter.type == "integer":
        return int(text.replace("_", ""))
    if parameter.type == "number":
        return float(text.replace("_", ""))
    if parameter.type == "boolean":
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise ValueError(text)
    return text


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_spec(parameter: Parameter) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": parameter.type}
    for key in ("min", "max", "pattern"):
        if getattr(parameter, key) is not None:
            spec[key] = getattr(parameter, key)
    if parameter.choices:
        spec["choices"] = list(parameter.choices)
    return spec


def resolve_parameters(runbook: Runbook, assignments: list[str]) -> dict[str, Any]:
    """Defaults overlaid with ``NAME=VALUE`` assignments, all checked."""
    values: dict[str, Any] = {name: p.default for name, p in runbook.parameters.items()}
    problems = []
    for assignment in assignments:
        name, equals, text = assignment.partition("=")
        name = name.strip()
        parameter = runbook.parameters.get(name)
        if not equals:
            problems.append(f"--set {assignment!r}: expected NAME=VALUE")
        elif not _utf8(text):  # the OS gave bytes that are no UTF-8 (surrogate escapes)
            problems.append(f"--set {name}: the value is not valid UTF-8; give it in UTF-8")
        elif parameter is None:
            known = list(runbook.parameters)
            close = difflib.get_close_matches(name, known, n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (it takes: {', '.join(known) or 'none'})"
            )
            problems.append(f"--set {name}: {runbook.name} has no parameter {name!r}{hint}")
        else:
            try:
                value = _convert(parameter, text)
            except ValueError:
                problems.append(f"--set {name}={text}: expected {parameter.type}")
                continue
            problem = value_problem(_as_spec(parameter), value) or _option_problem(
                runbook, name, value
            )
            if problem:
                problems.append(f"--set {name}={text}: {problem}")
            else:
                values[name] = value
    for name, parameter in runbook.parameters.items():
        if parameter.required and values[name] is None:
            problems.append(f"parameter {name!r} has no default: give it with --set {name}=VALUE")
    if problems:
        raise ParameterError(problems)
    return values


def _option_problem(runbook: Runbook, name: str, value: Any) -> str | None:
    """A value that begins with '-' where a command of the runbook reads options: it would
    be an option of that command, not its operand (templates put '--' before such a value)."""
    if not isinstance(value, str) or not value.startswith("-"):
        return None
    templates = [o.command for o in runbook.observations.values()]
    templates += [step.run for step in runbook.steps]
    for template in templates:
        if template is not None and name in template.option_placeholders():
            command = template.words[0] if template.words else "the command"
            return (
                f"begins with '-' where {command} reads options ({template.source}): "
                "it would be an option, not a value"
            )
    return None


def gpu_range(runbook: Runbook, spec: str | None) -> list[str]:
    """``--gpus N`` or ``--gpus A-B`` as the runbook's narrowing parameters (first_gpu,
    last_gpu). It can only narrow: the GPUs a run acts on are still only the subject's."""
    if spec is None:
        return []
    if not {"first_gpu", "last_gpu"} <= set(runbook.parameters):
        raise ParameterError([f"--gpus: {runbook.name} takes no GPU range"])
    first, dash, last = spec.strip().partition("-")
    if not first.isdigit() or (dash and not last.isdigit()) or len(spec) > 12:
        raise ParameterError([f"--gpus {spec!r}: expected a GPU index or a range, e.g. 0-3"])
    low, high = int(first), int(last) if dash else int(first)
    if low > high:
        raise ParameterError([f"--gpus {spec!r}: the range runs backwards"])
    return [f"first_gpu={low}", f"last_gpu={high}"]
