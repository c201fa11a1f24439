"""``--prometheus FILE``: the run's results written for node_exporter's textfile collector.

The text is made by fleet/prometheus.py (pure); here it is written next to FILE and renamed
onto it, so the collector reads the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runbook_runner.errors import UsageError
from runbook_runner.fleet import prometheus, summary


def host_result(
    host: str, outcome: str, exit_code: int, duration_s: float, checks: Sequence[dict[str, Any]]
) -> prometheus.HostResult:
    return prometheus.HostResult(
        host,
        outcome,
        exit_code,
        duration_s,
        tuple((str(c["name"]), str(c["status"])) for c in checks),
    )


def write(path: str, runbook: str, hosts: Iterable[prometheus.HostResult], prog: str) -> None:
    """Write the metrics to ``path`` through a temporary file in its folder and a rename."""
    text = prometheus.render(runbook, hosts, (summary.OK, *summary.PROGRESS_KINDS), time.time())
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"--prometheus {path}: no folder {folder}", prog)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(temporary, 0o644)  # the collector often runs as another user
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise UsageError(f"--prometheus {path}: cannot write it ({error.strerror})", prog) from None
