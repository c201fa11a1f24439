"""The README is a front door; the manual is on the site. Nothing the old README said is
lost (its headings, its commands, its exit codes: tests/fixtures/README-before-issue-34.md),
every manual page is in the nav, and the command page's examples parse and run."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml
from test_docs import site  # noqa: F401  (the session's built site)

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.cli.parser import build_parser
from runbook_runner.exitcodes import ExitCode

OLD = (REPO / "tests" / "fixtures" / "README-before-issue-34.md").read_text()
README = (REPO / "README.md").read_text()
MANUAL = REPO / "docs" / "manual"
TWO_COMMANDS = ["pip install . && runbook drill gpu-oom-recovery --yes", "scripts/test"]


def outside_fences(markdown: str) -> list[str]:
    lines, fence = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def headings(markdown: str) -> list[str]:
    return [
        re.sub(r"^#+\s+", "", line).strip()
        for line in outside_fences(markdown)
        if re.match(r"^#{1,6} ", line)
    ]


def fenced_commands(markdown: str) -> list[str]:
    """Every line of a ```sh block that starts with `runbook `, without its comment."""
    commands = []
    for body in re.findall(r"```sh\n(.*?)^ *```", markdown, re.M | re.S):
        for line in body.splitlines():
            line = line.strip()
            if line.startswith("runbook "):
                commands.append(line)
    return commands


def site_pages() -> dict[str, str]:
    return {
        str(p.relative_to(REPO)): p.read_text()
        for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
        if "includes" not in p.parts
    }


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) <= 250
    blocks = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    for command in TWO_COMMANDS:
        assert command in blocks, command
    for step in ("runbook sim", "runbook plan", "runbook run --plan", "preflight"):
        assert step in README, step
    for page in sorted(MANUAL.glob("*.md")):
        assert f"](docs/manual/{page.name})" in README, page.name


def test_every_manual_page_is_in_the_nav():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text().split("\nnav:", 1)[1].join(["nav:", ""]))
    (manual,) = [entry["Manual"] for entry in nav["nav"] if "Manual" in entry]
    listed = {path for entry in manual for path in entry.values()}
    assert listed == {f"manual/{p.name}" for p in MANUAL.glob("*.md")}


def test_no_heading_of_the_old_readme_is_lost():
    on_site = {heading for text in site_pages().values() for heading in headings(text)}
    missing = [h for h in headings(OLD) if h not in on_site]
    assert missing == [], f"headings of the old README on no page: {missing}"


# Old commands that did not work as written (issue 46), each with what replaced it.
RETIRED = {
    "runbook run NAME --host HOST --set idle_mib=512 --json     # parameters; one JSON document": "runbook run gpu-oom-recovery --host HOST --set idle_mib=512 --json",
    "runbook run --plan plan.json --approved-by alice --yes             # exactly that, or nothing": "--approved-by alice --approved-sha256 HASH --yes   # exactly that, or nothing",
}


def test_no_command_or_exit_code_of_the_old_readme_is_lost():
    pages = "\n".join(site_pages().values())
    assert [new for new in RETIRED.values() if new not in pages] == []
    missing = [c for c in fenced_commands(OLD) if c not in pages and c not in RETIRED]
    assert missing == [], missing
    rows = [line for line in OLD.splitlines() if re.match(r"^\| \d+ \|", line)]
    assert len(rows) >= 11
    exit_codes = (MANUAL / "exit-codes.md").read_text()
    assert [r for r in rows if r not in exit_codes] == []


# Paragraphs changed in the move, each for a link that pointed inside the README (or said
# "below"/"above") and now names its page.
EDITED = {
    "Drill scenarios, each named for what it teaches": "the scenario matrix is a link",
    "`runbook plan NAME --host HOST` (the same as": "[Exit codes](exit-codes.md)",
    "On many hosts the exit code is the worst": "[Many hosts](fleets.md)",
    "Expressions (`expect`, `where`, `when`)": "the schema is a code span, not a link",
    "How `gpu-oom-recovery` gets there": "ownership (above) links its section",
    "- **Add a runbook**: write `runbooks/NAME.yaml`": "the parser table and Speed are links",
    "A `{{ placeholder }}` in a command": "issue 37: a value enters a command as a list word",
    "**Placeholders by construction.**": "issue 37: the allow-list went with the string form",
    "`--json` prints one document with a record per host": "issue 47: --serial/--max-fail N|P%",
    "It serves simulated 8-GPU hosts on 127.0.0.1": "issue 48: the practice host's sandbox",
}


def test_every_paragraph_of_the_old_readme_is_on_the_site():
    """Each prose paragraph of the old README is on some page word for word: a moved
    section was moved, not rewritten away; the few edited for their links are named."""
    pages = " ".join(" ".join(text.split()) for text in site_pages().values())
    paragraphs = [
        " ".join(p.split())
        for p in "\n".join(outside_fences(OLD)).split("\n\n")
        if len(p.split()) > 12 and not p.lstrip().startswith(("#", "|", "<!--"))
    ]
    assert len(paragraphs) > 60
    lost = [p for p in paragraphs if p not in pages]
    unexplained = [p[:80] for p in lost if not any(p.startswith(k) for k in EDITED)]
    assert unexplained == [], unexplained
    assert len(lost) == len(EDITED)  # an entry here whose paragraph moved intact: remove it


def command_page_examples(section_only: bool = True) -> list[str]:
    """The examples of "Every subcommand" (or of the whole page)."""
    page = (MANUAL / "command.md").read_text()
    if section_only:
        page = page[page.index("## Every subcommand") : page.index("## Using it")]
    return fenced_commands(page)


def test_the_command_page_has_an_example_of_every_subcommand():
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    examples = command_page_examples()
    for name in subparsers.choices:
        assert any(e.split()[1] == name for e in examples), f"no example of runbook {name}"


OFFLINE = {"list", "show", "validate", "runs", "test"}


@pytest.mark.hand_written_journal  # a minimal run-start line, for `runbook runs show`
def test_every_example_of_the_command_page_parses_and_the_offline_ones_run(
    capsys, run_journals_in_tmp, monkeypatch
):
    run_journals_in_tmp.mkdir(parents=True)
    (run_journals_in_tmp / "20261130T141200Z-gpu-oom-recovery-h-0000.jsonl").write_text(
        '{"event": "run-start", "t": "x"}\n'
    )
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RUNBOOK_PATH", raising=False)
    parser = build_parser()
    for example in command_page_examples(section_only=False):
        parser.parse_args(shlex.split(example.split("  #")[0])[1:])
    ran = 0
    for example in command_page_examples():
        argv = shlex.split(example.split("  #")[0])[1:]
        parser.parse_args(argv)  # exits 2 (SystemExit) on an example that does not parse
        if argv[0] not in OFFLINE:
            continue  # reaches a host, writes files, or serves until Ctrl-C
        code = main(argv)
        _, err = capsys.readouterr()
        assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET), (example, err)
        ran += 1
    assert ran >= 6


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in (REPO / "runbooks").glob("*.yaml")), ids=str
)
def test_each_runbook_page_shows_its_plan_and_sim_commands(name):
    from runbook_runner.kb.docs_page import render_page
    from runbook_runner.runbook import load

    page = render_page(load(REPO / "runbooks" / f"{name}.yaml"), f"runbooks/{name}.yaml")
    assert f"runbook plan {name} --host HOST" in page
    assert "runbook sim --scenario oom-crash --folder sim" in page
    assert f"runbook plan {name} --ssh-config sim/ssh_config --host sim0001" in page


def test_the_built_site_has_no_status_icon_without_a_label(site):  # noqa: F811
    for page in site.rglob("*.html"):
        assert 'class="md-status' not in page.read_text(), page.name
    drills = (site / "drills.html").read_text()
    assert "One reading of the incident" in drills
    assert "The incident:" not in drills
