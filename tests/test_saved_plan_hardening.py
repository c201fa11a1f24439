"""A saved plan that cannot be forged, moved or fed as a bomb (issue #38).

- The run sends exactly what was approved: a command the plan does not have for that step
  and target stops the run before it is sent (exit 10), even when the plan's digest was
  recomputed after the edit.
- A plan is bound to its host: the key the host offers in the handshake and the
  destination ``ssh -G`` resolves; another host is refused before any login (exit 3).
- Approval that cannot be recomputed: an OpenSSH signature (``ssh-keygen -Y``) checked
  against ``--allowed-signers``, or the SHA-256 the reviewer gave (``--approved-sha256``).
- The plan file is input like any other: every malformed one is exit 2 with one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.plan import saved
from runbook_runner.plan.identity import Target

REPO = Path(__file__).resolve().parent.parent


def forge(path: Path, change) -> dict:
    """Edit a plan file and recompute its digest with the project's own function, as an
    attacker who can write the file would."""
    document = json.loads(path.read_text())
    change(document)
    document["sha256"] = saved.digest(document)
    path.write_text(json.dumps(document))
    return document


def sha_of(path: Path) -> list[str]:
    return ["--approved-sha256", json.loads(path.read_text())["sha256"]]


# -- the comparison (pure) --------------------------------------------------------------------


def plan_with(commands, targets) -> saved.SavedPlan:
    action = {
        "step": "reset-gpus",
        "timing": "first",
        "commands": commands,
        "targets": [{"kind": "gpu", "key": k, "text": f"GPU {k}"} for k in targets],
    }
    return saved.SavedPlan({"actions": [action]})


def gpu(key: str) -> Target:
    return Target("gpu", key, f"GPU {key}")


def test_a_command_the_plan_has_for_its_target_passes():
    plan = plan_with(["reset 0", "reset 2"], ["0", "2"])
    saved.check_sent(plan, "reset-gpus", [(gpu("0"), "reset 0"), (gpu("2"), "reset 2")])


def test_a_command_other_than_the_plans_for_that_target_is_refused_naming_both():
    plan = plan_with(["echo harmless", "reset 2"], ["0", "2"])
    with pytest.raises(saved.NotApproved) as refused:
        saved.check_sent(plan, "reset-gpus", [(gpu("0"), "reset 0")])
    said = str(refused.value)
    assert "step reset-gpus on GPU 0" in said
    assert "'reset 0'" in said
    assert "'echo harmless'" in said
    # the command of another target is not this target's
    with pytest.raises(saved.NotApproved):
        saved.check_sent(plan, "reset-gpus", [(gpu("0"), "reset 2")])


def test_a_step_the_plan_has_no_command_for_is_refused():
    with pytest.raises(saved.NotApproved, match="has no command for it"):
        saved.check_sent(plan_with([], []), "reset-gpus", [(None, "reboot")])
    with pytest.raises(saved.NotApproved):
        saved.check_sent(plan_with(["reset 0"], ["0"]), "other-step", [(None, "reset 0")])
    # a step run once (no target) matches among the step's commands
    saved.check_sent(
        plan_with(["systemctl stop x"], []), "reset-gpus", [(None, "systemctl stop x")]
    )


# -- malformed plan files: exit 2, one line naming the file ------------------------------------


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    """A real plan document (a drill's: its host is simulated, its shape is the real one)."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    done = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "drill", "gpu-oom-recovery", "--dry-run",
         "--out", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    return json.loads(path.read_text())


def refused_in_one_line(capsys, path, *extra) -> str:
    code = main(["run", "--plan", str(path), "--approved-sha256", "0" * 64, *extra])
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT, (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert str(path) in err, err
    assert "Traceback" not in err
    assert "internal error" not in err
    return err


def test_dev_zero_is_refused_without_being_read(capsys):
    assert "a character device, not a regular file" in refused_in_one_line(capsys, "/dev/zero")


def test_a_directory_is_refused(capsys, tmp_path):
    assert "a directory" in refused_in_one_line(capsys, tmp_path)


def test_a_fifo_nobody_writes_is_refused_at_once(tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "run", "--plan", str(fifo),
         "--approved-sha256", "0" * 64],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"{fifo}" in done.stderr
    assert "FIFO" in done.stderr


def test_a_file_past_the_size_bound_is_refused(capsys, tmp_path):
    big = tmp_path / "plan.json"
    with big.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)  # sparse: no disk, and more than PLAN_LIMIT
    assert "larger than 16 MiB" in refused_in_one_line(capsys, big)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
        ('{"a":' * 40 + "1" + "}" * 40, "nested deeper than"),
        (b"\xff\xfe not utf-8", "not UTF-8"),
        ('{"format": "runbook-runner/plan", "version": NaN}', "not JSON"),
        ('{"format": "runbook-runner/plan", "version": 1, "n": ' + "9" * 100_000 + "}", "not JSON"),
        ("", "not JSON"),
        ("[]", "not a plan"),
    ],
    ids=["100000-deep", "41-deep", "not-utf8", "nan", "huge-number", "empty", "a-list"],
)
def test_a_plan_that_is_not_json_or_nests_too_deep_is_one_line(capsys, tmp_path, text, said):
    path = tmp_path / "plan.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert said in refused_in_one_line(capsys, path)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.__setitem__("actions", [{}]), "actions[0]: missing 'step'"),
        (lambda d: d.__setitem__("actions", "reset everything"), "actions: must be array"),
        (lambda d: d["actions"].append({**d["actions"][0], "targets": [{"kind": "gpu"}]}), "missing"),
        (lambda d: d["actions"][0].__setitem__("commands", [1, 2]), "must be string"),
        (lambda d: d.__setitem__("gates", {"allow_reboot": "yes", "allow_node_wide": False}), "gates.allow_reboot"),
        (lambda d: d.pop("host_key"), "missing 'host_key'"),
        (lambda d: d.__setitem__("extra", 1), "unknown key"),
        (lambda d: d.__setitem__("destination", {"hostname": "x", "port": "22", "user": None}), "destination.port"),
    ],
    ids=["empty-action", "actions-a-string", "target-without-key", "command-a-number", "gate-a-string",
         "no-host-key", "unknown-key", "port-a-string"],
)  # fmt: skip
def test_a_plan_of_the_wrong_shape_is_one_line_even_with_its_digest_recomputed(
    capsys, tmp_path, good_plan, change, said
):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(good_plan))
    forge(path, change)
    err = refused_in_one_line(capsys, path)
    assert said in err, err


def test_the_schema_shipped_in_the_package_is_the_one_that_checks(good_plan):
    assert saved.shape_problem(good_plan) is None
    assert saved.schema()["$id"].endswith("plan.schema.json")


def test_without_a_signature_or_an_approved_sha256_the_plan_is_refused(capsys, tmp_path, good_plan):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(good_plan))
    assert main(["run", "--plan", str(path)]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "--allowed-signers FILE" in err
    assert "--approved-sha256 HASH" in err
    assert len(err.strip().splitlines()) == 1


def test_an_approved_sha256_that_is_not_the_plans_is_refused(capsys, tmp_path, good_plan):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(good_plan))
    err = refused_in_one_line(capsys, path)  # "0" * 64
    assert "this is not the plan that was approved" in err


# -- over real SSH ----------------------------------------------------------------------------


def make_plan(capsys, host, path, *extra):
    from test_plan import make_plan as made

    code, out = made(capsys, host, path, *extra)
    assert code == ExitCode.OK, out
    return out


def apply(capsys, host, path, *extra):
    from test_runbooks_ssh import RECOVERY

    code = main(["run", RECOVERY, *host.cli_args(), "--plan", str(path), "--yes", *extra])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.ssh
def test_the_plan_records_the_host_key_and_the_destination_ssh_g_resolved(
    crashed, capsys, tmp_path
):
    plan = tmp_path / "plan.json"
    out = make_plan(capsys, crashed, plan)
    document = json.loads(plan.read_text())
    offered = crashed.host_public_key.split()
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", "-"], input=" ".join(offered[:2]), capture_output=True,
        text=True, check=True,
    ).stdout.split()[1]  # fmt: skip
    assert document["host_key"] == {"type": offered[0], "sha256": fingerprint}
    g = subprocess.run(
        ["ssh", "-G", "-p", str(crashed.port), "-l", crashed.user, "127.0.0.1"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    options = dict(line.split(" ", 1) for line in g if " " in line)
    assert document["destination"] == {
        "hostname": options["hostname"],
        "port": int(options["port"]),
        "user": options["user"],
    }
    assert f"plan sha256: {document['sha256']}" in out


@pytest.mark.ssh
def test_an_edited_command_with_its_digest_recomputed_is_refused_before_acting(
    crashed, capsys, tmp_path
):
    from test_run_ssh import destructive_calls, resets

    plan = tmp_path / "plan.json"
    make_plan(capsys, crashed, plan)

    def harmless(document):
        for action in document["actions"]:
            if action["step"] == "reset-gpus":
                action["commands"] = ["echo harmless" for _ in action["commands"]]

    forge(plan, harmless)
    crashed.clear_calls()
    code, out = apply(capsys, crashed, plan, *sha_of(plan))
    assert code == ExitCode.NOT_APPROVED, out
    line = next(x for x in out.splitlines() if "stopped before sending" in x)
    assert "step reset-gpus on GPU 0" in line
    assert "'echo harmless'" in line
    assert "nvidia-smi --gpu-reset -i 0" in line
    assert resets(crashed) == []
    assert destructive_calls(crashed) == []


@pytest.mark.ssh
def test_a_plan_for_host_a_on_host_b_is_refused_before_login(crashed, capsys, tmp_path):
    from sshd import started_hosts

    plan = tmp_path / "plan.json"
    make_plan(capsys, crashed, plan)
    with started_hosts(1) as (other,):
        # As made: the destination OpenSSH resolves for B is not the plan's: not even a
        # connection is opened.
        logins = other.logins()
        code, out = apply(capsys, other, plan, *sha_of(plan))
        assert code == ExitCode.HOST_UNREACHABLE, out
        assert "not connecting" in out

        # Edited to name B (destination too), digest recomputed, that SHA-256 approved: B
        # offers its own key in the handshake, which is not the plan's: no login.
        def to_b(document):
            document["host"] = f"127.0.0.1:{other.port}"
            document["asked"]["port"] = other.port
            document["destination"]["port"] = other.port

        forge(plan, to_b)
        code, out = apply(capsys, other, plan, *sha_of(plan))
        assert code == ExitCode.HOST_UNREACHABLE, out
        said = [x for x in out.splitlines() if "not logging in" in x]
        assert len(said) == 1, out
        assert json.loads(plan.read_text())["host_key"]["sha256"] in said[0]
        assert other.logins() == logins
        assert other.calls() == []


def signing_key(tmp_path: Path, name: str = "alice") -> tuple[Path, Path]:
    """An approver's key and an allowed_signers file naming it for runbook-plan."""
    key = tmp_path / f"{name}_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    public = Path(f"{key}.pub").read_text().split()
    signers = tmp_path / "allowed_signers"
    signers.write_text(f'{name} namespaces="runbook-plan" {public[0]} {public[1]}\n')
    return key, signers


@pytest.mark.ssh
def test_a_signed_plan_verified_by_ssh_keygen_runs(crashed, capsys, tmp_path, run_journals_in_tmp):
    from test_run_ssh import resets

    key, signers = signing_key(tmp_path)
    plan = tmp_path / "plan.json"
    out = make_plan(capsys, crashed, plan, "--sign-with", str(key))
    signature = Path(f"{plan}.sig")
    assert f"plan signed: {signature}" in out
    # OpenSSH itself says the signature is good (the oracle, not our code)
    checked = subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "alice", "-n", "runbook-plan",
         "-s", str(signature)],
        stdin=plan.open("rb"), capture_output=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    crashed.clear_calls()
    code, out = apply(capsys, crashed, plan, "--allowed-signers", str(signers))
    assert code == ExitCode.OK, out
    assert "approval: signed by alice (ssh-keygen -Y verify" in out
    assert {tuple(c[2:]) for c in resets(crashed)} == {("-i", "0"), ("-i", "2")}
    start = json.loads(next(run_journals_in_tmp.glob("*.jsonl")).read_text().splitlines()[0])
    assert start["plan"]["approved_by"] == "alice"  # the signer, as allowed_signers names them


@pytest.mark.ssh
def test_an_edited_gate_without_a_valid_signature_is_refused(crashed, capsys, tmp_path):
    from test_run_ssh import destructive_calls

    key, signers = signing_key(tmp_path)
    plan = tmp_path / "plan.json"
    make_plan(capsys, crashed, plan, "--sign-with", str(key))
    forge(plan, lambda d: d["gates"].__setitem__("allow_reboot", True))
    crashed.clear_calls()
    code, out = apply(capsys, crashed, plan, "--allowed-signers", str(signers))
    assert code == ExitCode.BAD_INPUT, out
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == 1, out
    assert "not a good signature of this plan by alice" in lines[0]
    assert crashed.calls() == []
    # signed by a key the allowed_signers file does not list: refused too
    (tmp_path / "mallory").mkdir()
    mallory, _ = signing_key(tmp_path / "mallory", "mallory")
    make_plan(capsys, crashed, plan, "--sign-with", str(mallory))
    code, out = apply(capsys, crashed, plan, "--allowed-signers", str(signers))
    assert code == ExitCode.BAD_INPUT, out
    assert "signed by no key" in out
    assert destructive_calls(crashed) == []


@pytest.mark.ssh
def test_a_plan_edited_without_its_digest_is_refused_before_any_connection(
    crashed, capsys, tmp_path
):
    plan = tmp_path / "plan.json"
    make_plan(capsys, crashed, plan)
    document = json.loads(plan.read_text())
    document["gates"]["allow_reboot"] = True  # the digest is left as it was
    plan.write_text(json.dumps(document))
    logins = crashed.logins()
    code, out = apply(capsys, crashed, plan, *sha_of(plan))
    assert code == ExitCode.BAD_INPUT, out
    assert "changed after it was made" in out
    assert crashed.logins() == logins  # not even a login: the file was judged first


def test_an_ssh_keygen_in_the_current_folder_never_approves_a_plan(tmp_path, monkeypatch):
    """With ``.`` first on PATH, a ``ssh-keygen`` in the current folder that says yes to
    anything is not the one asked (issue 48): helpers are found on absolute entries only,
    as --local finds commands; the real ssh-keygen refuses the forged signature."""
    from runbook_runner.ssh import signatures

    for name in ("ssh-keygen", "ssh"):
        liar = tmp_path / name
        liar.write_text("#!/bin/sh\necho mallory\nexit 0\n")
        liar.chmod(0o755)
    (tmp_path / "plan.json.sig").write_text("not a signature\n")
    (tmp_path / "allowed_signers").write_text("alice ssh-ed25519 AAAA\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f".:{os.environ['PATH']}")
    with pytest.raises(signatures.SignatureRefused):
        signatures.verify(b"{}", Path("plan.json.sig"), Path("allowed_signers"), None)
    from runbook_runner.ssh.openssh import ssh_program

    assert ssh_program() == shutil.which("ssh", path=os.environ["PATH"].split(":", 1)[1])
