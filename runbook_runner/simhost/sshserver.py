"""The drill's simulated host behind a real SSH server (paramiko's server side) on 127.0.0.1.

Each connection is verified like any other: the host key is generated for the
session and pinned in the client's known_hosts; one generated client key is
accepted. Each command runs in the simulated shell; nothing runs for real. A
reboot drops the connection, and the host refuses connections until it has
"booted" again in simulated time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

import paramiko

from runbook_runner.simhost.commands import Env
from runbook_runner.simhost.model import SimHost
from runbook_runner.simhost.shell import Shell
from runbook_runner.simhost.simulated import SimClock, SimProcesses
from runbook_runner.ssh import batch

BOOT_S = 90.0  # simulated seconds a reboot keeps the host away


@dataclass
class Outcome:
    stdout: str
    stderr: str
    status: int
    rebooted: bool


@dataclass
class DrillHost:
    host: SimHost
    clock: SimClock = field(default_factory=SimClock)
    user: str = "root"

    def __post_init__(self) -> None:
        self.processes = SimProcesses(self.host, self.clock)
        self.calls: list[list[str]] = []
        self.down_until: float | None = None
        self.host_key = paramiko.ECDSAKey.generate()
        self.client_key = paramiko.ECDSAKey.generate()
        self._lock = threading.Lock()
        self._next_pid = 3000
        self._listener: socket.socket | None = None
        self._transports: list[paramiko.Transport] = []
        self._closed = threading.Event()

    # -- the simulated host -----------------------------------------------------------------

    def execute(self, command: str) -> Outcome:
        """Run a command line on the simulated host as its login shell would."""
        unpacked = batch.unpack(command)
        if unpacked is not None:
            # The runner's batch script (several observations on one channel): the simulated
            # shell runs each of its commands and answers as the script would have.
            def run(one: str) -> tuple[int, bytes, bytes]:
                outcome = self._execute(one)
                return outcome.status, outcome.stdout.encode(), outcome.stderr.encode()

            return Outcome(batch.frame(unpacked, run).decode(), "", 0, False)
        return self._execute(command)

    def _execute(self, command: str) -> Outcome:
        with self._lock:
            self.host.now = self.clock.now()
            self.host.forget_dead(self.processes.alive)
            self.host.tick(self.processes.alive)
            rebooted: list[bool] = []
            env = Env(
                self.host, self.processes, on_reboot=lambda: rebooted.append(True), user=self.user
            )
            self._next_pid += 7
            shell = Shell(env, pid=self._next_pid)
            status = shell.run(command)
            self.calls.extend(shell.calls)
            self.host.forget_dead(self.processes.alive)
            if rebooted:
                self.down_until = self.clock.now() + BOOT_S
            return Outcome("".join(env.stdout), "".join(env.stderr), status, bool(rebooted))

    def is_down(self) -> bool:
        return self.down_until is not None and self.clock.now() < self.down_until

    # -- the SSH server -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def start(self) -> DrillHost:
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept_loop, name="drill-sshd", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        for transport in self._transports:
            transport.close()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            if self.is_down():
                sock.close()  # still booting
                continue
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else ~40 ms a reply
        transport = paramiko.Transport(sock)
        transport.add_server_key(self.host_key)
        self._transports.append(transport)
        try:
            transport.start_server(server=_Interface(self, transport))
        except (paramiko.SSHException, EOFError, OSError):
            transport.close()
            return
        channels: list[
            paramiko.Channel
        ] = []  # held here: paramiko closes a channel whose object is garbage-collected
        while transport.is_active() and not self._closed.is_set():
            channel = transport.accept(
                0.5
            )  # served by its exec request (check_channel_exec_request)
            if channel is not None:
                channels = [c for c in channels if not c.closed] + [channel]

    def respond(
        self, channel: paramiko.Channel, transport: paramiko.Transport, command: str
    ) -> None:
        outcome = self.execute(command)
        # No close from this side: paramiko sends the exec request's "success" reply from its
        # own thread after check_channel_exec_request returns, and a close that overtook it
        # would read as "Channel closed" to the client. EOF and the exit status are enough;
        # the client closes the channel when it has read them.
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            channel.sendall(outcome.stdout.encode())
            channel.sendall_stderr(outcome.stderr.encode())
            channel.send_exit_status(outcome.status)
            channel.shutdown_write()
        if outcome.rebooted:
            for open_transport in self._transports:
                open_transport.close()  # the host went down: every connection drops


class _Interface(paramiko.ServerInterface):
    def __init__(self, drill: DrillHost, transport: paramiko.Transport) -> None:
        self.drill, self.transport = drill, transport

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if username == self.drill.user and key.asbytes() == self.drill.client_key.asbytes():
            return int(paramiko.common.AUTH_SUCCESSFUL)
        return int(paramiko.common.AUTH_FAILED)

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return int(paramiko.common.OPEN_SUCCEEDED)
        return int(paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED)

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode("utf-8", "replace")
        threading.Thread(
            target=self.drill.respond, args=(channel, self.transport, text), daemon=True
        ).start()
        return True
