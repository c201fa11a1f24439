"""What a person reads is words, never Python: over every row of the scenario matrix, the
plan (``drill --dry-run``) and the run (``drill --yes``) print no enum repr
(``<Condition.OK: 'ok'>``), no status said twice ("BLOCKED  blocked: ...", "blocked
(blocked: ...)"), no reason said twice in one line, no table row named "row ...", and no
line cut short with "…" where a long one wraps (past six lines, a message says where the
rest is)."""

from __future__ import annotations

import itertools
import re

import pytest
from sshd import only_simulated_hosts_start

from runbook_runner.cli import main
from runbook_runner.simhost.scenarios import MATRIX

REPR = re.compile(r"<[A-Za-z_.]+: ")
STATUS_TWICE = re.compile(r"\bblocked\b[\s\d.s(]*blocked: ", re.I)


@pytest.fixture(autouse=True)
def nothing_real_is_touched(monkeypatch):
    only_simulated_hosts_start(monkeypatch)


def problems(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        if REPR.search(line) or STATUS_TWICE.search(line) or " on row " in line:
            found.append(line)
        if re.search(r"The kernel logged: Xid \d+ on [0-9a-f]{4}:", line):
            found.append(f"a PCI address where the GPU index is known: {line!r}")
        if line.endswith("…"):  # cut where the fact is ("GPU 3 (00…"): wrapped instead
            found.append(f"cut: {line!r}")
        parts = line.split("; ")
        for before, part in itertools.pairwise(parts):
            if before.endswith(part):
                found.append(f"said twice: {part!r} in {line!r}")
        held = re.findall(r"cannot tell who holds: [^;]+", line)
        if len(held) != len(set(held)):
            found.append(f"one holder's reason twice in {line!r}")
    return found


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.name for s in MATRIX])
def test_the_plan_and_the_run_of_every_row_print_words_not_python(
    capsys, run_journals_in_tmp, scenario
):
    printed = {}
    for mode in ("--dry-run", "--yes"):
        argv = ["drill", scenario.runbook, "--scenario", scenario.name, mode]
        main([*argv, "--allow-reboot"] if scenario.allow_reboot else argv)
        out, err = capsys.readouterr()
        printed[mode] = out + err
    assert "first, on this state" in printed["--dry-run"] or "the plan:" in printed["--dry-run"]
    assert "Debrief" in printed["--yes"]
    for mode, text in printed.items():
        assert problems(text) == [], mode


def test_the_checks_find_what_they_look_for():
    assert problems("  ok   driver-loaded: condition <Condition.OK: 'ok'>, expected != 'x'")
    assert problems("  [7/28] reset-gpus   BLOCKED      0.0s  blocked: cannot tell: ...")
    assert problems("    wait-for-teardown        blocked  (blocked: cannot tell: x")
    assert problems("  [26/28] start-server-unit   ok   0.0s  on row sglang-a.service")
    reason = "cannot tell who holds: PID 7001 (python3 train.py): no unit in its cgroup"
    assert problems(f"stopping a reaches every GPU; {reason}; stopping b; {reason}")
    assert problems("PID 7001: unknown, cannot tell: no unit (/); no unit (/)")
    assert problems("  done: reset-gpus: GPU 0 (00000000:18:00.0, /dev/nvidia0), GPU 3 (00…")
    assert problems("  The kernel logged: Xid 79 on 0000:48:00: RESTART_BM (GPU has fallen off)")
    assert not problems("  ok   driver-loaded: condition 'ok', expected != 'driver-not-loaded'")
