"""The knowledge base as incident memory: front matter checked with file:line, incidents
indexed by GPU, pitfall, fault and rung, and action items done only when their test passes."""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import only_simulated_hosts_start
from test_docs import build, site, text_of  # noqa: F401  (the repository's site)
from test_postmortem import SCENARIO, simulated_drill
from test_postmortem import events as journal_events

from conftest import REPO
from runbook_runner import journal
from runbook_runner.kb import incidents as kb
from runbook_runner.kb.postmortem import draft

PITFALLS = [p.stem for p in (REPO / "docs" / "pitfalls").glob("*.md")]
SEED = REPO / "docs" / "postmortems" / "sglang-hicache-oom.md"
FRONT = """---
title: A page
date: 2026-12-01
incident: gpu-7-1
hosts: [gpu-7]
gpus: [{host: gpu-7, index: 3, uuid: GPU-aa}]
fault: [oom]
recovered: {how: automatic, runbook: gpu-oom-recovery, rung: reset-gpus}
times: {clock: wall, detected: 2026-12-01T10:00:00Z, acted: unknown, recovered: 2026-12-01T10:04:00Z}
pitfalls: [orphaned-gpu-memory]
tags: [postmortem]
actions:
  - {item: A guard, kind: guard, owner: us, due: 2026-01-01, proves: "tests/test_x.py::test_y"}
  - {item: An alert, kind: detect, owner: them, due: 2026-01-01, status: outstanding}
  - {item: A rewrite, kind: prevent, owner: them, due: 2026-01-01, status: not-doing, reason: too big}
---

# A page
"""


def test_a_page_is_read_into_an_incident():
    incident, problems = kb.parse(FRONT, "postmortems/a.md", PITFALLS)
    assert problems == []
    assert incident is not None
    assert [g.key for g in incident.gpus] == ["GPU-aa"]
    assert incident.recover_s == 240
    assert (incident.rung, incident.how) == ("reset-gpus", kb.How.AUTOMATIC)
    assert [a.status for a in incident.actions] == [
        None,
        kb.Status.OUTSTANDING,
        kb.Status.NOT_DOING,
    ]


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        (
            "fault: [oom]",
            "fault: [oom, bad-luck]",
            "docs/postmortems/a.md:7:14: fault[1]: must be one of",
        ),
        (
            "pitfalls: [orphaned-gpu-memory]",
            "pitfalls: [nope]",
            "docs/postmortems/a.md:10:12: pitfalls[0]: no page docs/pitfalls/nope.md",
        ),
        ("acted: unknown", "acted: 10:00", "docs/postmortems/a.md:9:"),
        (
            'proves: "tests/test_x.py::test_y"',
            'ticket: "T-1"',
            "docs/postmortems/a.md:13:5: actions[0]: missing required key 'proves'",
        ),
        (
            "reason: too big",
            "ticket: T-2",
            "docs/postmortems/a.md:15:5: actions[2]: missing required key 'reason'",
        ),
        (
            "hosts: [gpu-7]",
            "hots: [gpu-7]",
            "docs/postmortems/a.md:5:1: hots: unknown key 'hots'; did you mean 'hosts'?",
        ),
    ],
    ids=["fault", "pitfall", "time", "proof", "reason", "typo"],
)
def test_a_malformed_field_is_reported_at_its_line(old, new, where):
    assert old in FRONT
    incident, problems = kb.parse(FRONT.replace(old, new), "postmortems/a.md", PITFALLS)
    assert incident is None
    assert any(p.startswith(where) for p in problems), problems


def test_a_guard_is_done_only_while_its_test_passes():
    incident, _ = kb.parse(FRONT, "postmortems/a.md", PITFALLS)
    assert incident is not None
    guard = incident.actions[0]
    session = {"commit": "c0ffee" * 6, "finished": "2026-12-02T00:00:00Z", "runbooks": {}}

    def results(*outcomes: tuple[str, str]) -> kb.Results:
        tests = {t: {"outcome": o, "session": "s"} for t, o in outcomes}
        return kb.read_results({"sessions": {"s": session}, "tests": tests})

    assert kb.status(guard, kb.NO_RESULTS)[0] == kb.Status.OUTSTANDING
    assert kb.status(guard, results(("tests/test_x.py::test_y", "passed")))[0] == kb.Status.DONE
    cases = results(
        ("tests/test_x.py::test_y[a]", "passed"), ("tests/test_x.py::test_y[b]", "failed")
    )
    assert kb.status(guard, cases)[0] == kb.Status.OUTSTANDING
    other = results(("tests/test_x.py::test_y_more", "passed"))  # another test, not a case of it
    assert kb.status(guard, other)[0] == kb.Status.OUTSTANDING
    overdue = kb.index_pages([incident], kb.NO_RESULTS, "2026-12-05")["incidents/overdue.md"]
    assert "A guard" in overdue
    assert "An alert" in overdue
    assert "A rewrite" not in overdue  # not doing, with its reason: not overdue
    assert (
        "An alert"
        not in kb.index_pages([incident], kb.NO_RESULTS, "2025-12-31")["incidents/overdue.md"]
    )


def test_a_runbook_changed_since_its_drills_ran_is_flagged():
    data = {
        "sessions": {
            "s": {"commit": "abc", "finished": "2026-12-02T00:00:00Z", "runbooks": {"r": "1"}}
        },
        "tests": {"tests/t.py::d[x]": {"outcome": "passed", "session": "s"}},
    }
    results = kb.read_results(data)
    same = kb.drills_section("r", "1", ["tests/t.py::d[x]"], results)
    assert "last passed at commit `abc`, 2026-12-02T00:00:00Z" in same
    assert "Changed since" not in same
    assert "Changed since its drills ran" in kb.drills_section(
        "r", "2", ["tests/t.py::d[x]"], results
    )
    assert "have not run" in kb.drills_section("r", "1", ["tests/t.py::d[y]"], results)


def test_a_draft_carries_the_front_matter_its_journal_fills():
    page = draft(journal_events(), known_runbooks={"gpu-oom-recovery"})
    incident, problems = kb.parse(page.markdown, f"postmortems/{page.filename}", PITFALLS)
    assert problems == []
    assert incident is not None
    assert incident.rung == "reset-gpus"
    assert incident.faults == ("gpu-memory-held",)
    assert incident.recover_s == 10.5
    assert incident.clock == "wall"
    drill, _ = kb.parse(
        draft(simulated_drill(), scenario=SCENARIO).markdown, "postmortems/d.md", PITFALLS
    )
    assert drill is not None
    assert drill.pitfalls == ("orphaned-gpu-memory",)  # the scenario's page
    assert drill.clock == "simulated"


def test_the_repositorys_site_lists_the_seed_its_record_once_and_the_two_drill_drafts(site):  # noqa: F811
    raw = (site / "incidents" / "index.html").read_text()
    table = raw[raw.index("<article") :].split("<table>")[1].split("</table>")[0]
    listed = [
        html.unescape(re.sub(r"<[^>]+>", "", row)).strip()
        for row in re.findall(r'<a href="\.\./postmortems/[^"]+">(.*?)</a>', table)
    ]
    # The seed once (its record is the same incident), then the two drill drafts.
    assert listed[0] == "Postmortem: SGLang HiCache OOM on an 8-GPU server"
    assert len(listed) == 3
    drafts = sorted((REPO / "docs" / "postmortems").glob("drill-*.md"))
    assert len(drafts) == 2
    for page in drafts:
        title = kb.parse(page.read_text(), f"postmortems/{page.name}", PITFALLS)[0]
        assert title is not None
        assert title.title in listed
    record = kb.parse(
        (REPO / "docs/postmortems/sglang-hicache-oom-record.md").read_text(),
        "postmortems/sglang-hicache-oom-record.md",
        PITFALLS,
    )[0]
    assert record is not None
    assert record.record
    assert record.incident == "hicache-oom-1"


# --- The site: three drills on one GPU, the seed's action items proven by their tests ----------


@pytest.fixture(scope="module")
def kb_site(tmp_path_factory):
    """A copy of the docs with three drill drafts on GPU 2 (a week apart), built strictly with
    the results of a real test run of the seed's proofs and one failing test."""
    root = tmp_path_factory.mktemp("kb")
    for name in ("docs", "runbooks"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("*.js"))
    shutil.copy(REPO / "mkdocs.yml", root)
    (root / "docs" / "assets" / "javascripts" / "mermaid-11.17.2.min.js").write_text("")
    # The committed drill drafts out: this site's GPU 2 has only the three below.
    for old in (root / "docs" / "postmortems").glob("drill-*.md"):
        old.unlink()
    nav = (root / "mkdocs.yml").read_text().splitlines(keepends=True)
    (root / "mkdocs.yml").write_text("".join(x for x in nav if "postmortems/drill-" not in x))
    results = root / "build" / "test-results.json"  # where the copy's hook reads them
    # The seed's proofs, run for real; and one test made to fail, in a second run.
    seed = kb.parse(SEED.read_text(), "postmortems/sglang-hicache-oom.md", PITFALLS)[0]
    assert seed is not None
    proofs = [a.proves for a in seed.actions if a.proves]
    env = {**os.environ, "RUNBOOK_TEST_RESULTS": str(results), "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *proofs]
    done = subprocess.run(
        run, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:]
    (root / "tests").mkdir()
    (root / "tests" / "test_deliberate.py").write_text("def test_fails():\n    assert False\n")
    env["PYTHONPATH"] = f"{REPO / 'tests'}{os.pathsep}{REPO}"
    failing = [sys.executable, "-m", "pytest", "-q", "-p", "results_file", "-p", "no:cacheprovider"]
    subprocess.run(
        [*failing, "--rootdir", str(root), "tests/test_deliberate.py"],
        cwd=root,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    page = root / "docs" / "postmortems" / "sglang-hicache-oom.md"
    page.write_text(
        page.read_text().replace(
            "actions:\n",
            "actions:\n  - {item: A deliberately failing guard, kind: guard, owner: us, due: 2026-01-01, "
            "proves: 'tests/test_deliberate.py::test_fails'}\n",
            1,
        )
    )
    _three_drills_on_gpu_2(root)
    return root, results


def _three_drills_on_gpu_2(root: Path) -> list[str]:
    from runbook_runner.cli import main

    state = root / "state"
    made = []
    with pytest.MonkeyPatch.context() as mp:
        only_simulated_hosts_start(mp)
        mp.setenv("XDG_STATE_HOME", str(state))
        real = journal.new_run_id
        for day, scenario in (
            (1, "oom-crash"),
            (8, "persistence-blocks-reset"),
            (15, "daemon-holds-gpu"),
        ):
            stamp = 1796083200 + (day - 1) * 86400  # 2026-12-01 00:00 UTC, simulated days apart
            mp.setattr(journal, "new_run_id", lambda rb, host, now=None, s=stamp: real(rb, host, s))
            with contextlib.redirect_stdout(io.StringIO()):
                assert (
                    main(["drill", "gpu-oom-recovery", "--scenario", scenario, "--yes", "--json"])
                    == 0
                )
            (run,) = [
                p for p in (state / "runbook-runner" / "runs").glob("*.jsonl") if p.stem not in made
            ]
            made.append(run.stem)
            with contextlib.redirect_stdout(io.StringIO()):
                assert (
                    main(
                        ["postmortem", "new", "--from-run", run.stem, "--docs", str(root / "docs")]
                    )
                    == 0
                )
    return made


def test_three_drills_on_one_gpu_are_its_recurrence_list_in_order_with_their_rungs(kb_site):
    root, results = kb_site
    result = build(root, root / "site")
    assert result.returncode == 0, result.stderr
    by_gpu = text_of(root / "site" / "incidents" / "by-gpu.html")
    gpu2 = by_gpu.split("GPU 2 (GPU-5a1e0000-0000-4000-8000-000000000002) (3)")[-1].split("GPU 0")[
        0
    ]
    cells = [line.strip() for line in gpu2.splitlines()]
    rows = [cell for cell in cells if cell.startswith("2026-12-")]
    assert rows == ["2026-12-01", "2026-12-08", "2026-12-15"]
    rungs = [c.split(" / ")[1] for c in cells if c.startswith("gpu-oom-recovery / ")]
    assert rungs == ["reset-gpus", "reset-gpus-again", "reset-gpus-without-services"]
    # The latest draft names the two before it, on the same GPU.
    (last,) = (root / "docs" / "postmortems").glob("drill-*daemon-holds-gpu*.md")
    built = text_of(root / "site" / "postmortems" / f"{last.stem}.html")
    earlier = built.split("Earlier incidents on this host and GPU")[-1]
    assert "oom-crash scenario, 2026-12-01" in earlier
    assert "persistence-blocks-reset scenario, 2026-12-08" in earlier
    # The seed's pitfall lists the incidents it caused; the index counts them.
    caused = text_of(root / "site" / "pitfalls" / "orphaned-gpu-memory.html").split(
        "The incidents it caused"
    )[-1]
    assert "Postmortem: SGLang HiCache OOM" in caused
    assert "oom-crash scenario, 2026-12-01" in caused
    index = text_of(root / "site" / "incidents" / "index.html")
    assert "Of the drills with both times: median 30 s" in index
    # Each seed action item of kind guard or rung is done by its passing test; the failing one is not.
    actions = (root / "site" / "incidents" / "actions.html").read_text()
    rows = actions.split("<tr>")[2:]
    seed = kb.parse(SEED.read_text(), "postmortems/sglang-hicache-oom.md", PITFALLS)[0]
    assert seed is not None
    for action in [a for a in seed.actions if a.proves]:
        (row,) = [r for r in rows if action.proves in r]
        assert "<td>done</td>" in row, row
        assert "passed at" in row, row
        assert f'href="../{action.link.replace(".md", ".html")}"' in row
    (failed,) = [r for r in rows if "test_deliberate.py::test_fails" in r]
    assert "<td>outstanding</td>" in failed
    assert "failed at" in failed
    overdue = text_of(root / "site" / "incidents" / "overdue.html")
    assert "A deliberately failing guard" in overdue
    # The recovery runbook's page says when its drills last ran.
    recovery = text_of(root / "site" / "runbooks" / "gpu-oom-recovery.html")
    assert "Its drills" in recovery
    # Both test runs are in the one results file: the second kept the first's entries.
    ran = json.loads(results.read_text())["tests"]
    assert ran["tests/test_deliberate.py::test_fails"]["outcome"] == "failed"
    assert all(ran[p]["outcome"] == "passed" for p in ran if p.startswith("tests/test_drill.py"))


def test_a_malformed_field_fails_the_build_with_file_and_line(tmp_path):
    for name in ("docs", "runbooks"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("*.js"))
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    (tmp_path / "docs" / "assets" / "javascripts" / "mermaid-11.17.2.min.js").write_text("")
    page = tmp_path / "docs" / "postmortems" / "sglang-hicache-oom.md"
    text = page.read_text()
    line = text.splitlines().index("fault: [sizing, oom, host-memory, gpu-memory-held]") + 1
    page.write_text(text.replace("fault: [sizing, oom,", "fault: [sizing, om,"))
    result = build(tmp_path, tmp_path / "site")
    assert result.returncode != 0
    assert (
        f"docs/postmortems/sglang-hicache-oom.md:{line}:17: fault[1]: must be one of"
        in result.stderr
    )
