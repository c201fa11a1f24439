"""Running commands on a host: one SSH connection (paramiko) per host, a channel per command.

A remote command that exits non-zero is data (:class:`CommandResult`); only the
transport failing raises (:class:`TransportError` and its kinds), each with a
hint that says what to do.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import paramiko

from runbook_runner import batch
from runbook_runner.batch import BatchCommand
from runbook_runner.errors import (
    AuthenticationFailed,
    ConnectionLost,
    Interrupted,
    TransportError,
    Unreachable,
)
from runbook_runner.hostkeys import (
    HostKeyPolicy,
    fingerprint,
    host_key_changed,
    load_known_hosts,
    record_host_key,
    unknown_host_key,
)
from runbook_runner.target import SshTarget, resolve_target
from runbook_runner.template import quote

__all__ = [
    "BatchCommand",
    "CommandResult",
    "SshTarget",
    "SshTransport",
    "fingerprint",
    "record_host_key",
    "resolve_target",
    "unknown_host_key",
]

# paramiko logs socket errors itself; the runner reports transport failures as one line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_OUTPUT_LIMIT = 1024 * 1024  # bytes kept per stream; the tail is what matters
_PGID_MARK = "rbr-pgid:"


class TailBuffer:
    """Keeps the last ``limit`` bytes of a stream and counts all of them."""

    HEAD = 256  # the first bytes are kept too: they carry the process-group mark

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.head = b""
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        if len(self.head) < self.HEAD:
            self.head += chunk[: self.HEAD - len(self.head)]
        self.size += len(chunk)
        self._data += chunk
        if len(self._data) > 2 * self.limit:
            del self._data[: len(self._data) - self.limit]

    def bytes(self) -> bytes:
        return bytes(self._data[-self.limit :]) if self.limit else b""

    @property
    def truncated(self) -> bool:
        return self.size > self.limit


@dataclass(frozen=True)
class CommandResult:
    """What a command did. Output is decoded with replacement: never fatal."""

    command: str
    exit_status: int | None  # None when it timed out or the host did not say
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    stdout_size: int = 0
    stderr_size: int = 0

    @property
    def truncated(self) -> bool:
        return self.stdout_size > len(self.stdout.encode()) or self.stderr_size > len(
            self.stderr.encode()
        )


@dataclass(frozen=True)
class Held:
    """A command started by :meth:`SshTransport.hold`: still running (``channel`` set) once it
    printed its ready line, else ended with ``exit_status``."""

    exit_status: int | None
    stdout: str
    stderr: str
    channel: paramiko.Channel | None = None


PassphrasePrompt = Callable[[str], str | None]


class SshTransport:
    """One authenticated SSH connection; :meth:`run` opens a channel per command."""

    def __init__(
        self,
        target: SshTarget,
        passphrase_prompt: PassphrasePrompt | None = None,
        on_host_key_recorded: Callable[[str, paramiko.PKey], None] = lambda host, key: None,
    ) -> None:
        self.target = target
        self.passphrase_prompt = passphrase_prompt
        self.on_host_key_recorded = on_host_key_recorded
        self._clients: list[paramiko.SSHClient] = []
        self._client: paramiko.SSHClient | None = None
        self.host_key: paramiko.PKey | None = None
        self.login_user: str | None = None
        self.is_root = False
        # Called after every reconnect (the host lock re-takes itself); may raise to stop.
        self.after_reconnect: list[Callable[[], None]] = []

    # -- connecting ------------------------------------------------------------

    def connect(self) -> SshTransport:
        sock: Any = None
        if self.target.proxy_jump:
            sock = self._through_jump_hosts(self.target.proxy_jump)
        self._client = self._connect_one(self.target, sock)
        transport = self._client.get_transport()
        assert transport is not None
        transport.set_keepalive(15)
        self.host_key = transport.get_remote_server_key()
        whoami = self.run("id -u; id -un", timeout=self.target.connect_timeout)
        lines = whoami.stdout.split()
        self.is_root = bool(lines) and lines[0] == "0"
        self.login_user = lines[1] if len(lines) > 1 else self.target.user
        return self

    def _through_jump_hosts(self, spec: str) -> Any:
        sock: Any = None
        hops = [hop.strip() for hop in spec.split(",") if hop.strip()]
        chain = [*hops[1:], f"{self.target.hostname}:{self.target.port}"]
        for hop, next_hop in zip(hops, chain, strict=True):
            user, _, hostport = hop.rpartition("@")
            host, _, port = hostport.partition(":")
            jump = resolve_target(
                host,
                port=int(port) if port else None,
                user=user or None,
                known_hosts=self.target.known_hosts,
                accept_new_host_key=self.target.accept_new_host_key,
                connect_timeout=self.target.connect_timeout,
                ssh_config=self.target.ssh_config,
            )
            jump.identity_files = jump.identity_files or self.target.identity_files
            client = self._connect_one(jump, sock)
            next_host, _, next_port = next_hop.rpartition(":")
            transport = client.get_transport()
            assert transport is not None
            try:
                sock = transport.open_channel(
                    "direct-tcpip",
                    (next_host, int(next_port)),
                    ("127.0.0.1", 0),
                    timeout=self.target.connect_timeout,
                )
            except (paramiko.SSHException, OSError) as error:
                raise Unreachable(
                    f"{jump.label} could not reach {next_hop}: {error}",
                    "check the ProxyJump chain and that the jump host may forward",
                ) from None
        return sock

    def _open_socket(self, target: SshTarget) -> socket.socket:
        try:
            sock = socket.create_connection(
                (target.hostname, target.port), timeout=target.connect_timeout
            )
        except socket.gaierror as error:
            raise Unreachable(
                f"{target.label}: cannot resolve {target.hostname!r} ({error.strerror})",
                "check the host name, or use its address",
            ) from None
        except TimeoutError:
            raise Unreachable(
                f"{target.label}: no answer within {target.connect_timeout:g}s",
                "check that the host is up and port reachable, or raise --connect-timeout",
            ) from None
        except ConnectionRefusedError:
            raise Unreachable(
                f"{target.label}: connection refused",
                "is sshd running on that port? check --port",
            ) from None
        except OSError as error:
            raise Unreachable(
                f"{target.label}: {error.strerror or error}", "check the network path"
            ) from None
        # Without TCP_NODELAY each small exec request waits on Nagle: ~45 ms instead of ~3 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _connect_one(self, target: SshTarget, sock: Any) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(HostKeyPolicy(target, self.on_host_key_recorded))
        if target.known_hosts.is_file():
            try:
                load_known_hosts(client.get_host_keys(), target.known_hosts)
            except (OSError, paramiko.SSHException) as error:
                raise Unreachable(
                    f"cannot read {target.known_hosts}: {error}", "fix the file"
                ) from None
        passphrase: str | None = None
        while True:
            channel_sock = sock if sock is not None else self._open_socket(target)
            try:
                client.connect(
                    target.hostname,
                    port=target.port,
                    username=target.user or _local_user(),
                    key_filename=target.identity_files or None,  # type: ignore[arg-type]  # a list works
                    passphrase=passphrase,
                    sock=channel_sock,
                    timeout=target.connect_timeout,
                    banner_timeout=target.connect_timeout,
                    auth_timeout=target.connect_timeout,
                    channel_timeout=target.connect_timeout,
                    allow_agent=True,
                    look_for_keys=not target.identity_files,
                )
                break
            except paramiko.PasswordRequiredException:
                prompt = self.passphrase_prompt
                answer = prompt(f"passphrase for the key to {target.label}: ") if prompt else None
                if answer is None or passphrase is not None:
                    client.close()
                    raise AuthenticationFailed(
                        f"{target.label}: the key is encrypted and no passphrase was given",
                        "load it into ssh-agent (ssh-add), or run from a terminal to be asked",
                    ) from None
                passphrase = answer
                if sock is not None:
                    raise AuthenticationFailed(
                        f"{target.label}: the key is encrypted", "load it into ssh-agent (ssh-add)"
                    ) from None
            except paramiko.BadHostKeyException as error:
                client.close()
                raise host_key_changed(target.label, error.expected_key, error.key) from None
            except paramiko.AuthenticationException as error:
                client.close()
                raise AuthenticationFailed(
                    f"{target.label}: authentication failed as {target.user or _local_user()} ({error})",
                    "check --user and -i/--identity, or that the key is in authorized_keys",
                ) from None
            except TransportError:
                client.close()
                raise
            except (paramiko.SSHException, EOFError, OSError) as error:
                client.close()
                raise Unreachable(
                    f"{target.label}: SSH handshake failed ({error or type(error).__name__})",
                    "is an SSH server listening on that port?",
                ) from None
        self._clients.append(client)
        return client

    # -- running -----------------------------------------------------------------

    def run(
        self,
        command: str,
        timeout: float,
        *,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        as_root: bool = False,
    ) -> CommandResult:
        """Run one command; on timeout its whole process group is ended on the host too."""
        if as_root and not self.is_root:
            command = f"sudo -n sh -c {quote(command)}"
        # The login shell is a session leader (sshd calls setsid): its PID is the
        # process group to end if the command outlives its timeout.
        wrapped = f"printf '%s%s\\n' {_PGID_MARK} $$ >&2; {command}"
        started = time.monotonic()
        out, err = TailBuffer(output_limit), TailBuffer(output_limit)
        channel = self._open_channel()
        try:
            # Bytes, not str: a value given on the command line may hold bytes that are not
            # UTF-8 (Python keeps them as surrogates); they go out exactly as they came in.
            channel.exec_command(wrapped.encode("utf-8", "surrogateescape"))
            # Nothing is ever typed into a command: a command (or a sudo asking for a
            # password) that reads stdin gets end-of-file at once, not a wait until its timeout.
            channel.shutdown_write()
            timed_out = _drain(channel, started + timeout, out, err)
            exit_status = None if timed_out else channel.recv_exit_status()
            if exit_status == -1 and not channel.get_transport().is_active():
                # paramiko reports -1 when the connection died before the exit status came.
                raise EOFError("the connection closed before the command ended")
        except KeyboardInterrupt as interrupt:
            # Ctrl-C, SIGTERM or SIGHUP: the command must not outlive the operator's run.
            pgid = self._end_after_interrupt(channel, err, as_root and not self.is_root)
            if isinstance(interrupt, Interrupted):
                interrupt.ended_on_host = pgid
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise ConnectionLost(
                f"{self.target.label}: connection lost while running a command ({error})",
                "check the host; re-run, or resume the run",
            ) from None
        finally:
            _close_quietly(channel)
        pgid, mark_size = _pgid_mark(err.head)
        stderr_bytes = err.bytes()
        if not err.truncated:  # the mark is still at the front of what we kept
            stderr_bytes = stderr_bytes[mark_size:]
        if timed_out and pgid:
            self._end_process_group(pgid, as_root and not self.is_root)
        return CommandResult(
            command=command,
            exit_status=exit_status,
            stdout=out.bytes().decode("utf-8", "replace"),
            stderr=stderr_bytes.decode("utf-8", "replace"),
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            stdout_size=out.size,
            stderr_size=err.size - mark_size,
        )

    def _end_after_interrupt(
        self, channel: paramiko.Channel, err: TailBuffer, use_sudo: bool
    ) -> str | None:
        """End the interrupted command's process group; its id, or None if it never started."""
        with contextlib.suppress(paramiko.SSHException, OSError, EOFError, TransportError):
            pgid, _ = _pgid_mark(err.head)
            deadline = time.monotonic() + 2.0
            while pgid is None and not channel.closed and time.monotonic() < deadline:
                # The mark is the first thing the remote shell prints: wait a moment for it.
                if channel.recv_stderr_ready():
                    err.add(channel.recv_stderr(65536))
                    pgid, _ = _pgid_mark(err.head)
                else:
                    select.select([channel], [], [], 0.05)
                    while channel.recv_ready():
                        channel.recv(65536)
            if pgid is None:
                return None
            self._end_process_group(pgid, use_sudo)
            return pgid
        return None

    def hold(self, command: str, ready: str, timeout: float) -> Held:
        """Start a command that runs for as long as this connection lives: its stdin stays
        open until the returned channel is closed or the connection dies. It is held once
        it prints the line ``ready``; if it exits first, its status and output come back."""
        channel = self._open_channel()
        out, err = TailBuffer(65536), TailBuffer(65536)
        marker = ready.encode() + b"\n"
        deadline = time.monotonic() + timeout
        try:
            channel.exec_command(command.encode("utf-8", "surrogateescape"))
            while True:
                while channel.recv_ready():
                    out.add(channel.recv(65536))
                while channel.recv_stderr_ready():
                    err.add(channel.recv_stderr(65536))
                text = out.bytes()
                if marker in text:
                    before = text[: text.index(marker)].decode("utf-8", "replace")
                    return Held(None, before, err.bytes().decode("utf-8", "replace"), channel)
                ended = channel.closed or (channel.eof_received and channel.exit_status_ready())
                if ended and not channel.recv_ready() and not channel.recv_stderr_ready():
                    status = channel.recv_exit_status()
                    _close_quietly(channel)
                    return Held(
                        status,
                        text.decode("utf-8", "replace"),
                        err.bytes().decode("utf-8", "replace"),
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    _close_quietly(channel)
                    return Held(None, text.decode("utf-8", "replace"), "timed out")
                if channel.eof_received:
                    channel.status_event.wait(min(remaining, 0.2))
                else:
                    select.select([channel], [], [], min(remaining, 0.2))
        except (paramiko.SSHException, OSError, EOFError) as error:
            _close_quietly(channel)
            raise ConnectionLost(
                f"{self.target.label}: connection lost while taking the lock ({error})",
                "check the host; re-run, or resume the run",
            ) from None

    def run_many(
        self, commands: Sequence[BatchCommand], *, output_limit: int = DEFAULT_OUTPUT_LIMIT
    ) -> list[CommandResult]:
        """Run read-only commands as one script on one channel (see :mod:`batch`).

        Each result is what :meth:`run` would have returned for that command alone; the
        ones not marked ``alone`` run at the same time. A host without ``timeout`` or
        ``mktemp`` gets them one by one through :meth:`run`.
        """
        wanted = list(commands)
        if len(wanted) < 2:
            return [self._run_one(c, output_limit) for c in wanted]
        boundary = batch.new_boundary()
        text = batch.script(wanted, boundary, output_limit, self.is_root)
        started = time.monotonic()
        channel = self._open_channel()
        # Room for every command's kept output on both streams, plus the headers.
        room = 2 * output_limit * len(wanted) + 256 * len(wanted) + 4096
        out, err = TailBuffer(room), TailBuffer(room)
        try:
            channel.exec_command(text.encode("utf-8", "surrogateescape"))
            channel.shutdown_write()
            timed_out = _drain(channel, started + batch.deadline(wanted), out, err)
            exit_status = None if timed_out else channel.recv_exit_status()
            if exit_status == -1 and not channel.get_transport().is_active():
                raise EOFError("the connection closed before the commands ended")
        except KeyboardInterrupt as interrupt:
            # As in run(): the observations must not outlive the operator's run.
            sudo = any(c.as_root for c in wanted) and not self.is_root
            pgid = self._end_after_interrupt(channel, err, sudo)
            if isinstance(interrupt, Interrupted):
                interrupt.ended_on_host = pgid
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise ConnectionLost(
                f"{self.target.label}: connection lost while running commands ({error})",
                "check the host; re-run, or resume the run",
            ) from None
        finally:
            _close_quietly(channel)
        duration = time.monotonic() - started
        if timed_out:
            pgid, _ = _pgid_mark(err.head)
            if pgid:
                self._end_process_group(pgid, False)
            return [
                CommandResult(batch.as_sent(c, self.is_root), None, "", "", duration, True)
                for c in wanted
            ]
        try:
            if exit_status == batch.UNSUPPORTED_STATUS:
                raise batch.BatchUnsupported
            outputs = batch.parse(out.bytes(), len(wanted), boundary, output_limit)
        except (batch.BatchUnsupported, batch.BatchGarbled):
            return [self._run_one(c, output_limit) for c in wanted]
        return [
            CommandResult(
                command=batch.as_sent(c, self.is_root),
                exit_status=o.exit_status,
                stdout=o.stdout.decode("utf-8", "replace"),
                stderr=o.stderr.decode("utf-8", "replace"),
                duration_s=duration,
                timed_out=o.timed_out,
                stdout_size=o.stdout_size,
                stderr_size=o.stderr_size,
            )
            for c, o in zip(wanted, outputs, strict=True)
        ]

    def _run_one(self, command: BatchCommand, output_limit: int) -> CommandResult:
        return self.run(
            command.command, command.timeout, output_limit=output_limit, as_root=command.as_root
        )

    def _open_channel(self) -> paramiko.Channel:
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            raise ConnectionLost(f"{self.target.label}: not connected", "reconnect and re-run")
        try:
            return transport.open_session(timeout=self.target.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise ConnectionLost(
                f"{self.target.label}: cannot open a channel ({error})", "re-run"
            ) from None

    def _end_process_group(self, pgid: str, use_sudo: bool) -> None:
        # "kill -SIG -PGID": the one spelling dash, bash and BusyBox sh all accept.
        group = f"-{int(pgid)}"
        # A short grace after TERM, then KILL: the caller's timeout is kept within a second.
        script = (
            f"kill -TERM {group} 2>/dev/null; i=0; "
            f"while kill -0 {group} 2>/dev/null && [ $i -lt 5 ]; do sleep 0.1; i=$((i+1)); done; "
            f"kill -KILL {group} 2>/dev/null; true"
        )
        if use_sudo:
            script = f"sudo -n sh -c {quote(script)}"
        channel = self._open_channel()
        try:
            channel.exec_command(script)
            channel.shutdown_write()
            _drain(channel, time.monotonic() + 2, TailBuffer(4096), TailBuffer(4096))
        finally:
            _close_quietly(channel)

    def alive(self) -> bool:
        """Does the connection still carry a command? (False once the host went down.)"""
        try:
            return self.run("true", timeout=5).exit_status == 0
        except ConnectionLost:
            return False

    def reconnect(self) -> SshTransport:
        """A fresh connection to the same host; a different host key is refused as always."""
        known = self.host_key
        self.close()
        self.connect()
        if (
            known is not None
            and self.host_key is not None
            and known.asbytes() != self.host_key.asbytes()
        ):
            raise host_key_changed(self.target.label, known, self.host_key)
        for hook in self.after_reconnect:
            hook()
        return self

    def close(self) -> None:
        for client in reversed(self._clients):
            client.close()
        self._clients.clear()
        self._client = None

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_quietly(channel: paramiko.Channel) -> None:
    """Closing a channel writes to the socket, which may be gone already (a reboot)."""
    with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
        channel.close()


def _local_user() -> str:
    import getpass

    return getpass.getuser()


EXIT_GRACE_S = 0.5  # after the exit status, how long output may still come


def _drain(channel: paramiko.Channel, deadline: float, out: TailBuffer, err: TailBuffer) -> bool:
    """Read stdout and stderr together until the command ends or the deadline passes;
    True when it timed out.

    Reading both streams in one loop is what keeps a chatty command from
    filling one window while we wait on the other (paramiko's recv_exit_status
    warns about exactly that hang). The exit status is the end: a background child
    that keeps stdout open gets a short grace for its output, then is left behind.
    """
    exited_at: float | None = None
    while True:
        progressed = False
        while channel.recv_ready():
            out.add(channel.recv(65536))
            progressed = True
        while channel.recv_stderr_ready():
            err.add(channel.recv_stderr(65536))
            progressed = True
        # sshd may report the exit status before the last of the output: the end is
        # EOF (after all data on both streams) plus the status, with nothing left to read.
        finished = channel.closed or (channel.eof_received and channel.exit_status_ready())
        if finished and not channel.recv_ready() and not channel.recv_stderr_ready():
            return False
        now = time.monotonic()
        if channel.exit_status_ready():
            exited_at = now if exited_at is None else exited_at
            if now - exited_at >= EXIT_GRACE_S:
                return False
        remaining = deadline - now
        if remaining <= 0:
            return True
        if channel.eof_received and not channel.exit_status_ready():
            # All output is in; only the exit status is still on its way. The channel's
            # pipe stays readable after EOF, so selecting on it would spin: wait for the status.
            channel.status_event.wait(min(remaining, 0.5))
        elif not progressed:
            wait = min(remaining, 0.5 if exited_at is None else EXIT_GRACE_S / 3)
            select.select([channel], [], [], wait)


def _pgid_mark(head: bytes) -> tuple[str | None, int]:
    """The process group announced on stderr's first line, and that line's size."""
    first, newline, _ = head.partition(b"\n")
    if newline and first.startswith(_PGID_MARK.encode()):
        pgid = first[len(_PGID_MARK) :].decode("ascii", "replace").strip()
        return (pgid if pgid.isdigit() else None), len(first) + 1
    return None, 0
