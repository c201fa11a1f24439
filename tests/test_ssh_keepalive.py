"""ServerAliveInterval/CountMax from the ssh config end a connection whose peer went silent."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from sshd import wait_for

from runbook_runner.ssh.config import resolve_target
from runbook_runner.transport import SshTransport

pytestmark = pytest.mark.ssh
RELAY = Path(__file__).parent / "tcp_relay.py"


def test_server_alive_count_max_ends_a_silent_connection(gpu_host, tmp_path):
    config = tmp_path / "config"
    config.write_text(
        f"Host gpu\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n  User {gpu_host.user}\n"
        f"  IdentityFile {gpu_host.client_key}\n  UserKnownHostsFile {gpu_host.known_hosts}\n"
        f"  ProxyCommand {sys.executable} {RELAY} %h %p\n"
        "  ServerAliveInterval 1\n  ServerAliveCountMax 2\n"
    )
    target = resolve_target("gpu", ssh_config=config)
    assert (target.server_alive_interval, target.server_alive_count_max) == (1, 2)
    transport = SshTransport(target).connect()
    raw = transport._client.get_transport()
    relay = raw.sock.process  # our own ProxyCommand process (the shell exec'd it)
    try:
        assert transport.run("echo alive", timeout=60).stdout == "alive\n"
        os.kill(relay.pid, signal.SIGSTOP)  # the path to the host goes silent
        # 2 keepalives unanswered, 1 s apart: a few seconds; without them, never
        wait_for(lambda: not raw.is_active(), 60, "the keepalive to end the silent connection")
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        transport.close()
