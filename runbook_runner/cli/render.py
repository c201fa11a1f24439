"""Text for people: tables and runbook descriptions. Builds strings, prints nothing."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, ClassVar

from runbook_runner.journal.state import first_of
from runbook_runner.journal.state import state_json as state_json  # --json prints it too
from runbook_runner.observe.state import Memory, Unavailable
from runbook_runner.plan.ownership import Disposition
from runbook_runner.runbook import Runbook, Step, seconds_text
from runbook_runner.safetext import own_sgr, visible
from runbook_runner.status import OnFailure, StepStatus

if TYPE_CHECKING:
    from runbook_runner.events import StepRecord, Verdict, Waiting
    from runbook_runner.expect import CheckResult


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
        text = visible(text)  # host text inside a colour cannot end it or add its own
        if not self.enabled or not styles:
            return text
        codes = ";".join(self._CODES[s] for s in styles)
        return f"{own_sgr(codes)}{text}{own_sgr('0')}"


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 error``, ``2 errors``, ``0 steps``."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def value_text(value: Any) -> str:
    """A parameter value as the user wrote it: no quotes doubled, no backslashes doubled."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def kind_of(runbook: Runbook) -> str:
    return f"destructive ({runbook.blast_radius})" if runbook.destructive else "read-only"


def runbook_list(runbooks: Sequence[Runbook]) -> str:
    rows = [(r.name, kind_of(r), r.title) for r in runbooks]
    return table(rows, ("NAME", "KIND", "TITLE"))


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(
        " ".join(text.split()), width=88, initial_indent=indent, subsequent_indent=indent
    )


def _skip_text(step: Step, goal: tuple[str, ...]) -> str:
    if set(step.skip_if) == set(goal):
        return "skipped once the goal holds"
    return (
        "skipped when "
        + ", ".join(step.skip_if)
        + (" holds" if len(step.skip_if) == 1 else " hold")
    )


def _step_flags(step: Step, goal: tuple[str, ...]) -> str:
    flags = []
    if step.destructive:
        flags.append(f"DESTRUCTIVE, affects {step.affects}")
    if step.root:
        flags.append("needs root")
    if step.fixes:
        fixes = "the goal" if set(step.fixes) == set(goal) else ", ".join(step.fixes)
        flags.append(f"runs only while {fixes} fails")
    if step.when is not None:
        flags.append(f"when {step.when.source}")
    if step.for_each_failing:
        flags.append(f"once per item failing {step.for_each_failing}")
    if step.reboots:
        flags.append("REBOOTS the host: asked for even with --yes unless --allow-reboot")
    if step.skip_if:
        flags.append(_skip_text(step, goal))
    flags.append(f"timeout {seconds_text(step.timeout)}")
    if step.on_failure is OnFailure.CONTINUE:
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
    if runbook.subject is not None:
        raw = runbook.subject
        subject = raw.with_parameters({n: p.default for n, p in runbook.parameters.items()})
        out += ["", f"Acts only on what is its subject's, and broken: {subject.description}"]
        for label, template, value in (
            ("launcher", raw.launcher, subject.launcher),
            ("workers", raw.workers, subject.workers),
            ("unit", raw.unit, subject.unit),
        ):
            if value:
                given = f"  (--set {template.strip('{} ')}=...)" if "{{" in template else ""
                out.append(f"  {label}: {value}{given}")
        if subject.health_path:
            ports = ", ".join(f"{p} if the command matches {k!r}" for k, p in subject.ports)
            out.append(
                f"  health: GET {subject.health_path} on the launcher's --port"
                + (f" (else {ports})" if ports else "")
            )
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
            if p.required:
                default = "required"
            elif p.default is None:
                default = "optional, no default"
            else:
                default = f"default {value_text(p.default)}"
            extra = f"; {', '.join(bounds)}" if bounds else ""
            out.append(f"  {p.name} ({p.type}, {default}{extra})")
            out.append(_wrap(p.description, "      "))
    out += ["", "Observations:"]
    for o in runbook.observations.values():
        where = " (its parser's own command)" if o.own_command else ""
        where = where if o.command else " (parsed here, not run)"
        out.append(f"  {o.name} [{o.parser}]{where}: {o.source}")
    out += ["", "Checks (goal marked *):"]
    for c in runbook.checks.values():
        mark = "*" if c.name in runbook.goal else " "
        if c.every:
            rule = f"every {c.every}: {c.expect.source if c.expect else ''}"
        elif c.none:
            rule = f"no {c.none}" + (f" where {c.where.source}" if c.where else "")
        else:
            rule = c.expect.source if c.expect else ""
        if c.within is not None:
            rule += f" (only {c.within.describe()})"
        if c.without is not None:
            rule += f" (less {c.without.describe()})"
        if c.over and c.empty_ok:
            rule += " (an empty list is ok)"
        out.append(f" {mark}{c.name}: {c.description}")
        out.append(f"      {rule}")
    if runbook.steps:
        out += ["", "Steps:"]
    else:
        out += ["", "Steps: none (a read-only check)"]
    for number, step in enumerate(runbook.steps, start=1):
        out.append(f"  {number}. {step.id}: {step.title}")
        out.append(f"     [{_step_flags(step, runbook.goal)}]")
        if step.run:
            command = step.run.source.strip().replace("\n", "\n       ")
            out.append(f"     $ {command}")
        if step.wait:
            wait = step.wait
            until = ", ".join(wait.until)
            out.append(
                f"     waits up to {seconds_text(wait.timeout)} "
                f"(every {seconds_text(wait.interval)}) for: {until}"
            )
            if wait.settle is not None:
                left = ", ".join(wait.nothing_left) or "-"
                out.append(
                    f"     ends early after {seconds_text(wait.settle)} without progress "
                    f"once these hold: {left}"
                )
    return "\n".join(out)


# -- observed state, steps, checks -------------------------------------------------------


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def gpu_table(runbook: Runbook, state: Mapping[str, Any]) -> str:
    """GPU | MEMORY USED / TOTAL | PROCESSES, then one line of host memory."""
    lines: list[str] = []
    gpus = first_of(runbook, state, "gpus")
    if isinstance(gpus, Unavailable):
        lines.append(f"GPUs: unknown ({gpus.reason})")
    elif gpus is not None:
        rows = []
        for gpu in gpus:
            used = f"{_mib(gpu.memory_used_mib)} / {_mib(gpu.memory_total_mib)} MiB"
            rows.append((str(gpu.index), used, holders_text(runbook, state, gpu)))
        lines.append(table(rows, ("GPU", "MEMORY USED / TOTAL", "PROCESSES")))
    memory = first_of(runbook, state, "free")
    if isinstance(memory, Unavailable):
        lines.append(f"host memory: unknown ({memory.reason})")
    elif memory is not None:
        lines.append(memory_line(memory))
    lines += owner_lines(runbook, state)
    return "\n".join(lines)


def holders_text(runbook: Runbook, state: Mapping[str, Any], gpu: Any) -> str:
    """Who holds ``gpu``, for a table cell: its --query-compute-apps records (with their
    memory), else the process-owners records of its device file; '-' for nobody."""
    processes = first_of(runbook, state, "gpu-processes")
    on_gpu: list[str] = []
    if isinstance(processes, tuple):
        on_gpu = [
            f"{p.pid} {p.process_name or '?'} ({_mib(p.used_memory_mib)} MiB)"
            for p in processes
            if (p.gpu_bus_id and p.gpu_bus_id == gpu.pci_bus_id)
            or (p.gpu_uuid and p.gpu_uuid == gpu.uuid)
        ]
    on_gpu = on_gpu or _holders_of(gpu, first_of(runbook, state, "process-owners"))
    return ", ".join(on_gpu) or "-"


def _holders_of(gpu: Any, owners: Any) -> list[str]:
    """Who holds ``gpu``'s device file (/dev/nvidiaN, N its minor number, else its index)
    by the process-owners records: 'PID name (owner)', each once, GPU infrastructure left
    out (a daemon such as nvidia-persistenced holds every GPU; the owner lines name it). For
    a GPU no --query-compute-apps record names (none observed, or none with its bus id/UUID)."""
    minor = gpu.minor_number if gpu.minor_number is not None else gpu.index
    if minor is None or not isinstance(owners, tuple):
        return []
    found: dict[int | None, str] = {}
    for row in owners:
        if row.minor_number == minor and row.owner != "infrastructure" and row.pid not in found:
            name = os.path.basename((row.command or "?").split(" ", 1)[0]) or "?"
            said = f"{row.pid} {name[:32]} ({row.owner or 'unclassified'})"
            found[row.pid] = visible(said, lines=False, tabs=False)
    return list(found.values())


_VERDICT: dict[str, str] = {
    Disposition.ACT: "acted on",
    Disposition.LEAVE: "left alone",
    Disposition.CANNOT_TELL: "cannot tell",
}


def owner_lines(runbook: Runbook, state: Mapping[str, Any]) -> list[str]:
    """Who holds what, one line per process: its owner class, what is done with it and why
    (the evidence), and the GPUs it holds. Host text is shown escaped."""
    owners = first_of(runbook, state, "process-owners")
    if isinstance(owners, Unavailable):
        return [f"who holds the GPUs: unknown ({owners.reason})"]
    if not isinstance(owners, tuple) or runbook.subject is None:
        return []
    if not owners:
        return ["who holds the GPUs: no process holds a GPU, and none is the server's"]
    lines = ["who holds the GPUs (owner, verdict, why):"]
    seen: dict[int, list[Any]] = {}
    for row in owners:
        seen.setdefault(row.pid, []).append(row)
    for pid, rows in seen.items():
        row = rows[0]
        gpus = sorted(r.minor_number for r in rows if r.minor_number is not None)
        where = f" on /dev/nvidia{','.join(map(str, gpus))}" if gpus else ""
        verdict = _VERDICT.get(row.disposition or "", row.disposition or "?")
        command = visible((row.command or "?")[:60], lines=False, tabs=False)
        why = (
            row.reason
            if row.evidence in (None, "", row.reason)
            else f"{row.reason}; {row.evidence}"
        )
        lines.append(
            f"  PID {pid} {command}{where}: {row.owner}, {verdict}: "
            + visible(why, lines=False, tabs=False)
        )
    return lines


def memory_line(memory: Memory) -> str:
    def gib(value: int | None) -> str:
        return "?" if value is None else f"{value / 1024**3:,.1f} GiB"

    return (
        f"host memory: {gib(memory.available_bytes)} available of {gib(memory.total_bytes)}"
        f" (used {gib(memory.used_bytes)})"
    )


def check_lines(results: Sequence[CheckResult], runbook: Runbook, style: Style) -> str:
    lines = []
    for result in results:
        if result.ok:
            mark = style("ok  ", "green")
        elif result.cannot_tell:
            mark = style("????", "yellow", "bold")  # cannot tell: neither ok nor failing
        else:
            mark = style("FAIL", "red", "bold")
        lines.append(f"  {mark} {result.name}: {result.message}")
        hint = runbook.checks[result.name].hint
        if not result.ok and hint:
            lines.append(f"       {style('what to do:', 'dim')} {hint}")
    return "\n".join(lines)


_STATUS_STYLE = {
    StepStatus.OK: ("ok", "green"),
    StepStatus.FAILED: ("FAILED", "red"),
    StepStatus.TIMED_OUT: ("TIMED OUT", "red"),
    StepStatus.SKIPPED: ("skipped", "dim"),
    StepStatus.DECLINED: ("declined", "yellow"),
    StepStatus.PLANNED: ("planned", "cyan"),
    StepStatus.UNKNOWN: ("UNKNOWN", "yellow"),
    StepStatus.BLOCKED: ("BLOCKED", "yellow"),
}


def step_line(record: StepRecord, number: int, total: int, style: Style) -> str:
    label, colour = _STATUS_STYLE.get(record.status, (record.status, ""))
    if (
        record.wait is not None
        and record.wait.ended == "no-progress"
        and record.status == StepStatus.OK
    ):
        label, colour = "waited", "cyan"  # it showed that waiting cannot help: not a failure
    head = f"  [{number}/{total}] {record.id:<28} {style(f'{label:<9}', colour)} {record.duration_s:6.1f}s"
    what = record.message
    if record.status == StepStatus.BLOCKED:  # the status says it: not "BLOCKED blocked: ..."
        what = what.removeprefix("blocked: ")
    if record.targets and record.status == StepStatus.OK and record.commands:
        what = f"on {', '.join(record.targets)}" + (f"; {what}" if what else "")
    if not what:
        return head
    return "\n".join(wrapped(f"{head}  {what}", " " * 8, width=len(head) + 2 + LINE))


LINE = 150  # the width a progress or verdict line wraps at
MOST_LINES = 6  # a message longer than this many lines says where the rest is


def wrapped(line: str, indent: str, width: int = LINE) -> list[str]:
    """``line`` wrapped at ``width`` on spaces (the fact at the end is shown, not cut), the
    lines after the first indented; past ``MOST_LINES`` it says where the rest is."""
    if len(line) <= width:
        return [line]
    lines = textwrap.wrap(
        line, width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False
    )
    if len(lines) > MOST_LINES:
        more = "… (more in --json and the journal)"
        lines = [*lines[: MOST_LINES - 1], lines[MOST_LINES - 1][: width - len(more)] + more]
    return lines


def folded_line(steps: Sequence[str]) -> str:
    """The rungs not needed, as one line (``-v`` lists each with why)."""
    return f"  - not needed: {', '.join(steps)} ({plural(len(steps), 'rung')}; -v says why)"


def before_after(runbook: Runbook, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """GPU | BEFORE | HELD BY | AFTER | HELD BY NOW, one line each (GPUs that read the same
    fold into one), then host memory before -> after, then who holds the GPUs now."""
    lines: list[str] = []
    was, now = first_of(runbook, before, "gpus"), first_of(runbook, after, "gpus")
    if isinstance(now, Unavailable):
        lines.append(f"GPUs: unknown ({now.reason})")
    elif isinstance(now, tuple):
        old = {g.index: g for g in was} if isinstance(was, tuple) else {}
        rows: list[list[str]] = []
        for gpu in now:
            prior = old.get(gpu.index)
            cells = [
                f"{_mib(prior.memory_used_mib)} MiB" if prior is not None else "?",
                holders_text(runbook, before, prior) if prior is not None else "?",
                f"{_mib(gpu.memory_used_mib)} / {_mib(gpu.memory_total_mib)} MiB",
                holders_text(runbook, after, gpu),
            ]
            if rows and rows[-1][1:] == cells:  # GPUs that read the same fold into one row
                rows[-1][0] = _fold(rows[-1][0], gpu.index)
            else:
                rows.append([str(gpu.index), *cells])
        header = ("GPU", "BEFORE", "HELD BY", "AFTER (USED / TOTAL)", "HELD BY NOW")
        lines.append(table(rows, header))
    m_was, m_now = first_of(runbook, before, "free"), first_of(runbook, after, "free")
    if isinstance(m_now, Memory):
        line = memory_line(m_now)
        if isinstance(m_was, Memory) and m_was.available_bytes != m_now.available_bytes:
            line += f"; before: {memory_line(m_was).split(': ', 1)[1]}"
        lines.append(line)
    elif isinstance(m_now, Unavailable):
        lines.append(f"host memory: unknown ({m_now.reason})")
    lines += owner_lines(runbook, after)
    return "\n".join(lines)


def _fold(indices: str, index: int) -> str:
    """'1' + 2 -> '1-2'; '1-2' + 3 -> '1-3'; '0,2' + 5 -> '0,2,5' (consecutive runs as ranges)."""
    head, _, last = indices.rpartition(",")
    first, _, end = last.partition("-")
    if int(end or first) == index - 1:
        return f"{head + ',' if head else ''}{first}-{index}"
    return f"{indices},{index}"


def check_summary(results: Sequence[CheckResult], runbook: Runbook, style: Style) -> str:
    """The goal's checks: one line when they all hold, else each one that does not."""
    if all(r.ok for r in results):
        verb = "holds" if len(results) == 1 else "hold"
        return "  " + style("ok  ", "green") + f" the goal's {plural(len(results), 'check')} {verb}"
    return check_lines([r for r in results if not r.ok], runbook, style)


def verdict_lines(verdict: Verdict, nexts: Sequence[str], *, done: str = "done") -> list[str]:
    """The verdict's lines, the last on the screen: done, left alone, still wrong, next."""

    lines = []
    for label, items, empty in (
        (done, verdict.done, "nothing changed on the host"),
        ("left alone", verdict.left_alone, "nothing"),
        ("still wrong", verdict.held + verdict.still_wrong, "nothing"),
        ("next", tuple(nexts), "nothing"),
    ):
        pad = f"  {' ' * len(label)}  "
        for i, item in enumerate(items or (empty,)):
            said, mark, look = item.rpartition(" (look: ")
            if not mark or not look.endswith(")"):
                said, look = item, ""
            line = f"  {label}: {said}" if i == 0 else f"{pad}{said}"
            lines += [line] if label == "next" else wrapped(line, pad + "  ")  # a command whole
            if look:  # the command a person runs to look at it, whole, on its own line
                lines.append(f"{pad}  look: {look[:-1]}")
    return lines


def wait_line(event: Waiting, width: int = 120) -> str:
    failing = "; ".join(r.message for r in event.failing)
    trend = f" (unchanged for {event.unchanged_s:.0f} s)" if event.unchanged_s >= 1 else ""
    line = f"      waiting {event.elapsed_s:.0f}s of {event.timeout_s:.0f}s{trend}: {failing}"
    return line if len(line) <= width else line[: width - 1] + "…"


def check_json(result: CheckResult, runbook: Runbook) -> dict[str, Any]:
    """A check's verdict for --json; a failing one carries its hint (what a human does)."""
    document = result.to_json()
    check = runbook.checks.get(result.name)
    if not result.ok and check is not None and check.hint:
        document["hint"] = check.hint
    return document
