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
    assert page.filename == "gpu-oom-recovery-on-gpu-7-2026-11-30-14-00-utc.md"
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
            assert len(cells) in (4, 5, 6, 7, 8), line
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
        "drill-gpu-oom-recovery-oom-crash-scenario-2026-11-30-14-00-utc-2.md",
        "drill-gpu-oom-recovery-oom-crash-scenario-2026-11-30-14-00-utc.md",
    ]
    nav = (tmp_path / "mkdocs.yml").read_text()
    assert all(f"postmortems/{page}" in nav for page in pages)
    # Two pages, two titles: the second is told apart in the nav and on its page.
    titles = re.findall(r'^\s+- "(Drill: [^"]*)": postmortems/', nav, flags=re.M)
    assert titles == [
        "Drill: gpu-oom-recovery, oom-crash scenario, 2026-11-30 14:00 UTC",
        "Drill: gpu-oom-recovery, oom-crash scenario, 2026-11-30 14:00 UTC (2)",
    ]
    assert "(a drill)" in capsys.readouterr().out


def test_the_command_refuses_a_folder_that_is_not_a_site(tmp_path, capsys):
    from runbook_runner.cli import main
    from runbook_runner.exitcodes import ExitCode

    journal = _journal(tmp_path / "runs")
    code = main(["postmortem", "new", "--from-run", str(journal), "--docs", str(tmp_path)])
    assert code == ExitCode.BAD_INPUT
    assert "needs" in capsys.readouterr().err
    assert main(["postmortem", "new", "--from-run", "no-such-run"]) == ExitCode.BAD_INPUT


# --- A drill's draft: today's date, the debrief, no control characters, the chart --------------


def simulated_drill(run: str = "20261202T091500Z-gpu-oom-recovery-127.0.0.1-f891") -> list[dict]:
    """A drill's journal: stamped by the simulator's fixed clock (2026-11-30), its run id
    named from the wall clock (2026-12-02 09:15), with polls between 'before' and 'after'."""
    out = events(drill="oom-crash")
    out[0] = {**out[0], "run": run, "simulated_time": True}
    gpus = lambda held: [  # noqa: E731
        {"index": i, "memory_used_mib": held if i in (0, 2) else 3, "memory_total_mib": 97887}
        for i in range(4)
    ]
    memory = lambda gib: {"total_bytes": 449 * 2**30, "available_bytes": gib * 2**30}  # noqa: E731
    out[1]["state"] = {"gpus": gpus(96413), "memory": memory(120)}
    polls = [
        {
            "t": f"2026-11-30T14:00:0{n}.500Z",
            "event": "observed",
            "label": "poll",
            "state": {"gpus": gpus(96413), "memory": memory(120 + 100 * n)},
            "checks": [],
        }
        for n in (1, 2)
    ]
    out[6]["state"] = {"gpus": gpus(3), "memory": memory(440)}
    skipped = [
        {
            "t": "2026-11-30T14:00:09.500Z",
            "event": "step-end",
            "id": f"rung-{n}",
            "status": "skipped",
            "duration_s": 0.0,
            "message": "nothing to do",
        }
        for n in range(5)
    ]
    drill_end = {
        "t": "2026-11-30T14:00:11.000Z",
        "event": "drill-end",
        "scenario": "oom-crash",
        "timeline": [{"at_s": 2.1, "action": "reset GPU 0"}],
        "expert": ["reset GPU 0", "reset GPU 2"],
        "extra": [],
        "missing": ["reset GPU 2"],
        "recovery_s": 10.5,
        "ideal_s": 40,
        "in_time": True,
    }
    return out[:2] + polls + out[2:6] + skipped + out[6:] + [drill_end]


SCENARIO = {
    "wrong": "orphaned memory on GPUs 0 and 2, no process left",
    "expert": "wait briefly; then reset GPUs 0 and 2 only",
    "lesson": "memory with no process left is orphaned: reset exactly the GPUs that hold it",
    "page": "pitfalls/orphaned-gpu-memory.md",
}


def test_a_drill_is_dated_the_day_it_ran_not_by_the_simulator():
    page = draft(simulated_drill(), known_runbooks={"gpu-oom-recovery"}, scenario=SCENARIO)
    front = page.markdown.split("---\n")[1]
    assert 'date: "2026-12-02"' in front
    assert "2026-12-02 09:15 UTC" in page.title
    assert "(simulated clock)" in front  # its stamps are said to be the simulator's
    assert "simulator's clock" in page.markdown
    assert "2026-11-30" not in page.title


def test_a_real_run_is_dated_by_its_own_stamps_and_today_is_the_last_resort():
    assert draft(events()).markdown.count('date: "2026-11-30"') == 1
    start = {"event": "run-start", "drill": "x", "run": "not-a-stamp"}
    assert draft([start], today="2026-12-24").markdown.count('date: "2026-12-24"') == 1


def test_a_drill_draft_holds_the_debrief_and_its_lesson():
    page = draft(simulated_drill(), known_runbooks={"gpu-oom-recovery"}, scenario=SCENARIO)
    debrief = page.markdown.split("## Drill debrief\n")[1].split("\n## ")[0]
    assert "orphaned memory on GPUs 0 and 2" in debrief
    assert "reset GPU 0 at \\+2.1 s" in debrief
    assert "wait briefly; then reset GPUs 0 and 2 only" in debrief
    assert "reset GPU 2 missing (the expert would)" in debrief
    assert "10.5 s simulated, against the expert's 40 s" in debrief
    assert "reset exactly the GPUs that hold it" in text(page.markdown) or (
        "reset exactly the GPUs that hold it" in debrief.replace("\\", "")
    )
    assert "](../pitfalls/orphaned-gpu-memory.md)" in debrief


def test_skipped_rungs_fold_into_one_line():
    page = draft(simulated_drill(), known_runbooks={"gpu-oom-recovery"})
    resolution = page.markdown.split("## Resolution\n")[1].split("\n## ")[0]
    assert "rung-0" not in resolution.split("Skipped")[0]  # not a row of the table
    assert resolution.count("Skipped, with nothing to do (5 rungs)") == 1
    timeline = page.markdown.split("## Timeline\n")[1].split("\n## ")[0]
    assert timeline.count("5 rungs skipped: ") == 1
    rows = [line for line in timeline.splitlines() if "rung-" in line]
    assert len(rows) == 1
    assert all(f"rung-{n}</code>" in rows[0] for n in range(5))


CONTROL = "\x1b]0;owned\x07\x1b[2J\u202egnp.exe"


def test_control_characters_reach_neither_markdown_nor_html():
    hostile = simulated_drill()
    hostile[0] = {**hostile[0], "host": CONTROL, "operator": CONTROL}
    for event in hostile:
        if event.get("event") == "step-end":
            event["message"] = CONTROL
    page = draft(hostile, title=None, known_runbooks=set(), scenario={"wrong": CONTROL})
    for char in ("\x1b", "\x07", "\u202e"):
        assert char not in page.markdown
        assert char not in page.title
    assert "\\x1b" in page.markdown or "&#92;x1b" in page.markdown  # shown, not dropped


def _svg_series(markdown: str) -> tuple[dict[str, list[tuple[float, float]]], dict[str, float]]:
    import xml.etree.ElementTree as ET

    svg = markdown[markdown.index("<svg") : markdown.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)  # noqa: S314  (our own output, in a test)
    ns = "{http://www.w3.org/2000/svg}"
    series = {
        g.get("data-series"): [
            (float(c.get("data-t")), float(c.get("data-value"))) for c in g.iter(f"{ns}circle")
        ]
        for g in root.iter(f"{ns}g")
        if g.get("class") == "series"
    }
    actions = {
        g.get("data-action"): float(g.get("data-t"))
        for g in root.iter(f"{ns}g")
        if g.get("class") == "action"
    }
    return series, actions


def test_the_drill_draft_charts_every_gpu_and_the_host_with_the_journals_values():
    journal = simulated_drill()
    page = draft(journal, known_runbooks={"gpu-oom-recovery"})
    assert "## The run at a glance" in page.markdown
    series, actions = _svg_series(page.markdown)
    assert sorted(series) == ["GPU 0", "GPU 1", "GPU 2", "GPU 3", "host available"]
    # The journal's observed states, read independently: (seconds from the start, value).
    from datetime import datetime

    def at(stamp: str) -> float:
        return (
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            - datetime.fromisoformat(journal[0]["t"].replace("Z", "+00:00"))
        ).total_seconds()

    observed = [e for e in journal if e["event"] == "observed"]
    for index in range(4):
        want = [
            (at(e["t"]), g["memory_used_mib"])
            for e in observed
            for g in e["state"]["gpus"]
            if g["index"] == index
        ]
        assert series[f"GPU {index}"] == want
    host = [(at(e["t"]), e["state"]["memory"]["available_bytes"] / 2**30) for e in observed]
    assert series["host available"] == host
    # The confirmed action, marked at its time.
    assert actions == {"reset-gpus": at("2026-11-30T14:00:02.100Z")}
    assert ">reset-gpus (GPU 0) (+2.1 s)<" in page.markdown
    # Readable on the light and the dark theme: text and axes follow the page's colour.
    assert 'fill="currentColor"' in page.markdown
    assert "<script" not in page.markdown
    assert "http://" not in page.markdown.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_draft_names_who_held_what_and_what_was_left_alone():
    journal = events()
    journal[1]["state"]["holders"] = [
        {
            "pid": 7001,
            "command": "python3 train.py\x1b[31m",
            "gpus": [5],
            "owner": "another-owner",
            "verdict": "leave",
            "reason": "not the subject's",
            "evidence": "another owner's: login session-3 of uid 1001, user alice",
        }
    ]
    page = draft(journal, known_runbooks={"gpu-oom-recovery"})
    row = next(line for line in page.markdown.splitlines() if line.startswith("| 7001 |"))
    assert "another\\-owner" in row  # Markdown-escaped, as all host text
    assert "| leave |" in row
    assert "session\\-3 of uid 1001" in row
    assert "\x1b" not in page.markdown  # host text stays inert
