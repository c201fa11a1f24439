"""A run's journal as a postmortem page: what the run knows filled in, host text kept inert."""

from __future__ import annotations

import re

import pytest

from runbook_runner.kb.postmortem import add_to_nav, code, draft, targets, text

HOSTILE = "<script>alert(1)</script> | `rm -rf /` {{ fig.gpu0_held }} [x](javascript:1) *[TP]: y"


def events(host: str = "gpu-7", drill: str | None = None, output: str = "") -> list[dict]:
    start = {
        "t": "2026-11-30T14:00:00.000Z",
        "event": "run-start",
        "run": "20261130T140000Z-gpu-oom-recovery-gpu-7-abcd",
        "runbook": "gpu-oom-recovery",
        "host": host,
        "operator": "alice",
    }
    if drill:
        start["drill"] = drill
    gpus = [{"index": 0, "memory_used_mib": 96413, "memory_total_mib": 97887}]
    return [
        start,
        {
            "t": "2026-11-30T14:00:01.000Z",
            "event": "observed",
            "label": "before",
            "state": {"gpus": gpus, "memory": {"total_bytes": 2**30 * 449}},
            "checks": [{"name": "gpu-memory-released", "ok": False, "message": output}],
        },
        {
            "t": "2026-11-30T14:00:02.000Z",
            "event": "step-start",
            "id": "reset-gpus",
            "commands": ["nvidia-smi --gpu-reset -i 0", f"echo '{output}'"],
        },
        {
            "t": "2026-11-30T14:00:02.100Z",
            "event": "confirmation",
            "step": "reset-gpus",
            "answer": "yes",
            "operator": output or "alice",
        },
        {
            "t": "2026-11-30T14:00:03.000Z",
            "event": "wait",
            "step": "reset-gpus",
            "elapsed_s": 4.0,
            "timeout_s": 60.0,
            "failing": [output],
        },
        {
            "t": "2026-11-30T14:00:09.000Z",
            "event": "step-end",
            "id": "reset-gpus",
            "status": "ok",
            "duration_s": 6.0,
            "message": output,
        },
        {
            "t": "2026-11-30T14:00:10.000Z",
            "event": "observed",
            "label": "after",
            "state": {"gpus": [{**gpus[0], "memory_used_mib": 3}]},
            "checks": [{"name": "gpu-memory-released", "ok": True}],
        },
        {
            "t": "2026-11-30T14:00:10.500Z",
            "event": "run-end",
            "ok": True,
            "reached_by": "reset-gpus",
        },
    ]


def test_the_run_fills_metadata_timeline_targets_and_state():
    page = draft(events(), known_runbooks={"gpu-oom-recovery"})
    assert page.filename == "gpu-oom-recovery-on-gpu-7-2026-11-30.md"
    front = page.markdown.split("---\n")[1]
    assert 'hosts: ["gpu-7"]' in front
    assert 'outcome: "goal holds (reached by reset-gpus)"' in front
    assert 'runbooks: ["gpu-oom-recovery"]' in front
    assert "severity: TODO" in front
    assert "drill:" not in front
    assert "](../runbooks/gpu-oom-recovery.md)" in page.markdown
    assert "| 0 | 96,413 MiB | 3 MiB | 97,887 MiB |" in page.markdown
    assert "GPU 0" in page.markdown  # the reset's target
    assert "waited 4\\.0 s of 60\\.0 s" in page.markdown
    for heading in ("Summary", "Impact", "Root causes", "Trigger", "Detection", "Resolution"):
        assert f"## {heading}\n" in page.markdown
    assert page.markdown.count("TODO") >= 8


def test_a_drill_run_is_marked_as_a_drill():
    page = draft(events(drill="oom-crash"), known_runbooks={"gpu-oom-recovery"})
    assert page.drill == "oom-crash"
    assert page.title.startswith("Drill:")
    assert 'drill: "oom-crash"' in page.markdown
    assert "  - drill" in page.markdown
    assert '!!! warning "A drill, not an incident"' in page.markdown


def test_a_runbook_the_site_does_not_have_is_named_not_linked():
    page = draft(events(), known_runbooks=set())
    assert "../runbooks/" not in page.markdown
    assert "runbooks:" not in page.markdown


def test_host_text_stays_inert():
    page = draft(events(host=HOSTILE, output=HOSTILE), title=HOSTILE, known_runbooks=set())
    body = page.markdown.split("---\n", 2)[2]
    assert "<script" not in page.markdown
    assert "{{" not in body  # the site's figure placeholders
    assert "](javascript" not in body
    assert "\n*[" not in body  # no abbreviation definition
    assert not re.search(r"(?<!\\)`rm", body)  # an escaped backtick opens no code span
    # Every table row keeps its columns: no '|' from the host breaks a cell.
    for line in body.splitlines():
        if line.startswith("| ") and "---" not in line:
            cells = re.split(r"(?<!\\)\|", line)
            assert len(cells) in (4, 5, 6, 7), line
    assert page.filename.endswith(".md")
    assert "/" not in page.filename


def test_escapers():
    assert text("a|b<c>") == "a\\|b&lt;c&gt;"
    assert (
        code("x | `y` {{ z }}") == "<code>x &#124; &#96;y&#96; &#123;&#123; z &#125;&#125;</code>"
    )
    assert text("line one\nline two") == "line one line two"


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (["nvidia-smi --gpu-reset -i 0", "nvidia-smi --gpu-reset -i 2"], "GPU 0, GPU 2"),
        (["kill -TERM 4101", "sudo -n kill -9 4120 4121"], "PID 4101, PID 4120, PID 4121"),
        (["fuser -k -9 /dev/nvidia*"], "–"),
    ],
)
def test_targets(commands, expected):
    assert targets(commands) == expected


NAV = """nav:
  - Home: index.md
  - Postmortems:
      - One: postmortems/one.md
      - Template: postmortems/TEMPLATE.md
  - Pitfalls:
      - P: pitfalls/p.md
"""


def test_the_page_joins_the_nav_before_the_template_once():
    once = add_to_nav(NAV, 'Drill: "x"', "postmortems/new.md")
    assert '      - "Drill: \\"x\\"": postmortems/new.md\n      - Template' in once
    assert add_to_nav(once, "again", "postmortems/new.md") == once


def test_nav_without_postmortems_is_an_error():
    with pytest.raises(ValueError, match="no '- Postmortems:'"):
        add_to_nav("nav:\n  - Home: index.md\n", "t", "postmortems/t.md")


def _journal(folder, name="20261130T140000Z-gpu-oom-recovery-gpu-7-abcd.jsonl"):
    import json

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(e) + "\n" for e in events(drill="oom-crash")))
    return path


def test_the_command_writes_the_page_and_the_nav_and_never_overwrites(tmp_path, capsys):
    from runbook_runner.cli import main
    from runbook_runner.exitcodes import ExitCode

    journal = _journal(tmp_path / "runs")
    (tmp_path / "docs" / "postmortems").mkdir(parents=True)
    (tmp_path / "mkdocs.yml").write_text(NAV)
    args = ["postmortem", "new", "--from-run", str(journal), "--docs", str(tmp_path / "docs")]
    assert main(args) == ExitCode.OK
    assert main(args) == ExitCode.OK
    pages = sorted(p.name for p in (tmp_path / "docs" / "postmortems").glob("*.md"))
    assert pages == [
        "drill-gpu-oom-recovery-on-the-oom-crash-scenario-2026-11-30-v2.md",
        "drill-gpu-oom-recovery-on-the-oom-crash-scenario-2026-11-30.md",
    ]
    nav = (tmp_path / "mkdocs.yml").read_text()
    assert all(f"postmortems/{page}" in nav for page in pages)
    assert "(a drill)" in capsys.readouterr().out


def test_the_command_refuses_a_folder_that_is_not_a_site(tmp_path, capsys):
    from runbook_runner.cli import main
    from runbook_runner.exitcodes import ExitCode

    journal = _journal(tmp_path / "runs")
    code = main(["postmortem", "new", "--from-run", str(journal), "--docs", str(tmp_path)])
    assert code == ExitCode.BAD_INPUT
    assert "needs" in capsys.readouterr().err
    assert main(["postmortem", "new", "--from-run", "no-such-run"]) == ExitCode.BAD_INPUT
