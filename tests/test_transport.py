"""The SSH transport against a real OpenSSH sshd on 127.0.0.1 (never mocked)."""

from __future__ import annotations

import subprocess
import time

import pytest
from sshd import free_port, keygen, start_test_host, wait_for

from runbook_runner.errors import AuthenticationFailed, HostKeyChanged, UnknownHostKey, Unreachable
from runbook_runner.transport import SshTransport, resolve_target

pytestmark = pytest.mark.ssh


def test_remote_exit_status_is_data_and_streams_stay_apart(connect):
    transport = connect()
    result = transport.run("echo out; echo err >&2; exit 3", timeout=120)  # far beyond its need
    assert result.exit_status == 3
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not result.timed_out


def test_login_user_is_detected(connect, gpu_host):
    transport = connect()
    assert transport.login_user == gpu_host.user
    assert transport.is_root is False


def test_five_mib_on_both_streams_does_not_hang_and_keeps_the_tail(connect):
    transport = connect()
    command = (
        "head -c 5242880 /dev/zero | tr '\\0' o; echo END; "
        "head -c 5242880 /dev/zero | tr '\\0' e >&2; echo ERR-END >&2"
    )
    result = transport.run(command, timeout=600, output_limit=64 * 1024)
    assert not result.timed_out  # a hang is a wait until the timeout
    assert result.exit_status == 0
    assert result.stdout_size == 5 * 1024 * 1024 + 4
    assert result.stderr_size == 5 * 1024 * 1024 + 8
    assert len(result.stdout) == 64 * 1024
    assert result.stdout.endswith("oooEND\n")
    assert result.stderr.endswith("eeeERR-END\n")
    assert result.truncated


def test_timeout_ends_the_command_on_the_host_too(connect):
    transport = connect()
    # 5 s: the shell prints its child's PID at once (within the timeout on a machine ten
    # times slower); the 300 s sleep is what the timeout ends.
    result = transport.run("sleep 300 & echo $!; wait", timeout=5)
    assert result.timed_out
    assert result.exit_status is None
    child = int(result.stdout.split()[0])

    def gone() -> bool:
        return transport.run(f"kill -0 {child}", timeout=30).exit_status != 0

    wait_for(gone, 60, f"the remote sleep {child} to be ended")  # far from its 300 s


def test_one_connection_serves_many_commands(connect, gpu_host):
    before = gpu_host.logins()
    transport = connect()
    for number in range(20):
        assert transport.run(f"echo {number}", timeout=30).stdout == f"{number}\n"
    assert gpu_host.logins() - before == 1


def test_unknown_host_key_is_refused_with_its_fingerprint(connect, gpu_host, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(UnknownHostKey) as raised:
        connect(known_hosts=empty)
    assert _openssh_fingerprint(gpu_host.host_public_key) in str(raised.value)
    assert "--accept-new-host-key" in raised.value.hint
    assert empty.read_text() == ""


def test_accept_new_host_key_records_it_then_it_is_known(connect, gpu_host, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    empty_config = tmp_path / "ssh_config"
    empty_config.write_text("")  # no HashKnownHosts (Debian's /etc/ssh/ssh_config sets it)
    connect(known_hosts=known, accept_new_host_key=True, ssh_config=empty_config)
    line = known.read_text().strip()
    assert line.startswith(f"[127.0.0.1]:{gpu_host.port} ssh-ed25519 ")
    assert line.split()[2] == gpu_host.host_public_key.split()[1]
    connect(known_hosts=known)  # no flag needed any more


def test_changed_host_key_is_refused_even_with_accept_new(connect, gpu_host, tmp_path):
    impostor = keygen(tmp_path / "other", "someone-else")
    known = tmp_path / "known_hosts"
    key_type, blob = impostor.split()[:2]
    known.write_text(f"[127.0.0.1]:{gpu_host.port} {key_type} {blob}\n")
    with pytest.raises(HostKeyChanged) as raised:
        connect(known_hosts=known, accept_new_host_key=True)
    message = str(raised.value)
    assert _openssh_fingerprint(impostor) in message
    assert _openssh_fingerprint(gpu_host.host_public_key) in message
    assert known.read_text().count("\n") == 1


def test_hashed_known_hosts_entries_are_understood(connect, gpu_host, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(gpu_host.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")
    connect(known_hosts=known)


def test_wrong_port_fails_fast_as_unreachable(connect):
    started = time.monotonic()
    with pytest.raises(Unreachable, match="connection refused"):
        connect(port=free_port(), connect_timeout=300.0)
    assert time.monotonic() - started < 60  # at the refusal, not at the 300 s ConnectTimeout


def test_wrong_key_is_an_authentication_failure(connect, tmp_path):
    keygen(tmp_path / "stranger", "not-authorised")
    with pytest.raises(AuthenticationFailed) as raised:
        connect(identity_files=[str(tmp_path / "stranger")])
    assert "authorized_keys" in raised.value.hint


def test_encrypted_key_without_a_terminal_fails_clearly(connect, tmp_path):
    keygen(tmp_path / "locked", "encrypted", passphrase="correct horse")
    with pytest.raises(AuthenticationFailed, match="encrypted"):
        connect(identity_files=[str(tmp_path / "locked")])


def test_encrypted_key_with_its_passphrase_from_the_prompt(gpu_host, tmp_path):
    key = tmp_path / "locked"
    keygen(key, "encrypted", passphrase="correct horse")
    authorized = gpu_host.root / "authorized_keys"
    original = authorized.read_text()
    authorized.write_text(original + (tmp_path / "locked.pub").read_text())
    try:
        target = resolve_target(
            "127.0.0.1",
            port=gpu_host.port,
            user=gpu_host.user,
            identity_files=[str(key)],
            known_hosts=gpu_host.known_hosts,
        )
        asked = []
        transport = SshTransport(
            target, lambda prompt: asked.append(prompt) or "correct horse"
        ).connect()
        with transport:
            assert transport.run("echo in", timeout=30).stdout == "in\n"
        assert len(asked) == 1
    finally:
        authorized.write_text(original)


def test_ssh_config_supplies_hostname_user_port_and_key(gpu_host, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n  User {gpu_host.user}\n"
        f"  IdentityFile {gpu_host.client_key}\n"
    )
    known = tmp_path / "known_hosts"
    known.write_text(gpu_host.known_hosts.read_text())
    target = resolve_target("gpu-box", known_hosts=known, ssh_config=config)
    assert (target.hostname, target.port, target.user) == (
        "127.0.0.1",
        gpu_host.port,
        gpu_host.user,
    )
    with SshTransport(target).connect() as transport:
        assert transport.run("echo via-config", timeout=30).stdout == "via-config\n"


def test_proxy_jump_through_a_second_sshd(gpu_host, tmp_path):
    jump = start_test_host(extra_config="LogLevel DEBUG1")
    try:
        authorized = jump.root / "authorized_keys"
        authorized.write_text(
            authorized.read_text() + (gpu_host.root / "authorized_keys").read_text()
        )
        known = tmp_path / "known_hosts"
        known.write_text(gpu_host.known_hosts.read_text() + jump.known_hosts.read_text())
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host target\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n  User {gpu_host.user}\n"
            f"  IdentityFile {gpu_host.client_key}\n"
            f"  ProxyJump {jump.user}@127.0.0.1:{jump.port}\n"
            # As for ssh, the jump host is reached with its own config, not the target's key.
            f"Host 127.0.0.1\n  IdentityFile {gpu_host.client_key}\n"
        )
        target = resolve_target("target", known_hosts=known, ssh_config=config)
        with SshTransport(target).connect() as transport:
            assert transport.run("echo through", timeout=30).stdout == "through\n"
        assert f"target 127.0.0.1 port {gpu_host.port}" in jump.log()
    finally:
        jump.stop()


def _openssh_fingerprint(public_line: str) -> str:
    """The key's SHA256 fingerprint as OpenSSH prints it (not as the code under test does)."""
    done = subprocess.run(
        ["ssh-keygen", "-lf", "-"], input=public_line, capture_output=True, text=True, check=True
    )
    return done.stdout.split()[1]


def test_a_server_that_never_speaks_ssh_times_out_as_unreachable(tmp_path):
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    try:
        target = resolve_target(
            "127.0.0.1",
            port=listener.getsockname()[1],
            user="nobody",
            known_hosts=tmp_path / "known_hosts",
            connect_timeout=1.0,
        )
        started = time.monotonic()
        with pytest.raises(Unreachable, match="SSH handshake failed"):
            SshTransport(target).connect()
        assert time.monotonic() - started < 1 + 10  # not paramiko's own 15 s banner wait
    finally:
        listener.close()
        for conn, _ in accepted:
            conn.close()
