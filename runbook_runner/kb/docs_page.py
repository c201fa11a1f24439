"""A runbook as a Markdown page for the MkDocs site (pure: a runbook in, text out).

The site's hook (docs/hooks.py) renders one page per runbook with this at build
time, so the page and the YAML can never drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runbook_runner import exitcodes
from runbook_runner.runbook import Expression, Runbook, Seconds, Step
from runbook_runner.status import OnFailure

# A word holding a backslash, outside a code span: Markdown would eat the backslash
# (vllm\.entrypoints -> vllm.entrypoints), so it goes into a code span, where it stays.
# A quoted string holding a backslash ('vllm serve|vllm\.entrypoints') becomes one code span.
_CODE_OR_BACKSLASH_WORD = re.compile(r"(`+)(.+?)\1|'([^'`\s][^'`]*\\[^'`]*)'|([^\s`]*\\[^\s`]*)")


def prose(text: str) -> str:
    """Free text from a runbook, on one line, with backslashes kept."""

    def keep(match: re.Match[str]) -> str:
        word = match.group(3) or match.group(4)
        if word is None:
            return match.group(0)  # already a code span
        return f"`` {word} ``" if "`" in word else f"`{word}`"

    return _CODE_OR_BACKSLASH_WORD.sub(keep, " ".join(text.split()))


_AFFECTS = {
    "process": "the server's processes (or the ones named)",
    "files": "the files it names (never one a live process holds)",
    "service": "services of the node (persistence, monitoring)",
    "gpu": "the GPUs it names",
    "node": "the whole node: every GPU and every workload on it",
}


def _fence(text: str, language: str = "sh") -> str:
    """A fenced block holding ``text`` as it is (a fence longer than any backtick run in it)."""
    ticks = "`" * max(3, _longest_run(text, "`") + 1)
    return f"{ticks}{language}\n{text.strip()}\n{ticks}"


def _longest_run(text: str, char: str) -> int:
    runs = re.findall(re.escape(char) + "+", text)
    return max((len(r) for r in runs), default=0)


def _code(text: str) -> str:
    """A code span that shows ``text`` byte for byte (Markdown keeps everything in it)."""
    flat = " ".join(text.split())
    ticks = "`" * (_longest_run(flat, "`") + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


_CODE_SPAN = re.compile(r"(`+).+?\1")


def table_cell(markdown: str) -> str:
    """Markdown for a table cell: a ``|`` outside code spans escaped (it would end the cell);
    inside a code span it is left alone, since the table splits around code spans, and an
    escape there would be shown, and copied, as a backslash."""
    out, at = [], 0
    for match in _CODE_SPAN.finditer(markdown):
        out.append(markdown[at : match.start()].replace("|", "\\|"))
        out.append(match.group(0))
        at = match.end()
    out.append(markdown[at:].replace("|", "\\|"))
    return "".join(out)


def _duration(value: Seconds, runbook: Runbook) -> str:
    """A duration as a reader needs it: the default value, and the parameter that sets it."""
    if isinstance(value, Expression):
        parameter = runbook.parameters.get(value.source.strip())
        if parameter is not None and isinstance(parameter.default, int | float):
            return f"{_seconds(float(parameter.default))} (`--set {parameter.name}=SECONDS`)"
        return f"`{value.source}` seconds (an expression over the parameters)"
    return _seconds(value)


def _seconds(value: float) -> str:
    if value >= 120 and value % 60 == 0:
        return f"{value / 60:g} min"
    return f"{value:g} s"


def _step(number: int, step: Step, runbook: Runbook) -> str:
    lines = [f"### {number}. {step.title}", "", f"Step id: `{step.id}`", ""]
    if step.destructive:
        lines += [
            f'!!! danger "Destructive: affects {step.affects}"',
            f"    Changes {_AFFECTS.get(step.affects or '', step.affects)}. "
            "`runbook run` asks before it unless `--yes`"
            + (
                "; a reboot is asked for even then, unless `--allow-reboot`."
                if step.reboots
                else "."
            ),
            "",
        ]
    else:
        lines += ['!!! note "Read-only"', "    Changes nothing on the host.", ""]
    if step.why:
        lines += [prose(step.why), ""]
    if step.run:
        lines += [_fence(step.run.source), ""]
    facts = []
    if step.fixes:
        fixes = ", ".join(f"[`{c}`](#check-{c})" for c in step.fixes)
        facts.append(
            f"Runs only while one of {fixes} is failing; where that cannot be told, it is "
            "blocked and the run stops before it."
        )
    if step.when is not None:
        facts.append(f"Runs only when `{step.when.source}`.")
    if step.for_each_failing:
        facts.append(
            f"Runs once for each item that fails [`{step.for_each_failing}`](#check-{step.for_each_failing}), "
            "with `{{ item.FIELD }}` filled in."
        )
    if step.skip_if:
        if set(step.skip_if) == set(runbook.goal):
            facts.append("Skipped once the goal holds.")
        else:
            facts.append("Skipped when " + ", ".join(f"`{c}`" for c in step.skip_if) + " holds.")
    if step.wait:
        until = ", ".join(f"[`{c}`](#check-{c})" for c in step.wait.until)
        facts.append(
            f"Then waits up to {_duration(step.wait.timeout, runbook)}, polling every "
            f"{_duration(step.wait.interval, runbook)}, until {until} hold."
        )
        if step.wait.settle is not None:
            left = ", ".join(f"[`{c}`](#check-{c})" for c in step.wait.nothing_left)
            facts.append(
                f"Stops waiting early when nothing changed for {_duration(step.wait.settle, runbook)}"
                + (f" and {left} hold" if left else "")
                + ": waiting cannot help then."
            )
    if step.root:
        facts.append("Needs root: runs through `sudo -n` when you do not log in as root.")
    facts.append(
        f"Timeout: {_duration(step.timeout, runbook)}; exit statuses that count as success: "
        + ", ".join(str(c) for c in step.ok_exit)
        + "."
    )
    facts.append(
        "If it fails: "
        + ("the next step is tried." if step.on_failure is OnFailure.CONTINUE else "the run stops.")
    )
    lines += [f"- {fact}" for fact in facts]
    return "\n".join(lines)


def failure_modes(runbook: Runbook, written: Mapping[str, Any] | None) -> list[str]:
    """The page's "When it cannot help" section: what the runbook cannot see, when it stops,
    what to do then. ``written``: the runbook's entry in docs/data/runbooks/failure-modes.yaml;
    what the YAML itself tells (its observations, "cannot tell", the exit codes) is added."""
    written = written or {}

    def items(key: str) -> list[str]:
        value = written.get(key) or []
        return [f"- {prose(str(v))}" for v in value] if isinstance(value, list) else []

    observed = ", ".join(f"`{name}`" for name in runbook.observations)
    out = [
        "## When it cannot help",
        "",
        "### What it cannot see",
        "",
        *items("cannot_see"),
        f"- Anything beyond what it observes ({observed}): it knows only what those show.",
        "",
        "### When it stops",
        "",
        *items("stops_when"),
        "- A check it cannot evaluate (an observation failed, a value was not reported) is "
        "*cannot tell*: never ok, never failing. "
        + (
            "A step that would act on it is blocked, and the run stops before it."
            if runbook.steps
            else "The goal is then not known to hold."
        ),
        "- " + exitcodes.sentence(),
        "",
        "### What to do then",
        "",
        *items("then"),
    ]
    if not written:
        out.append(
            "- No failure modes are written for this runbook yet: add its entry to "
            "`docs/data/runbooks/failure-modes.yaml`."
        )
    return [*out, ""]


def render_page(
    runbook: Runbook, source: str, written_failure_modes: Mapping[str, Any] | None = None
) -> str:
    """The Markdown of a runbook's page; ``source`` is its path in the repository."""
    kind = (
        f"destructive, blast radius **{runbook.blast_radius}**"
        if runbook.destructive
        else "read-only"
    )
    tags = "".join(f"\n  - {tag}" for tag in runbook.tags)
    out = [
        "---",
        f"title: {runbook.title}",
        f"tags:{tags}" if tags else "tags: []",
        "---",
        "",
        f"# {runbook.title}",
        "",
        '!!! abstract "When to use it"',
        f"    {prose(runbook.when) or 'See the summary below.'}",
        "",
        prose(runbook.summary),
        "",
        "| | |",
        "|---|---|",
        f"| Runbook | `{runbook.name}`, from `{source}` |",
        f"| Kind | {kind} |",
        f"| Steps | {len(runbook.steps)} |",
        "",
        "## Run it",
        "",
        "Read-only: the state and each check.",
        "",
        _fence(f"runbook check {runbook.name} --host HOST"),
        "",
    ]
    if runbook.steps:
        out += [
            "The plan and every command it would send; nothing changes.",
            "",
            _fence(f"runbook run {runbook.name} --host HOST --dry-run"),
            "",
            "The run: "
            + (
                "asks before each destructive step."
                if runbook.destructive
                else "every step is read-only."
            ),
            "",
            _fence(f"runbook run {runbook.name} --host HOST"),
            "",
        ]
    out += [
        "Review what a run would do on the host's state now (`run --dry-run` is the same;"
        " `--out plan.json` saves it for `run --plan`):",
        "",
        _fence(f"runbook plan {runbook.name} --host HOST"),
        "",
        "Practise it on a simulated host first: `runbook sim` serves one on 127.0.0.1 until"
        " Ctrl-C and keeps its ssh_config in the folder given,",
        "",
        _fence("runbook sim --scenario oom-crash --folder sim"),
        "",
        "and, in another terminal, the same commands reach it by name:",
        "",
        _fence(f"runbook plan {runbook.name} --ssh-config sim/ssh_config --host sim0001"),
        "",
    ]
    if runbook.destructive:
        out += [
            "Or live through the incident with simulated time and a debrief"
            " ([drills](../drills.md)):",
            "",
            _fence(f"runbook drill {runbook.name}"),
            "",
        ]
    out += [
        "## Goal",
        "",
        "The run ends by checking these; `runbook check` checks them without changing anything.",
        "",
    ]
    for name in runbook.goal:
        out.append(_check_line(runbook, name))
    others = [n for n in runbook.checks if n not in runbook.goal]
    if others:
        out += ["", "Other checks the steps use:", ""] + [_check_line(runbook, n) for n in others]
    out += ["", *failure_modes(runbook, written_failure_modes)]
    if runbook.parameters:
        out += [
            "",
            "## Parameters",
            "",
            "Set with `--set NAME=VALUE`.",
            "",
            "| Name | Type | Default | Description |",
            "|---|---|---|---|",
        ]
        for p in runbook.parameters.values():
            default = (
                "required" if p.required else ("unset" if p.default is None else f"`{p.default}`")
            )
            bounds = []
            if p.min is not None:
                bounds.append(f"≥ {p.min:g}")
            if p.max is not None:
                bounds.append(f"≤ {p.max:g}")
            extra = f" ({', '.join(bounds)})" if bounds else ""
            description = table_cell(prose(p.description))
            out.append(f"| `{p.name}` | {p.type}{extra} | {default} | {description} |")
    if runbook.steps:
        out += ["", "## Steps", ""]
        for number, step in enumerate(runbook.steps, start=1):
            out += [_step(number, step, runbook), ""]
    out += ["", "## What it observes", ""]
    for o in runbook.observations.values():
        if o.command:
            own = " its own command" if o.own_command else ""
            out += [f"- `{o.name}`, read by the parser `{o.parser}` from{own}:", ""]
            out += ["    " + line if line else "" for line in _fence(o.source).splitlines()]
            out.append("")
        else:
            out.append(f"- `{o.name}`, parsed locally by `{o.parser}` from {_code(o.source)}")
            out.append("")
    if runbook.let:
        out += ["", "Computed values:", ""] + [
            f"- `{name}` = `{' '.join(e.source.split())}`" for name, e in runbook.let.items()
        ]
    if runbook.docs:
        out += ["", "## Read more", ""] + [f"- [{page}](../{page})" for page in runbook.docs]
    return "\n".join(out) + "\n"


def _check_line(runbook: Runbook, name: str) -> str:
    check = runbook.checks[name]
    if check.every:
        rule = f"every `{check.every}`: `{check.expect.source if check.expect else ''}`"
    elif check.none:
        rule = f"no `{check.none}`" + (f" where `{check.where.source}`" if check.where else "")
    else:
        rule = f"`{' '.join(check.expect.source.split()) if check.expect else ''}`"
    hint = f" *What to do when it fails:* {prose(check.hint)}" if check.hint else ""
    return (
        f'- <span id="check-{name}"></span>**`{name}`**: {prose(check.description)} — {rule}.{hint}'
    )
