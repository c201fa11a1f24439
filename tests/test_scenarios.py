"""The scenario matrix, proven: each row's drill, over real SSH to the simulated host, ends
where the expert would, takes exactly the expert's actions, and recovers within 1.5x the
row's ideal time (simulated)."""

from __future__ import annotations

import json
import re

import pytest
from sshd import only_simulated_hosts_start

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.journal import read, summary
from runbook_runner.simhost.drill import TOLERANCE, judge, pick
from runbook_runner.simhost.scenarios import MATRIX, SCENARIOS


@pytest.fixture(autouse=True)
def nothing_real_is_touched(monkeypatch):
    """A drill signals no real process and starts no program on this machine but the
    simulated host's own shell (with its stand-ins first on PATH)."""
    only_simulated_hosts_start(monkeypatch)


def play(capsys, scenario, *extra):
    argv = ["drill", scenario.runbook, "--scenario", scenario.name, "--yes", "--json", *extra]
    if scenario.allow_reboot:
        argv.append("--allow-reboot")
    code = main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.name for s in MATRIX])
def test_the_run_does_what_the_expert_would(capsys, scenario):
    code, document, _ = play(capsys, scenario)
    drill = document["drill"]
    # 1. it ends where the expert would: the goal, or a stop with the right code and words
    if scenario.ends == "goal":
        assert code == ExitCode.OK, document["steps"]
        assert document["ok"]
    else:
        assert code == scenario.exit_code
        said = " ".join(s.get("message", "") for s in document["steps"])
        said += " " + " ".join(document["verdict"]["held"])  # the GPUs not accounted for
        hints = " ".join(c.get("hint", "") + c.get("message", "") for c in _failing(document))
        assert scenario.message in said + hints
        assert drill["ended_right"]
    # 2. exactly the expert's actions: nothing signalled, reset, stopped, removed or rebooted beyond
    assert drill["extra"] == [], drill["timeline"]
    assert drill["missing"] == [], drill["timeline"]
    assert set(drill["actions"]) == set(scenario.actions)
    # 2b. what is not ours (or not broken) is named as left alone, with its evidence
    holders = {h["pid"]: h for h in document["state"].get("holders", [])}
    for pid in scenario.left_alone:
        assert holders[pid]["verdict"] == "leave", holders.get(pid)
        assert holders[pid]["evidence"]
    # 2c. a holder whose owner cannot be told is named so, with why; it held back only what
    # could reach it: no action above touched it or its GPUs (the extra actions are none)
    for pid in scenario.cannot_tell:
        assert holders[pid]["verdict"] == "cannot-tell", holders.get(pid)
        assert "cannot be told" in holders[pid]["reason"]
        for gpu in holders[pid]["gpus"]:
            assert f"reset GPU {gpu}" not in drill["actions"]
    # 3. in time
    assert drill["recovery_s"] <= TOLERANCE * scenario.ideal_s, drill
    assert drill["ok"]


def _failing(document):
    """The checks that still fail at the end of the run, as the JSON document gives them."""
    return [c for c in document["checks"] if not c.get("ok")]


def test_the_matrix_has_every_row_of_the_issue_and_each_row_is_complete():
    assert len(MATRIX) >= 14
    for name in ("oom-crash", "slow-teardown", "persistence-blocks-reset", "stuck-d-state"):
        assert name in SCENARIOS  # the drill's first four keep their names
    for scenario in MATRIX:
        assert scenario.wrong, scenario.name
        assert scenario.expert, scenario.name
        assert scenario.lesson, scenario.name
        page, _, anchor = scenario.page.partition("#")
        assert (REPO / "docs" / page).is_file(), scenario.page
        if anchor:
            headings = [
                re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in (REPO / "docs" / page).read_text().splitlines()
                if line.startswith("#")
            ]
            assert anchor in headings, scenario.page
        assert scenario.ideal_s > 0


def test_a_judgement_can_fail_an_extra_action_or_a_slow_run():
    row = SCENARIOS["oom-crash"]
    slow = judge(
        row, [(1000.0, "reset GPU 0"), (1001.0, "reset GPU 2")], 1000.0, 1200.0, 0, True, ""
    )
    assert not slow.in_time
    assert not slow.ok
    wide = judge(
        row,
        [(1000.0, "reset GPU 0"), (1001.0, "reset GPU 2"), (1002.0, "reset GPU 5")],
        1000.0,
        1010.0,
        0,
        True,
        "",
    )
    assert wide.extra == ("reset GPU 5",)
    assert not wide.ok
    short = judge(row, [(1000.0, "reset GPU 0")], 1000.0, 1010.0, 0, True, "")
    assert short.missing == ("reset GPU 2",)
    assert not short.ok


def test_the_debrief_teaches_the_refused_reset_and_the_lesson(capsys):
    code = main(["drill", "gpu-oom-recovery", "--scenario", "persistence-blocks-reset", "--yes"])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert "the reset of GPU 2 was refused" in out
    assert "What an expert does:" in out
    assert "The difference: none" in out
    assert "Lesson: the smallest blast radius" in out
    assert "docs/pitfalls/orphaned-gpu-memory.md" in out


def test_stuck_d_state_debrief_says_allow_reboot(capsys):
    code = main(["drill", "gpu-oom-recovery", "--scenario", "stuck-d-state", "--yes"])
    out = capsys.readouterr().out
    assert code == ExitCode.GOAL_NOT_MET
    assert "--allow-reboot" in out
    assert "--from" not in out.split("Debrief")[1]


def test_a_drill_is_marked_in_the_journal_with_simulated_time(capsys, run_journals_in_tmp):
    main(["drill", "gpu-oom-recovery", "--scenario", "oom-crash", "--yes"])
    capsys.readouterr()
    [path] = list(run_journals_in_tmp.glob("*.jsonl"))
    journal = read(path)
    start = journal.first("run-start")
    assert start["drill"] == "oom-crash"
    assert start["simulated_time"] is True
    assert start["t"].startswith("2026-11-30T01:")  # the simulated clock, not today
    end = journal.last("drill-end")
    assert end["actions"] == ["reset GPU 0", "reset GPU 2"]
    assert summary(path)["drill"] == "oom-crash"
    assert main(["runs"]) == 0
    assert "drill: oom-crash" in capsys.readouterr().out
    assert main(["runs", "show", path.stem]) == 0
    shown = capsys.readouterr().out
    assert "(drill: scenario oom-crash, simulated time)" in shown
    assert "drill oom-crash: as the expert would; actions: reset GPU 0, reset GPU 2" in shown
    assert "2026-11-30T01:" in shown  # simulated time stamps in the timeline


def test_random_picks_without_naming_and_the_debrief_names_it(capsys, monkeypatch):
    monkeypatch.setattr("runbook_runner.simhost.drill.random.choice", lambda names: "leaked-shm")
    code = main(["drill", "gpu-oom-recovery", "--scenario", "random", "--yes"])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    before, after = out.split("Debrief")
    assert "Drill: a scenario picked at random" in before
    assert "Drill: leaked-shm" not in before
    assert SCENARIOS["leaked-shm"].teaches not in before
    assert "Debrief: leaked-shm" in "Debrief" + after
    assert pick("oom-crash") == "oom-crash"


def test_a_unit_with_restart_always_brings_a_killed_server_back():
    from runbook_runner.simhost.hosts import supervisor_restarts_server
    from runbook_runner.simhost.simulated import SimClock, SimProcesses

    host = supervisor_restarts_server()
    clock = SimClock()
    table = SimProcesses(host, clock)
    first = sorted(p.pid for p in host.processes)
    for pid in first:
        table.signal(pid, 15)
    clock.sleep(60)
    host.now = clock.now()
    host.forget_dead(table.alive)
    host.tick(table.alive)  # notices the unit's processes are gone
    clock.sleep(10)
    host.now = clock.now()
    host.tick(table.alive)
    assert sorted(p.pid for p in host.processes) != first
    assert len(host.processes) == len(first)
    assert any("restarted the server" in event for _, event in host.happened)


def test_the_shm_listing_parses_and_rejects_what_it_cannot_read():
    from runbook_runner.errors import ParseError
    from runbook_runner.observe.shm import parse_shm

    text = "1796001000\n42949672960 root 1796000100 free /dev/shm/a\n32 pg 1796000990 held /dev/shm/b\n"
    a, b = parse_shm(text)
    assert (a.size_bytes, a.owner, a.age_s, a.held) == (42949672960, "root", 900, False)
    assert (b.age_s, b.held) == (10, True)
    assert parse_shm("1796001000\n") == ()
    (spaced,) = parse_shm("1796001000\n5 root 1796000000 free /dev/shm/a b\n")
    assert spaced.path == "/dev/shm/a b"
    with pytest.raises(ParseError):
        parse_shm("42949672960 root 1796000100 free /dev/shm/a\n")
    with pytest.raises(ParseError):
        parse_shm("1796001000\nstat: cannot statx '/dev/shm/x'\n")


def test_the_gpu_and_host_ram_ladders_never_cross():
    from runbook_runner.runbook import load

    recovery = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
    steps = {step.id: step for step in recovery.steps}
    gpu_rungs = ["reset-gpus", "persistence-off"]
    gpu_rungs += ["reset-gpus-again", "stop-gpu-services", "reload-driver"]
    for rung in gpu_rungs:
        assert steps[rung].fixes == ("gpu-memory-released",), rung
    assert steps["remove-leaked-shm"].fixes == ("host-memory-available", "no-shm-fault")
    assert steps["remove-leaked-shm"].affects == "files"
    # the short-cuts act on their own evidence, not on a generic failure
    assert steps["reboot-for-xid"].fixes == ("no-xid-needs-reboot",)
    assert steps["reboot-for-recovery-action"].fixes == ("no-gpu-asks-reboot",)
    assert steps["reboot-for-stuck"].fixes == ("no-stuck-server",)
    assert steps["load-driver"].fixes == ("driver-loaded",)
    # the last resort is for memory only: a drain or an NVLink fault never climbs to it
    assert set(steps["reboot"].fixes) == {"gpu-memory-released", "host-memory-available"}


def test_the_matrix_renders_as_one_table_for_the_site():
    from runbook_runner.simhost.scenarios import XID_CATALOG, matrix_table

    table = matrix_table(lambda page: "../" + page)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(MATRIX)
    assert "`reset GPU 0`, `reset GPU 2`" in table
    assert "(../pitfalls/orphaned-gpu-memory.md#what-blocks-a-gpu-reset)" in table
    assert XID_CATALOG in table
