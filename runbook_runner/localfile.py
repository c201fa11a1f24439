"""Reading a file named on the command line or in a configuration, with a size bound.

``runbook validate /dev/zero`` (or ``--resume`` of a 40 GB file) must not read until the
memory is gone: every such read takes at most its limit, and more is an error that names
the file, as an :class:`OSError` (EFBIG) so that callers already reporting a file they cannot
read report this one the same way.
"""

from __future__ import annotations

import errno
from pathlib import Path

MiB = 1024 * 1024
RUNBOOK_LIMIT = 4 * MiB  # the bundled runbooks are 5-25 KB
CONFIG_LIMIT = 4 * MiB  # ssh_config, key files, state files
LIST_LIMIT = 64 * MiB  # known_hosts, inventories: one line per host of a large fleet
JOURNAL_LIMIT = 256 * MiB  # a long run's journal: every observation of every poll


class TooLarge(OSError):
    """The file is larger than its limit (or never ends: /dev/zero)."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(
            errno.EFBIG,
            f"larger than {limit // MiB} MiB: not read (is it the file you meant?)",
            str(path),
        )


def read_bytes(path: Path, limit: int) -> bytes:
    """The file's bytes; :class:`TooLarge` past ``limit`` (whatever the file claims to be)."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, limit)
    return data


def read_text(path: Path, limit: int, encoding: str = "utf-8", errors: str = "strict") -> str:
    return read_bytes(path, limit).decode(encoding, errors)
