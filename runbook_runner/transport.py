"""Running commands on a host: one SSH connection (paramiko) per host, a channel per command.

A remote command that exits non-zero is data (:class:`CommandResult`); only the
transport failing raises (:class:`TransportError` and its kinds), each with a
hint that says what to do.

This module is the connection and what runs through it (one command, a held one, a
batch, sudo, stalls, reconnecting); what a command did is :mod:`runbook_runner.commandresult`,
one channel's reading and process-group handling is :mod:`runbook_runner.ssh.channel`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import paramiko

from runbook_runner.commandresult import DEFAULT_OUTPUT_LIMIT, CommandResult, Held, TailBuffer
from runbook_runner.errors import (
    ConnectionLost,
    Interrupted,
    TransportError,
)
from runbook_runner.format.template import quote
from runbook_runner.ssh import batch
from runbook_runner.ssh.batch import BatchCommand
from runbook_runner.ssh.channel import (
    announcing_pgid,
    close_quietly,
    drain,
    end_group_script,
    final_status,
    no_check,
    pgid_mark,
    wait_for_pgid,
    wait_ready,
)
from runbook_runner.ssh.config import resolve_target
from runbook_runner.ssh.hostkeys import (
    fingerprint,
    host_key_changed,
    record_host_key,
    unknown_host_key,
)
from runbook_runner.ssh.target import SshTarget

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "BatchCommand",
    "CommandResult",
    "Held",
    "SshTarget",
    "SshTransport",
    "TailBuffer",
    "fingerprint",
    "record_host_key",
    "resolve_target",
    "unknown_host_key",
]

# paramiko logs socket errors itself; the runner reports transport failures as one line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

STALL_PROBE_S = 5.0  # after a wait ran out, the host has max(ConnectTimeout, this) to answer

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
        self._batch_refused = False  # the host could not run a batch script (run_many)
        self._last_finished: tuple[str, int | None] | None = None  # for a stall's message
        # --ask-become-pass: sent only to sudo -S, only where sudo -n is refused.
        self.become_password: str | None = None
        self._sudo_password: bool | None = None  # does this connection's sudo want it?
        # Called after every reconnect (the host lock re-takes itself); may raise to stop.
        self.after_reconnect: list[Callable[[], None]] = []
        # Asked while a command runs; raises Interrupted to stop it as a signal would (a
        # fleet's worker threads get no signals: the main thread's stop reaches them here).
        self.interrupt_check: Callable[[], None] = no_check

    # -- connecting ------------------------------------------------------------

    def connect(self) -> SshTransport:
        from runbook_runner.ssh.connect import Hooks, connect_route

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
        self._last_finished = None  # only the run's own commands are named in a stall
        self._sudo_password = None
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
        typed = None
        if as_root and not self.is_root:
            command, typed = self._through_sudo(command)
        wrapped = announcing_pgid(command)
        started = time.monotonic()
        out, err = TailBuffer(output_limit), TailBuffer(output_limit)
        channel = self._open_channel("running a command", "the command was not sent")
        with self._sent(channel, err, "running a command", as_root and not self.is_root):
            # Bytes, not str: a value given on the command line may hold bytes that are not
            # UTF-8 (Python keeps them as surrogates); they go out exactly as they came in.
            self._exec(channel, wrapped.encode("utf-8", "surrogateescape"), "running a command")
            if typed is not None:  # the become password, read by sudo -S alone
                channel.sendall(typed)
            # Nothing else is ever typed into a command: a command (or a sudo asking for a
            # password) that reads stdin gets end-of-file at once, not a wait until its timeout.
            channel.shutdown_write()
            timed_out = drain(channel, started + timeout, out, err, self.interrupt_check)
            exit_status = final_status(channel, timed_out, "the command")
        if timed_out:
            self._stalled_unless_answering(
                "running a command",
                f"its end never came in the {timeout:g}s it was given: whether it finished on "
                "the host is not known",
            )
        else:
            self._last_finished = (command, exit_status)
        pgid, mark_size = pgid_mark(err.head)
        stderr_bytes = err.bytes()
        if not err.truncated:  # the mark is still at the front of what we kept
            stderr_bytes = stderr_bytes[mark_size:]
        if timed_out and pgid:
            self._end_process_group(pgid, as_root and not self.is_root)
        stdout, stderr = (
            out.bytes().decode("utf-8", "replace"),
            stderr_bytes.decode("utf-8", "replace"),
        )
        if typed is not None and self.become_password:  # a sudo that says it back: not shown
            stdout = stdout.replace(self.become_password, "***")
            stderr = stderr.replace(self.become_password, "***")
        return CommandResult(
            command=command,
            exit_status=exit_status,
            stdout=stdout,
            stderr=stderr,
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            stdout_size=out.size,
            stderr_size=err.size - mark_size,
        )

    @contextlib.contextmanager
    def _sent(
        self,
        channel: paramiko.Channel,
        err: TailBuffer,
        doing: str,
        use_sudo: bool,
        session: bool = False,
    ) -> Iterator[None]:
        """Around a command on ``channel``: Ctrl-C, SIGTERM or SIGHUP ends its process group
        on the host (it must not outlive the operator's run); a connection that fails is
        :class:`ConnectionLost` naming what it was ``doing``; the channel is closed after."""
        try:
            yield
        except KeyboardInterrupt as interrupt:
            pgid = self._end_after_interrupt(channel, err, use_sudo, session)
            if isinstance(interrupt, Interrupted):
                interrupt.ended_on_host = pgid
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise ConnectionLost(
                f"{self.target.label}: connection lost while {doing} ({error})",
                "check the host; re-run, or resume the run",
            ) from None
        finally:
            close_quietly(channel)

    def _end_after_interrupt(
        self, channel: paramiko.Channel, err: TailBuffer, use_sudo: bool, session: bool = False
    ) -> str | None:
        """End the interrupted command's process group; its id, or None if it never started."""
        with contextlib.suppress(paramiko.SSHException, OSError, EOFError, TransportError):
            pgid = wait_for_pgid(channel, err)
            if pgid is None:
                return None
            self._end_process_group(pgid, use_sudo, session)
            return pgid
        return None

    def hold(self, command: str, ready: str, timeout: float) -> Held:
        """Start a command that runs for as long as this connection lives: its stdin stays
        open until the returned channel is closed or the connection dies. It is held once
        it prints the line ``ready``; if it exits first, its status and output come back."""
        channel = self._open_channel("taking the lock", "the lock was not asked for")
        out, err = TailBuffer(65536), TailBuffer(65536)
        marker = ready.encode() + b"\n"
        deadline = time.monotonic() + timeout
        try:
            self._exec(channel, command.encode("utf-8", "surrogateescape"), "taking the lock")
            outcome, status = wait_ready(channel, marker, deadline, out, err)
            text = out.bytes()
            if outcome == "ready":
                before = text[: text.index(marker)].decode("utf-8", "replace")
                return Held(None, before, err.bytes().decode("utf-8", "replace"), channel)
            close_quietly(channel)
            if outcome == "ended":
                return Held(
                    status,
                    text.decode("utf-8", "replace"),
                    err.bytes().decode("utf-8", "replace"),
                )
            self._stalled_unless_answering(
                "taking the lock", f"the lock was not taken in {timeout:g}s"
            )
            return Held(None, text.decode("utf-8", "replace"), "timed out")
        except (paramiko.SSHException, OSError, EOFError) as error:
            close_quietly(channel)
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
        if len(wanted) < 2 or self._batch_refused:
            return [self._run_one(c, output_limit) for c in wanted]
        if any(c.as_root for c in wanted) and self._sudo_needs_password():
            # sudo -S reads the password from the command's stdin: one channel each.
            return [self._run_one(c, output_limit) for c in wanted]
        boundary = batch.new_boundary()
        text = batch.script(wanted, boundary, output_limit, self.is_root)
        started = time.monotonic()
        channel = self._open_channel("observing the host", "the observations were not sent")
        # Room for every command's kept output on both streams, plus the headers.
        room = 2 * output_limit * len(wanted) + 256 * len(wanted) + 4096
        out, err = TailBuffer(room), TailBuffer(room)
        sudo = any(c.as_root for c in wanted) and not self.is_root
        with self._sent(channel, err, "running commands", sudo, session=True):
            self._exec(channel, text.encode("utf-8", "surrogateescape"), "observing the host")
            channel.shutdown_write()
            timed_out = drain(
                channel, started + batch.deadline(wanted), out, err, self.interrupt_check
            )
            exit_status = final_status(channel, timed_out, "the commands")
        duration = time.monotonic() - started
        if timed_out:
            self._stalled_unless_answering(
                "observing the host",
                f"{len(wanted)} observation commands had not ended in {batch.deadline(wanted):g}s",
            )
            pgid, _ = pgid_mark(err.head)
            if pgid:
                self._end_process_group(pgid, sudo, session=True)
            return [
                CommandResult(batch.as_sent(c, self.is_root), None, "", "", duration, True)
                for c in wanted
            ]
        try:
            if exit_status == batch.UNSUPPORTED_STATUS:
                raise batch.BatchUnsupported
            outputs = batch.parse(out.bytes(), len(wanted), boundary, output_limit)
        except (batch.BatchUnsupported, batch.BatchGarbled):
            # This host cannot run the script: not asked again on this connection.
            self._batch_refused = True
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

    def _through_sudo(self, command: str) -> tuple[str, bytes | None]:
        """``command`` as root on a non-root login, and what to type into it: ``sudo -n``,
        or, where the host needs the password given with --ask-become-pass, ``sudo -S``
        with the password on its stdin (never in the command line, never journaled)."""
        if self._sudo_needs_password():
            assert self.become_password is not None
            typed = (self.become_password + "\n").encode("utf-8", "surrogateescape")
            return f"sudo -S -p '' sh -c {quote(command)}", typed
        return f"sudo -n sh -c {quote(command)}", None

    def _sudo_needs_password(self) -> bool:
        """Whether this host's sudo wants the become password (asked once per connection,
        and only when one was given: without it, sudo -n says so itself)."""
        if self.become_password is None or self.is_root:
            return False
        if self._sudo_password is None:
            probe = self.run("sudo -n true", timeout=self.target.connect_timeout)
            self._sudo_password = probe.exit_status != 0
        return self._sudo_password

    def _run_one(self, command: BatchCommand, output_limit: int) -> CommandResult:
        return self.run(
            command.command, command.timeout, output_limit=output_limit, as_root=command.as_root
        )

    def _open_channel(
        self, phase: str = "ending a command", unsent: str = "nothing was sent"
    ) -> paramiko.Channel:
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            raise ConnectionLost(f"{self.target.label}: not connected", "reconnect and re-run")
        try:
            return transport.open_session(timeout=self.target.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as error:
            if transport.is_active():  # no answer to the channel request: a stall
                self.close()
                raise ConnectionLost(
                    f"{self.target.label}: the connection stalled while {phase}: the host did "
                    f"not answer a request for a new channel in "
                    f"{self.target.connect_timeout:g}s; {unsent}{self._after_last()}",
                    "check the host and the network path to it; re-run, or resume the run",
                ) from None
            raise ConnectionLost(
                f"{self.target.label}: cannot open a channel ({error})", "re-run"
            ) from None

    def _exec(self, channel: paramiko.Channel, command: bytes, phase: str) -> None:
        """``channel.exec_command``, which waits for the host's reply with no time limit:
        when none comes within the connect timeout and the host no longer answers at all,
        the connection is closed (so the wait ends) and the stall is said, naming ``phase``.
        A host that is merely slow keeps its connection."""
        done = threading.Event()
        stalled: list[float] = []

        def watch() -> None:
            if done.wait(self.target.connect_timeout):
                return
            within = max(self.target.connect_timeout, STALL_PROBE_S)
            if not done.is_set() and not self.answers(within) and not done.is_set():
                stalled.append(self.target.connect_timeout + within)
                self.close()

        watcher = threading.Thread(target=watch, name="exec-watch", daemon=True)
        watcher.start()
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError):
            if stalled:
                raise ConnectionLost(
                    f"{self.target.label}: the connection stalled while {phase}: the host did "
                    f"not answer the command's start in {stalled[0]:g}s; whether it began on "
                    f"the host is not known{self._after_last()}",
                    "check the host and the network path to it; re-run, or resume the run",
                ) from None
            raise
        finally:
            done.set()

    def answers(self, within: float) -> bool:
        """Whether the host still answers on this connection: a new channel (which sshd
        must confirm or refuse) within ``within`` seconds. Nothing runs on the host."""
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            return False
        try:
            probe = transport.open_session(timeout=within)
        except (paramiko.SSHException, OSError, EOFError):
            return False
        close_quietly(probe)
        return True

    def _stalled_unless_answering(self, phase: str, what: str) -> None:
        """After a wait ran out: a lost connection (exit 3) naming ``phase`` if the host no
        longer answers at all, rather than a slow command or a lock-folder problem."""
        within = max(self.target.connect_timeout, STALL_PROBE_S)
        if self.answers(within):
            return
        self.close()  # nothing more can go through it; a reconnect starts afresh
        raise ConnectionLost(
            f"{self.target.label}: the connection stalled while {phase}: the host stopped "
            f"answering (no reply in {within:g}s); {what}{self._after_last()}",
            "check the host and the network path to it; re-run, or resume the run",
        )

    def _after_last(self) -> str:
        if self._last_finished is None:
            return ""
        command, status = self._last_finished
        shown = command if len(command) <= 60 else command[:57] + "..."
        return f"; the command before it had finished on the host (exit {status}): {shown}"

    def _end_process_group(self, pgid: str, use_sudo: bool, session: bool = False) -> None:
        """End a command's process group (and with ``session``, its session's groups)."""
        script = end_group_script(pgid, session)
        typed = None
        if use_sudo:
            script, typed = self._through_sudo(script)
        channel = self._open_channel()
        try:
            self._exec(channel, script.encode("utf-8", "surrogateescape"), "ending a command")
            if typed is not None:
                channel.sendall(typed)
            channel.shutdown_write()
            drain(channel, time.monotonic() + 2, TailBuffer(4096), TailBuffer(4096))
        finally:
            close_quietly(channel)

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
