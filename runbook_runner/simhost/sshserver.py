"""A simulated host behind a real SSH server (paramiko's server side) on 127.0.0.1.

Each connection is verified like any other: the host key is generated for the
session and pinned in the client's known_hosts; one generated client key is
accepted. Each command runs, unchanged, in a real shell (hostshell.py) whose stand-ins
ask this process's stand-in server to answer over the simulated state: stdin, stdout,
stderr and the exit status travel as they do through sshd, and a command that waits
(the host lock's holder) runs until its channel or connection ends. A reboot drops every
connection, and the host refuses connections until it has "booted" again in simulated
time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import paramiko

from runbook_runner.simhost import hostshell
from runbook_runner.simhost.commands import Env
from runbook_runner.simhost.model import SimHost
from runbook_runner.simhost.simulated import SimClock, SimProcesses
from runbook_runner.simhost.utilities import SERVED

# The server side's own log: a client that drops its connection is no news to print.
LOG_CHANNEL = "runbook_runner.simhost.sshd"
logging.getLogger(LOG_CHANNEL).addHandler(logging.NullHandler())
logging.getLogger(LOG_CHANNEL).propagate = False

BOOT_S = 90.0  # simulated seconds a reboot keeps the host away
EXEC_REPLY_S = 0.05
DROP_S = 2.0  # how long a reboot waits for a client to read what it was sent and hang up  # paramiko replies to the exec request after our check returns


@dataclass
class Answer:
    stdout: str
    stderr: str
    status: int


@dataclass
class DrillHost:
    host: SimHost
    clock: SimClock = field(default_factory=SimClock)
    user: str = "root"
    folder: Path | None = None
    # state.json after every call, for a person looking at a practice host (runbook sim);
    # a drill's folder goes with it, unread, and saving is most of a stand-in call's time
    save_state: bool = True

    def __post_init__(self) -> None:
        self.processes = SimProcesses(self.host, self.clock)
        self.calls: list[list[str]] = []
        self.down_until: float | None = None
        self.host_key = paramiko.ECDSAKey.generate()
        self.client_key = paramiko.ECDSAKey.generate()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._transports: list[paramiko.Transport] = []
        self._closed = threading.Event()
        self._owns_folder = self.folder is None
        self.folder = Path(self.folder or tempfile.mkdtemp(prefix="runbook-sim-"))
        self.shell = hostshell.prepare(self.folder, self.host)
        self.reboots = 0
        # What a reboot ends once its command has answered: the connections and commands
        # of the host that went down (not those of the host that came back meanwhile).
        self._going_down: tuple[list[paramiko.Transport], list[subprocess.Popen[bytes]]] = (
            [],
            [],
        )
        self._running: set[subprocess.Popen[bytes]] = set()
        self._standins = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._standins.bind(str(self.shell.socket))
        self._standins.listen(64)
        _HUB.add(self._standins, self._standin)

    # -- the simulated host: one stand-in call at a time ---------------------------------------

    def answer(self, argv: list[str], lc_all: str = "") -> Answer:
        """Run one stand-in over the simulated state, as the host's tool would answer."""
        name, args = argv[0], argv[1:]
        with self._lock:
            self.calls.append([name, *args])
            self._log(argv)
            self.host.now = self.clock.now()
            self.host.forget_dead(self.processes.alive)
            self.host.tick(self.processes.alive)
            rebooted: list[bool] = []
            env = Env(
                self.host,
                self.processes,
                on_reboot=lambda: rebooted.append(True),
                user=self.user,
            )
            command = SERVED.get(name)
            if command is None:
                return Answer("", f"{name}: not simulated\n", 127)
            env.lc_all = lc_all
            status = command(env, args)
            self.host.forget_dead(self.processes.alive)
            if rebooted:
                self.down_until = self.clock.now() + BOOT_S
                self.reboots += 1
                self._going_down = (list(self._transports), list(self._running))
            hostshell.sync_shm(self.shell, self.host)
            if self.save_state:
                self.host.save(self.shell.state_file)
            return Answer("".join(env.stdout), "".join(env.stderr), status)

    def restore(self, host: SimHost, now: float) -> None:
        """Put the host back in a given state at a given simulated time (tests compare two
        runs of one command from the same start)."""
        with self._lock:
            self.host = host
            self.processes.host = host
            self.clock.set(now)
            self.down_until = None
            hostshell.sync_shm(self.shell, host)

    def _log(self, argv: list[str]) -> None:
        with self.shell.calls_log.open("a") as log:
            log.write(json.dumps({"t": self.clock.now(), "argv": argv}) + "\n")

    def _standin(self, sock: socket.socket) -> None:
        """One stand-in call (protocol: standin_client.py)."""
        with sock:
            try:
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                lc_all, *argv = data.decode("utf-8", "surrogateescape").split("\0")[:-1]
                answer = self.answer(argv, lc_all) if argv else Answer("", "no command\n", 126)
            except (OSError, ValueError) as error:
                answer = Answer("", f"stand-in: bad request ({error})\n", 126)
            out = answer.stdout.encode("utf-8", "surrogateescape")
            err = answer.stderr.encode("utf-8", "surrogateescape")
            with contextlib.suppress(OSError):
                sock.sendall(f"{answer.status} {len(out)}\n".encode() + out + err)

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
        for transport in list(self._transports):
            transport.close()
        self._end_commands()
        _HUB.remove(self._standins)
        if self._owns_folder and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

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
        transport.set_log_channel(LOG_CHANNEL)
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
            channel = transport.accept(0.5)  # served by its exec request
            if channel is not None:
                channels = [c for c in channels if not c.closed] + [channel]
        with contextlib.suppress(ValueError):
            self._transports.remove(transport)

    def respond(
        self, channel: paramiko.Channel, transport: paramiko.Transport, command: str
    ) -> None:
        """Run one exec request's command in the host's shell, as sshd would."""
        started = time.monotonic()
        reboots = self.reboots
        try:
            process = subprocess.Popen(
                self.shell.argv(command),
                env=self.shell.env(),
                cwd=self.shell.folder / "home",
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            self._finish(channel, started, 127, f"sh: cannot start: {error}\n".encode())
            return
        self._running.add(process)
        assert process.stdin
        assert process.stdout
        assert process.stderr
        pumps = [
            threading.Thread(target=_pump_out, args=(process.stdout, channel.sendall), daemon=True),
            threading.Thread(
                target=_pump_out, args=(process.stderr, channel.sendall_stderr), daemon=True
            ),
        ]
        for pump in pumps:
            pump.start()
        threading.Thread(target=_pump_in, args=(channel, process.stdin), daemon=True).start()
        while True:  # until it exits; ended with its connection, as sshd ends a session's
            try:
                process.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if channel.closed or not transport.is_active() or self._closed.is_set():
                    _end(process)
        for pump in pumps:
            pump.join()
        self._running.discard(process)
        # Told before its status is sent: the client cannot have sent the next command yet,
        # so a reboot after this is not this command's.
        if self.reboots != reboots:
            # The connection drops before the reboot's status (as a host whose shutdown
            # ends the session first): the client finds the host gone the moment its
            # command ends, so how long it takes to notice, in simulated seconds, does not
            # depend on how fast this machine is.
            self._went_down()
        self._finish(channel, started, process.returncode, b"")

    def _finish(self, channel: paramiko.Channel, started: float, status: int, err: bytes) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            if err:
                channel.sendall_stderr(err)
            channel.send_exit_status(status if status >= 0 else 128 - status)
            channel.shutdown_write()
            time.sleep(max(0.0, EXEC_REPLY_S - (time.monotonic() - started)))
            channel.close()  # as sshd does; OpenSSH's client waits for it

    def _went_down(self) -> None:
        """A reboot: its connections drop, its commands end, /run/lock is emptied."""
        transports, commands = self._going_down
        self._going_down = ([], [])
        for transport in transports:  # what was sent arrives: FIN after it, never a reset
            with contextlib.suppress(OSError):
                transport.sock.shutdown(socket.SHUT_WR)
        for transport in transports:
            transport.join(DROP_S)  # the client reads to the end and hangs up
            transport.close()
        for process in commands:
            _end(process)
        with contextlib.suppress(OSError):  # gone too, if the host was stopped meanwhile
            for entry in self.shell.lock_dir.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _end_commands(self) -> None:
        for process in list(self._running):
            _end(process)

    # -- the host without SSH ----------------------------------------------------------------------

    def run_local(self, command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """The command in a plain shell here, with the same stand-ins (no SSH)."""
        return self.shell.run_local(command, stdin)


class _Hub:
    """One thread accepts the stand-in calls of every simulated host of the process; each
    call is answered in a thread of its own."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, listener: socket.socket, serve: Any) -> None:
        listener.setblocking(False)
        with self._lock:
            self._selector.register(listener, selectors.EVENT_READ, serve)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sim-standins", daemon=True)
                self._thread.start()

    def remove(self, listener: socket.socket) -> None:
        with self._lock, contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(listener)
        with contextlib.suppress(OSError):
            listener.close()

    def _loop(self) -> None:
        while True:  # a listener added meanwhile is seen by the wait in progress (epoll)
            ready = []
            with contextlib.suppress(OSError, ValueError):
                ready = self._selector.select(timeout=0.5)
            for key, _ in ready:
                try:
                    sock, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue  # closed meanwhile, or another thread took it
                sock.setblocking(True)
                threading.Thread(target=key.data, args=(sock,), daemon=True).start()


_HUB = _Hub()


def _end(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's own process group (its shell and what it started): only
    processes this server started."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)


def _pump_out(pipe: IO[bytes], send: Any) -> None:
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
            send(chunk)
    with contextlib.suppress(OSError):
        pipe.close()


def _pump_in(channel: paramiko.Channel, stdin: IO[bytes]) -> None:
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException, ValueError):
        while data := channel.recv(65536):
            stdin.write(data)
            stdin.flush()
    with contextlib.suppress(OSError, ValueError):
        stdin.close()


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

    def check_channel_env_request(
        self, channel: paramiko.Channel, name: bytes, value: bytes
    ) -> bool:
        return False  # as sshd without AcceptEnv

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode("utf-8", "replace")
        threading.Thread(
            target=self.drill.respond, args=(channel, self.transport, text), daemon=True
        ).start()
        return True
