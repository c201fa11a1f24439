"""`check` and `run` on many hosts, end to end over three real sshd instances (and a closed port)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sshd import free_port, started_hosts, wait_for

from conftest import REPO
from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.simhost.model import eight_gpu_server

pytestmark = pytest.mark.ssh

HEALTH = """\
name: fleet-health
title: GPU memory on a fleet
summary: s
parameters:
  idle_mib: {type: integer, default: 1024, description: d}
observations:
  gpus:
    command: nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
    parser: gpus
checks:
  gpu-memory-released:
    description: Every GPU's memory is released
    every: gpus
    expect: memory_used_mib <= idle_mib
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
    wait: {until: goal, timeout: 2, interval: 0.2}
"""


@pytest.fixture(scope="module")
def fleet():
    with started_hosts(3) as hosts:
        yield hosts


@pytest.fixture
def files(fleet, tmp_path):
    """gpu1..gpu3 are the three sshd; gpu4 is a closed port on 127.0.0.1."""
    for host in fleet:
        host.set_state(eight_gpu_server())
        host.clear_calls()
    closed = free_port()
    known = tmp_path / "known_hosts"
    known.write_text("".join(host.known_hosts.read_text() for host in fleet))
    config = tmp_path / "ssh_config"
    blocks = [
        f"Host gpu{i}\n  HostName 127.0.0.1\n  Port {host.port}\n  IdentityFile {host.client_key}\n"
        for i, host in enumerate(fleet, 1)
    ]
    config.write_text("".join(blocks) + f"Host gpu4\n  HostName 127.0.0.1\n  Port {closed}\n")
    ini = tmp_path / "hosts"
    ini.write_text(
        "[gpus]\n"
        + "".join(
            f"gpu{i} ansible_host=127.0.0.1 ansible_port={host.port} "
            f"ansible_ssh_private_key_file={host.client_key}\n"
            for i, host in enumerate(fleet, 1)
        )
        + f"[spare]\ngpu4 ansible_host=127.0.0.1 ansible_port={closed}\n"
        + f"[all:vars]\nansible_user={fleet[0].user}\n"
    )
    yaml_inventory = tmp_path / "hosts.yaml"
    yaml_inventory.write_text(
        "all:\n  children:\n    pool:\n      children:\n        gpus:\n          hosts:\n"
        + "".join(
            f"            gpu{i}: {{ansible_host: 127.0.0.1, ansible_port: {host.port}, "
            f"ansible_user: {host.user}, ansible_ssh_private_key_file: {host.client_key}}}\n"
            for i, host in enumerate(fleet, 1)
        )
    )
    runbook = tmp_path / "fleet-health.yaml"
    runbook.write_text(HEALTH)
    return {
        "known": str(known),
        "config": str(config),
        "ini": str(ini),
        "yaml": str(yaml_inventory),
        "runbook": str(runbook),
        "common": ["--known-hosts", str(known), "--ssh-config", str(config)],
    }


def orphan(host, index=3, mib=81920, resets_fail=0):
    state = eight_gpu_server(services=[])  # no persistence daemon holding the GPUs
    state.gpu(index).orphaned_mib = mib
    state.gpu(index).resets_that_fail = resets_fail
    host.set_state(state)


def resets(host):
    return [call for call in host.calls() if call[:2] == ["nvidia-smi", "--gpu-reset"]]


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_node_set_over_ssh_config_aliases_with_a_user(fleet, files, capsys):
    code, out, _ = cli(
        capsys, "check", files["runbook"], "--hosts", f"{fleet[0].user}@gpu[1-3]", *files["common"]
    )
    assert code == ExitCode.OK, out
    assert "gpu[1-3]: ok" in out
    assert "3 hosts: 3 ok" in out
    assert all(host.logins() >= 1 for host in fleet)


def test_mixed_outcomes_grouped_with_an_unreachable_host_and_the_worst_exit_code(
    fleet, files, capsys
):
    orphan(fleet[1])
    code, out, _ = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        files["ini"],
        "--known-hosts",
        files["known"],
    )
    assert code == ExitCode.HOST_UNREACHABLE  # the worst: a host that could not be seen
    lines = out.splitlines()
    assert "gpu[1,3]: ok" in lines
    assert (
        "gpu2: gpu-memory-released failing — GPU 3: memory.used 81,923 MiB, "
        "expected <= 1,024 MiB (idle_mib)"
    ) in lines
    assert "gpu4: unreachable — connection refused" in lines
    assert lines[-1] == "4 hosts: 2 ok, 1 failing, 1 unreachable"
    # The ok group first, the worst last: the eye ends on what needs doing.
    assert lines.index("gpu[1,3]: ok") < lines.index("gpu4: unreachable — connection refused")


def test_groups_and_limit_from_a_yaml_inventory(fleet, files, capsys):
    orphan(fleet[0])
    code, out, _ = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        files["yaml"],
        "--hosts",
        "@pool",
        "--limit",
        "gpu*:!gpu1",
        "--known-hosts",
        files["known"],
    )
    assert code == ExitCode.OK, out
    assert "gpu[2-3]: ok" in out
    assert "2 hosts" in out
    assert fleet[0].calls() == []  # gpu1 was left out: never contacted


def test_limit_and_groups_from_an_ini_inventory(fleet, files, capsys):
    code, out, _ = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        files["ini"],
        "--hosts",
        "@gpus",
        "--limit",
        "gpu1,gpu3",
        "--known-hosts",
        files["known"],
    )
    assert code == ExitCode.OK, out
    assert "gpu[1,3]: ok" in out
    assert fleet[1].calls() == []


def test_an_unknown_group_is_bad_input(files, capsys):
    code, _, err = cli(
        capsys, "check", files["runbook"], "--inventory", files["ini"], "--hosts", "@nope"
    )
    assert code == ExitCode.BAD_INPUT
    assert "no group @nope" in err
    assert "Traceback" not in err


def test_json_has_a_record_per_host_and_jsonl_a_line_per_host(fleet, files, capsys):
    orphan(fleet[2])
    code, out, _ = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        files["ini"],
        "--known-hosts",
        files["known"],
        "--json",
    )
    document = json.loads(out)
    assert code == document["exit_code"] == ExitCode.HOST_UNREACHABLE
    by_host = {record["host"]: record for record in document["hosts"]}
    assert [r["host"] for r in document["hosts"]] == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert by_host["gpu3"]["outcome"] == "failing"
    assert by_host["gpu3"]["exit_code"] == 1
    assert by_host["gpu3"]["state"]["gpus"][3]["memory_used_mib"] == 81923
    assert by_host["gpu4"]["outcome"] == "unreachable"
    assert by_host["gpu1"]["ok"] is True

    code, out, err = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        files["ini"],
        "--known-hosts",
        files["known"],
        "--jsonl",
    )
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["host"] for r in records) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert "4 hosts: 2 ok, 1 failing, 1 unreachable" in err  # people's text on stderr


def test_a_refused_key_is_a_per_host_outcome(fleet, files, capsys, tmp_path):
    wrong = tmp_path / "hosts.ini"
    wrong.write_text(
        f"gpu1 ansible_host=127.0.0.1 ansible_port={fleet[0].port} "
        f"ansible_ssh_private_key_file={fleet[1].client_key} ansible_user={fleet[0].user}\n"
        f"gpu2 ansible_host=127.0.0.1 ansible_port={fleet[1].port} "
        f"ansible_ssh_private_key_file={fleet[1].client_key} ansible_user={fleet[1].user}\n"
    )
    code, out, _ = cli(
        capsys,
        "check",
        files["runbook"],
        "--inventory",
        str(wrong),
        "--known-hosts",
        files["known"],
    )
    assert code == ExitCode.HOST_UNREACHABLE
    assert "gpu2: ok" in out
    assert "gpu1: refused — authentication failed" in out


def test_serial_rollout_stops_after_max_fail_and_gives_each_host_a_journal(
    fleet, files, capsys, run_journals_in_tmp
):
    orphan(fleet[0])
    orphan(fleet[1], resets_fail=99)  # its reset never works
    orphan(fleet[2])
    code, out, _ = cli(
        capsys,
        "run",
        files["runbook"],
        "--inventory",
        files["ini"],
        "--hosts",
        "@gpus",
        "--serial",
        "1",
        "--max-fail",
        "1",
        "--yes",
        "--known-hosts",
        files["known"],
    )
    assert code == ExitCode.BREAKER, out
    assert resets(fleet[0]) == [["nvidia-smi", "--gpu-reset", "-i", "3"]]
    assert resets(fleet[1]), out  # tried, failed
    assert resets(fleet[2]) == []  # not started: the rollout stopped at one failure
    assert "gpu1: ok — goal reached by reset-gpus" in out
    assert "gpu2: goal NOT reached" in out
    assert "gpu3: not started — the breaker tripped: 1 host failed (--max-fail 1)" in out
    journals = sorted(p.name for p in run_journals_in_tmp.glob("*.jsonl"))
    assert len(journals) == 2
    assert "-fleet-health-gpu1-" in journals[0] + journals[1]
    assert "-fleet-health-gpu2-" in journals[0] + journals[1]


def test_rollout_goes_on_past_a_failure_under_a_higher_max_fail(fleet, files, capsys):
    orphan(fleet[0], resets_fail=99)
    orphan(fleet[2])
    code, out, _ = cli(
        capsys,
        "run",
        files["runbook"],
        "--hosts",
        "gpu[1-3]",
        "--serial",
        "2",
        "--max-fail",
        "2",
        "--yes",
        *files["common"],
        "--user",
        fleet[0].user,
    )
    assert code == ExitCode.GOAL_NOT_MET
    assert resets(fleet[2]) == [["nvidia-smi", "--gpu-reset", "-i", "3"]]
    assert "gpu2: ok — goal held already" in out
    assert "gpu3: ok — goal reached by reset-gpus" in out
    assert "gpu1: goal NOT reached — step reset-gpus failed" in out


def test_each_host_of_a_rollout_has_its_verdict_in_the_json(fleet, files, capsys):
    """The same verdict as on one host, per host: done (each action with its targets),
    left alone, still wrong, next."""
    orphan(fleet[0], resets_fail=99)
    orphan(fleet[2])
    code, out, _ = cli(
        capsys, "run", files["runbook"], "--hosts", "gpu[1-3]", "--max-fail", "2", "--yes",
        "--json", *files["common"], "--user", fleet[0].user,
    )  # fmt: skip
    assert code == ExitCode.GOAL_NOT_MET, out
    verdicts = {h["host"]: h["verdict"] for h in json.loads(out)["hosts"]}
    assert set(verdicts) == {"gpu1", "gpu2", "gpu3"}
    assert verdicts["gpu2"]["done"] == []  # held already: nothing done
    assert verdicts["gpu2"]["still_wrong"] == []
    assert [d.split(":")[0] for d in verdicts["gpu3"]["done"]] == ["reset-gpus"]
    assert "GPU 3" in verdicts["gpu3"]["done"][0]
    assert verdicts["gpu3"]["still_wrong"] == []
    assert verdicts["gpu1"]["still_wrong"], verdicts["gpu1"]  # its reset failed: still wrong


def _rollout_on_a_terminal(files, user, answers: str, *extra: str) -> subprocess.CompletedProcess:
    import pty

    controller, terminal = pty.openpty()
    os.write(controller, answers.encode())
    try:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "runbook_runner",
                "run",
                files["runbook"],
                "--hosts",
                "gpu[1-3]",
                "--user",
                user,
                *files["common"],
                *extra,
            ],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=REPO,
            env={**os.environ, "NO_COLOR": "1"},
        )
    finally:
        os.close(terminal)
        os.close(controller)


def test_a_destructive_rollout_asks_once_per_batch_listing_hosts_and_steps(fleet, files):
    for host in fleet:
        orphan(host)
    result = _rollout_on_a_terminal(files, fleet[0].user, "y\ny\n", "--serial", "2")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert result.stdout.count("Run on th") == 2  # two batches, two questions
    assert "Run it?" not in result.stdout  # no question per step or per host
    assert "Batch 1/2: 2 hosts: gpu[1-2]" in result.stdout
    assert "Batch 2/2: 1 host: gpu3" in result.stdout
    assert "reset-gpus: Reset only the GPUs that still hold memory (affects gpu)" in result.stdout
    assert "$ nvidia-smi --gpu-reset -i {{ item.index }}" in result.stdout
    assert all(resets(host) for host in fleet)
    # The first batch had finished before the second question came.
    first_done = result.stdout.index("gpu2: ")
    assert first_done < result.stdout.index("Batch 2/2")


def test_a_declined_batch_runs_nothing_there_or_after(fleet, files):
    for host in fleet:
        orphan(host)
    result = _rollout_on_a_terminal(files, fleet[0].user, "n\n", "--serial", "2")
    assert result.returncode == ExitCode.DECLINED
    assert result.stdout.count("Run on th") == 1
    assert not any(resets(host) for host in fleet)
    assert "gpu[1-3]: not started — batch 1 was declined" in result.stdout


def test_a_terminal_shows_the_progress_line(fleet, files):
    import pty

    orphan(fleet[1])
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "runbook_runner", "check", files["runbook"], "--inventory",
         files["ini"], "--known-hosts", files["known"]],
        stdout=terminal,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert process.wait(timeout=60) == ExitCode.HOST_UNREACHABLE
    text = output.decode()
    assert "\r\x1b[K4/4 hosts, 1 failing, 1 unreachable" in text
    assert "gpu[1,3]: ok" in text


def test_groups_from_clustershells_configuration_without_an_inventory(fleet, files, tmp_path):
    (tmp_path / "groups.d").mkdir()
    (tmp_path / "groups.d" / "site.yaml").write_text('site:\n    gpus: "gpu[1-3]"\n')
    (tmp_path / "groups.conf").write_text(
        f"[Main]\ndefault: site\nautodir: {tmp_path / 'groups.d'}\n"
    )
    command = [
        sys.executable, "-m", "runbook_runner", "check", files["runbook"], "--hosts", "@gpus",
        "--user", fleet[0].user, *files["common"],
    ]  # fmt: skip
    env = {**os.environ, "CLUSTERSHELL_CFGDIR": str(tmp_path), "NO_COLOR": "1"}
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False
    )
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert "gpu[1-3]: ok" in result.stdout
    (tmp_path / "groups.conf").write_text("[Main]\ndefault: nowhere\n")
    broken = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False
    )
    assert broken.returncode == ExitCode.BAD_INPUT
    assert "Traceback" not in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1


def test_each_host_has_its_own_lock_a_locked_host_is_its_own_outcome(fleet, files, capsys):
    from runbook_runner.ssh.hostlock import LOCK_NAME

    for host in fleet:
        orphan(host)
    lock = fleet[1].root / "sim" / LOCK_NAME
    held = fleet[1].ssh(
        f"mkdir {lock} && : > {lock}/alive && "
        f"printf '%s' '{{\"operator\": \"alice\"}}' > {lock}/owner"
    )
    assert held.returncode == 0, held.stderr
    # A live holder, as another run's would be: a process holding flock on the lock's file.
    holder = subprocess.Popen(["flock", str(lock / "alive"), "cat"], stdin=subprocess.PIPE)
    try:
        wait_for(
            lambda: subprocess.run(["flock", "-n", str(lock / "alive"), "true"]).returncode == 1,
            60,
            "the holder to take the lock",
        )
        code, out, _ = cli(
            capsys, "run", files["runbook"], "--hosts", "gpu[1-3]", "--serial", "3", "--yes",
            "--user", fleet[0].user, *files["common"],
        )  # fmt: skip
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        fleet[1].ssh(f"rm -rf {lock}")
    assert code == ExitCode.LOCKED
    assert "gpu2: locked — gpu2 is locked by alice" in out
    assert resets(fleet[1]) == []
    assert resets(fleet[0])
    assert resets(fleet[2])
    assert "gpu[1,3]: ok — goal reached by reset-gpus" in out


def test_a_dry_run_rollout_asks_nothing_and_changes_nothing(fleet, files, capsys):
    for host in fleet:
        orphan(host)
    code, out, _ = cli(
        capsys, "run", files["runbook"], "--hosts", "gpu[1-3]", "--serial", "3", "--dry-run",
        "--user", fleet[0].user, *files["common"],
    )  # fmt: skip
    assert code == ExitCode.OK, out
    # One plan per host, folded: the same first action on the same GPU on each.
    assert re.search(r"gpu\[1-3\]: plan: first .*reset-gpus \(3\).*would-act \(exit 0\)", out), out
    assert not any(resets(host) for host in fleet)


def test_a_host_that_never_speaks_ssh_times_out_as_its_own_outcome(fleet, files, capsys, tmp_path):
    import socket

    # The silent host alone has a short ConnectTimeout (its own address, 127.0.0.2, in the
    # ssh config): the real sshd's handshake keeps one a loaded machine cannot miss.
    with socket.create_server(("127.0.0.2", 0)) as silent:  # accepts TCP, never says a word
        inventory = tmp_path / "hosts.ini"
        inventory.write_text(
            f"gpu1 ansible_host=127.0.0.1 ansible_port={fleet[0].port} "
            f"ansible_ssh_private_key_file={fleet[0].client_key} ansible_user={fleet[0].user}\n"
            f"mute1 ansible_host=127.0.0.2 ansible_port={silent.getsockname()[1]}\n"
        )
        config = tmp_path / "ssh_config"
        config.write_text(
            "Host 127.0.0.2\n  ConnectTimeout 1\nHost 127.0.0.1\n  ConnectTimeout 60\n"
        )
        code, out, _ = cli(
            capsys, "check", files["runbook"], "--inventory", str(inventory), "--known-hosts",
            files["known"], "--ssh-config", str(config),
        )  # fmt: skip
    assert code == ExitCode.HOST_UNREACHABLE
    assert "gpu1: ok" in out
    assert "mute1: unreachable — SSH handshake failed" in out
    assert out.splitlines()[-1] == "2 hosts: 1 ok, 1 unreachable"


def test_a_host_that_cannot_be_observed_is_stopped_with_exit_6_not_escalated(fleet, files, capsys):
    """Evidence before action on many hosts too: gpu2's driver is not loaded, so its reset
    is blocked (cannot tell), the others recover, and the fleet exits 6."""
    for host in fleet:
        orphan(host)
    state = eight_gpu_server(services=[])
    state.driver_loaded = False
    fleet[1].set_state(state)
    code, out, _ = cli(
        capsys, "run", files["runbook"], "--hosts", "gpu[1-3]", "--serial", "3", "--yes",
        "--max-fail", "3", "--user", fleet[0].user, *files["common"],
    )  # fmt: skip
    assert code == ExitCode.CANNOT_TELL, out
    assert "gpu2: stopped: cannot tell — before reset-gpus" in out
    assert resets(fleet[1]) == []
    assert resets(fleet[0])
    assert resets(fleet[2])


MANY_CHECKS = HEALTH.replace(
    "goal: [gpu-memory-released]",
    """  gpu-count:
    description: Eight GPUs
    expect: count(gpus) == 8
  gpu-memory-known:
    description: Every GPU reports its memory
    every: gpus
    expect: memory_total_mib > 0
  gpu-memory-small:
    description: Every GPU under 100 GiB used
    every: gpus
    expect: memory_used_mib < 102400
goal: [gpu-memory-released, gpu-count, gpu-memory-known, gpu-memory-small]""",
)


def test_a_host_whose_checks_cannot_be_told_is_grouped_as_cannot_tell_on_one_short_line(
    fleet, files, capsys, tmp_path
):
    """Issue 25: nvidia-smi cannot answer on gpu2 (its driver is not loaded): that host is
    'cannot tell' (exit 6), not 'failing', and the reason the four checks share is said once,
    shortened; --json has it whole."""
    runbook = tmp_path / "many-checks.yaml"
    runbook.write_text(MANY_CHECKS.replace("name: fleet-health", "name: many-checks"))
    state = eight_gpu_server()
    state.driver_loaded = False
    fleet[1].set_state(state)
    argv = ["check", str(runbook), "--hosts", "gpu[1-3]", "--user", fleet[0].user]
    code, out, _ = cli(capsys, *argv, *files["common"])
    assert code == ExitCode.CANNOT_TELL, out
    lines = out.splitlines()
    (line,) = [x for x in lines if x.startswith("gpu2: ")]
    assert line.startswith("gpu2: 4 checks (gpu-memory-released, gpu-count, gpu-memory-known, ...)")
    assert " cannot tell — " in line
    assert line.count("cannot tell") == 1  # one reason, said once
    assert len(line) <= len("gpu2: ") + 160
    assert "gpu[1,3]: ok" in lines
    assert lines[-1] == "3 hosts: 2 ok, 1 cannot tell"
    code, out, _ = cli(capsys, *argv, *files["common"], "--json")
    (record,) = [h for h in json.loads(out)["hosts"] if h["host"] == "gpu2"]
    assert record["outcome"] == "cannot tell"
    assert record["exit_code"] == 6
    assert record["summary"].startswith(line[len("gpu2: ") :].removesuffix("..."))
    assert {c["status"] for c in record["checks"]} == {"cannot-tell"}


def test_an_internal_error_exits_70_on_one_host_and_on_a_fleet(fleet, files, capsys, monkeypatch):
    """One error-to-exit table (cli/outcomes.py): a bug while checking is 70 on one host and
    the same 70 (outcome 'internal error') for each host of a fleet, not 6."""
    from runbook_runner.engine import Runner

    def broken(self, when):
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(Runner, "check_goal", broken)
    common = ["--user", fleet[0].user, *files["common"]]
    code, _, err = cli(capsys, "check", files["runbook"], "--host", "gpu1", *common)
    assert code == ExitCode.INTERNAL == 70
    assert "internal error: ZeroDivisionError: injected" in err
    code, out, _ = cli(capsys, "check", files["runbook"], "--hosts", "gpu[1-2]", *common)
    assert code == ExitCode.INTERNAL, out
    assert "gpu[1-2]: internal error: ZeroDivisionError: injected" in out
    assert out.splitlines()[-1] == "2 hosts: 2 internal error"


def test_a_step_that_times_out_and_leaves_the_goal_unmet_exits_8_on_one_host_and_a_fleet(
    fleet, files, capsys, tmp_path
):
    runbook = tmp_path / "hang.yaml"
    runbook.write_text(
        "name: hang\ntitle: t\nsummary: s\n"
        "observations:\n  marker: {command: 'cat \"$RUNBOOK_LOCK_DIR/never\" 2>/dev/null || true', parser: lines}\n"
        "checks:\n  never: {description: never true, expect: count(marker) == 1}\n"
        "goal: [never]\nsteps:\n"
        "  - {id: hang, title: hang, run: 'exec sleep 30', timeout: 0.5}\n"
    )
    common = ["--user", fleet[0].user, *files["common"]]
    code, out, _ = cli(capsys, "run", str(runbook), "--host", "gpu1", *common)
    assert code == ExitCode.TIMED_OUT == 8, out
    code, out, _ = cli(capsys, "run", str(runbook), "--hosts", "gpu[1-2]", "--serial", "2", *common)
    assert code == ExitCode.TIMED_OUT, out
    assert "gpu[1-2]: goal NOT reached — step hang timed out" in out
    assert out.splitlines()[-1] == "2 hosts: 2 timed out"


def test_ssh_config_dev_null_is_no_configuration_as_for_ssh_f(fleet, files, capsys):
    """``--ssh-config /dev/null`` reads as ``ssh -F /dev/null`` does: no configuration (the
    inventory says where each host is), on one host and on a fleet; a folder is refused."""
    host = fleet[0]
    one = ["--host", "127.0.0.1", "--port", str(host.port), "--user", host.user]
    one += ["-i", str(host.client_key), "--known-hosts", str(host.known_hosts)]
    code, out, err = cli(capsys, "check", files["runbook"], *one, "--ssh-config", os.devnull)
    assert code == ExitCode.OK, out + err
    code, out, err = cli(
        capsys, "check", files["runbook"], "--inventory", files["ini"], "--limit", "gpu[1-3]",
        "--known-hosts", files["known"], "--ssh-config", os.devnull,
    )  # fmt: skip
    assert code == ExitCode.OK, out + err
    assert "gpu[1-3]: ok" in out
    code, out, err = cli(
        capsys, "check", files["runbook"], "--inventory", files["ini"], "--ssh-config", "/",
    )  # fmt: skip
    assert code == ExitCode.BAD_INPUT  # once, before any host: not 'unreachable' on each
    assert "/: a folder" in err
    assert "unreachable" not in out


def _families(path):
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def _value(family, **labels):
    (sample,) = [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return sample.value


def test_prometheus_file_for_the_textfile_collector_parses_and_says_each_host_and_check(
    fleet, files, capsys, tmp_path
):
    """--prometheus writes gauges node_exporter's textfile collector reads; the Python
    client's own parser reads them back (as promtool check metrics would)."""
    orphan(fleet[1])
    prom = tmp_path / "runbook.prom"
    prom.write_text("old contents\n")
    code, out, _ = cli(
        capsys, "check", files["runbook"], "--inventory", files["ini"], "--known-hosts",
        files["known"], "--prometheus", str(prom),
    )  # fmt: skip
    assert code == ExitCode.HOST_UNREACHABLE, out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # renamed
    families = _families(prom)
    assert {f.type for f in families.values()} == {"gauge"}
    status = families["runbook_check_status"]
    check = {"runbook": "fleet-health", "check": "gpu-memory-released"}
    assert _value(status, host="gpu2", status="failing", **check) == 1
    assert _value(status, host="gpu2", status="ok", **check) == 0
    assert _value(status, host="gpu1", status="ok", **check) == 1
    assert not [s for s in status.samples if s.labels["host"] == "gpu4"]  # never observed
    outcome = families["runbook_host_outcome"]
    assert _value(outcome, host="gpu4", outcome="unreachable") == 1
    assert _value(outcome, host="gpu4", outcome="ok") == 0
    assert _value(outcome, host="gpu2", outcome="failing") == 1
    assert _value(families["runbook_host_exit_code"], host="gpu2") == 1
    assert _value(families["runbook_host_exit_code"], host="gpu4") == 3
    assert families["runbook_last_run_timestamp_seconds"].samples[0].value > 1.7e9
    # One host: the same metrics.
    host = fleet[0]
    one = ["--host", "127.0.0.1", "--port", str(host.port), "--user", host.user]
    one += ["-i", str(host.client_key), "--known-hosts", str(host.known_hosts)]
    assert cli(capsys, "check", files["runbook"], *one, "--prometheus", str(prom))[0] == 0
    families = _families(prom)
    assert _value(families["runbook_host_outcome"], host="127.0.0.1", outcome="ok") == 1


def test_prometheus_label_values_are_escaped():
    from prometheus_client.parser import text_string_to_metric_families

    from runbook_runner.fleet.prometheus import HostResult, render

    odd = 'gpu"1\\\nx'
    text = render("r", [HostResult(odd, "ok", 0, 0.5, (("c", "ok"),))], ("ok", "failing"), 1.5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    hosts = {s.labels["host"] for s in families["runbook_check_status"].samples}
    assert hosts == {odd}
    assert families["runbook_host_duration_seconds"].samples[0].value == 0.5
