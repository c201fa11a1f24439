"""The commands that read run journals: ``runs`` (list, show) and ``postmortem new``.

Part of the CLI layer (cli/): it prints and picks exit codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from runbook_runner import journal as journal_module
from runbook_runner.cli import render
from runbook_runner.cli.host import journal_folder
from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.safetext import markdown_cell, visible


def _latest_run(run: str, folder: Path) -> Path:
    """A run by id, path or prefix; of several runs with that prefix, the latest, with a note."""
    candidate = Path(run)
    matches = sorted(folder.glob(f"{run}*.jsonl")) if folder.is_dir() and "/" not in run else []
    if len(matches) > 1 and not (candidate.suffix == ".jsonl" and candidate.is_file()):
        print(
            f"{run!r} matches {len(matches)} runs; showing the latest, {matches[-1].stem}",
            file=sys.stderr,
        )
        return matches[-1]
    return journal_module.find(run, folder)


def cmd_runs(args: argparse.Namespace) -> int:
    folder = journal_folder()
    if args.action == "show":
        if not args.run:
            raise UsageError("runs show needs a RUN id (see 'runbook runs')", "runbook runs")
        journal = journal_module.read(_latest_run(args.run, folder))
        for problem in journal.problems:
            print(visible(str(problem)), file=sys.stderr)
        rows = journal_module.timeline(journal)
        if args.markdown:
            print("| Time (UTC) | Step | Event |")
            print("|---|---|---|")
            for t, step, what in rows:
                cells = " | ".join(markdown_cell(cell) for cell in (t, step, what))
                print(f"| {cells} |")
        else:
            for t, step, what in rows:
                print(visible(f"{t}  {step:<22} {what}", lines=False))
        return ExitCode.OK
    paths = sorted(folder.glob("*.jsonl"))[-args.last :] if folder.is_dir() else []
    if not paths:
        print(f"no runs recorded in {folder}")
        return ExitCode.OK
    summaries = [journal_module.summary(p) for p in paths]
    print(
        visible(
            render.table(
                [
                    (
                        x["run"],
                        x["operator"],
                        x["result"] + (f" (drill: {x['drill']})" if x.get("drill") else ""),
                    )
                    for x in summaries
                ],
                ("RUN", "OPERATOR", "RESULT"),
            )
        )
    )
    return ExitCode.OK


def cmd_postmortem(args: argparse.Namespace) -> int:
    from runbook_runner.kb import postmortem

    journal = journal_module.read(journal_module.find(args.from_run, journal_folder()))
    for problem in journal.problems:
        print(problem, file=sys.stderr)
    if journal.first("run-start") is None:
        raise journal_module.JournalError(f"{args.from_run}: no run-start line: not a run journal")
    docs = Path(args.docs)
    mkdocs_yml = docs.parent / "mkdocs.yml"
    if not (docs / "postmortems").is_dir() or not mkdocs_yml.is_file():
        raise UsageError(
            f"--docs {docs}: needs {docs}/postmortems/ and {mkdocs_yml} (run it in the repository)",
            "runbook postmortem",
        )
    known = {p.stem for p in (docs.parent / "runbooks").glob("*.yaml")}
    page = _postmortem_draft(journal.events, args.title, known, docs)
    target = docs / "postmortems" / page.filename
    try:
        nav = postmortem.add_to_nav(
            mkdocs_yml.read_text(encoding="utf-8"), page.title, f"postmortems/{target.name}"
        )
    except ValueError as error:
        raise UsageError(f"{mkdocs_yml}: {error}", "runbook postmortem") from None
    target.write_text(page.markdown, encoding="utf-8")
    mkdocs_yml.write_text(nav, encoding="utf-8")
    print(f"wrote {target}" + (" (a drill)" if page.drill else ""))
    print(f"added it to the nav in {mkdocs_yml}; fill in the TODO sections, then build the site")
    return ExitCode.OK


def _postmortem_draft(
    events: list[dict[str, Any]], title: str | None, known: set[str], docs: Path
) -> Any:
    """The draft, dated today where the journal dates nothing, with the drill's scenario for
    its debrief, and a title no other page under docs/postmortems/ has (' (2)', ' (3)')."""
    import datetime

    from runbook_runner.kb import postmortem
    from runbook_runner.simhost.scenarios import SCENARIOS

    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    start = next((e for e in events if e.get("event") == "run-start"), {})
    scenario = SCENARIOS.get(str(start.get("drill") or ""))
    about = (
        {
            "wrong": scenario.wrong,
            "expert": scenario.expert,
            "lesson": scenario.lesson,
            "page": scenario.page,
        }
        if scenario is not None
        else None
    )
    taken = {
        line.split(":", 1)[1].strip().strip('"')
        for page in (docs / "postmortems").glob("*.md")
        for line in page.read_text(encoding="utf-8", errors="replace").splitlines()[:5]
        if line.startswith("title:")
    }
    page = postmortem.draft(events, title, known, today, about)
    base, counter = page.title, 2
    while page.title in taken or (docs / "postmortems" / page.filename).exists():
        page = postmortem.draft(events, f"{base} ({counter})", known, today, about)
        counter += 1
    return page
