"""Running commands on a host: one SSH connection (paramiko) per host, a channel per command.

A remote command that exits non-zero is data (:class:`CommandResult`); only the
transport failing raises (:class:`TransportError` and its kinds), each with a
hint that says what to do.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from runbook_runner.errors import ConnectionLost
from runbook_runner.hostkeys import (
    fingerprint,
    host_key_changed,
    record_host_key,
    unknown_host_key,
)
from runbook_runner.target import SshTarget, resolve_target
from runbook_runner.template import quote

__all__ = [
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


PassphrasePrompt = Callable[[str], str | None]


class SshTransport:
    """One authenticated SSH connection; :meth:`run` opens a channel per command."""

    def __init__(
        self,
        target: SshTarget,
        passphrase_prompt: PassphrasePrompt | None = None,
        on_host_key_recorded: Callable[[str, paramiko.PKey], None] = lambda host, key: None,
        on_notice: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.target = target
        self.on_notice = on_notice
        self._noticed: set[str] = set()
        self.passphrase_prompt = passphrase_prompt
        self.on_host_key_recorded = on_host_key_recorded
        self._clients: list[paramiko.SSHClient] = []
        self._client: paramiko.SSHClient | None = None
        self.host_key: paramiko.PKey | None = None
        self.login_user: str | None = None
        self.is_root = False

    # -- connecting ------------------------------------------------------------

    def connect(self) -> SshTransport:
        from runbook_runner.sshconnect import Hooks, connect_route

        hooks = Hooks(self.passphrase_prompt, self.on_host_key_recorded, self._notice_once)
        try:
            self._client = connect_route(self.target, hooks, self._clients)
        except BaseException:
            self.close()
            raise
        transport = self._client.get_transport()
        assert transport is not None
        self.host_key = transport.get_remote_server_key()
        whoami = self.run("id -u; id -un", timeout=self.target.connect_timeout)
        lines = whoami.stdout.split()
        self.is_root = bool(lines) and lines[0] == "0"
        self.login_user = lines[1] if len(lines) > 1 else self.target.user
        return self

    def _notice_once(self, text: str) -> None:
        if text not in self._noticed:
            self._noticed.add(text)
            self.on_notice(text)

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
        channel = self._open_channel()
        try:
            # Bytes, not str: a value given on the command line may hold bytes that are not
            # UTF-8 (Python keeps them as surrogates); they go out exactly as they came in.
            channel.exec_command(wrapped.encode("utf-8", "surrogateescape"))
            out, err, timed_out = _drain(channel, started + timeout, output_limit)
            exit_status = None if timed_out else channel.recv_exit_status()
            if exit_status == -1 and not channel.get_transport().is_active():
                # paramiko reports -1 when the connection died before the exit status came.
                raise EOFError("the connection closed before the command ended")
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
        script = (
            f"kill -TERM {group} 2>/dev/null; i=0; "
            f"while kill -0 {group} 2>/dev/null && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; "
            f"kill -KILL {group} 2>/dev/null; true"
        )
        if use_sudo:
            script = f"sudo -n sh -c {quote(script)}"
        channel = self._open_channel()
        try:
            channel.exec_command(script)
            _drain(channel, time.monotonic() + 10, 4096)
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


def _drain(
    channel: paramiko.Channel, deadline: float, limit: int
) -> tuple[TailBuffer, TailBuffer, bool]:
    """Read stdout and stderr together until the command ends or the deadline passes.

    Reading both streams in one loop is what keeps a chatty command from
    filling one window while we wait on the other (paramiko's recv_exit_status
    warns about exactly that hang).
    """
    out, err = TailBuffer(limit), TailBuffer(limit)
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
            return out, err, False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return out, err, True
        if channel.eof_received and not channel.exit_status_ready():
            # All output is in; only the exit status is still on its way. The channel's
            # pipe stays readable after EOF, so selecting on it would spin: wait for the status.
            channel.status_event.wait(min(remaining, 0.5))
        elif not progressed:
            select.select([channel], [], [], min(remaining, 0.5))


def _pgid_mark(head: bytes) -> tuple[str | None, int]:
    """The process group announced on stderr's first line, and that line's size."""
    first, newline, _ = head.partition(b"\n")
    if newline and first.startswith(_PGID_MARK.encode()):
        pgid = first[len(_PGID_MARK) :].decode("ascii", "replace").strip()
        return (pgid if pgid.isdigit() else None), len(first) + 1
    return None, 0
