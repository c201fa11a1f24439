"""A connection that stops answering after login is a lost connection, named by its phase.

The path to a real sshd goes through tests/tcp_relay.py as a ProxyCommand; SIGSTOP on the
relay stalls the connection (TCP stays open, nothing comes back). Whatever was going on —
taking the lock, a command, the observations — ends within its own bounds as a
ConnectionLost (exit 3) that says which phase stalled and whether the command before it
had finished: never a lock-folder problem (exit 5), never a step that "timed out".

Each connection is made with a generous ConnectTimeout (a loaded machine's handshake is
slow); the bounds under test are then lowered on the connection made (``_short_bounds``):
ConnectTimeout and the stall probe 2 s each. Each stall must end in its bounds plus a slack
a ten times slower machine keeps (SLACK_S): without the stall detection it never ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from runbook_runner import transport as transport_module
from runbook_runner.cli import main
from runbook_runner.errors import ConnectionLost
from runbook_runner.exitcodes import ExitCode
from runbook_runner.ssh import batch, hostlock
from runbook_runner.ssh.batch import BatchCommand
from runbook_runner.ssh.config import resolve_target
from runbook_runner.ssh.hostlock import LOCK_NAME, HostLock
from runbook_runner.transport import SshTransport

pytestmark = pytest.mark.ssh
RELAY = Path(__file__).parent / "tcp_relay.py"
MINI = str(Path(__file__).parent / "runbooks" / "mini-recovery.yaml")
BOUND_S = 2.0  # ConnectTimeout and the stall probe, once connected
SLACK_S = 30.0  # what a loaded machine adds to a bound that is all waiting


def _short_bounds(transport: SshTransport, monkeypatch) -> SshTransport:
    """The stall bounds under test, lowered on a connection already made."""
    transport.target = dataclasses.replace(transport.target, connect_timeout=BOUND_S)
    monkeypatch.setattr(transport_module, "STALL_PROBE_S", BOUND_S)
    return transport


def _config(gpu_host, tmp_path: Path, connect_timeout: float = 30) -> Path:
    config = tmp_path / "config"
    config.write_text(
        f"Host gpu\n  HostName 127.0.0.1\n  Port {gpu_host.port}\n  User {gpu_host.user}\n"
        f"  IdentityFile {gpu_host.client_key}\n  UserKnownHostsFile {gpu_host.known_hosts}\n"
        f"  GlobalKnownHostsFile /dev/null\n  ConnectTimeout {connect_timeout:g}\n"
        f"  ProxyCommand {sys.executable} {RELAY} %h %p\n"
    )
    return config


def _relay_of(transport: SshTransport):
    return transport._client.get_transport().sock.process  # our ProxyCommand (exec'd)


@pytest.fixture
def stalled(gpu_host, tmp_path, monkeypatch):
    """A connection that answered a command, then stalls: (transport, when it stalled)."""
    transport = SshTransport(resolve_target("gpu", ssh_config=_config(gpu_host, tmp_path)))
    transport.connect()
    relay = _relay_of(transport)
    try:
        assert transport.run("echo done", timeout=60).stdout == "done\n"
        _short_bounds(transport, monkeypatch)
        os.kill(relay.pid, signal.SIGSTOP)
        yield transport, time.monotonic()
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        transport.close()


def test_a_stall_before_a_command_says_it_was_not_sent(stalled):
    transport, since = stalled
    with pytest.raises(ConnectionLost) as lost:
        transport.run("true", timeout=2)
    message = str(lost.value)
    assert time.monotonic() - since < BOUND_S + SLACK_S  # the ConnectTimeout
    assert "the connection stalled while running a command" in message
    assert "the command was not sent" in message
    assert "the command before it had finished on the host (exit 0): echo done" in message


def test_a_stall_during_a_command_is_a_lost_connection_not_a_timeout(
    gpu_host, tmp_path, monkeypatch
):
    """The relay stops while the command runs (it waits on a FIFO until then): the command's
    end never comes; after its timeout the host is asked, does not answer: a lost connection."""
    fifo = gpu_host.root / "sim" / f"stall-{os.getpid()}"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)  # noqa: S103  # the host's login user reads it
    transport = SshTransport(resolve_target("gpu", ssh_config=_config(gpu_host, tmp_path)))
    _short_bounds(transport.connect(), monkeypatch)
    relay = _relay_of(transport)

    def stop_the_relay_once_the_command_runs() -> None:
        writer = os.open(fifo, os.O_WRONLY)  # returns when the command opened it
        os.kill(relay.pid, signal.SIGSTOP)
        os.write(writer, b"go\n")
        os.close(writer)

    watcher = threading.Thread(target=stop_the_relay_once_the_command_runs, daemon=True)
    watcher.start()
    try:
        started = time.monotonic()
        with pytest.raises(ConnectionLost) as lost:
            transport.run(f"cat {fifo}", timeout=3)
        message = str(lost.value)
        assert time.monotonic() - started < 3 + BOUND_S + SLACK_S  # its timeout, the probe
        assert "the connection stalled while running a command" in message
        assert "its end never came in the 3s it was given" in message
        assert "whether it finished on the host is not known" in message
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        transport.close()
        watcher.join(5)
        fifo.unlink()


def test_a_stall_during_observations_names_the_phase(stalled):
    transport, since = stalled
    commands = [BatchCommand("true", 2.0, False), BatchCommand("true", 2.0, False)]
    with pytest.raises(ConnectionLost, match="the connection stalled while observing the host"):
        transport.run_many(commands)
    assert time.monotonic() - since < batch.deadline(commands) + BOUND_S + SLACK_S


def test_a_stall_while_taking_the_lock_is_not_a_lock_folder_problem(stalled, monkeypatch):
    monkeypatch.setattr(hostlock, "LOCK_TAKE_S", 2)
    transport, since = stalled
    lock = HostLock(transport, "gpu", {"run": "r1", "operator": "me"})
    with pytest.raises(ConnectionLost) as lost:
        lock.acquire()
    message = str(lost.value)
    assert time.monotonic() - since < 2 + BOUND_S + SLACK_S  # LOCK_TAKE_S, the probe
    assert "stalled while taking the lock" in message
    assert "folder" not in message
    assert "the command before it had finished on the host (exit 0)" in message


def test_a_slow_command_on_a_live_connection_still_times_out(connect):
    """The probe only turns a wait that ran out into a lost connection when the host is gone."""
    transport = connect()
    result = transport.run("sleep 600", timeout=0.5)
    assert result.timed_out
    assert result.exit_status is None
    assert transport.run("echo still here", timeout=60).stdout == "still here\n"


def test_run_stalled_at_the_lock_exits_3_naming_the_phase(gpu_host, tmp_path, capsys, monkeypatch):
    """The CLI end to end: the relay stops while the host takes the lock; exit 3 and one
    line, not exit 5 after 117 s.

    The lock's ``owner`` file is a FIFO here. The host's lock script reads it once it holds
    the lock and before it says so, and that read waits for a writer, this test: the script
    waits at that one point, however busy the machine, until the relay is stopped, and then
    answers into the stalled relay. (The FIFO this test once used was opened twice by the
    script; on a busy machine the second open passed while the test still held the first, the
    lock was taken over a live relay, and the run ended in exit 5 after reconnecting.)"""
    monkeypatch.setattr(hostlock, "LOCK_TAKE_S", 2)
    folder = gpu_host.root / "sim" / LOCK_NAME
    folder.mkdir(exist_ok=True)  # an earlier run on this test host may have left it (released)
    for leftover in folder.iterdir():
        leftover.unlink()
    owner = folder / "owner"
    os.mkfifo(owner)
    os.chmod(folder, 0o777)  # noqa: S103  # the host's login user writes the lock there
    os.chmod(owner, 0o666)  # noqa: S103
    # The CLI connects with the config's ConnectTimeout, which is also its stall bound here:
    # 5 s, as a user's.
    config = _config(gpu_host, tmp_path, connect_timeout=5)
    stopped: list[int] = []
    ended = threading.Event()

    def stop_the_relay_while_the_lock_is_taken_but_unsaid() -> None:
        # Opening a FIFO to write waits for a reader: the script's `cat owner`, which it runs
        # once it holds the flock and before it prints that it does.
        writer = os.open(owner, os.O_WRONLY)
        if ended.is_set():  # the run ended elsewhere; the finally below opened it
            os.close(writer)
            return
        for pid in _relays(gpu_host.port):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        os.close(writer)  # the script reads no earlier owner and goes on
        # It writes its own owner into the FIFO next: read that, so its write ends too.
        reader = os.open(owner, os.O_RDONLY)
        while os.read(reader, 4096):
            pass
        os.close(reader)

    watcher = threading.Thread(
        target=stop_the_relay_while_the_lock_is_taken_but_unsaid, daemon=True
    )
    watcher.start()
    try:
        code = main(["run", MINI, "--host", "gpu", "-F", str(config), "--yes"])
        _, err = capsys.readouterr()
    finally:
        ended.set()
        for pid in stopped:
            os.kill(pid, signal.SIGKILL)
        if watcher.is_alive():  # waiting in an open of the FIFO: the other end lets it return
            for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
                with contextlib.suppress(OSError):  # ENXIO: no reader waits
                    os.close(os.open(owner, flags))
        watcher.join(5)
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()
    assert stopped, "the lock was never taken"
    assert code == ExitCode.HOST_UNREACHABLE, err
    assert "stalled while taking the lock" in err
    assert "make that folder writable" not in err


def _relays(port: int) -> list[int]:
    """The ProxyCommand relays (tcp_relay.py) to this test host's port."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(RELAY).encode() in cmdline and str(port).encode() in cmdline:
            found.append(int(entry.name))
    return found


def test_a_stall_between_a_channel_and_its_command_ends_within_bounds(
    gpu_host, tmp_path, monkeypatch
):
    """The host confirmed the channel, then stops answering before the command's start
    is confirmed: paramiko's exec_command alone would wait for ever; the transport says the
    stall (exit 3's ConnectionLost) within ConnectTimeout plus the probe, naming the phase."""
    import paramiko

    transport = SshTransport(resolve_target("gpu", ssh_config=_config(gpu_host, tmp_path)))
    transport.connect()
    relay = _relay_of(transport)
    exec_command = paramiko.Channel.exec_command

    def stall_first(channel: paramiko.Channel, command: bytes) -> None:
        os.kill(relay.pid, signal.SIGSTOP)  # the network path stops here, for real
        exec_command(channel, command)

    try:
        assert transport.run("echo done", timeout=60).stdout == "done\n"
        _short_bounds(transport, monkeypatch)
        monkeypatch.setattr(paramiko.Channel, "exec_command", stall_first)
        since = time.monotonic()
        with pytest.raises(ConnectionLost) as lost:
            transport.run("true", timeout=2)
        assert time.monotonic() - since < BOUND_S + BOUND_S + SLACK_S  # ConnectTimeout, probe
        message = str(lost.value)
        assert "the connection stalled while running a command" in message
        assert "did not answer the command's start" in message
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        transport.close()
