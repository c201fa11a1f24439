"""The knowledge base as incident memory (pure: front matter and test results in, Markdown out).

:func:`parse` reads a postmortem page's front matter (``schema/incident.schema.json``: hosts,
GPUs, fault classes, the rung that recovered and how, the detect / act / recover times, the
pitfalls it teaches, its action items) into an :class:`Incident`, or ``file:line:col``
problems. The index pages, a postmortem's earlier incidents, a pitfall's incidents and a
runbook's drill status are rendered from those and the test results file
(``tests/results_file.py`` writes it; :func:`read_results`). docs/hooks.py does the I/O.

Rules:
- Incidents are listed in the order of their day (the ``date`` field's leading
  ``YYYY-MM-DD``), then their run id (a run id starts with its UTC start time).
- A GPU is the same GPU wherever its UUID (else its serial) is the same; a GPU with
  neither is its host and index.
- An action item of kind ``guard`` or ``rung`` is done only while every test its ``proves``
  names passed in the last run that ran it; failed, or never run, it is outstanding,
  whatever the page says. Other items have the status the page gives them.
- An outstanding item past its due day is overdue.
- A runbook's drills are stale when the runbook's SHA-256 differs from the one the test
  run that last ran them recorded.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from functools import cache
from importlib import resources
from typing import Any

from runbook_runner.format import schema, yamlsource
from runbook_runner.kb.markdown import code, text

BUCKETS = [(60, "under 1 min"), (300, "1–5 min"), (900, "5–15 min"), (3600, "15–60 min")]


class How(str, Enum):
    AUTOMATIC = "automatic"
    BY_HAND = "by-hand"
    NOT_RECOVERED = "not-recovered"
    UNKNOWN = "unknown"


class Status(str, Enum):
    OUTSTANDING = "outstanding"
    DONE = "done"
    NOT_DOING = "not-doing"


class Proof(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_RUN = "not run"


@dataclass(frozen=True)
class Gpu:
    host: str
    index: int
    uuid: str = ""
    serial: str = ""

    @property
    def key(self) -> str:
        return self.uuid or self.serial or f"{self.host} GPU {self.index}"

    @property
    def label(self) -> str:
        ident = f" ({self.uuid or self.serial})" if self.uuid or self.serial else ""
        return f"{self.host} GPU {self.index}{ident}"


@dataclass(frozen=True)
class Action:
    item: str
    kind: str
    owner: str
    due: str  # YYYY-MM-DD or "not set"
    status: Status | None  # None: a guard or rung, whose status its test decides
    reason: str = ""
    proves: str = ""
    link: str = ""


@dataclass(frozen=True)
class Incident:
    page: str  # postmortems/NAME.md
    title: str
    incident: str
    day: str
    run: str
    drill: str
    record: bool
    hosts: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    faults: tuple[str, ...]
    how: How
    runbook: str
    rung: str
    clock: str
    detected: datetime | None
    acted: datetime | None
    recovered: datetime | None
    pitfalls: tuple[str, ...]
    actions: tuple[Action, ...]

    @property
    def order(self) -> tuple[str, str, str]:
        return (self.day, self.run, self.page)

    @property
    def recover_s(self) -> float | None:
        if self.detected and self.recovered:
            return (self.recovered - self.detected).total_seconds()
        return None


@dataclass(frozen=True)
class Session:
    commit: str
    dirty: bool
    finished: str
    runbooks: Mapping[str, str]  # name: SHA-256 of its YAML when the run started


@dataclass(frozen=True)
class Results:
    tests: Mapping[str, tuple[str, Session]]  # test id: (outcome, the run that ran it)

    def proof(self, test: str) -> tuple[Proof, Session | None]:
        """A test id, or a parametrized test's every case: passed only if all passed."""
        runs = [v for k, v in self.tests.items() if k == test or k.startswith(test + "[")]
        if not runs:
            return Proof.NOT_RUN, None
        latest = max((s for _, s in runs), key=lambda s: s.finished)
        if any(outcome != "passed" for outcome, _ in runs):
            return Proof.FAILED, latest
        return Proof.PASSED, latest


NO_RESULTS = Results({})


@cache
def incident_schema() -> dict[str, Any]:
    path = resources.files("runbook_runner").joinpath("schema").joinpath("incident.schema.json")
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return loaded


def _plain(value: Any) -> Any:
    """YAML's dates and times as the strings they were written as."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


NOT_KNOWN = "unknown"  # a time the page does not know (front matter)


def _when(value: str) -> datetime | None:
    return None if value == NOT_KNOWN else datetime.fromisoformat(value.replace("Z", "+00:00"))


def parse(markdown: str, page: str, pitfalls: Iterable[str]) -> tuple[Incident | None, list[str]]:
    """A postmortem page's front matter as an Incident, or its problems, each
    ``docs/PAGE:LINE:COL: field: message``. ``pitfalls``: the names of the pitfall pages."""
    where = f"docs/{page}"
    lines = markdown.split("\n")
    if lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        return None, [f"{where}:1:1: no front matter (a block between --- lines) to index"]
    end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    source, problems = yamlsource.load("\n".join(lines[1:end]) + "\n")
    if not problems:
        source.data = _plain(source.data)
        problems = schema.validate(source, incident_schema())
    if not problems:
        known = set(pitfalls)
        problems = [
            yamlsource.Problem(
                source.mark_of(("pitfalls", i)), ("pitfalls", i), f"no page docs/pitfalls/{n}.md"
            )
            for i, n in enumerate(source.data["pitfalls"])
            if n not in known
        ]
    if problems:
        shifted = [
            yamlsource.Problem(yamlsource.Mark(p.mark.line + 1, p.mark.column), p.path, p.message)
            for p in problems
        ]
        return None, [p.format(where) for p in sorted(shifted)]
    data = source.data
    times, recovered = data["times"], data["recovered"]
    fields = ("item", "kind", "owner", "due", "reason", "proves", "link")
    actions = tuple(
        Action(
            **{k: a.get(k, "") for k in fields},
            status=None if a["kind"] in ("guard", "rung") else Status(a["status"]),
        )
        for a in data.get("actions", [])
    )
    return Incident(
        page=page,
        title=data["title"],
        incident=data["incident"],
        day=data["date"][:10],
        run=data.get("run", ""),
        drill=data.get("drill", ""),
        record="record" in data,
        hosts=tuple(data["hosts"]),
        gpus=tuple(Gpu(**g) for g in data["gpus"]),
        faults=tuple(data["fault"]),
        how=How(recovered["how"]),
        runbook=recovered.get("runbook") or "",
        rung=recovered.get("rung") or "",
        clock=times["clock"],
        detected=_when(times["detected"]),
        acted=_when(times["acted"]),
        recovered=_when(times["recovered"]),
        pitfalls=tuple(data["pitfalls"]),
        actions=actions,
    ), []


def read_results(data: Mapping[str, Any]) -> Results:
    """The test results file (tests/results_file.py writes it) as Results."""
    sessions = {
        name: Session(
            s.get("commit", ""), bool(s.get("dirty")), s.get("finished", ""), s["runbooks"]
        )
        for name, s in (data.get("sessions") or {}).items()
    }
    return Results(
        {
            test: (str(entry.get("outcome")), sessions[entry.get("session")])
            for test, entry in (data.get("tests") or {}).items()
            if entry.get("session") in sessions
        }
    )


# --- Rendering ---------------------------------------------------------------------------------


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:g} s"
    return f"{seconds / 60:.1f} min"


def _link(incident: Incident, up: str) -> str:
    kind = " (drill)" if incident.drill else ""
    return f"[{text(incident.title, 120)}]({up}postmortems/{incident.page.split('/')[-1]}){kind}"


def _rung(incident: Incident) -> str:
    if incident.how == How.BY_HAND:
        return "by hand"
    if incident.rung:
        return f"{code(incident.runbook)} / {code(incident.rung)}"
    return str(incident.how.value).replace("-", " ")


def _table(incidents: Sequence[Incident], up: str) -> list[str]:
    rows = ["| Day | Incident | Fault | Recovered by | Time to recover |", "|---|---|---|---|---|"]
    for i in incidents:
        clock = " (simulated)" if i.clock == "simulated" and i.recover_s is not None else ""
        rows.append(
            f"| {text(i.day)} | {_link(i, up)} | {', '.join(i.faults)} | {_rung(i)} "
            f"| {_duration(i.recover_s)}{clock} |"
        )
    return rows


def primary(incidents: Iterable[Incident]) -> list[Incident]:
    """One page per incident, in order: the postmortem, not its record."""
    pages: dict[str, Incident] = {}
    for i in sorted(incidents, key=lambda i: i.order):
        if i.incident not in pages or pages[i.incident].record:
            pages[i.incident] = i
    return sorted(pages.values(), key=lambda i: i.order)


def _grouped(
    incidents: Sequence[Incident], keys: Any, heading: Any, up: str, lead: str
) -> list[str]:
    groups: dict[str, list[Incident]] = {}
    for i in incidents:
        for key in keys(i):
            groups.setdefault(key, []).append(i)
    out = [lead, ""]
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        out += [f"## {heading(key)} ({len(groups[key])})", "", *_table(groups[key], up), ""]
    return out if groups else [lead, "", "No incidents yet.", ""]


def _distribution(incidents: Sequence[Incident]) -> list[str]:
    out = ["| Time to recover | Incidents | Drills (simulated clock) |", "|---|---|---|"]
    real = [i.recover_s for i in incidents if not i.drill]
    drills = [i.recover_s for i in incidents if i.drill]

    def count(values: list[float | None], low: float, high: float) -> str:
        n = sum(1 for v in values if v is not None and low <= v < high)
        return f"{'█' * n} {n}"

    low = 0.0
    for high, label in [*BUCKETS, (float("inf"), "over 1 h")]:
        out.append(f"| {label} | {count(real, low, high)} | {count(drills, low, high)} |")
        low = high
    unknown = [sum(1 for v in vs if v is None) for vs in (real, drills)]
    out.append(f"| unknown | {unknown[0]} | {unknown[1]} |")
    for name, values in (("incidents", real), ("drills", drills)):
        known = sorted(v for v in values if v is not None)
        if known:
            p90 = known[min(len(known) - 1, int(0.9 * len(known)))]
            out.append(
                f"\nOf the {name} with both times: median {_duration(statistics.median(known))}, "
                f"90th percentile {_duration(p90)}, longest {_duration(known[-1])}."
            )
    return out


def index_pages(incidents: Iterable[Incident], results: Results, today: str) -> dict[str, str]:
    """The generated pages under incidents/: their path and Markdown."""
    listed = primary(incidents)
    up = "../"
    by_how = {h: sum(1 for i in listed if i.how == h) for h in How}
    pages = {
        "incidents/index.md": [
            "# Incidents",
            "",
            "Every postmortem and drill draft under `docs/postmortems/`, from its front matter, "
            "in order. Listed also [by pitfall](by-pitfall.md), [by fault](by-fault.md), "
            "[by host and GPU](by-gpu.md) (the recurrence list) and [by rung](by-rung.md); the "
            "action items are [here](actions.md), the [overdue](overdue.md) ones apart.",
            "",
            *_table(listed, up),
            "",
            "## Automatic or by hand",
            "",
            "| How it was recovered | Incidents and drills |",
            "|---|---|",
            *(f"| {h.value.replace('-', ' ')} | {n} |" for h, n in by_how.items()),
            "",
            "## Time to recover",
            "",
            "From the detect time to the recover time of each page.",
            "",
            *_distribution(listed),
        ],
        "incidents/by-pitfall.md": [
            "# Incidents by pitfall",
            *_grouped(
                listed,
                lambda i: i.pitfalls or ("none named",),
                lambda k: k if k == "none named" else f"[{k}](../pitfalls/{k}.md)",
                up,
                "\nThe pitfall pages each incident teaches, most incidents first.",
            ),
        ],
        "incidents/by-fault.md": [
            "# Incidents by fault class",
            *_grouped(listed, lambda i: i.faults, str, up, "\nAn incident may show several."),
        ],
        "incidents/by-gpu.md": [
            "# Incidents by host and GPU",
            *_grouped(
                listed,
                lambda i: [f"GPU {g.key}" for g in i.gpus],
                lambda k: _gpu_heading(k, listed),
                up,
                "\nThe recurrence list: every GPU, each incident on it in order; a GPU with "
                "its UUID is the same GPU on any host and at any index.",
            ),
            "# By host",
            *_grouped(listed, lambda i: i.hosts, lambda k: f"Host {text(k)}", up, ""),
        ],
        "incidents/by-rung.md": [
            "# Incidents by the rung that recovered",
            *_grouped(
                listed,
                lambda i: [_rung(i)],
                str,
                up,
                "\nWhich runbook rung brought the host back, or whether a person did.",
            ),
        ],
        "incidents/actions.md": ["# Action items", "", *_actions(listed, results, today, False)],
        "incidents/overdue.md": [
            "# Overdue action items",
            "",
            f"Outstanding items whose due day is before {today}, the day the site was built.",
            "",
            *_actions(listed, results, today, True),
        ],
    }
    return {path: "\n".join(lines) + "\n" for path, lines in pages.items()}


def _gpu_heading(key: str, incidents: Sequence[Incident]) -> str:
    gpu = next(g for i in incidents for g in i.gpus if f"GPU {g.key}" == key)
    return text(gpu.label)


def status(action: Action, results: Results) -> tuple[Status, str]:
    """An item's status and why: a guard or rung from its test, the rest from the page."""
    if action.status is not None:
        return action.status, action.reason
    proof, session = results.proof(action.proves)
    if proof == Proof.PASSED and session:
        return Status.DONE, f"`{action.proves}` passed at {session.commit[:10]}, {session.finished}"
    if proof == Proof.FAILED and session:
        return Status.OUTSTANDING, f"`{action.proves}` failed at {session.commit[:10]}"
    return Status.OUTSTANDING, f"`{action.proves}` has not run"


def _actions(
    incidents: Sequence[Incident], results: Results, today: str, overdue: bool
) -> list[str]:
    rows = []
    for i in incidents:
        for a in i.actions:
            state, why = status(a, results)
            late = state == Status.OUTSTANDING and a.due != "not set" and a.due < today
            if overdue and not late:
                continue
            item = f"[{text(a.item)}](../{a.link})" if a.link else text(a.item)
            rows.append(
                f"| {item} | {a.kind} | {text(a.owner)} | {a.due}{' (overdue)' if late else ''} "
                f"| {state.value.replace('-', ' ')} | {why} | {_link(i, '../')} |"
            )
    head = [
        "| Item | Kind | Owner | Due | Status | Why | Incident |",
        "|---|---|---|---|---|---|---|",
    ]
    return head + rows if rows else ["None."]


def actions_section(incident: Incident, results: Results, today: str) -> str:
    return "\n".join(["## Action items, tracked", "", *_actions([incident], results, today, False)])


def earlier_section(incident: Incident, incidents: Iterable[Incident]) -> str:
    """A postmortem's earlier incidents on the same hosts and GPUs."""
    before = [i for i in primary(incidents) if i.order < incident.order]
    keys = {g.key for g in incident.gpus}
    on_gpu = [i for i in before if keys & {g.key for g in i.gpus}]
    on_host = [i for i in before if set(incident.hosts) & set(i.hosts) and i not in on_gpu]
    out = ["## Earlier incidents on this host and GPU", ""]
    if not on_gpu and not on_host:
        return "\n".join([*out, "None in this knowledge base.", ""])
    if on_gpu:
        out += ["On the same GPU:", "", *_table(on_gpu, "../"), ""]
    if on_host:
        out += ["On the same host:", "", *_table(on_host, "../"), ""]
    return "\n".join(out)


def caused_section(pitfall: str, incidents: Iterable[Incident]) -> str:
    """A pitfall page's incidents: those whose front matter names it."""
    caused = [i for i in primary(incidents) if pitfall in i.pitfalls]
    body = _table(caused, "../") if caused else ["None recorded yet."]
    return "\n".join(["## The incidents it caused", "", *body, ""])


def drills_section(runbook: str, sha256: str, drills: Sequence[str], results: Results) -> str:
    """When the runbook's drills last passed, and whether it changed since."""
    runs = [results.proof(d) for d in drills]
    sessions = [s for _, s in runs if s]
    if not sessions:
        said = f"Its {len(drills)} drills have not run." if drills else "No drill runs it."
        return f"## Its drills\n\n{said}\n"
    last = max(sessions, key=lambda s: s.finished)
    at = f"commit `{last.commit[:10]}`{' (uncommitted changes)' if last.dirty else ''}"
    failed = sum(1 for p, _ in runs if p == Proof.FAILED)
    said = (
        f"**{failed} of its {len(drills)} drills failed** in the run at {at}, {last.finished}."
        if failed
        else f"Its drills last passed at {at}, {last.finished} ({len(sessions)} of "
        f"{len(drills)} ran)."
    )
    if last.runbooks.get(runbook) != sha256:
        said += (
            '\n\n!!! warning "Changed since its drills ran"\n    The runbook\'s YAML is not '
            "the one the last drill run read: run the drills again "
            "(`pytest tests/test_scenarios.py`) before trusting it."
        )
    return f"## Its drills\n\n{said}\n"
