"""The postmortem's Before/After GPU table shows each GPU's holders (PID, owner class)."""

from __future__ import annotations

from runbook_runner.kb.timeline import holders_by_gpu, state_tables

BEFORE = {
    "state": {
        "gpus": [
            {"index": 0, "memory_used_mib": 96_413, "memory_total_mib": 97_887},
            {"index": 1, "memory_used_mib": 3, "memory_total_mib": 97_887},
            {"index": 5, "memory_used_mib": 80_003, "memory_total_mib": 97_887},
        ],
        "holders": [
            {"pid": 4120, "owner": "ours", "gpus": [0]},
            {"pid": 7001, "owner": "other", "gpus": [5]},
            {"pid": 9001, "owner": "infrastructure", "gpus": [0, 1, 5]},
        ],
    }
}
AFTER = {
    "state": {
        "gpus": [
            {"index": 0, "memory_used_mib": 3, "memory_total_mib": 97_887},
            {"index": 1, "memory_used_mib": 3, "memory_total_mib": 97_887},
            {"index": 5, "memory_used_mib": 80_003, "memory_total_mib": 97_887},
        ],
        "holders": [
            {"pid": 7001, "owner": "other", "gpus": [5]},
            {"pid": 9001, "owner": "infrastructure", "gpus": [0, 1, 5]},
        ],
    }
}


def test_each_gpu_row_names_its_holders_before_and_after():
    rows = {line.split("|")[1].strip(): line for line in state_tables(BEFORE, AFTER)[:5]}
    assert "Holders before" in rows["GPU"]
    assert rows["0"].endswith(
        "| PID 4120 (ours), PID 9001 (infrastructure) | PID 9001 (infrastructure) |"
    )
    assert rows["5"].endswith(
        "| PID 7001 (other), PID 9001 (infrastructure) | PID 7001 (other), PID 9001 (infrastructure) |"
    )


def test_a_gpu_held_by_nobody_shows_a_dash_and_minor_numbers_map_to_indexes():
    gpus = {0: {"index": 0, "minor_number": 3}, 1: {"index": 1, "minor_number": 0}}
    held = holders_by_gpu([{"pid": 1, "owner": "ours", "gpus": [3]}], gpus)
    assert held == {0: ["PID 1 (ours)"]}
    table = state_tables({"state": {"gpus": [{"index": 2}]}}, {"state": {}})
    assert table[2].endswith("| – | – |")
