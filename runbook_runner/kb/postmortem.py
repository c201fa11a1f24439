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
from runbook_runner.kb.markdown import code, slug, targets, text, yaml_string
from runbook_runner.kb.timeline import outcome, secs, state_tables, timeline
from runbook_runner.status import StepStatus

TODO = "TODO"
# A check of the recovery runbooks that failed before the run, and the fault class it shows.
FAULT_OF_CHECK = {
    "gpu-memory-released": "gpu-memory-held",
    "host-memory-available": "host-memory",
    "broken-server-gone": "crashed-server",
    "crash-loop-ended": "crash-loop",
    "holders-attributed": "ownership",
    "no-xid-needs-reboot": "xid",
    "no-gpu-to-drain": "xid",
    "no-nvlink-fault": "nvlink",
    "gpus-answer": "gpu-unresponsive",
    "driver-loaded": "driver",
    "driver-matches-library": "driver",
    "hicache-fits": "sizing",
    "offload-fits": "sizing",
    "kv-offload-fits-dev-shm": "sizing",
}


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


def _debrief(drill_end: Mapping[str, Any], scenario: Mapping[str, Any] | None) -> list[str]:
    """The drill's debrief, as the terminal showed it: wrong, done, expert, difference, time,
    lesson."""
    scenario = scenario or {}
    out = ["## Drill debrief", ""]
    if scenario.get("wrong"):
        out.append(f"- **What was wrong:** {text(scenario['wrong'])}")
    timeline = [t for t in drill_end.get("timeline") or [] if isinstance(t, Mapping)]
    done = ", ".join(f"{text(t.get('action'))} at \\+{secs(t.get('at_s'))} s" for t in timeline)
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
        f"outcome: {yaml_string(outcome(end))}",
        f"run: {yaml_string(run)}",
    ]
    if linked:
        front.append(f"runbooks: [{yaml_string(runbook)}]")
    # The index's fields (incident.schema.json), each one line of JSON, which YAML reads.
    fields = from_journal(events, str((scenario or {}).get("page") or ""))
    front += [f"{key}: {json.dumps(value)}" for key, value in fields.items()]
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
        f"The runbook {runbook_ref} ran on {code(host)}: {text(outcome(end))}.",
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
        *state_tables(_first_labelled(events, "before"), _last_labelled(events, "after")),
        "## Timeline",
        "",
        timeline_head,
        "",
        "| Time | Step | Event | Data |",
        "|---|---|---|---|",
        *timeline(events),
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


def from_journal(events: Sequence[Mapping[str, Any]], pitfall_page: str = "") -> dict[str, Any]:
    """The incident fields a run's journal can fill: the GPUs the run acted on, the fault
    classes of the checks that failed before it, the rung that reached the goal, and the
    times (detected: the run's start; acted: the first confirmed action; recovered: its end,
    if the goal held). ``pitfall_page``: a drill scenario's page, which the run teaches."""
    nothing: Mapping[str, Any] = {}
    start = next((e for e in events if e.get("event") == "run-start"), nothing)
    end = next((e for e in reversed(events) if e.get("event") == "run-end"), nothing)
    before = next(
        (e for e in events if e.get("event") == "observed" and e.get("label") == "before"),
        nothing,
    )
    host = str(start.get("host") or "unknown")
    gpus: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.get("event") != "step-start":
            continue
        for item in e.get("items") or []:
            if isinstance(item, Mapping) and isinstance(item.get("index"), int):
                gpu = {"host": host, "index": item["index"]}
                gpu.update({k: str(item[k]) for k in ("uuid", "serial") if item.get(k)})
                gpus.setdefault(item["index"], gpu)
    failed = [c.get("name") for c in before.get("checks") or [] if c.get("ok") is False]
    faults = sorted({FAULT_OF_CHECK[n] for n in failed if n in FAULT_OF_CHECK}) or ["unknown"]
    acted = next((e.get("t") for e in events if e.get("event") == "confirmation"), None)
    ok = bool(end.get("ok"))
    rung = end.get("reached_by") if ok else None
    pitfall = pitfall_page.split("#")[0].removeprefix("pitfalls/").removesuffix(".md")
    return {
        "incident": str(start.get("run") or "unknown"),
        "gpus": [gpus[i] for i in sorted(gpus)],
        "fault": faults,
        "recovered": {
            "how": "automatic" if ok else "not-recovered",
            "runbook": start.get("runbook"),
            "rung": rung,
        },
        "times": {
            "clock": "simulated" if start.get("simulated_time") else "wall",
            "detected": start.get("t") or "unknown",
            "acted": acted or "unknown",
            "recovered": (end.get("t") if ok else None) or "unknown",
        },
        "pitfalls": [pitfall] if pitfall_page.startswith("pitfalls/") else [],
    }


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
