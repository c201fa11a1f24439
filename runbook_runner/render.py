"""Text for people: tables and runbook descriptions. Builds strings, prints nothing."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from typing import IO, ClassVar

from runbook_runner.runbook import Runbook, Step


def use_colour(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class Style:
    _CODES: ClassVar[dict[str, str]] = {
        "bold": "1",
        "dim": "2",
        "red": "31",
        "green": "32",
        "yellow": "33",
        "cyan": "36",
    }

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        codes = ";".join(self._CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def kind_of(runbook: Runbook) -> str:
    return f"destructive ({runbook.blast_radius})" if runbook.destructive else "read-only"


def runbook_list(runbooks: Sequence[Runbook]) -> str:
    rows = [(r.name, kind_of(r), r.title) for r in runbooks]
    return table(rows, ("NAME", "KIND", "TITLE"))


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(
        " ".join(text.split()), width=88, initial_indent=indent, subsequent_indent=indent
    )


def _step_flags(step: Step) -> str:
    flags = []
    if step.destructive:
        flags.append(f"DESTRUCTIVE, affects {step.affects}")
    if step.root:
        flags.append("needs root")
    if step.for_each_failing:
        flags.append(f"once per item failing {step.for_each_failing}")
    if step.skip_if:
        flags.append("skipped when " + ", ".join(step.skip_if) + " hold")
    flags.append(f"timeout {step.timeout:g}s")
    if step.on_failure == "continue":
        flags.append("on failure: continue")
    return "; ".join(flags)


def runbook_details(runbook: Runbook) -> str:
    out = [
        f"{runbook.name}: {runbook.title}",
        f"  file: {runbook.path}",
        f"  kind: {kind_of(runbook)}",
    ]
    out += ["", _wrap(runbook.summary)]
    if runbook.when:
        out += ["", "When to use it:", _wrap(runbook.when)]
    if runbook.docs:
        out += ["", "Docs pages:"] + [f"  docs/{page}" for page in runbook.docs]
    if runbook.parameters:
        out += ["", "Parameters (--set NAME=VALUE):"]
        for p in runbook.parameters.values():
            bounds = []
            if p.min is not None:
                bounds.append(f">= {p.min:g}")
            if p.max is not None:
                bounds.append(f"<= {p.max:g}")
            if p.choices:
                bounds.append("one of " + ", ".join(map(str, p.choices)))
            default = "required" if p.required else f"default {p.default!r}"
            extra = f"; {', '.join(bounds)}" if bounds else ""
            out.append(f"  {p.name} ({p.type}, {default}{extra})")
            out.append(_wrap(p.description, "      "))
    out += ["", "Observations:"]
    for o in runbook.observations.values():
        out.append(f"  {o.name} [{o.parser}]: {o.command.source}")
    out += ["", "Checks (goal marked *):"]
    for c in runbook.checks.values():
        mark = "*" if c.name in runbook.goal else " "
        if c.every:
            rule = f"every {c.every}: {c.expect.source if c.expect else ''}"
        elif c.none:
            rule = f"no {c.none}" + (f" where {c.where.source}" if c.where else "")
        else:
            rule = c.expect.source if c.expect else ""
        out.append(f" {mark}{c.name}: {c.description}")
        out.append(f"      {rule}")
    out += ["", "Steps:"]
    for number, step in enumerate(runbook.steps, start=1):
        out.append(f"  {number}. {step.id}: {step.title}")
        out.append(f"     [{_step_flags(step)}]")
        if step.run:
            out.append(f"     $ {step.run.source.strip()}")
        if step.wait:
            wait = step.wait
            until = ", ".join(wait.until)
            out.append(
                f"     waits up to {wait.timeout:g}s (every {wait.interval:g}s) for: {until}"
            )
    return "\n".join(out)
