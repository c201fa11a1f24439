"""MkDocs hooks: one page per runbook, rendered from runbooks/*.yaml, and links checked both ways.

- Every runbook becomes ``runbooks/NAME.md`` at build time (no hand-written copy exists),
  with its failure modes from ``docs/data/runbooks/failure-modes.yaml``.
- A runbook naming a docs page that does not exist, a page linking a runbook that does not
  exist, and a runbook that no page links to are each reported; ``mkdocs build --strict``
  fails on them.
- Figures come from ``docs/data/*.yaml``: ``{{ fig.NAME }}`` and ``{{ calc.NAME }}`` are
  filled in (runbook_runner/kb/figures.py), a name that is not there fails the build, and a
  page ``figures.md`` lists every figure with its source and arithmetic.
- A postmortem's front matter (date, authors, status, severity, ...) is shown as a table
  under its title.
- ``drills.md`` lists every drill scenario of the simulator, so the page cannot fall behind.
- Every postmortem's front matter is checked against incident.schema.json (a bad field fails
  the build with ``file:line:col``) and indexed: ``incidents/*.md`` are generated, each
  postmortem lists the earlier incidents on its host and GPUs and its tracked action items,
  each pitfall page the incidents it caused, and each runbook page when its drills last
  passed, from the test results file (runbook_runner/kb/incidents.py renders all of it).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import yaml
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File, Files

from runbook_runner.kb import figures as figures_module
from runbook_runner.kb import incidents as kb
from runbook_runner.kb.docs_page import render_page
from runbook_runner.runbook import Runbook, RunbookInvalid, load

log = get_plugin_logger("runbooks")
REPO = Path(__file__).resolve().parent.parent
RUNBOOKS = REPO / "runbooks"
# A Markdown link to a runbook page, relative from anywhere: (../)runbooks/NAME.md
RUNBOOK_LINK = re.compile(r"\]\((?:\.\./)*runbooks/([a-z0-9-]+)\.md(?:#[^)]*)?\)")

DATA = Path(__file__).resolve().parent / "data"

_runbooks: dict[str, Runbook] = {}
_linked_from: dict[str, set[str]] = {}
_figures: dict[str, figures_module.Figure] = {}
_figure_files: dict[str, str] = {}
_failure_modes: dict[str, dict] = {}
_incidents: dict[str, kb.Incident] = {}  # by page
_results: list[kb.Results] = [kb.NO_RESULTS]
# Written by the test run (tests/results_file.py): which tests passed, at which commit.
RESULTS = Path(os.environ.get("RUNBOOK_TEST_RESULTS") or REPO / "build" / "test-results.json")
DRILL_TEST = "tests/test_scenarios.py::test_the_run_does_what_the_expert_would[{}]"

# What each drill scenario replays on the site: the pages that explain it.
DRILL_PAGES = {
    "oom-crash": [
        ("Postmortem: SGLang HiCache OOM", "postmortems/sglang-hicache-oom.md"),
        ("Orphaned GPU memory", "pitfalls/orphaned-gpu-memory.md"),
    ],
    "slow-teardown": [("Host RAM after a kill", "pitfalls/host-memory-after-kill.md")],
    "host-ram-leak": [("Host RAM after a kill", "pitfalls/host-memory-after-kill.md")],
    "persistence-blocks-reset": [
        ("What blocks a GPU reset", "pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset")
    ],
    "stuck-d-state": [
        ("Processes in D state", "pitfalls/host-memory-after-kill.md#3-processes-in-d-state"),
        ("Orphaned GPU memory", "pitfalls/orphaned-gpu-memory.md"),
    ],
}
META_ROWS = [
    ("drill", "Drill"),
    ("date", "Date"),
    ("authors", "Authors"),
    ("owner", "Owner"),
    ("status", "Status"),
    ("severity", "Severity"),
    ("incident", "Incident"),
    ("hosts", "Hosts"),
    ("fault", "Fault class"),
    ("recovered", "Recovered"),
    ("started", "Started (UTC)"),
    ("ended", "Ended (UTC)"),
    ("outcome", "Outcome"),
    ("run", "Run"),
    ("runbooks", "Runbooks"),
]


def _load_figures() -> None:
    _figures.clear()
    _figure_files.clear()
    for path in sorted(DATA.glob("*.yaml")):
        try:
            loaded = figures_module.load(yaml.safe_load(path.read_text()) or {})
        except (figures_module.FigureError, yaml.YAMLError) as error:
            log.warning(f"docs/data/{path.name}: {error}")
            continue
        for name, figure in loaded.items():
            if name in _figures:
                log.warning(f"docs/data/{path.name}: {name} is also in {_figure_files[name]}")
            _figures[name] = figure
            _figure_files[name] = path.name


def _page_title(page: str) -> str:
    """A link text for a docs page path: its file name in words."""
    stem = page.split("#")[0].rsplit("/", 1)[-1].removesuffix(".md")
    return stem.replace("-", " ").capitalize()


def _cell(text: object) -> str:
    """Front matter and data-file text in a table cell: inert (no HTML, no column breaks)."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "&#124;")


def _figures_page() -> str:
    lines = [
        "---",
        "title: Figures of the SGLang HiCache OOM",
        "---",
        "",
        "# Figures of the SGLang HiCache OOM",
        "",
        "Every number the postmortem and the pitfall pages quote comes from this table, "
        "built from `docs/data/` at build time. GB, MB, KB and TB are powers of 10 "
        "(a GB is 10^9 bytes); GiB, MiB, KiB and TiB powers of 2 (a GiB is 2^30 bytes). "
        "*Observed*: read off a command output in the session record. *Configured*: a flag "
        "we set. *Inferred*: our reading of a record that does not state its unit. "
        "*Reference*: from a source outside the incident. *Example*: a number chosen to illustrate. "
        "*Derived*: computed here from the "
        "others, with the arithmetic shown.",
        "",
        "## Measured and sourced",
        "",
        "| Figure | Value | Status | Source |",
        "|---|---|---|---|",
    ]
    derived = []
    for name, figure in _figures.items():
        if figure.expr:
            derived.append(figure)
            continue
        lines.append(
            f"| `{name}` | {_cell(figure.text())} | {figure.status} | {_cell(figure.source)} |"
        )
    lines += ["", "## Derived", "", "| Figure | Arithmetic | Note |", "|---|---|---|"]
    for figure in derived:
        lines.append(
            f"| `{figure.name}` | {_cell(figures_module.arithmetic(figure, _figures))} "
            f"| {_cell(figure.note)} |"
        )
    return "\n".join(lines) + "\n"


def _teaches(text: str) -> str:
    """A scenario's lesson as a sentence. The incident's record shows GPUs 0 and 2 still full
    after the kill, not what held them: a scenario that replays it is one reading of the
    incident, not "the incident" (the postmortem's open questions)."""
    if text.startswith("the incident:"):
        text = "one reading of the incident:" + text[len("the incident:") :]
    return text[0].upper() + text[1:] + "."


def _drills_page() -> str:
    from runbook_runner.simhost.scenarios import SCENARIOS, matrix_table

    lines = [
        "---",
        "title: Drills",
        "tags:",
        "  - drill",
        "---",
        "",
        "# Drills: practise the recovery before you need it",
        "",
        "`runbook drill` runs a runbook against a simulated crashed 8-GPU server that answers "
        "over real SSH on 127.0.0.1. It touches nothing on your machine, and simulated time "
        "runs fast, so a ten-minute wait takes a second. Every prompt is the one a real run "
        "would show. At the end a debrief lists what changed on the simulated host and which "
        "rung of the ladder worked. This page is generated from the simulator's scenarios, "
        "so it lists every one.",
        "",
        "| Scenario | What it teaches | Read with it |",
        "|---|---|---|",
    ]
    for name, scenario in SCENARIOS.items():
        pages = DRILL_PAGES.get(name)
        page = scenario.page
        if not pages and page:  # the scenario's own page (the matrix names one per row)
            pages = [(_page_title(page), page)]
        if not pages:
            log.warning(
                f"drill scenario {name!r}: no page in docs/hooks.py DRILL_PAGES explains it"
            )
            pages = []
        links = ", ".join(f"[{title}]({page})" for title, page in pages)
        lines.append(
            f"| [`{name}`](#{name}) | {_cell(_teaches(scenario.teaches)[:-1])} | {links} |"
        )
    for name, scenario in SCENARIOS.items():
        lines += [
            "",
            f"## `{name}` {{#{name}}}",
            "",
            _teaches(scenario.teaches),
            "",
        ]
        wrong, expert = scenario.wrong, scenario.expert
        if wrong:
            lines += [f"**What is wrong:** {_cell(wrong)}", ""]
        if expert:
            ideal = scenario.ideal_s
            lines += [
                f"**What an expert does:** {_cell(expert)}"
                + (f" (ideal time: {ideal:g} s, simulated)" if ideal else ""),
                "",
            ]
        lines += [
            "```sh",
            f"runbook drill {scenario.runbook} --scenario {name}",
            "```",
        ]
    lines += [
        "",
        "Add `--yes` to answer every prompt with yes (reboots still need `--allow-reboot`). "
        "Afterwards, turn the run into a practice postmortem: "
        "`runbook runs` lists it, and `runbook postmortem new --from-run RUN` writes the page "
        "(marked as a drill) under `docs/postmortems/`.",
        "",
        "The drills run the [GPU OOM recovery](runbooks/gpu-oom-recovery.md) runbook.",
        "",
        "## Practise the exact on-call command {#practice-host}",
        "",
        "A drill runs the runbook for you. To rehearse the command you will type at 3 a.m., "
        "start a practice host in any scenario (or a `--state FILE`) and run against it:",
        "",
        "```sh",
        "runbook sim --scenario oom-crash",
        "```",
        "",
        "It prints the options to use (`--host 127.0.0.1 --port PORT --user root -i KEY "
        "--known-hosts FILE`) and an ssh_config with a `Host sim0001` alias, and serves until "
        "Ctrl-C. `runbook run gpu-oom-recovery` with those options asks before each "
        "destructive step, takes the host lock, writes its journal, and can be interrupted "
        "and resumed (`--resume RUN`), as on a real host; `--hosts N` starts a fleet for "
        "`--hosts 'sim[0001-000N]'`, and plain `ssh -F FILE sim0001` works too. Every "
        "command runs in a real shell on the practice host, with stand-ins for the GPU and "
        "system tools that read and change the scenario; nothing on your machine is touched.",
    ]
    lines += [
        "",
        "## The scenario matrix {#matrix}",
        "",
        "Every drill as one row: what is wrong on the host, what an expert does (the fewest "
        "actions, the smallest blast radius), the ideal time to recovery in simulated "
        "seconds, and where the run must end. The test suite plays each row over SSH and "
        "fails if the runbook takes an action the expert would not, misses one, or takes "
        "more than 1.5 times the ideal.",
        "",
        matrix_table(),
    ]
    return "\n".join(lines) + "\n"


def _load_failure_modes() -> None:
    _failure_modes.clear()
    path = DATA / "runbooks" / "failure-modes.yaml"
    try:
        loaded = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except yaml.YAMLError as error:
        log.warning(f"docs/data/runbooks/failure-modes.yaml: {error}")
        return
    for name, entry in (loaded or {}).items():
        keys = ("cannot_see", "stops_when", "then")
        if not isinstance(entry, dict) or any(
            not isinstance(entry.get(k, []), list)
            or not all(isinstance(v, str) for v in entry.get(k, []))
            for k in keys
        ):
            log.warning(
                f"docs/data/runbooks/failure-modes.yaml: {name}: needs lists of text under "
                + ", ".join(keys)
                + " (quote an item holding ': ')"
            )
            continue
        _failure_modes[name] = entry


def _load_incidents(files: Files) -> None:
    """Every postmortem page's front matter, checked and kept; the test results."""
    _incidents.clear()
    _results[0] = kb.NO_RESULTS  # no test run yet: every proof is "not run"
    try:
        _results[0] = kb.read_results(json.loads(RESULTS.read_text()))
    except FileNotFoundError:
        log.info(f"{RESULTS}: no test results; run the tests first to mark what they prove")
    except (OSError, ValueError, AttributeError, KeyError, TypeError) as error:
        log.info(f"{RESULTS}: unreadable ({error!r}); every proof reads 'not run'")
    pitfalls = [
        f.src_uri[len("pitfalls/") : -3] for f in files if f.src_uri.startswith("pitfalls/")
    ]
    for file in files.documentation_pages():
        if not file.src_uri.startswith("postmortems/") or file.abs_src_path is None:
            continue
        incident, problems = kb.parse(Path(file.abs_src_path).read_text(), file.src_uri, pitfalls)
        for problem in problems:
            log.warning(problem)
        if incident and not file.src_uri.endswith("/TEMPLATE.md"):
            _incidents[file.src_uri] = incident


def _drills_of(runbook: str) -> list[str]:
    from runbook_runner.simhost.scenarios import MATRIX

    return [DRILL_TEST.format(s.name) for s in MATRIX if s.runbook == runbook]


def on_files(files: Files, config) -> Files:
    _runbooks.clear()
    _linked_from.clear()
    _load_figures()
    _load_failure_modes()
    _load_incidents(files)
    today = datetime.now(timezone.utc).date().isoformat()
    for path, content in kb.index_pages(_incidents.values(), _results[0], today).items():
        files.append(File.generated(config, path, content=content))
    files.append(File.generated(config, "figures.md", content=_figures_page()))
    files.append(File.generated(config, "drills.md", content=_drills_page()))
    for path in sorted(RUNBOOKS.glob("*.yaml")):
        try:
            runbook = load(path)
        except RunbookInvalid as error:
            for line in error.lines:
                log.warning(line)
            continue
        _runbooks[runbook.name] = runbook
        page = render_page(runbook, f"runbooks/{path.name}", _failure_modes.get(runbook.name))
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        page += "\n" + kb.drills_section(runbook.name, sha, _drills_of(runbook.name), _results[0])
        files.append(File.generated(config, f"runbooks/{runbook.name}.md", content=page))
        for doc in runbook.docs:
            if files.get_file_from_path(doc) is None:
                log.warning(
                    f"runbooks/{path.name}: names the docs page {doc!r}, which does not exist in docs/"
                )
    files.append(File.generated(config, "runbooks/index.md", content=_index()))
    return files


def _index() -> str:
    lines = [
        "# Runbooks",
        "",
        "Each page is rendered from its YAML file at build time. Run them with `runbook`; "
        "`runbook show NAME` prints the same in a terminal.",
        "",
        "| Runbook | Kind | What it is for |",
        "|---|---|---|",
    ]
    for name, runbook in sorted(_runbooks.items()):
        kind = f"destructive ({runbook.blast_radius})" if runbook.destructive else "read-only"
        lines.append(
            f"| [{runbook.title}]({name}.md) | {kind} | {' '.join(runbook.when.split())} |"
        )
    return "\n".join(lines) + "\n"


def _meta_table(meta: dict, depth: int) -> str:
    up = "../" * depth
    rows = []
    for key, label in META_ROWS:
        value = meta.get(key)
        if value in (None, "", []):
            continue
        if key == "runbooks":
            shown = ", ".join(f"[{_cell(n)}]({up}runbooks/{_cell(n)}.md)" for n in value)
        elif key == "recovered" and isinstance(value, dict):
            rung = " / ".join(_cell(value[k]) for k in ("runbook", "rung") if value.get(k))
            shown = _cell(value.get("how", "unknown")).replace("-", " ") + (
                f": {rung}" if rung else ""
            )
        elif key == "drill":
            shown = (
                f"yes: scenario `{_cell(value)}` on a simulated host "
                f"([drills]({up}drills.md)); not a real incident"
            )
        elif isinstance(value, list):
            shown = ", ".join(_cell(v) for v in value)
        else:
            shown = _cell(value)
        rows.append(f"| {label} | {shown} |")
    if not rows:
        return ""
    return "\n".join(["| About this postmortem | |", "|---|---|", *rows]) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = page.file.src_uri
    if source.startswith("runbooks/"):
        return markdown
    markdown, missing = figures_module.expand(markdown, _figures)
    for name in missing:
        log.warning(f"docs/{source}: quotes the figure {name!r}, which is not in docs/data/")
    if source.startswith("postmortems/") and page.meta:
        table = _meta_table(page.meta, source.count("/"))
        # The theme draws a page's `status` as an icon in the nav, with no label (a status
        # like "action items open" is no icon it knows): the table above says it in words.
        if "status" in page.meta:
            page.meta["postmortem_status"] = page.meta.pop("status")
        if table:
            markdown = re.sub(
                r"^(# .*\n)", lambda m: m.group(1) + "\n" + table, markdown, count=1, flags=re.M
            )
    incident = _incidents.get(source)
    if incident and not incident.record:
        today = datetime.now(timezone.utc).date().isoformat()
        markdown += "\n" + kb.earlier_section(incident, _incidents.values())
        if incident.actions:
            markdown += "\n" + kb.actions_section(incident, _results[0], today)
    if source.startswith("pitfalls/"):
        markdown += "\n" + kb.caused_section(source[len("pitfalls/") : -3], _incidents.values())
    for name in RUNBOOK_LINK.findall(markdown):
        if name == "index":  # the generated list of runbooks, not a runbook
            continue
        if name not in _runbooks:
            log.warning(
                f"docs/{source}: links the runbook {name!r}, which does not exist in runbooks/"
            )
        _linked_from.setdefault(name, set()).add(source)
    return markdown


def on_env(env, config, files):
    # Every page's Markdown has been read by now: a runbook nobody links is an orphan.
    for name in sorted(_runbooks):
        if not _linked_from.get(name):
            log.warning(
                f"runbooks/{name}.yaml: no docs page links to it; link it from a postmortem or pitfall"
            )
    return env
