"""Writing a new runbook: the skeleton ``runbook new`` writes, and where its docs link goes.

Pure: names and text in, text out. cli/runbooks.py asks, writes the files and prints.
"""

from __future__ import annotations

import re
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9-]*$")  # as the schema's "name" pattern


class AuthoringError(ValueError):
    pass


def check_name(name: str) -> None:
    if not NAME.match(name) or len(name) > 64:
        raise AuthoringError(
            f"{name!r} is not a runbook name: lower-case kebab-case, e.g. tmp-free-space"
        )


def docs_pages(docs: Path) -> list[str]:
    """The pages a runbook may belong to: Markdown under docs/, not the home page or includes."""
    if not docs.is_dir():
        return []
    pages = [
        p.relative_to(docs).as_posix()
        for p in sorted(docs.rglob("*.md"))
        if p.relative_to(docs).parts[0] not in {"includes", "runbooks"}
    ]
    return [p for p in pages if p != "index.md"]


def skeleton(name: str, page: str) -> str:
    """A commented runbook that validates as written: one observation, one check, no steps."""
    title = name.replace("-", " ").capitalize()
    return f"""\
# yaml-language-server: $schema=../runbook_runner/schema/runbook.schema.json
# A new runbook. Edit it, then:
#   runbook validate runbooks/{name}.yaml    every error as FILE:LINE:COL
#   runbook show {name}                      what it observes, checks and does
#   runbook test runbooks/{name}.yaml        run it on a simulated host (--state FILE)
name: {name}                       # equal to the file name
title: {title}
summary: >
  What this runbook checks (and fixes), in a few sentences. Shown by `runbook show`
  and on its docs page.
when: >
  When to reach for it: the symptom an operator sees.
docs: [{page}]                     # the pages it belongs to, under docs/
tags: [read-only]

parameters:                        # set with --set NAME=VALUE
  min_available_fraction:
    type: number
    default: 0.1
    min: 0
    max: 1
    description: Fraction of host RAM that must be available.

observations:                      # a command, and the parser that types its output
  memory:                          # `runbook show --parsers`: every parser and its fields
    command: cat /proc/meminfo
    parser: meminfo

checks:                            # the states you expect
  enough-memory:
    description: Enough host memory is available
    expect: memory.mem_available_bytes >= min_available_fraction * memory.mem_total_bytes
    hint: What the operator should do when it fails.

goal: [enough-memory]              # the checks that say "done"

steps: []                          # none: a read-only check. A step looks like this:
#  - id: show-memory
#    title: Show what uses the memory
#    run: ps -eo pid,rss,args --sort=-rss | head -n 5   # a value: [kill, -TERM, "{{{{ item.pid }}}}"]
#    skip_if: goal                 # skipped once the goal holds
#    destructive: false            # true needs affects: process | service | gpu | node
"""


def docs_link(page: str, name: str, title: str) -> str:
    """The line appended to a docs page so that the site links the runbook."""
    up = "../" * page.count("/")
    return f"\n- Runbook: [{title}]({up}runbooks/{name}.md)\n"
