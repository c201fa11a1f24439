"""`runbook drill`: each scenario ends where it should, over real SSH to a simulated host."""

from __future__ import annotations

import json
import re

import pytest
from sshd import only_simulated_hosts_start

from conftest import fixture_text
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.observe.free import FreeUnits, parse_free
from runbook_runner.observe.nvidia_smi import parse_compute_apps, parse_gpus
from runbook_runner.simhost import render
from runbook_runner.simhost.model import eight_gpu_server
from runbook_runner.simhost.sshserver import DrillHost


@pytest.fixture(autouse=True)
def nothing_real_is_touched(monkeypatch):
    """A drill signals no real process and starts no program on this machine but the
    simulated host's own shell (with its stand-ins first on PATH)."""
    only_simulated_hosts_start(monkeypatch)


def drill(capsys, *argv):
    code = main(["drill", "gpu-oom-recovery", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def drill_json(capsys):
    code = main(["drill", "gpu-oom-recovery", "--scenario", "oom-crash", "--yes", "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def changes(text: str) -> list[str]:
    """The debrief's "What the run did" lines: the actions the simulated host recorded."""
    lines = text.split("What the run did:\n")[1].splitlines()
    found = []
    for line in lines:
        if not line.startswith("    "):
            break
        if "(the host:" in line or "nothing to the host" in line:
            continue
        found.append(line.split(" s  ", 1)[1])
    return found or ["nothing"]


def test_oom_crash_is_fixed_by_resetting_only_gpus_0_and_2(capsys):
    code, out, _ = drill(capsys, "--scenario", "oom-crash", "--yes")
    assert code == ExitCode.OK
    assert changes(out) == ["reset GPU 0", "reset GPU 2"]
    assert "The rung that worked: reset-gpus" in out
    assert "docs/pitfalls/orphaned-gpu-memory.md" in out


def test_oom_crash_recovers_in_under_90_simulated_seconds_after_a_short_flat_wait(capsys):
    code, out, _ = drill(capsys, "--scenario", "oom-crash", "--yes")
    assert code == ExitCode.OK
    minutes = float(re.search(r"Simulated time: ([\d.]+) min", out)[1])
    assert minutes * 60 < 90
    # Memory did not move and no process was left: the wait stopped at its settle time.
    assert re.search(
        r"wait-for-teardown +waited +30\.0s  no change for 30 s, nothing left .*: waiting "
        r"cannot help, on to the next rung",
        out,
    )
    assert "FAILED" not in out
    assert not any("SIGKILL" in c or "driver" in c for c in changes(out))


def test_slow_teardown_is_fixed_by_waiting_not_by_killing(capsys):
    code, out, _ = drill(capsys, "--scenario", "slow-teardown", "--yes")
    assert code == ExitCode.OK
    assert "The rung that worked: wait-for-teardown" in out
    assert changes(out) == ["nothing"]  # no signal, no reset, no service stopped


def test_persistence_blocks_reset_until_only_that_gpu_leaves_persistence(capsys):
    code, out, _ = drill(capsys, "--scenario", "persistence-blocks-reset", "--yes")
    assert code == ExitCode.OK
    assert changes(out) == [
        "reset GPU 2",
        "persistence off GPU 2",
        "reset GPU 2",
        "persistence on GPU 2",
    ]
    assert "the reset of GPU 2 was refused" in out


def test_stuck_d_state_stops_before_reboot_and_names_it(capsys):
    code, out, _ = drill(capsys, "--scenario", "stuck-d-state", "--yes")
    assert code == ExitCode.GOAL_NOT_MET
    assert "reboot-for-stuck         declined  (needs --allow-reboot)" in out
    assert changes(out) == ["SIGKILL 4123"]  # one SIGKILL, queued; then only a reboot helps
    assert "because of: PID 4123 [D]" in out
    assert "--scenario stuck-d-state --yes --allow-reboot" in out


def test_stuck_d_state_with_allow_reboot_reboots_and_comes_back(capsys):
    code, out, _ = drill(capsys, "--scenario", "stuck-d-state", "--yes", "--allow-reboot", "--json")
    assert code == ExitCode.OK
    document = json.loads(out)
    assert document["reached_by"] == "reboot-for-stuck"
    assert [g["memory_used_mib"] for g in document["state"]["gpus"]] == [3] * 8


def test_a_host_ram_leak_runs_no_gpu_rung(capsys):
    code, out, _ = drill(capsys, "--scenario", "host-ram-leak", "--yes")
    assert code == ExitCode.GOAL_NOT_MET
    assert changes(out) == ["nothing"]
    assert "reboot                   declined  (needs --allow-reboot)" in out


def test_unknown_scenario_is_bad_input(capsys):
    code, _, err = drill(capsys, "--scenario", "meteor-strike")
    assert code == ExitCode.BAD_INPUT
    assert "no such scenario" in err


# -- the simulated shell -----------------------------------------------------------------------


def shell_run(script: str, host=None):
    """The simulated host's real shell, with its stand-ins, run here without SSH."""
    simulated = DrillHost(host or eight_gpu_server())
    try:
        done = simulated.run_local(script)
    finally:
        simulated.stop()
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_a_command_the_host_does_not_have_is_not_found_not_a_silent_success():
    status, _, err = shell_run("rbr-no-such-tool --version")
    assert status == 127
    assert "rbr-no-such-tool" in err
    assert "not found" in err


@pytest.mark.parametrize(
    ("script", "out"),
    [
        ("echo a; echo b", "a\nb\n"),
        ("false && echo no || echo yes", "yes\n"),
        ("! false && echo negated", "negated\n"),
        ("x=1; if [ $x = 1 ]; then echo one; else echo other; fi", "one\n"),
        ('for u in a "b c"; do echo "[$u]"; done', "[a]\n[b c]\n"),
        ("l=''; for m in x y; do l=\"$m $l\"; done; for m in $l; do echo $m; done", "y\nx\n"),
        ("printf '%s-%s\\n' a b c d", "a-b\nc-d\n"),
        ("echo err >&2; echo out", "out\n"),
        ("nvidia-smi -L | grep -c GPU", "8\n"),
        (
            "nvidia-smi -L | head -n 1 | tail -n 1",
            "GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-5a1e0000-0000-4000-8000-000000000000)\n",
        ),
        ("if true; then exit 3; fi; echo never", ""),
    ],
)
def test_the_shell_glue_the_runbooks_use(script, out):
    assert shell_run(script)[1] == out


def test_redirections_route_the_streams():
    _, out, err = shell_run("echo to-err >&2; echo both 2>&1; curl 2>/dev/null; echo x >/dev/null")
    assert err == "to-err\n"
    assert out == "both\n"


# -- the simulator's output is real output ------------------------------------------------------


def test_free_matches_procps_ng_4_layout_and_parses():
    host = eight_gpu_server()
    text = render.free(host, divisor=1)
    real = fixture_text("free/local-procps-ng-4.0.2-b.txt")
    assert text.splitlines()[0] == real.splitlines()[0]  # the header, byte for byte
    assert [len(w) for w in text.splitlines()[2].split()] == [5, 1, 1, 1]  # Swap: 0 0 0
    memory = parse_free(text, FreeUnits(multiplier=1))
    assert memory.total_bytes == host.memory_total_bytes
    assert memory.available_bytes == host.host_available_bytes()


def test_nvidia_smi_table_matches_the_590_driver_layout():
    table = render.table(eight_gpu_server()).splitlines()
    header = [
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    ]
    assert table[4:6] == header
    assert all(len(line) == 91 for line in table[1:] if line)
    assert "|  No running processes found" in "\n".join(table)


def test_query_csv_parses_with_the_same_parsers_and_has_the_real_header():
    host = eight_gpu_server()
    host.gpu(2).orphaned_mib = 96_410
    fields = ["index", "name", "memory.used", "memory.total"]
    gpus = parse_gpus(render.query_gpu(host, fields, header=True, units=True))
    assert [g.memory_used_mib for g in gpus][:3] == [3, 3, 96_413]
    assert gpus[0].memory_total_mib == 97_887
    apps_fields = [
        "timestamp",
        "gpu_name",
        "gpu_bus_id",
        "gpu_serial",
        "gpu_uuid",
        "pid",
        "process_name",
        "used_gpu_memory",
    ]
    empty = render.query_compute_apps(host, apps_fields, header=True, units=True)
    assert empty == fixture_text("nvidia-smi/csv-compute-apps-590.48.01-h200-idle-empty.txt")
    assert parse_compute_apps(empty) == ()


def test_the_stopped_gpu_services_observation_lists_only_installed_units():
    """The simulated shell runs the runbook's loop as sh would: a unit that is not installed
    is not a stopped service (it used to be listed: the loop read is-active alone)."""
    import yaml

    from conftest import REPO
    from runbook_runner.simhost.model import SimService

    host = eight_gpu_server()
    host.services += [SimService("dcgm-exporter"), SimService("dcgm", active=False, enabled=False)]
    spec = yaml.safe_load((REPO / "runbooks" / "gpu-oom-recovery.yaml").read_text())
    command = spec["observations"]["stopped_gpu_services"]["command"]
    status, out, _ = shell_run(command, host)
    assert (out, status) == ("dcgm\n", 0)


def test_gpus_narrows_a_recovery_and_never_widens_it(capsys):
    code, out, _ = drill(capsys, "--scenario", "other-team-gpu5", "--yes", "--gpus", "0-1")
    assert code == ExitCode.OK
    assert changes(out) == ["reset GPU 0", "reset GPU 1"]
    code, out, _ = drill(capsys, "--scenario", "other-team-gpu5", "--yes", "--gpus", "3-5")
    assert code == ExitCode.OK
    assert changes(out) == ["reset GPU 3"]  # GPU 5 is alice's: in the range, still left alone


def test_a_gpu_range_that_is_not_one_is_bad_input(capsys):
    code, _, err = drill(capsys, "--scenario", "oom-crash", "--yes", "--gpus", "9-3")
    assert code == ExitCode.BAD_INPUT
    assert "--gpus '9-3': the range runs backwards" in err


def holders_of(text: str, gpu: int) -> list[str]:
    """GPU ``gpu``'s holders before and after, from the run's before/after GPU table (its
    row: GPU, BEFORE, HELD BY, AFTER, HELD BY NOW; cells apart by two spaces or more)."""
    row = re.search(rf"^{gpu}  .*$", text, re.MULTILINE)
    assert row, text
    cells = re.split(r"\s{2,}", row.group(0).strip())
    return [cells[2], cells[4]]


def test_the_gpu_tables_name_each_gpus_holders_from_the_process_owners(capsys):
    """gpu-oom-recovery observes no --query-compute-apps record with a GPU: a GPU's holders
    come from the process-owners records (its /dev/nvidiaN), the GPU daemon left out."""
    code, out, _ = drill(capsys, "--scenario", "wedged-server", "--yes")
    assert code == ExitCode.OK
    before, after = holders_of(out, 3)
    assert before == "4123 sglang::scheduler_TP3 (ours)"
    assert after == "-"  # the server is gone; nvidia-persistenced still holds it, unnamed here
    code, out, _ = drill(capsys, "--scenario", "other-team-gpu5", "--yes")
    assert code == ExitCode.OK
    assert holders_of(out, 5) == ["7001 python3 (another-owner)"] * 2  # left alone
    assert holders_of(out, 4) == ["-", "-"]


def test_the_seed_drill_reads_in_about_40_lines_and_ends_with_its_verdict(capsys):
    """A line per rung that acted or waited, the rungs not needed folded, no failed rung in
    a run that reached its goal, and the verdict last: the GPUs reset and the next step."""
    code, out, _ = drill(capsys, "--scenario", "oom-crash", "--yes")
    assert code == ExitCode.OK
    before, _, _ = out.partition("\nDebrief:")
    lines = before.rstrip("\n").splitlines()
    assert len(lines) <= 42, "\n".join(lines)
    assert not [ln for ln in lines if "FAILED" in ln or " skipped " in ln]
    assert any(ln.startswith("  - not needed: reboot-for-xid, load-driver") for ln in lines)
    verdict = lines[-5:]
    assert verdict[0].startswith("goal holds on ")
    assert verdict[1].startswith("  done:")
    assert "reset-gpus: GPU 0" in verdict[1]
    assert "GPU 2" in verdict[1]
    assert verdict[3].startswith("  still wrong: nothing")
    assert verdict[4].startswith("  next:")
    assert "runbook check sglang-hicache-preflight" in verdict[4]


def test_the_verdict_is_a_field_of_the_json(capsys):
    code, document, _ = drill_json(capsys)
    assert code == ExitCode.OK
    verdict = document["verdict"]
    assert [d.split(":")[0] for d in verdict["done"]] == ["reset-gpus"]
    assert verdict["still_wrong"] == []
    assert verdict["held"] == []
    assert any("sglang-hicache-preflight" in n for n in verdict["next"])


def test_minus_v_lists_every_rung_not_needed_with_why(capsys):
    code, out, _ = drill(capsys, "--scenario", "oom-crash", "--yes", "-v")
    assert code == ExitCode.OK
    assert "not needed:" not in out
    assert re.search(r"reboot-for-xid +skipped .*nothing to fix: no-xid-needs-reboot", out)


def test_a_simulated_reboot_drops_the_connection_before_the_command_ends():
    """The client finds the host gone as soon as its reboot command ends: how many
    simulated seconds a run takes to notice must not depend on this machine's speed
    (a busy machine made `runbook compare` report xid-79 as differing by a second)."""
    import contextlib

    from runbook_runner.errors import ConnectionLost
    from runbook_runner.simhost import drill as drills
    from runbook_runner.transport import SshTransport, resolve_target

    practice = drills.start("xid-79")
    try:
        target = resolve_target(
            "127.0.0.1",
            port=practice.host.port,
            user="root",
            identity_files=[str(practice.identity)],
            known_hosts=practice.known_hosts,
            ssh_config=practice.ssh_config,
            ssh=None,  # as a drill connects: no program of this machine is asked
        )
        transport = SshTransport(target).connect()
        try:
            with contextlib.suppress(ConnectionLost):
                transport.run("reboot", timeout=60)
            assert not transport.alive()
            assert practice.host.reboots == 1
        finally:
            transport.close()
    finally:
        practice.close()
