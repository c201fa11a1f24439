"""MkDocs hooks: one page per runbook, rendered from runbooks/*.yaml, and links checked both ways.

- Every runbook becomes ``runbooks/NAME.md`` at build time (no hand-written copy exists).
- A runbook naming a docs page that does not exist, a page linking a runbook that does not
  exist, and a runbook that no page links to are each reported; ``mkdocs build --strict``
  fails on them.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File, Files

from runbook_runner.docs_page import render_page
from runbook_runner.runbook import Runbook, RunbookInvalid, load

log = get_plugin_logger("runbooks")
REPO = Path(__file__).resolve().parent.parent
RUNBOOKS = REPO / "runbooks"
# A Markdown link to a runbook page, relative from anywhere: (../)runbooks/NAME.md
RUNBOOK_LINK = re.compile(r"\]\((?:\.\./)*runbooks/([a-z0-9-]+)\.md(?:#[^)]*)?\)")

_runbooks: dict[str, Runbook] = {}
_linked_from: dict[str, set[str]] = {}


def on_files(files: Files, config) -> Files:
    _runbooks.clear()
    _linked_from.clear()
    for path in sorted(RUNBOOKS.glob("*.yaml")):
        try:
            runbook = load(path)
        except RunbookInvalid as error:
            for line in error.lines:
                log.warning(line)
            continue
        _runbooks[runbook.name] = runbook
        page = render_page(runbook, f"runbooks/{path.name}")
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


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = page.file.src_uri
    if source.startswith("runbooks/"):
        return markdown
    for name in RUNBOOK_LINK.findall(markdown):
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
