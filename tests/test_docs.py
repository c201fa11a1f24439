"""The MkDocs site: strict build, runbook pages generated from YAML, links checked both ways."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from runbook_runner.kb.docs_page import render_page
from runbook_runner.runbook import load

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def text_of(page: Path) -> str:
    """A page's text without its tags (highlighted code is split into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(project / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site as built from the repository, once per session."""
    out = tmp_path_factory.mktemp("site")
    result = build(REPO, out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the docs, runbooks and mkdocs.yml to break on purpose."""
    for name in ("docs", "runbooks"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("*.js"))
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    (tmp_path / "docs" / "assets" / "javascripts" / "mermaid-11.17.2.min.js").write_text("")
    return tmp_path


def test_strict_build_renders_a_page_per_runbook(site):
    for runbook in sorted((REPO / "runbooks").glob("*.yaml")):
        page = site / "runbooks" / f"{runbook.stem}.html"
        assert page.exists(), runbook.stem
    recovery = text_of(site / "runbooks" / "gpu-oom-recovery.html")
    assert "nvidia-smi --gpu-reset -i {{ item.index }}" in recovery
    assert "runbook run gpu-oom-recovery --host HOST --dry-run" in recovery


def test_the_site_loads_nothing_from_the_internet(site):
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "fonts.googleapis.com" not in text, page
        assert "unpkg.com" not in text, page
    assert (site / "assets" / "javascripts" / "mermaid-11.17.2.min.js").stat().st_size > 1_000_000


def test_a_runbook_naming_a_missing_page_fails_the_build(project, tmp_path):
    path = project / "runbooks" / "gpu-node-health.yaml"
    path.write_text(
        path.read_text().replace("pitfalls/orphaned-gpu-memory.md", "pitfalls/no-such-page.md")
    )
    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    assert (
        "runbooks/gpu-node-health.yaml: names the docs page 'pitfalls/no-such-page.md'"
        in result.stderr
    )


def test_a_page_linking_a_missing_runbook_fails_the_build(project, tmp_path):
    page = project / "docs" / "pitfalls" / "kv-cache-capacity.md"
    page.write_text(page.read_text() + "\nSee [the old runbook](../runbooks/gpu-reset-all.md).\n")
    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "docs/pitfalls/kv-cache-capacity.md: links the runbook 'gpu-reset-all'" in result.stderr


def test_a_runbook_no_page_links_fails_the_build(project, tmp_path):
    source = (project / "runbooks" / "gpu-node-health.yaml").read_text()
    (project / "runbooks" / "lonely-check.yaml").write_text(
        source.replace("name: gpu-node-health", "name: lonely-check")
    )
    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "runbooks/lonely-check.yaml: no docs page links to it" in result.stderr


def test_generated_page_shows_every_step_command_and_flag():
    runbook = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
    page = render_page(runbook, "runbooks/gpu-oom-recovery.yaml")
    for number, step in enumerate(runbook.steps, start=1):
        assert f"### {number}. {step.title}" in page
        if step.run:
            assert step.run.source.strip() in page
    assert page.count('!!! danger "Destructive') == sum(s.destructive for s in runbook.steps)
    assert "Skipped once the goal holds." in page
    assert "asked for even then, unless `--allow-reboot`" in page
    # Waits read as durations with their defaults, not as parameter names.
    assert "Then waits up to 2 min (`--set stop_wait_s=SECONDS`), polling every 2 s" in page
    assert "Then waits up to 3 min (`--set teardown_wait_s=SECONDS`)" in page
    assert not re.search(r"up to `?[a-z_]+_s\b", page)
    for doc in runbook.docs:
        assert f"](../{doc})" in page


# --- Figures: one data file, quoted by every page ------------------------------------------

HAND_WRITTEN = sorted(
    p
    for p in (REPO / "docs").rglob("*.md")
    if "includes" not in p.parts
    and p.name != "TEMPLATE.md"
    # The manual (moved from the README) states the tool's own limits and measurements
    # (a 1 MB output tail, 600 MB in 6.5 s), not the incident's figures.
    and "manual" not in p.parts
    # A page made by `runbook postmortem new` quotes its run's journal, not docs/data.
    and not re.search(r"^(run|record): ", p.read_text().split("\n---\n")[0], flags=re.M)
)


def prose(markdown: str) -> str:
    """A page without its front matter, code blocks and code spans (quoted host text)."""
    markdown = re.sub(r"\A---\n.*?\n---\n", "", markdown, flags=re.S)
    markdown = re.sub(r"^( *)(```|~~~).*?^\1\2", "", markdown, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", markdown)


def incident_figures():
    import yaml

    from runbook_runner.kb import figures

    return figures.load(
        yaml.safe_load((REPO / "docs" / "data" / "sglang-hicache-oom.yaml").read_text())
    )


@pytest.mark.parametrize("page", HAND_WRITTEN, ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_pages_state_figures_only_through_the_data(page):
    from runbook_runner.kb import figures

    typed = [written for _, _, written in figures.stated(prose(page.read_text()))]
    assert typed == [], f"type these as {{{{ fig.NAME }}}} from docs/data/: {typed}"


@pytest.mark.parametrize("page", HAND_WRITTEN, ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_every_figure_a_page_shows_is_in_the_data(page):
    from runbook_runner.kb import figures

    known = incident_figures()
    expanded, missing = figures.expand(page.read_text(), known)
    assert missing == []
    unbacked = [
        written
        for value, unit, written in figures.stated(prose(expanded))
        if not figures.backed(value, unit, written, known)
    ]
    assert unbacked == []


def test_a_figure_typed_into_a_page_is_caught():
    from runbook_runner.kb import figures

    text = prose("The host had 449 GB of RAM; `free -g` printed `449`.\n```\n0, 96413 MiB\n```\n")
    assert [w for _, _, w in figures.stated(text)] == ["449 GB"]
    value, unit, written = figures.stated("449 GB")[0]
    assert not figures.backed(value, unit, written, incident_figures())  # 449 is GiB
    value, unit, written = figures.stated("482.1 GB")[0]
    assert figures.backed(value, unit, written, incident_figures())


def test_derived_figures_show_their_arithmetic():
    from runbook_runner.kb import figures

    known = incident_figures()
    assert figures.arithmetic(known["hicache_requested_total"], known) == (
        "8 × 300 GB = 2,400 GB (2.18 TiB)"
    )
    assert figures.arithmetic(known["kv_bf16_per_token"], known) == (
        "(512 + 64) × 2 B × 61 = 70,272 B (68.6 KiB)"
    )
    # GiB in, GB out: the per-rank budget crosses units explicitly.
    assert known["safe_per_rank"].text() == "47.4 GB (44.14 GiB)"
    assert known["safe_hicache_size"].text() == "47 GB"


def test_a_figure_file_without_sources_or_with_unknown_names_is_refused():
    from runbook_runner.kb import figures

    with pytest.raises(figures.FigureError, match="needs a source"):
        figures.load({"figures": {"x": {"value": 1, "unit": "GB", "status": "observed"}}})
    with pytest.raises(figures.FigureError, match="uses 'y'"):
        figures.load({"derived": {"x": {"expr": "y * 2", "unit": "GB"}}})
    with pytest.raises(figures.FigureError, match="unknown unit"):
        figures.load(
            {"figures": {"x": {"value": 1, "unit": "gigs", "status": "observed", "source": "s"}}}
        )


def test_a_page_quoting_a_missing_figure_fails_the_build(project, tmp_path):
    page = project / "docs" / "pitfalls" / "kv-cache-capacity.md"
    page.write_text(page.read_text() + "\nThe host had {{ fig.no_such_figure }}.\n")
    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "docs/pitfalls/kv-cache-capacity.md: quotes the figure 'no_such_figure'" in result.stderr


def test_figures_metadata_and_drills_pages(site):
    from runbook_runner.simhost.scenarios import SCENARIOS

    figures_page = text_of(site / "figures.html")
    for name in incident_figures():
        assert name in figures_page
    assert "8 × 300 GB = 2,400 GB (2.18 TiB)" in figures_page
    postmortem = text_of(site / "postmortems" / "sglang-hicache-oom.html")
    for label in ("Date", "Authors", "Owner", "Status", "Severity", "Hosts", "Runbooks"):
        assert f"\n{label}\n" in postmortem, label
    assert "runbook run gpu-oom-recovery --host HOST --dry-run" in postmortem
    assert "{{" not in postmortem
    drills = text_of(site / "drills.html")
    for name in SCENARIOS:
        assert f"runbook drill gpu-oom-recovery --scenario {name}" in drills
    index = text_of(site / "index.html")
    assert "runbook run gpu-oom-recovery --dry-run" not in index  # without --host: exit 2


def test_each_code_block_of_runbook_commands_copies_one_command():
    """A copy button copies a whole block: a block with a runbook command holds only that one."""
    pages = {str(p): p.read_text() for p in HAND_WRITTEN}
    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        pages[path.name] = render_page(load(path), f"runbooks/{path.name}")
    blocks = 0
    for name, markdown in pages.items():
        for block in re.findall(r"^ *```sh\n(.*?)^ *```", markdown, flags=re.S | re.M):
            if "runbook " not in block:
                continue
            blocks += 1
            lines = [line.strip() for line in block.splitlines() if line.strip()]
            starts = [
                line for i, line in enumerate(lines) if i == 0 or not lines[i - 1].endswith("\\")
            ]
            assert len(starts) == 1, (name, block)
            assert "#" not in block, (name, block)  # a comment would be copied and pasted too
    assert blocks >= 10


# --- A run becomes a postmortem ---------------------------------------------------------------


@pytest.fixture(scope="session")
def generated_site(tmp_path_factory):
    """A drill run, made into a postmortem in a copy of the docs, and that copy built strictly."""
    root = tmp_path_factory.mktemp("generated")
    for name in ("docs", "runbooks"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "mkdocs.yml", root)
    env = {**ENV, "XDG_STATE_HOME": str(root / "state"), "PYTHONPATH": str(REPO)}
    drill = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "drill", "gpu-oom-recovery", "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert drill.returncode == 0, drill.stdout + drill.stderr
    (journal,) = (root / "state" / "runbook-runner" / "runs").glob("*.jsonl")
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "runbook_runner",
            "postmortem",
            "new",
            "--from-run",
            journal.stem,
            "--docs",
            str(root / "docs"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert made.returncode == 0, made.stderr
    (page,) = [
        p
        for p in (root / "docs" / "postmortems").glob("drill-*.md")
        if not (REPO / "docs" / "postmortems" / p.name).exists()  # not a committed draft
    ]
    result = build(root, root / "site")
    assert result.returncode == 0, result.stderr
    return root / "site", page


def test_a_drill_run_becomes_a_postmortem_that_builds_strictly(generated_site):
    site_dir, page = generated_site
    assert page.stem in (page.parent.parent.parent / "mkdocs.yml").read_text()
    built = text_of(site_dir / "postmortems" / f"{page.stem}.html")
    assert "A drill, not an incident" in built
    assert "oom-crash" in built
    assert "nvidia-smi --gpu-reset -i 0" in built
    assert "GPU 0, GPU 2" in built  # the reset's targets
    assert "96,413 MiB" in built
    assert "3 MiB" in built
    assert "TODO" in built
    raw = (site_dir / "postmortems" / f"{page.stem}.html").read_text()
    assert 'href="../runbooks/gpu-oom-recovery.html' in raw
    # Dated by the day the drill ran (its run id), not by the simulator's fixed clock.
    (journal,) = (page.parents[2] / "state" / "runbook-runner" / "runs").glob("*.jsonl")
    ran = f"{journal.stem[:4]}-{journal.stem[4:6]}-{journal.stem[6:8]}"
    assert f'date: "{ran}"' in page.read_text()
    assert "Drill debrief" in built
    assert "Lesson:" in built
    assert "reset exactly the GPUs that hold it" in built
    assert raw.count('class="rbr-run-chart"') == 2  # the figure and its SVG, inline
    assert 'data-series="GPU 7"' in raw
    assert 'data-action="reset-gpus"' in raw


def _code_texts(page: Path) -> set[str]:
    """The text of every <code> element of a built page, tags stripped and entities undone."""
    raw = page.read_text()
    return {
        html.unescape(re.sub(r"<[^>]+>", "", inner))
        for inner in re.findall(r"<code[^>]*>(.*?)</code>", raw, flags=re.S)
    }


def test_runbook_pages_show_each_command_byte_for_byte(site):
    """Copy a command off a runbook page and you have the YAML's command: no backslash
    added before a | (the table escaping did that), no characters lost."""
    checked = 0
    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        runbook = load(path)
        codes = {c.strip() for c in _code_texts(site / "runbooks" / f"{runbook.name}.html")}
        wanted = [o.source.strip() for o in runbook.observations.values() if o.command]
        wanted += [step.run.source.strip() for step in runbook.steps if step.run]
        for command in wanted:
            assert command in codes, (runbook.name, command)
            checked += 1
    assert checked >= 20
    recovery = _code_texts(site / "runbooks" / "gpu-oom-recovery.html")
    # a regex default, whole and unescaped
    assert "sglang\\.launch_server|vllm serve|vllm\\.entrypoints" in recovery
    assert not any("\\|" in c for c in recovery)


def test_every_link_of_the_built_site_names_a_file(site):
    """Opened from file:// there is no web server to turn a folder into its index.html: every
    relative link must name a file that exists."""
    broken = []
    for page in site.rglob("*.html"):
        for href in re.findall(r'href="([^"#?]+)(?:[#?][^"]*)?"', page.read_text()):
            if re.match(r"^[a-z]+:", href) or href.startswith("/"):
                continue
            target = (page.parent / html.unescape(href)).resolve()
            if not target.is_file():
                broken.append((str(page.relative_to(site)), href))
    assert broken == []


# --- Sources a reader can follow ----------------------------------------------------------------

MARKDOWN_LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")


def test_every_figure_has_a_source_a_reader_can_open():
    """Each measured or sourced figure names a link: upstream (source at a commit, docs, the
    issue or PR) or the session record's page in this repository. Examples are ours."""
    for name, figure in incident_figures().items():
        if figure.expr or figure.status == "example":
            continue
        links = MARKDOWN_LINK.findall(figure.source)
        assert links, f"{name}: no link in its source: {figure.source!r}"
        for link in links:
            if not link.startswith("https://"):
                page = link.split("#")[0]
                target = REPO / "docs" / page
                if page.startswith("runbooks/"):  # generated from runbooks/NAME.yaml
                    target = REPO / "runbooks" / (page.removeprefix("runbooks/")[:-3] + ".yaml")
                assert target.is_file(), (name, link)
        if figure.status in {"observed", "configured", "inferred"}:
            assert "sglang-hicache-oom-record.md#" in figure.source, name


def test_no_source_points_outside_the_repository_or_the_web():
    """The research notes behind the site ('facts §3') are not in the repository or on the
    site: nothing may cite them, nor a path outside the repository."""
    for path in [
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "docs" / "data").glob("*.yaml"),
        *(REPO / "runbooks").glob("*.yaml"),
    ]:
        text = path.read_text()
        assert not re.search(r"facts (§|F\d|P\d)", text), path
        assert "shared/seed" not in text or path.name == "sglang-hicache-oom-record.md", path


def test_pr_and_issue_numbers_are_links():
    """'PR #35540' or 'vLLM #53042' in a page's prose is a link the reader can open."""
    for page in [*HAND_WRITTEN, *sorted((REPO / "docs" / "manual").glob("*.md"))]:
        text = prose(page.read_text())
        text = re.sub(r"\[[^\]]*\](\([^)]*\)|\[[^\]]*\])", "", text)  # links, their text
        text = re.sub(r"^\[[^\]]+\]: \S+$", "", text, flags=re.M)  # reference definitions
        text = re.sub(r"<[^>]+>", "", text)
        bare = re.findall(r"(?<![\w/#&])#\d{3,}\b", text)  # &#124; is a "|"
        assert bare == [], (page.name, bare)
    import yaml

    def strings(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from strings(value)
        elif isinstance(node, list):
            for value in node:
                yield from strings(value)

    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        for text in strings(yaml.safe_load(path.read_text())):
            if re.search(r"(?<![\w/])#\d{3,}\b", text):
                assert "https://" in text, (path.name, text)


def test_no_value_of_the_data_file_is_cut_by_a_yaml_comment():
    """An unquoted ' #' starts a YAML comment: 'PR #35540' would print as 'PR'."""
    for path in (REPO / "docs" / "data").glob("*.yaml"):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            key, colon, value = line.partition(": ")
            if not colon or key.lstrip().startswith("#") or value[:1] in "\"'":
                continue
            assert " #" not in value, f"{path.name}:{number}: quote it: {line.strip()}"
    note = incident_figures()["budget_35540_per_rank"].note
    assert "35540" in note
    assert note.endswith("available memory")


def test_every_runbook_page_says_when_it_cannot_help(site):
    """What it cannot see, when it stops, what to do then: written for every runbook shipped,
    shown on its page."""
    import yaml

    written = yaml.safe_load(
        (REPO / "docs" / "data" / "runbooks" / "failure-modes.yaml").read_text()
    )
    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        entry = written[path.stem]
        assert entry["cannot_see"]
        assert entry["stops_when"]
        assert entry["then"]
        page = text_of(site / "runbooks" / f"{path.stem}.html")
        for heading in (
            "When it cannot help",
            "What it cannot see",
            "When it stops",
            "What to do then",
        ):
            assert heading in page, (path.stem, heading)
        first = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", entry["cannot_see"][0])
        assert " ".join(first.split()[:6]) in " ".join(page.split()), path.stem
        assert "No failure modes are written" not in page


def test_the_template_and_the_postmortem_have_response_clock_times_and_owned_actions():
    for page in ("TEMPLATE.md", "sglang-hicache-oom.md"):
        text = (REPO / "docs" / "postmortems" / page).read_text()
        assert "\n## Response\n" in text, page
        assert "| Item | Type | Owner | Ticket | Due | Status |" in text, page
        rows = text.split("| Item | Type | Owner | Ticket | Due | Status |")[1].split("\n\n")[0]
        for row in rows.strip().splitlines()[1:]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert len(cells) == 6, (page, row)
            assert all(cells), (page, row)  # owner, ticket and due each say something
    seed = (REPO / "docs" / "postmortems" / "sglang-hicache-oom.md").read_text()
    assert "Clock times: **unknown**" in seed
    assert "When: **unknown**" in seed
