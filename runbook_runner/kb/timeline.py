"""A postmortem's timeline and its state tables, from a run's journal events (pure).

Each step's row: when, what, the commands with their targets and waits; skipped rungs folded
into one line. The state tables: each GPU and the host's memory before and after the run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from runbook_runner.kb.markdown import code, targets, text
from runbook_runner.status import CheckStatus


def _mib(value: object) -> str:
    return f"{value:,} MiB" if isinstance(value, int) else "?"


def _gib(value: object) -> str:
    return f"{value / 2**30:,.1f} GiB" if isinstance(value, int | float) else "?"


def holders_by_gpu(holders: object, gpus: Mapping[Any, Mapping[str, Any]]) -> dict[Any, list[str]]:
    """GPU index -> 'PID (owner class)' of each process that holds its device file, from the
    state's ``holders`` (each with the minor numbers of the /dev/nvidiaN it holds). A GPU's
    minor number is its own where the state gives it, else its index (as on most hosts)."""
    index_of = {
        g.get("minor_number", index): index for index, g in gpus.items() if isinstance(g, Mapping)
    }
    found: dict[Any, list[str]] = {}
    for holder in holders if isinstance(holders, list) else []:
        if not isinstance(holder, Mapping):
            continue
        for minor in holder.get("gpus") or []:
            index = index_of.get(minor, minor)
            found.setdefault(index, []).append(
                f"PID {text(holder.get('pid'))} ({text(holder.get('owner') or '?')})"
            )
    return found


def _held(holders: list[str] | None, most: int = 4) -> str:
    if not holders:
        return "–"
    more = f", +{len(holders) - most}" if len(holders) > most else ""
    return ", ".join(holders[:most]) + more


def state_tables(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    b_state, a_state = before.get("state") or {}, after.get("state") or {}
    out: list[str] = []
    b_gpus = {g.get("index"): g for g in b_state.get("gpus") or [] if isinstance(g, Mapping)}
    a_gpus = {g.get("index"): g for g in a_state.get("gpus") or [] if isinstance(g, Mapping)}
    indices = sorted({*b_gpus, *a_gpus}, key=lambda i: (not isinstance(i, int), str(i)))
    b_held = holders_by_gpu(b_state.get("holders"), b_gpus)
    a_held = holders_by_gpu(a_state.get("holders"), a_gpus)
    if indices:
        out += [
            "| GPU | Used before | Used after | Total | Holders before | Holders after |",
            "|---|---|---|---|---|---|",
        ]
        for index in indices:
            b, a = b_gpus.get(index, {}), a_gpus.get(index, {})
            total = b.get("memory_total_mib", a.get("memory_total_mib"))
            out.append(
                f"| {text(index)} | {_mib(b.get('memory_used_mib'))} "
                f"| {_mib(a.get('memory_used_mib'))} | {_mib(total)} "
                f"| {_held(b_held.get(index))} | {_held(a_held.get(index))} |"
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


def timeline(events: Sequence[Mapping[str, Any]]) -> list[str]:
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
            rows.append((t, "–", f"run ended: {text(outcome(event))}", ""))
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


def secs(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else text(value)


def outcome(end: Mapping[str, Any]) -> str:
    """How the run ended, in words, from its run-end line."""
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
