"""What a command did, whichever transport ran it: :class:`CommandResult`, the bounded
:class:`TailBuffer` each output stream is kept in, and :class:`Held` for a command that
keeps running (the host lock's holder).

A remote command that exits non-zero is data, not an error; only the transport failing
raises (:mod:`runbook_runner.errors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

DEFAULT_OUTPUT_LIMIT = 1024 * 1024  # bytes kept per stream; the tail is what matters


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
