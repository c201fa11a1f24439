"""A run's per-host, per-check results as Prometheus gauges, in the text exposition format
that node_exporter's textfile collector reads (``*.prom`` in its ``--collector.textfile.directory``).

Pure: results in, text out; the CLI writes it to a temporary file and renames it, so the
collector never reads half a file. Names follow Prometheus's conventions: the ``runbook_``
prefix, base units (``_seconds``), a ``_timestamp_seconds`` for a time, one series per
state with 0 or 1 (so an alert compares values, not the presence of a series), and labels
for what varies (``runbook``, ``host``, ``check``, ``outcome``, ``status``).

| metric | labels | value |
|---|---|---|
| ``runbook_check_status`` | runbook, host, check, status (ok, failing, cannot-tell) | 1 for the check's status, 0 for the others |
| ``runbook_host_outcome`` | runbook, host, outcome (ok, failing, cannot tell, unreachable, ...) | 1 for the host's outcome, 0 for the others |
| ``runbook_host_exit_code`` | runbook, host | the exit code one host would have exited with |
| ``runbook_host_duration_seconds`` | runbook, host | how long the host took |
| ``runbook_last_run_timestamp_seconds`` | runbook | when the run ended (Unix time) |
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runbook_runner.status import CheckStatus

CHECK_STATUSES = tuple(CheckStatus)


@dataclass(frozen=True)
class HostResult:
    """What one host came to, as the metrics need it."""

    host: str
    outcome: str
    exit_code: int
    duration_s: float
    checks: Sequence[tuple[str, str]] = ()  # (check name, status: ok, failing, cannot-tell)


def _label(value: str) -> str:
    """A label value escaped as the exposition format wants it (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: dict[str, str], value: float) -> str:
    inside = ",".join(f'{key}="{_label(text)}"' for key, text in labels.items())
    number = repr(float(value)) if not float(value).is_integer() else str(int(value))
    return f"{name}{{{inside}}} {number}"


def render(
    runbook: str, hosts: Iterable[HostResult], outcomes: Sequence[str], ended_at: float
) -> str:
    """The whole file: HELP and TYPE once per metric, then its series."""
    listed = list(hosts)
    lines: list[str] = []

    def metric(name: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")

    metric(
        "runbook_check_status",
        "1 for the status a goal check of the runbook has on the host (ok, failing, "
        "cannot-tell), 0 for the others.",
    )
    for host in listed:
        for check, status in host.checks:
            for state in CHECK_STATUSES:
                labels = {"runbook": runbook, "host": host.host, "check": check, "status": state}
                lines.append(_series("runbook_check_status", labels, int(status == state)))
    metric(
        "runbook_host_outcome",
        "1 for what the runbook came to on the host (ok, failing, cannot tell, unreachable, "
        "...), 0 for the others.",
    )
    for host in listed:
        for outcome in outcomes:
            labels = {"runbook": runbook, "host": host.host, "outcome": outcome}
            lines.append(_series("runbook_host_outcome", labels, int(host.outcome == outcome)))
    metric("runbook_host_exit_code", "The exit code runbook would have exited with on this host.")
    for host in listed:
        labels = {"runbook": runbook, "host": host.host}
        lines.append(_series("runbook_host_exit_code", labels, host.exit_code))
    metric("runbook_host_duration_seconds", "How long the runbook took on the host.")
    for host in listed:
        labels = {"runbook": runbook, "host": host.host}
        lines.append(_series("runbook_host_duration_seconds", labels, round(host.duration_s, 3)))
    metric("runbook_last_run_timestamp_seconds", "When the run ended, in seconds since the epoch.")
    lines.append(_series("runbook_last_run_timestamp_seconds", {"runbook": runbook}, ended_at))
    return "\n".join(lines) + "\n"
