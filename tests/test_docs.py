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
from runbook_runner.docs_page import render_page
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
        page = site / "runbooks" / runbook.stem / "index.html"
        assert page.exists(), runbook.stem
    recovery = text_of(site / "runbooks" / "gpu-oom-recovery" / "index.html")
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
    for doc in runbook.docs:
        assert f"](../{doc})" in page
