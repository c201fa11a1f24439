"""A run's journal as the first draft of a postmortem page (pure: events in, Markdown out).

``runbook postmortem new --from-run RUN`` writes the page under ``docs/postmortems/`` and
adds it to the site's nav (cli/runs.py does the I/O). What the run knows is filled in: the
metadata, the timeline with each step's commands, targets and waits, the state before and
after. What only a human knows is marked TODO.

Everything in a journal came from a host or an operator, so all of it is data: it is
escaped for Markdown and HTML, never placed where it could become markup, a link, an
include (``--8<--``), an abbreviation or one of the site's ``{{ fig.* }}`` placeholders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.kb import chart
from runbook_runner.safetext import visible
from runbook_runner.status import CheckStatus, StepStatus

TODO = "TODO"
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def _flat(value: object) -> str:
    """One line, with every control and format character (ESC, BEL, U+202E) shown as an
    escape (``\\x1b``), never passed to the page."""
    return visible(" ".join(str(value).split()), lines=False, tabs=False)


def text(value: object, limit: int = 300) -> str:
    """Host text as inert Markdown: one line, HTML-escaped, Markdown characters escaped."""
    flat = _flat(value)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = flat.replace('"', "&quot;")
    return _MD_SPECIAL.sub(r"\\\1", flat)


def code(value: object, limit: int = 300) -> str:
    """Host text shown as code in a table cell: an HTML <code> element, every character inert."""
    flat = _flat(value)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    escaped = (
        flat.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("|", "&#124;")
        .replace("`", "&#96;")
        .replace("{", "&#123;")
        .replace("}", "&#125;")
        .replace("*", "&#42;")
        .replace("_", "&#95;")
        .replace("[", "&#91;")
        .replace("]", "&#93;")
        .replace("\\", "&#92;")
    )
    return f"<code>{escaped}</code>"


def yaml_string(value: object) -> str:
    """A YAML double-quoted scalar (JSON's escapes are YAML's), ASCII only, and plain: the
    theme shows front matter and nav titles in places that may not escape HTML, so the
    characters that could start markup are dropped there (the body shows the full text)."""
    plain = " ".join(_UNSAFE.sub(" ", str(value)).split())
    return json.dumps(plain, ensure_ascii=True)


_UNSAFE = re.compile(
    "[<>&`{}|\\\\\\[\\]\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)


def slug(title: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return (words[:80].rstrip("-")) or "postmortem"


_GPU_TARGET = re.compile(r"(?:--id|-i)[ =]([0-9][0-9,]*)\b")
_PID_TARGET = re.compile(r"^\s*(?:sudo -n\s+)?kill\s+(?:-[A-Z0-9]+\s+)*([0-9 ]+)$")


def targets(commands: Iterable[str]) -> str:
    """The GPUs and PIDs a step's commands name, e.g. 'GPU 0, GPU 2' or 'PID 4101, PID 4120'."""
    found: list[str] = []
    for command in commands:
        for match in _GPU_TARGET.finditer(command):
            found += [f"GPU {n}" for n in match.group(1).split(",") if n]
        pid = _PID_TARGET.match(command)
        if pid:
            found += [f"PID {n}" for n in pid.group(1).split()]
    unique = list(dict.fromkeys(found))
    return ", ".join(unique) if unique else "–"


@dataclass(frozen=True)
class Draft:
    title: str
    filename: str  # NAME.md, under docs/postmortems/
    markdown: str
    runbook: str
    drill: str | None


def _first(events: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    return next((e for e in events if e.get("event") == kind), {})


def _last(events: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    return next((e for e in reversed(events) if e.get("event") == kind), {})


def _outcome(end: Mapping[str, Any]) -> str:
    if not end:
        return "did not finish (no run-end in the journal)"
    if end.get("ok"):
        reached = end.get("reached_by")
        return "goal holds" + (f" (reached by {reached})" if reached else "")
    if end.get("declined"):
        return "declined by the operator; goal not reached"
    if end.get("interrupted"):
        return "interrupted; goal not reached"
    return "goal not reached"


def _mib(value: object) -> str:
    return f"{value:,} MiB" if isinstance(value, int) else "?"


def _gib(value: object) -> str:
    return f"{value / 2**30:,.1f} GiB" if isinstance(value, int | float) else "?"


def _state_tables(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    b_state, a_state = before.get("state") or {}, after.get("state") or {}
    out: list[str] = []
    b_gpus = {g.get("index"): g for g in b_state.get("gpus") or [] if isinstance(g, Mapping)}
    a_gpus = {g.get("index"): g for g in a_state.get("gpus") or [] if isinstance(g, Mapping)}
    indices = sorted({*b_gpus, *a_gpus}, key=lambda i: (not isinstance(i, int), str(i)))
    if indices:
        out += ["| GPU | Used before | Used after | Total |", "|---|---|---|---|"]
        for index in indices:
            b, a = b_gpus.get(index, {}), a_gpus.get(index, {})
            total = b.get("memory_total_mib", a.get("memory_total_mib"))
            out.append(
                f"| {text(index)} | {_mib(b.get('memory_used_mib'))} "
                f"| {_mib(a.get('memory_used_mib'))} | {_mib(total)} |"
            )
        out.append("")
    b_mem, a_mem = b_state.get("memory") or {}, a_state.get("memory") or {}
    if b_mem or a_mem:
        out += [
            "| Host memory | Before | After |",
            "|---|---|---|",
            f"| total | {_gib(b_mem.get('total_bytes'))} | {_gib(a_mem.get('total_bytes'))} |",
            f"| available | {_gib(b_mem.get('available_bytes'))} "
            f"| {_gib(a_mem.get('available_bytes'))} |",
            "",
        ]
    b_procs = [p for p in b_state.get("gpu_processes") or [] if isinstance(p, Mapping)]
    a_procs = [p for p in a_state.get("gpu_processes") or [] if isinstance(p, Mapping)]
    if b_procs or a_procs or "gpu_processes" in b_state:
        out += [
            f"GPU processes: {len(b_procs)} before, {len(a_procs)} after"
            + (
                " (" + ", ".join(f"PID {text(p.get('pid'))}" for p in a_procs[:8]) + ")"
                if a_procs
                else ""
            )
            + ".",
            "",
        ]
    holders = [h for h in b_state.get("holders") or [] if isinstance(h, Mapping)]
    if holders:
        out += [
            "Who held what when the run began (owner and verdict from the process's cgroup, "
            "parent chain and command line; see the runbook's subject):",
            "",
            "| PID | Command | GPUs | Owner | Verdict | Why |",
            "|---|---|---|---|---|---|",
        ]
        for holder in holders[:40]:
            gpus = ", ".join(text(g) for g in holder.get("gpus") or []) or "–"
            why = f"{holder.get('reason') or ''}; {holder.get('evidence') or ''}"
            out.append(
                f"| {text(holder.get('pid'))} | {code(holder.get('command'), 60)} | {gpus} "
                f"| {text(holder.get('owner'))} | {text(holder.get('verdict'))} | {text(why)} |"
            )
        out.append("")
    b_checks = {c.get("name"): c for c in before.get("checks") or [] if isinstance(c, Mapping)}
    a_checks = {c.get("name"): c for c in after.get("checks") or [] if isinstance(c, Mapping)}
    if b_checks or a_checks:
        out += ["| Check | Before | After |", "|---|---|---|"]
        for name in dict.fromkeys([*b_checks, *a_checks]):

            def verdict(check: Mapping[str, Any] | None) -> str:
                if not check:
                    return "–"
                if check.get("ok") is None or check.get("status") == CheckStatus.CANNOT_TELL:
                    return "cannot tell"  # a check that could not be observed
                return "ok" if check.get("ok") else "fails"

            out.append(
                f"| {code(name)} | {verdict(b_checks.get(name))} | {verdict(a_checks.get(name))} |"
            )
        out.append("")
    return out or ["The journal has no observed state.", ""]


def _timeline(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The timeline's rows (the caller writes the header: times are UTC, or simulated)."""
    rows: list[tuple[str, str, str, str]] = []
    waits: dict[str, list[Mapping[str, Any]]] = {}
    started_commands: dict[str, list[str]] = {}
    eventful: set[str] = set()  # steps with a prompt or a wait between their start and end
    for event in events:
        if event.get("event") == "wait":
            waits.setdefault(str(event.get("step")), []).append(event)
        if event.get("event") in {"wait", "confirmation"}:
            eventful.add(str(event.get("step")))
    for event in events:
        kind, t = event.get("event"), str(event.get("t", ""))
        step = str(event.get("id", event.get("step", "")))
        if kind == "run-start":
            rows.append(
                (
                    t,
                    "–",
                    f"run of {code(event.get('runbook'))} started by {text(event.get('operator'))}",
                    f"host {code(event.get('host'))}",
                )
            )
        elif kind == "observed" and event.get("label") in {"before", "after"}:
            failing = [c for c in event.get("checks") or [] if not c.get("ok")]
            data = "; ".join(f"{code(c.get('name'))} fails" for c in failing) or "goal holds"
            rows.append((t, "–", f"state {text(event.get('label'))} observed", data))
        elif kind == "step-start":
            commands = [str(c) for c in event.get("commands") or []]
            started_commands[step] = commands
            if step in eventful:  # its own row, before the prompt and the waits
                rows.append((t, code(step), "started" + _commands(commands), targets(commands)))
        elif kind == "confirmation":
            rows.append(
                (
                    t,
                    code(step),
                    f"{text(event.get('operator'))} answered {text(event.get('answer'))}",
                    "",
                )
            )
        elif kind == "command" and (
            event.get("exit_status") not in (0, None) or event.get("timed_out")
        ):
            status = (
                "timed out" if event.get("timed_out") else f"exit {text(event.get('exit_status'))}"
            )
            rows.append((t, code(step), f"{code(event.get('command'), 120)}: {status}", ""))
        elif kind == "step-end":
            polled = waits.get(step, [])
            if polled:
                last = polled[-1]
                still = "; ".join(str(m) for m in last.get("failing") or [])
                rows.append(
                    (
                        str(last.get("t", t)),
                        code(step),
                        f"waited {text(last.get('elapsed_s'))} s of {text(last.get('timeout_s'))} s",
                        text(still, 200) if still else "",
                    )
                )
            message = str(event.get("message") or "")
            commands = [] if step in eventful else started_commands.get(step, [])
            rows.append(
                (
                    t,
                    code(step),
                    text(event.get("status"))
                    + f" after {text(event.get('duration_s'))} s"
                    + _commands(commands),
                    "; ".join(
                        x
                        for x in (targets(commands) if commands else "", text(message, 200))
                        if x and x != "–"
                    ),
                )
            )
        elif kind == "resume":
            rows.append((t, code(event.get("from_step")), "run resumed", ""))
        elif kind == "run-end":
            rows.append((t, "–", f"run ended: {text(_outcome(event))}", ""))
    return [f"| {text(_clock(t))} | {s} | {e} | {d} |" for t, s, e, d in _fold_skipped(rows)]


_SKIPPED = re.compile(r"^skipped after ")


def _fold_skipped(rows: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """Consecutive skipped rungs as one row: 'skipped (nothing to do): a, b, c'."""
    out: list[tuple[str, str, str, str]] = []
    run: list[tuple[str, str, str, str]] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            names = ", ".join(step for _, step, _, _ in run)
            out.append((run[0][0], "–", f"{len(run)} rungs skipped: {names}", "nothing to do"))
        run.clear()

    for row in rows:
        if _SKIPPED.match(row[2]):
            run.append(row)
            continue
        flush()
        out.append(row)
    flush()
    return out


def _clock(stamp: str) -> str:
    """'2026-11-30T14:00:02.100Z' as '14:00:02.100' (the date is above the table)."""
    match = re.fullmatch(r"\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d(?:\.\d+)?)Z?", stamp)
    return match.group(1) if match else stamp


def _commands(commands: Sequence[str]) -> str:
    if not commands:
        return ""
    shown = ", ".join(code(c, 120) for c in commands[:4])
    if len(commands) > 4:
        shown += f" and {len(commands) - 4} more"
    return f": {shown}"


_RUN_ID_CLOCK = re.compile(r"^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)\d\dZ")


def run_clock(start: Mapping[str, Any], today: str | None = None) -> tuple[str, str]:
    """The day and time (UTC) the run really happened: (YYYY-MM-DD, HH:MM).

    A drill's journal is stamped by the simulator's clock, which starts at a fixed moment;
    its run id is named from the wall clock when it began, so that is what dates it. A real
    run's own stamps are the wall clock. ``today`` is the fallback when neither says."""
    started = str(start.get("t") or "")
    match = _RUN_ID_CLOCK.match(str(start.get("run") or ""))
    if start.get("simulated_time") or start.get("drill") or not started:
        if match:
            y, mo, d, h, mi = match.groups()
            return f"{y}-{mo}-{d}", f"{h}:{mi}"
        return (today or "unknown"), ""
    return started[:10], started[11:16]


def _secs(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else text(value)


def _debrief(drill_end: Mapping[str, Any], scenario: Mapping[str, Any] | None) -> list[str]:
    """The drill's debrief, as the terminal showed it: wrong, done, expert, difference, time,
    lesson."""
    scenario = scenario or {}
    out = ["## Drill debrief", ""]
    if scenario.get("wrong"):
        out.append(f"- **What was wrong:** {text(scenario['wrong'])}")
    timeline = [t for t in drill_end.get("timeline") or [] if isinstance(t, Mapping)]
    done = ", ".join(f"{text(t.get('action'))} at \\+{_secs(t.get('at_s'))} s" for t in timeline)
    out.append(f"- **What the run did:** {done or 'nothing to the host (it only looked)'}")
    expert = ", ".join(text(a) for a in drill_end.get("expert") or [])
    said = text(scenario["expert"]) if scenario.get("expert") else ""
    out.append(
        "- **What an expert does:** "
        + "; ".join(x for x in (said, expert or "no action on the host") if x)
    )
    extra = [text(a) for a in drill_end.get("extra") or []]
    missing = [text(a) for a in drill_end.get("missing") or []]
    if extra or missing:
        diff = [f"{a} (the expert would not)" for a in extra]
        diff += [f"{a} missing (the expert would)" for a in missing]
        out.append("- **The difference:** " + "; ".join(diff))
    else:
        out.append("- **The difference:** none: the expert's actions, no more")
    recovery, ideal = drill_end.get("recovery_s"), drill_end.get("ideal_s")
    if isinstance(recovery, int | float) and isinstance(ideal, int | float) and ideal:
        out.append(
            f"- **Time to recovery:** {recovery:g} s simulated, against the expert's "
            f"{ideal:g} s ({recovery / ideal:.1f}x)"
            + ("" if drill_end.get("in_time", True) else "; over the 1.5x the drills allow")
        )
    if scenario.get("lesson"):
        page = str(scenario.get("page") or "")
        read = f"; read [{text(page)}](../{page})" if page else ""
        out.append(f"- **Lesson:** {text(scenario['lesson'])}{read}")
    return [*out, ""]


def draft(
    events: Sequence[Mapping[str, Any]],
    title: str | None = None,
    known_runbooks: Iterable[str] = (),
    today: str | None = None,
    scenario: Mapping[str, Any] | None = None,
) -> Draft:
    """The postmortem page for one run's journal events.

    ``today``: the date the page is written (YYYY-MM-DD), for a journal that dates nothing
    else; ``scenario``: a drill's scenario (wrong, expert, lesson, page), for its debrief."""
    start, end = _first(events, "run-start"), _last(events, "run-end")
    runbook = str(start.get("runbook") or "unknown")
    host = str(start.get("host") or "unknown")
    run = str(start.get("run") or "unknown")
    started = str(start.get("t") or "")
    drill = start.get("drill")
    drill_name = str(drill) if drill else None
    simulated = bool(start.get("simulated_time") or drill_name)
    day, clock = run_clock(start, today)
    when = f"{day} {clock} UTC" if clock else day
    if not title:
        title = (
            f"Drill: {runbook}, {drill_name} scenario, {when}"
            if drill_name
            else f"{runbook} on {host}, {when}"
        )
    linked = runbook in set(known_runbooks)
    runbook_ref = f"[{text(runbook)}](../runbooks/{runbook}.md)" if linked else code(runbook)
    sim = " (simulated clock)" if simulated else ""
    front = [
        "---",
        f"title: {yaml_string(title)}",
        f"date: {yaml_string(day)}",
        "authors: TODO",
        "owner: TODO",
        "status: draft",
        "severity: " + ("none (a drill)" if drill_name else "TODO"),
    ]
    if drill_name:
        front.append(f"drill: {yaml_string(drill_name)}")
    front += [
        f"hosts: [{yaml_string(host)}]",
        f"started: {yaml_string(started + sim)}",
        f"ended: {yaml_string(str(end.get('t', 'did not finish')) + (sim if end else ''))}",
        f"outcome: {yaml_string(_outcome(end))}",
        f"run: {yaml_string(run)}",
    ]
    if linked:
        front.append(f"runbooks: [{yaml_string(runbook)}]")
    front += ["tags:", "  - postmortem"] + (["  - drill"] if drill_name else []) + ["---", ""]
    body = [f"# {text(title, 200)}", ""]
    if drill_name:
        body += [
            '!!! warning "A drill, not an incident"',
            f"    This run was a drill of the {text(drill_name)} scenario on a simulated host "
            f"(see [drills](../drills.md)), run on {text(when)}. Nothing real was affected. "
            "The times in the timeline are the simulator's clock, which starts at a fixed "
            "moment and runs fast.",
            "",
        ]
    body += [
        '!!! note "Generated from a run journal"',
        f"    Written by `runbook postmortem new` from run {code(run)}. The metadata, the "
        "chart, the timeline and the state before and after come from the journal; every "
        "section marked TODO is for a person to write.",
        "",
        "## Summary",
        "",
        f"{TODO}: what broke, for whom, for how long, and why.",
        "",
    ]
    drill_end = _last(events, "drill-end")
    if drill_name and drill_end:
        body += _debrief(drill_end, scenario)
    body += [
        "## Impact",
        "",
        f"{TODO}: who or what was affected, and for how long.",
        "",
        "## Root causes",
        "",
        f"{TODO}",
        "",
        "## Trigger",
        "",
        f"{TODO}",
        "",
        "## Detection",
        "",
        f"{TODO}: how we found out, and when (clock time).",
        "",
        "## Response",
        "",
        f"The run was started by {text(start.get('operator') or 'unknown')} on {text(when)}"
        + (" (a drill)." if drill_name else ".")
        + f" {TODO}: who was paged or noticed, when, who joined, what they decided.",
        "",
        "## Resolution",
        "",
        f"The runbook {runbook_ref} ran on {code(host)}: {text(_outcome(end))}.",
        "",
    ]
    ends = [e for e in events if e.get("event") == "step-end"]
    commands: dict[str, list[str]] = {}
    for e in events:
        if e.get("event") == "step-start":
            commands[str(e.get("id"))] = [str(c) for c in e.get("commands") or []]
    ran = [e for e in ends if e.get("status") != StepStatus.SKIPPED]
    skipped = [e for e in ends if e.get("status") == StepStatus.SKIPPED]
    if ran:
        body += ["| Step | Status | Duration | Targets |", "|---|---|---|---|"]
        for e in ran:
            step = str(e.get("id"))
            body.append(
                f"| {code(step)} | {text(e.get('status'))} | {text(e.get('duration_s'))} s "
                f"| {targets(commands.get(step, []))} |"
            )
        body.append("")
    if skipped:
        body += [
            f"Skipped, with nothing to do ({len(skipped)} rungs): "
            + ", ".join(code(e.get("id")) for e in skipped)
            + ".",
            "",
        ]
    picture = chart.picture(events, {step: targets(c) for step, c in commands.items()})
    if picture.gpus or picture.host:
        body += [
            "## The run at a glance",
            "",
            "Each GPU's memory and the host's available memory at every state the run "
            "observed, from the journal; a dashed line marks each action the operator "
            "confirmed." + (" Seconds on the simulator's clock." if simulated else ""),
            "",
            '<figure class="rbr-run-chart">',
            chart.svg(picture, f"The run {run}: memory over time"),
            "</figure>",
            "",
        ]
    timeline_head = (
        f"Times are the simulator's clock (UTC, starting {text(started[:10])}); the drill "
        f"itself ran on {text(when)}."
        if simulated
        else (f"All times UTC, on {text(day)}." if day != "unknown" else "All times UTC.")
    )
    body += [
        "## State before and after",
        "",
        *_state_tables(_first_labelled(events, "before"), _last_labelled(events, "after")),
        "## Timeline",
        "",
        timeline_head,
        "",
        "| Time | Step | Event | Data |",
        "|---|---|---|---|",
        *_timeline(events),
        "",
        "## Action items",
        "",
        "| Item | Type | Owner | Ticket | Due | Status |",
        "|---|---|---|---|---|---|",
        f"| {TODO} | prevent / mitigate / detect / learn | {TODO} | {TODO} | {TODO} | open |",
        "",
        "## Lessons",
        "",
        "### What went well",
        "",
        f"- {TODO}",
        "",
        "### What went wrong",
        "",
        f"- {TODO}",
        "",
        "### Where we got lucky",
        "",
        f"- {TODO}",
        "",
        "## Supporting information",
        "",
        f"- The run journal: {code(run)}; `runbook runs show RUN --markdown` prints its timeline.",
        f"- The runbook: {runbook_ref}.",
    ]
    if drill_name:
        body.append("- Practice: [drills](../drills.md).")
    return Draft(
        title=title,
        filename=slug(title) + ".md",
        markdown="\n".join(front + body) + "\n",
        runbook=runbook,
        drill=drill_name,
    )


def _first_labelled(events: Sequence[Mapping[str, Any]], label: str) -> Mapping[str, Any]:
    return next((e for e in events if e.get("event") == "observed" and e.get("label") == label), {})


def _last_labelled(events: Sequence[Mapping[str, Any]], label: str) -> Mapping[str, Any]:
    return next(
        (e for e in reversed(events) if e.get("event") == "observed" and e.get("label") == label),
        {},
    )


def add_to_nav(mkdocs_yml: str, title: str, path: str, section: str = "Postmortems") -> str:
    """mkdocs.yml with ``path`` listed at the end of the nav's ``section`` (Postmortems:
    before the template, if listed).

    A text edit: the file holds ``!!python/name`` tags a YAML round trip would not keep.
    """
    if f" {path}" in mkdocs_yml:
        return mkdocs_yml
    lines = mkdocs_yml.split("\n")
    try:
        head = next(i for i, line in enumerate(lines) if line.strip() == f"- {section}:")
    except StopIteration:
        raise ValueError(f"mkdocs.yml has no '- {section}:' section in its nav") from None
    indent = len(lines[head]) - len(lines[head].lstrip()) + 4
    at = head + 1
    while at < len(lines) and (
        len(lines[at]) - len(lines[at].lstrip()) >= indent and lines[at].strip()
    ):
        if "postmortems/TEMPLATE.md" in lines[at]:
            break
        at += 1
    lines.insert(at, " " * indent + f"- {yaml_string(title)}: {path}")
    return "\n".join(lines)
