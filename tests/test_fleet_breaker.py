"""A rollout that stops itself (issue 47, item 3): the breaker (--max-fail N|P%), batches of
--serial N|P%, and the inventory's per-group modes (observe, plan, act).

Over 20 practice hosts (simhost/fleet.py: each a real SSH server on 127.0.0.1 with its own
command log) with faults on 6; what each host was sent is read from its own log, never from
what the runner says it did. The breaker's arithmetic and the consent it feeds are tested
without SSH.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet.rollout import (
    Breaker,
    Mode,
    Share,
    batch_size,
    batches,
    share,
    threshold,
)
from runbook_runner.simhost.fleet import SimFleet
from runbook_runner.simhost.model import eight_gpu_server

pytestmark = pytest.mark.ssh

HEALTH = """\
name: fleet-breaker
title: GPU memory on a fleet
summary: s
observations:
  gpus:
    command: nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
    parser: gpus
checks:
  gpu-memory-released:
    description: Every GPU's memory is released
    every: gpus
    expect: memory_used_mib <= 1024
goal: [gpu-memory-released]
steps:
  - id: reset-gpus
    title: Reset only the GPUs that still hold memory
    run: [nvidia-smi, --gpu-reset, -i, "{{ item.index }}"]
    for_each_failing: gpu-memory-released
    root: true
    destructive: true
    fixes: goal
    affects: gpu
"""

FAULTY = (2, 5, 7, 11, 14, 18)  # 0-based: sim0003, sim0006, sim0008, sim0012, sim0015, sim0019


def faulty_state(index: int, *, reset_cures: bool):
    state = eight_gpu_server(services=[])  # no persistence daemon holding the GPUs
    if index in FAULTY:
        state.gpu(3).orphaned_mib = 81920
        state.gpu(3).resets_that_fail = 0 if reset_cures else 99
    return state


@pytest.fixture(scope="module")
def quiet_paramiko():
    logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)


def practice_fleet(tmp_path: Path, *, reset_cures: bool) -> tuple[SimFleet, dict[str, Path]]:
    fleet = SimFleet(
        20, lambda index: faulty_state(index, reset_cures=reset_cures), folder=tmp_path / "hosts"
    ).start()
    files = fleet.write_files(tmp_path / "sim")
    runbook = tmp_path / "fleet-breaker.yaml"
    runbook.write_text(HEALTH)
    files["runbook"] = runbook
    return fleet, files


def sent(fleet: SimFleet, number: int) -> list[list[str]]:
    """What host ``sim00NN`` (1-based) was sent, from its own log."""
    log = fleet.hosts[number - 1].shell.calls_log
    if not log.exists():
        return []
    return [json.loads(line)["argv"] for line in log.read_text().splitlines() if line]


def reset_hosts(fleet: SimFleet) -> set[int]:
    return {
        number
        for number in range(1, 21)
        if any(call[:2] == ["nvidia-smi", "--gpu-reset"] for call in sent(fleet, number))
    }


def contacted(fleet: SimFleet) -> set[int]:
    return {number for number in range(1, 21) if sent(fleet, number)}


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_breaker_stops_a_rollout_after_max_fail_failed_hosts(tmp_path, capsys, quiet_paramiko):
    fleet, files = practice_fleet(tmp_path, reset_cures=False)  # 6 hosts whose reset fails
    try:
        code, out, err = cli(
            capsys, "run", str(files["runbook"]), "--ssh-config", str(files["ssh_config"]),
            "--hosts", "sim[0001-0020]", "--serial", "1", "--max-fail", "3", "--yes",
        )  # fmt: skip
        assert code == ExitCode.BREAKER, out + err
        # One host at a time: the three that failed are the only ones that acted, and no host
        # after the third failure was even connected to.
        assert reset_hosts(fleet) == {3, 6, 8}
        assert contacted(fleet) == set(range(1, 9))
        assert "sim[0003,0006,0008]: goal NOT reached" in out
        assert (
            "sim[0009-0020]: not started — the breaker tripped: 3 hosts failed (--max-fail 3)"
            in out
        )
        assert (
            "The breaker tripped: 3 hosts failed (--max-fail 3): sim[0003,0006,0008]; "
            "no further host started" in out
        )
        assert "the breaker trips at 3 failed hosts" in out
        assert "Traceback" not in err
    finally:
        fleet.stop()


def test_percentages_batch_and_trip_and_jsonl_says_why_each_host_did_not_start(
    tmp_path, capsys, quiet_paramiko
):
    fleet, files = practice_fleet(tmp_path, reset_cures=False)
    try:
        code, out, _ = cli(
            capsys, "run", str(files["runbook"]), "--ssh-config", str(files["ssh_config"]),
            "--hosts", "sim[0001-0020]", "--serial", "25%", "--max-fail", "15%", "--yes",
            "--jsonl",
        )  # fmt: skip
        assert code == ExitCode.BREAKER
        # 25% of 20: batches of 5. 15% of 20: 3 failed hosts trip it, in batch 2 (hosts 6-10,
        # with faults on 6 and 8): no more than 3 + the 4 others in flight acted.
        assert reset_hosts(fleet) == {3, 6, 8}
        assert contacted(fleet) == set(range(1, 11))
        records = {r["host"]: r for r in map(json.loads, out.splitlines())}
        assert len(records) == 20
        late = [records[f"sim{n:04d}"] for n in range(11, 21)]
        assert {(r["outcome"], r["exit_code"]) for r in late} == {("not started", 11)}
        breaker = late[0]["breaker"]
        assert (breaker["tripped"], breaker["max_fail"], breaker["trips_at"]) == (True, "15%", 3)
        assert sorted(breaker["failed"]) == ["sim0003", "sim0006", "sim0008"]  # as they ended
        assert records["sim0001"]["mode"] == "act"
    finally:
        fleet.stop()


def test_observe_and_plan_groups_send_nothing_destructive_and_do_not_trip_the_breaker(
    tmp_path, capsys, quiet_paramiko
):
    fleet, files = practice_fleet(tmp_path, reset_cures=True)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[watch]\nsim[0001:0006]\n[dry]\nsim[0007:0012]\n[live]\nsim[0013:0020]\n"
        "[watch:vars]\nrunbook_mode=observe\n[dry:vars]\nrunbook_mode=plan\n"
    )
    try:
        code, out, err = cli(
            capsys, "run", str(files["runbook"]), "--ssh-config", str(files["ssh_config"]),
            "--inventory", str(inventory), "--serial", "5", "--max-fail", "1", "--yes", "--json",
        )  # fmt: skip
        # Failing hosts seen in observe (3, 6) and plan (8, 12) do not count: only the act
        # group's hosts (15, 19: cured by their reset) could have tripped the breaker.
        assert reset_hosts(fleet) == {15, 19}, err
        for number in range(1, 13):
            calls = sent(fleet, number)
            assert calls, number  # observed, every one of them
            assert all("--gpu-reset" not in call for call in calls), (number, calls)
        document = json.loads(out)
        assert document["breaker"]["tripped"] is False
        hosts = {h["host"]: h for h in document["hosts"]}
        assert {hosts[f"sim{n:04d}"]["mode"] for n in range(1, 7)} == {"observe"}
        assert {hosts[f"sim{n:04d}"]["mode"] for n in range(7, 13)} == {"plan"}
        assert {hosts[f"sim{n:04d}"]["mode"] for n in range(13, 21)} == {"act"}
        assert hosts["sim0003"]["summary"].startswith("observe: gpu-memory-released failing")
        assert hosts["sim0008"]["summary"].startswith("plan: ")
        assert "plan" in hosts["sim0008"]
        assert hosts["sim0015"]["summary"] == "ok — goal reached by reset-gpus"
        # What was seen failing is still said: the exit code is the worst over the hosts.
        assert code == ExitCode.GOAL_NOT_MET
    finally:
        fleet.stop()


# -- without SSH: the arithmetic and the decisions -------------------------------------------


def test_shares_read_as_numbers_or_percentages_and_refuse_the_rest():
    assert share("3") == Share(3)
    assert share("10%") == Share(10, percent=True)
    assert str(share(" 25% ")) == "25%"
    for bad in ("0", "0%", "101%", "-1", "x", "1.5", "%", ""):
        with pytest.raises(ValueError, match="percentage"):
            share(bad)


def test_serial_percentages_round_down_as_ansible_and_max_fail_percentages_round_up():
    # Ansible's pct_to_int: int(pct / 100 * hosts) or 1.
    assert batch_size(Share(25, True), 20) == 5
    assert batch_size(Share(12, True), 60) == 7
    assert batch_size(Share(1, True), 20) == 1  # 0.2 rounds to 0: at least 1
    assert batch_size(Share(3), 20) == 3
    assert [len(b) for b in batches(list(range(20)), batch_size(Share(30, True), 20))] == [
        6,
        6,
        6,
        2,
    ]
    # Reached, not exceeded; at least one host.
    assert threshold(Share(50, True), 20) == 10
    assert threshold(Share(15, True), 20) == 3
    assert threshold(Share(10, True), 25) == 3  # 2.5 hosts: the third failure trips it
    assert threshold(Share(1, True), 20) == 1
    assert threshold(Share(4), 2) == 4


def test_the_breaker_counts_only_acting_hosts_that_failed_could_not_tell_or_ended_unexpectedly():
    breaker = Breaker.of(Share(2), 10)
    for code in (ExitCode.OK, ExitCode.SUBJECT_HELD, ExitCode.LOCKED, ExitCode.DECLINED):
        breaker = breaker.then("quiet", code)
    breaker = breaker.then("watched", ExitCode.GOAL_NOT_MET, Mode.OBSERVE)
    breaker = breaker.then("planned", ExitCode.CANNOT_TELL, Mode.PLAN)
    assert breaker.failed == ()
    breaker = breaker.then("gpu1", ExitCode.CANNOT_TELL)
    assert not breaker.tripped
    breaker = breaker.then("gpu2", ExitCode.HOST_UNREACHABLE)  # lost during its run
    assert breaker.tripped
    assert breaker.to_json() == {
        "tripped": True,
        "max_fail": 2,
        "trips_at": 2,
        "failed": ["gpu1", "gpu2"],
    }


def test_a_host_in_flight_starts_no_further_destructive_step_once_the_breaker_trips():
    from types import SimpleNamespace

    from runbook_runner.cli.fleet_run import _BatchConsent, _Rollout
    from runbook_runner.fleet.selection import FleetHost

    hosts = [FleetHost("gpu1"), FleetHost("gpu2")]
    rollout = _Rollout(Breaker.of(Share(1), 2), hosts, dry_run=False)
    request = SimpleNamespace(yes=True, allow_reboot=False)
    consent = _BatchConsent(True, request, rollout)  # type: ignore[arg-type]
    step = SimpleNamespace(id="reset-gpus", reboots=False)
    ask = SimpleNamespace(step=step)
    assert consent(ask).yes  # type: ignore[arg-type]
    from runbook_runner.fleet.summary import HostOutcome

    rollout.count(HostOutcome("gpu2", "failing", ExitCode.GOAL_NOT_MET, "goal NOT reached"))
    answer = consent(ask)  # type: ignore[arg-type]
    assert not answer.yes
    assert consent.breaker_stopped == "reset-gpus"
    assert "the breaker tripped: 1 host failed (--max-fail 1)" in answer.reason


def test_runbook_mode_comes_from_group_or_host_vars_and_a_wrong_one_names_the_host():
    from runbook_runner.fleet import inventory
    from runbook_runner.fleet.selection import select

    text = (
        "[watch]\ngpu[1:2]\ngpu3 runbook_mode=act\n[watch:vars]\nrunbook_mode=observe\n"
        "[other]\ngpu4\n"
    )
    parsed = inventory.parse(text, "hosts.ini")
    modes = {h.name: h.mode for h in select([], parsed, None, 100)}
    assert modes == {"gpu1": Mode.OBSERVE, "gpu2": Mode.OBSERVE, "gpu3": Mode.ACT, "gpu4": Mode.ACT}
    with pytest.raises(inventory.InventoryError, match="host gpu9: runbook_mode 'watch'"):
        inventory.parse("[g]\ngpu9 runbook_mode=watch\n", "hosts.ini")
