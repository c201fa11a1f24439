"""``--local``: a runbook's commands run on this machine, not over SSH.

The same runner, parsers, checks and journal as over SSH; only the transport differs: each
command runs under ``/bin/sh -c`` in a session (and so a process group) of its own, with no
stdin, its output kept as :class:`~runbook_runner.transport.CommandResult` keeps it, and the
whole group ended on a timeout or a signal, as the SSH transport ends it on the host; a
round's observations run side by side (``run_many``), as over SSH. This is
what Slurm's HealthCheckProgram, a Kubernetes DaemonSet or node-problem-detector runs on
every node.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from runbook_runner import localfile
from runbook_runner.commandresult import DEFAULT_OUTPUT_LIMIT, CommandResult, Held, TailBuffer
from runbook_runner.errors import Interrupted
from runbook_runner.format.template import quote
from runbook_runner.ssh.batch import BatchCommand

SHELL = "/bin/sh"
KILL_GRACE_S = 0.5  # after TERM to the command's group, then KILL


def host_name() -> str:
    """This machine's name, as the header, the journal and a Slurm drain reason carry it;
    refused (exit 2) when it holds a space, a newline or another control character, which
    would split a line of any of them."""
    name = socket.gethostname()
    if not name or not name.isprintable() or any(c.isspace() for c in name):
        from runbook_runner.errors import UsageError

        raise UsageError(
            f"--local: this machine's host name {name!r} is not a host name (a space, newline "
            "or control character in it would split the header, the journal and a drain "
            "reason); set a plain one (hostnamectl hostname NAME)",
            "runbook",
        )
    return name


@dataclass(frozen=True)
class LocalTarget:
    """This machine, named as the journal and the JSON name a host."""

    host: str
    label: str


def _pump(stream: IO[bytes], buffer: TailBuffer) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
        buffer.add(chunk)


class _Holder:
    """A held command (the host lock's flock holder): closing it ends the holder."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _end_group(self.process)


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """TERM to the command's whole process group, a short grace, then KILL to what is left
    of it: the shell may have ended on the TERM while a child that ignores TERM goes on."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while _group_alive(process) and time.monotonic() < deadline:
        time.sleep(0.02)  # a bounded poll: the grace ends early when the group is gone
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    process.poll()  # the shell reaped once it ends: a zombie leader would keep its group
    try:
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class LocalTransport:
    """Commands on this machine, shaped as :class:`~runbook_runner.transport.SshTransport`'s."""

    def __init__(self) -> None:
        name = host_name()
        self.target = LocalTarget(name, name)
        self.login_user: str | None = getpass.getuser()
        self.host_key = None
        self.is_root = os.geteuid() == 0
        self.after_reconnect: list[Callable[[], None]] = []
        self.interrupt_check: Callable[[], None] = lambda: None

    def _start(self, command: str, stdin: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [SHELL, "-c", command.encode("utf-8", "surrogateescape")],
            env={**os.environ, "PATH": localfile.safe_path(os.environ.get("PATH"))},
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: ended whole, as over SSH
        )

    def run(
        self,
        command: str,
        timeout: float,
        *,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        as_root: bool = False,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> CommandResult:
        """One command, its group ended on its timeout, a signal, or once ``cancelled()``
        (run_many's other commands were interrupted): then it reads as timed out."""
        if as_root and not self.is_root:
            command = f"sudo -n sh -c {quote(command)}"
        started = time.monotonic()
        out, err = TailBuffer(output_limit), TailBuffer(output_limit)
        process = self._start(command, subprocess.DEVNULL)
        assert process.stdout is not None
        assert process.stderr is not None
        readers = [
            threading.Thread(target=_pump, args=(process.stdout, out), daemon=True),
            threading.Thread(target=_pump, args=(process.stderr, err), daemon=True),
        ]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            deadline = started + timeout
            while True:
                self.interrupt_check()
                try:
                    process.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline or cancelled():
                        timed_out = True
                        _end_group(process)
                        break
        except KeyboardInterrupt as interrupt:
            _end_group(process)
            if isinstance(interrupt, Interrupted):
                interrupt.ended_on_host = str(process.pid)
            raise
        for reader in readers:
            reader.join(timeout=1.0)  # a background child holding the pipes is left behind
        return CommandResult(
            command=command,
            exit_status=None if timed_out else process.returncode,
            stdout=out.bytes().decode("utf-8", "replace"),
            stderr=err.bytes().decode("utf-8", "replace"),
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            stdout_size=out.size,
            stderr_size=err.size,
        )

    def run_many(
        self, commands: Sequence[BatchCommand], *, output_limit: int = DEFAULT_OUTPUT_LIMIT
    ) -> list[CommandResult]:
        """As SshTransport.run_many: the commands not ``alone`` at the same time, each under
        its own timeout, so observations that all hang (an nvidia-smi that does not answer)
        end by the longest timeout, not by the sum of them; then the ``alone`` ones, one at a
        time. A signal in this thread ends the commands still running in the others."""
        from concurrent.futures import ThreadPoolExecutor

        results: dict[int, CommandResult] = {}
        together = [i for i, c in enumerate(commands) if not c.alone]
        stop = threading.Event()

        def one(index: int) -> CommandResult:
            c = commands[index]
            return self.run(
                c.command, c.timeout, output_limit=output_limit, as_root=c.as_root,
                cancelled=stop.is_set,
            )  # fmt: skip

        pool = ThreadPoolExecutor(max_workers=max(1, len(together)))
        try:
            results.update(zip(together, pool.map(one, together), strict=True))
        finally:
            stop.set()  # when the set ended by itself, nothing is still running
            pool.shutdown(wait=True)
        for index, c in enumerate(commands):
            if c.alone:
                results[index] = self.run(
                    c.command, c.timeout, output_limit=output_limit, as_root=c.as_root
                )
        return [results[index] for index in range(len(commands))]

    def hold(self, command: str, ready: str, timeout: float) -> Held:
        """As SshTransport.hold: a command whose stdin stays open until it is closed."""
        process = self._start(command, subprocess.PIPE)
        assert process.stdout is not None
        assert process.stderr is not None
        err = TailBuffer(65536)
        reader = threading.Thread(target=_pump, args=(process.stderr, err), daemon=True)
        reader.start()
        marker = ready.encode() + b"\n"
        deadline = time.monotonic() + timeout
        text = b""
        while marker not in text:
            line = process.stdout.readline()  # the holder prints lines, then the ready one
            if not line or time.monotonic() > deadline:
                status = process.wait() if not line else None
                if line:
                    _end_group(process)
                return Held(status, text.decode("utf-8", "replace"), err.bytes().decode())
            text += line
        before = text[: text.index(marker)].decode("utf-8", "replace")
        return Held(None, before, err.bytes().decode("utf-8", "replace"), _Holder(process))  # type: ignore[arg-type]

    def alive(self) -> bool:
        return True

    def reconnect(self) -> LocalTransport:
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalTransport:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalConnecting:
    """What cli/connecting.py's Connecting is to SSH: here nothing to wait for."""

    def __init__(self) -> None:
        self.transport = LocalTransport()

    def result(self, say: Callable[[str], None]) -> Any:
        return self.transport

    def abandon(self) -> None:
        self.transport.close()
