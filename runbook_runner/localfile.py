"""Reading a file named on the command line or in a configuration, with a size bound.

``runbook validate /dev/zero`` (or ``--resume`` of a 40 GB file) must not read until the
memory is gone, nor wait for ever on a FIFO nobody writes: every such read is of a regular
file and takes at most its limit. Anything else is an error that names the file, as an
:class:`OSError` (EFBIG, EINVAL) so that callers already reporting a file they cannot read
report this one the same way.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

MiB = 1024 * 1024
RUNBOOK_LIMIT = 4 * MiB  # the bundled runbooks are 5-25 KB
CONFIG_LIMIT = 4 * MiB  # ssh_config, key files, state files
LIST_LIMIT = 64 * MiB  # known_hosts, inventories: one line per host of a large fleet
JOURNAL_LIMIT = 256 * MiB  # a long run's journal: every observation of every poll
PLAN_LIMIT = 16 * MiB  # a saved plan holds the state it was made on: every process of the host


class TooLarge(OSError):
    """The file is larger than its limit (or never ends: /dev/zero)."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(
            errno.EFBIG,
            f"larger than {limit // MiB} MiB: not read (is it the file you meant?)",
            str(path),
        )


class NotRegular(OSError):
    """Not a regular file (a FIFO, a device, a directory, a socket): not read."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file: not read", str(path))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO (named pipe)")."""
    return next((said for test, said in _KINDS if test(mode)), "not a file")


def require_regular(path: Path, *, null_ok: bool = False) -> None:
    """Refuse (:class:`NotRegular`) a path that is there and is not a regular file (``null_ok``:
    but /dev/null, "nothing", as for ``ssh -F``), judged without opening it: an open of a FIFO
    waits for its other end. For a file another program opens (ssh, ssh-keygen) or one
    opened to be written; a missing one is for the caller to report."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) or (null_ok and os.path.samefile(path, os.devnull)):
        return
    raise NotRegular(path, kind(mode))


def read_bytes(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit``: a FIFO nobody writes, a device
    (``/dev/zero``) or a directory is refused (:class:`NotRegular`) without waiting or
    reading; :class:`TooLarge` past ``limit``. The file is opened once and judged by
    what was opened (no check-then-open race)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(path, kind(mode))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(path, limit)
    return data


def read_text(path: Path, limit: int, encoding: str = "utf-8", errors: str = "strict") -> str:
    return read_bytes(path, limit).decode(encoding, errors)


def safe_path(path: str | None) -> str:
    """PATH for this machine's commands without its empty or relative entries: each of those
    is "the current directory", where a ``sudo`` or ``nvidia-smi`` of anyone's could lie in
    wait (sudo's secure_path has the same reason). Nothing left: the system's default."""
    kept = [entry for entry in (path or "").split(os.pathsep) if entry.startswith("/")]
    return os.pathsep.join(kept) or os.defpath


def program(name: str) -> str | None:
    """A helper program (``ssh``, ``ssh-keygen``) found as ``--local`` finds a command: on
    PATH's absolute entries only, never in the current folder."""
    return shutil.which(name, path=safe_path(os.environ.get("PATH")))
