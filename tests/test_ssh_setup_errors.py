"""Local SSH problems (key files, ssh config, known_hosts) are one clear line and the right exit code.

Exit 2 for a problem on our side (a key file, the ssh config), 3 for the host (its key
is unknown, changed or revoked). Never a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sshd import keygen

from conftest import TESTS
from runbook_runner.cli import main
from runbook_runner.errors import SshSetupError, UnknownHostKey
from runbook_runner.exitcodes import ExitCode
from runbook_runner.ssh import knownhosts
from runbook_runner.ssh.config import build_target, parse_ssh_g, resolve_target
from runbook_runner.transport import SshTransport

MINI = str(TESTS / "runbooks" / "mini-recovery.yaml")


def check(capsys, host, *extra, identity=None, known_hosts=None, config=None):
    argv = ["check", MINI, "--host", "127.0.0.1", "--port", str(host.port), "--user", host.user]
    argv += ["-i", str(identity or host.client_key)]
    argv += ["--known-hosts", str(known_hosts or host.known_hosts)]
    if config is not None:
        argv += ["--ssh-config", str(config)]
    code = main([*argv, *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.ssh
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: d / "missing", "no such file"),
        (lambda d: d, "a directory"),
        (
            lambda d: _write(d / "id.pub", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBqy x\n"),
            "a public key",
        ),
        (lambda d: _write(d / "garbage", "not a key at all\n", 0o600), "not a private key"),
        (lambda d: _write(d / "open", "irrelevant\n", 0o644), "too open"),
    ],
    ids=["missing", "directory", "public-key", "not-a-key", "too-open"],
)
def test_a_bad_identity_file_is_named_and_exits_2(capsys, gpu_host, tmp_path, make, problem):
    path = make(tmp_path)
    code, _, err = check(capsys, gpu_host, identity=path)
    assert code == ExitCode.BAD_INPUT
    assert str(path) in err
    assert problem in err
    assert err.count("\n") == 1


def _write(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.ssh
def test_wrong_passphrase_three_times_is_a_local_error(gpu_host, tmp_path):
    key = tmp_path / "locked"
    keygen(key, "encrypted", passphrase="correct horse")
    asked = []
    target = resolve_target(
        "127.0.0.1",
        port=gpu_host.port,
        user=gpu_host.user,
        identity_files=[str(key)],
        known_hosts=gpu_host.known_hosts,
    )
    with pytest.raises(SshSetupError, match="wrong passphrase") as raised:
        SshTransport(target, lambda prompt: asked.append(prompt) or "wrong").connect()
    assert len(asked) == 3
    assert str(key) in asked[0]
    assert str(key) in str(raised.value)


@pytest.mark.ssh
def test_an_encrypted_key_in_the_agent_needs_no_passphrase(gpu_host, tmp_path, monkeypatch):
    key = tmp_path / "locked"
    keygen(key, "encrypted", passphrase="correct horse")
    authorized = gpu_host.root / "authorized_keys"
    original = authorized.read_text()
    authorized.write_text(original + (tmp_path / "locked.pub").read_text())
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        from sshd import wait_for

        wait_for(sock.exists, 60, "ssh-agent")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        plain = tmp_path / "plain"
        shutil.copy(key, plain)
        subprocess.run(
            ["ssh-keygen", "-p", "-P", "correct horse", "-N", "", "-f", str(plain)],
            check=True,
            capture_output=True,
        )
        subprocess.run(["ssh-add", str(plain)], check=True, capture_output=True)
        target = resolve_target(
            "127.0.0.1",
            port=gpu_host.port,
            user=gpu_host.user,
            identity_files=[str(key)],
            known_hosts=gpu_host.known_hosts,
        )
        asked = []
        with SshTransport(target, lambda prompt: asked.append(prompt) or None).connect() as t:
            assert t.run("echo in", timeout=120).stdout == "in\n"
        assert asked == []
    finally:
        authorized.write_text(original)
        agent.terminate()
        agent.wait(timeout=10)


@pytest.mark.ssh
def test_a_damaged_known_hosts_line_is_skipped_with_a_warning(capsys, gpu_host, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(
        "@cert-authority\nbroken-line ssh-ed25519 !!!\n" + gpu_host.known_hosts.read_text()
    )
    code, _, err = check(capsys, gpu_host, known_hosts=known)
    assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET)
    assert f"{known}:1:" in err
    assert f"{known}:2:" in err


@pytest.mark.ssh
def test_a_revoked_key_is_refused_even_with_accept_new(capsys, gpu_host, tmp_path):
    known = tmp_path / "known_hosts"
    key_line = " ".join(gpu_host.host_public_key.split()[:2])
    known.write_text(f"@revoked * {key_line}\n")
    code, _, err = check(capsys, gpu_host, "--accept-new-host-key", known_hosts=known)
    assert code == ExitCode.HOST_UNREACHABLE
    assert "REVOKED" in err
    assert known.read_text() == f"@revoked * {key_line}\n"


@pytest.mark.ssh
def test_strict_host_key_checking_no_is_said_once_and_unknown_keys_are_still_refused(
    capsys, gpu_host, tmp_path
):
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  StrictHostKeyChecking no\n")
    known = tmp_path / "known_hosts"
    known.write_text("")
    code, _, err = check(capsys, gpu_host, known_hosts=known, config=config)
    assert code == ExitCode.HOST_UNREACHABLE
    assert err.count("StrictHostKeyChecking no") == 1
    assert "unknown host key" in err
    assert known.read_text() == ""
    # one line: the refusal, why the config's "no" is not followed, and what to do
    assert err.count("\n") == 1, err
    assert "is not followed (it would accept any key" in err
    assert "re-run with --accept-new-host-key" in err


@pytest.mark.ssh
def test_known_hosts_dev_null_with_accept_new_connects_and_records_nothing(
    capsys, gpu_host, tmp_path
):
    """The most common set-up of public ssh configs: StrictHostKeyChecking no and
    UserKnownHostsFile /dev/null. With --accept-new-host-key the key is accepted for this
    connection and recorded nowhere, as ssh does (it was 'Invalid argument', an fsync)."""
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gpu\n  HostName 127.0.0.1\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  GlobalKnownHostsFile /dev/null\n"
    )
    argv = ["check", MINI, "--host", "gpu", "-F", str(config), "-o", f"Port={gpu_host.port}"]
    argv += ["-o", f"User={gpu_host.user}", "-i", str(gpu_host.client_key)]
    code = main([*argv, "--accept-new-host-key"])
    out, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET), err
    assert "for this connection only: UserKnownHostsFile is /dev/null" in err
    assert "recorded the host key" not in out + err
    assert not list(tmp_path.glob("known_hosts*"))
    # without --accept-new-host-key: refused, with why
    assert main(argv) == ExitCode.HOST_UNREACHABLE
    assert "StrictHostKeyChecking no is not followed" in capsys.readouterr().err


@pytest.mark.ssh
def test_ssh_dash_o_j_f_reach_the_host_as_with_ssh(capsys, gpu_host, tmp_path):
    """-F FILE, -o KEY=VALUE (repeatable) and -J JUMP on runbook's command line, as ssh's."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu jump\n  HostName 127.0.0.1\n  Port 1\n  IdentityFile {gpu_host.client_key}\n"
        f"  UserKnownHostsFile {gpu_host.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
    )
    port, user = gpu_host.port, gpu_host.user
    options = ["-o", f"Port={port}", "-o", f"User={user}", "-o", "Port=1"]
    code = main(["check", MINI, "--host", "gpu", "-F", str(config), *options])
    _, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET), err
    jump = f"{user}@jump:{port}"
    code = main(["check", MINI, "--host", "gpu", "-F", str(config), *options, "-J", jump])
    _, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.GOAL_NOT_MET), err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "Port"], "-o 'Port': not an ssh option"),
        (["-o", "=x"], "not an ssh option"),
        (["-o", "NoSuchOption=yes"], "Bad configuration option: nosuchoption"),
        (["-J-oProxyCommand=x"], "not a host name"),
    ],
)
def test_a_bad_dash_o_or_j_is_one_line_and_exit_2(capsys, extra, message):
    code = main(["check", MINI, "--host", "gpu", *extra])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT, err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.ssh
def test_a_config_openssh_rejects_exits_2_with_its_message(capsys, gpu_host, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  NoSuchOption yes\n")
    code, _, err = check(capsys, gpu_host, config=config)
    assert code == ExitCode.BAD_INPUT
    assert "NoSuchOption" in err or "Bad configuration option" in err


def test_a_host_that_looks_like_an_option_is_refused():
    with pytest.raises(SshSetupError, match="not a host name"):
        resolve_target("-oProxyCommand=touch /tmp/x", ssh_config=TESTS / "conftest.py")


def test_a_proxyjump_loop_is_refused(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(SshSetupError, match="ProxyJump loop"):
        resolve_target("a", ssh_config=config)


def test_the_fallback_refuses_what_paramiko_cannot_read_exactly(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host gpu\n  HostName 10.0.0.1\nInclude other.conf\n")
    with pytest.raises(SshSetupError, match=r"config:3: Include needs OpenSSH"):
        resolve_target("gpu", ssh_config=config, ssh=None)


def test_options_that_change_security_and_cannot_be_honoured_are_refused_by_name():
    for option, value in [
        ("proxyusefdpass", "yes"),
        ("pkcs11provider", "/usr/lib/opensc-pkcs11.so"),
        ("knownhostscommand", "/usr/bin/fetch-keys %H"),
        ("bindaddress", "10.0.0.2"),
    ]:
        with pytest.raises(SshSetupError) as raised:
            build_target("gpu", {option: [value]})
        assert value in str(raised.value)


def test_ssh_g_output_is_parsed_with_repeated_keys():
    options = parse_ssh_g("host gpu\nidentityfile ~/.ssh/a\nidentityfile ~/.ssh/b\nport 2222\n")
    assert options["identityfile"] == ["~/.ssh/a", "~/.ssh/b"]
    assert options["port"] == ["2222"]


def test_known_hosts_damaged_lines_name_file_and_line():
    parsed = knownhosts.parse(
        "ok\n\n# c\n[h]:22 ssh-ed25519 AAAA@@@\n@weird h ssh-ed25519 AAAA\n", "kh"
    )
    assert parsed.entries == ()
    assert [p.split(":")[:2] for p in parsed.problems] == [["kh", "1"], ["kh", "4"], ["kh", "5"]]


def test_known_hosts_patterns_match_as_openssh_does():
    assert knownhosts.host_matches("[127.0.0.*]:2222", "[127.0.0.1]:2222")
    assert not knownhosts.host_matches("127.0.0.1", "[127.0.0.1]:2222")
    assert knownhosts.host_matches("a,B", "b")
    assert not knownhosts.host_matches("*,!b", "b")
    hashed = knownhosts.hash_name("gpu-01", b"0123456789abcdefghij")
    assert knownhosts.host_matches(hashed, "GPU-01")
    assert not knownhosts.host_matches(hashed, "gpu-02")


def test_an_unknown_key_message_names_the_fingerprint(gpu_host, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    target = resolve_target(
        "127.0.0.1",
        port=gpu_host.port,
        user=gpu_host.user,
        identity_files=[str(gpu_host.client_key)],
        known_hosts=empty,
    )
    with pytest.raises(UnknownHostKey, match="SHA256:"):
        SshTransport(target).connect()


def test_check_host_ip_is_not_silently_ignored():
    target = build_target("gpu", {"checkhostip": ["yes"]})
    assert any("CheckHostIP" in notice for notice in target.notices)


@pytest.mark.parametrize(
    ("text", "seconds"), [("7", 7.0), ("90s", 90.0), ("1m30s", 90.0), ("none", None)]
)
def test_connect_timeout_from_the_config_in_openssh_time_format(text, seconds):
    target = build_target("gpu", {"connecttimeout": [text]})
    assert target.connect_timeout == (seconds or 10.0)
    assert build_target("gpu", {"connecttimeout": [text]}, connect_timeout=3.0).connect_timeout == 3


@pytest.mark.parametrize(
    ("option", "value"),
    [("connecttimeout", "soon"), ("serveraliveinterval", "5 s"), ("serveralivecountmax", "-1")],
)
def test_a_bad_number_in_the_config_is_bad_input_not_a_traceback(option, value):
    with pytest.raises(SshSetupError, match=value):
        build_target("gpu", {option: [value]})


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from("|1@*?![]:,. #\n\tabcAB=+/0123456789-ssh-ed25519"), max_size=300
    )
)
def test_any_known_hosts_text_parses_without_raising(text):
    parsed = knownhosts.parse(text, "kh")
    for entry in parsed.entries:
        knownhosts.host_matches(entry.hosts, "[127.0.0.1]:2222")
    knownhosts.check(parsed.entries, "[127.0.0.1]:2222", b"x", "127.0.0.1")


BECOME = """\
name: become
title: t
summary: s
observations:
  as_root: {command: "printf '%s\\\\n' root-ok", parser: lines, root: true}
  plain: {command: "printf '%s\\\\n' plain", parser: lines}
checks:
  root-read: {description: the root observation ran, expect: count(as_root) == 1}
goal: [root-read]
steps:
  - id: as-root
    title: a root step
    run: printf '%s' step-ran
    root: true
"""


@pytest.fixture
def sudo_wants_a_password(gpu_host):
    password = gpu_host.root / "sim" / "sudo-password"
    password.write_text("s3cret pass\n")
    password.chmod(0o644)
    yield "s3cret pass"
    password.unlink()


@pytest.mark.ssh
def test_ask_become_pass_asks_once_and_sends_it_only_to_sudo_s(
    capsys, gpu_host, tmp_path, monkeypatch, sudo_wants_a_password, run_journals_in_tmp
):
    from runbook_runner.cli import console

    asked: list[str] = []
    monkeypatch.setattr(console, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(
        console, "ask_secret", lambda prompt: asked.append(prompt) or sudo_wants_a_password
    )
    runbook = tmp_path / "become.yaml"
    runbook.write_text(BECOME)
    code = main(["run", str(runbook), *gpu_host.cli_args(), "-K", "--json"])
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    assert asked == ["BECOME password: "]  # once, for every root command of the run
    sudo_calls = [call for call in gpu_host.calls() if call[:1] == ["sudo"]]
    # one probe (sudo -n true, refused), then each root command through sudo -S
    assert sudo_calls[0] == ["sudo", "-n", "true"]
    assert {tuple(call[:4]) for call in sudo_calls[1:]} == {("sudo", "-S", "-p", "")}
    ran = [call[-1] for call in sudo_calls[1:]]
    assert any(command.endswith("printf '%s\\n' root-ok") for command in ran)  # observation
    assert "printf '%s' step-ran" in ran  # the root step
    # never in a command line, the journal or the output
    journals = "".join(p.read_text() for p in run_journals_in_tmp.rglob("*") if p.is_file())
    for text in (out, err, journals, json.dumps(gpu_host.calls())):
        assert sudo_wants_a_password not in text
    assert '"event": "step-end"' in journals


@pytest.mark.ssh
def test_without_ask_become_pass_a_host_that_wants_a_password_says_so(
    capsys, gpu_host, tmp_path, sudo_wants_a_password
):
    runbook = tmp_path / "become.yaml"
    runbook.write_text(BECOME)
    code = main(["run", str(runbook), *gpu_host.cli_args()])
    out, err = capsys.readouterr()
    assert code != ExitCode.OK
    assert "password" in out + err
    assert not any("-S" in call for call in gpu_host.calls())


def test_ask_become_pass_needs_a_terminal(capsys, monkeypatch):
    from runbook_runner.cli import console

    monkeypatch.setattr(console, "stdin_is_terminal", lambda: False)
    assert main(["check", MINI, "--host", "gpu", "-K"]) == ExitCode.BAD_INPUT
    assert "-K asks the sudo password on a terminal" in capsys.readouterr().err
