"""A live server's health, as the host answers for it: the requests to make and what
their answers mean.

Pure: the commands (``curl`` on the instance's port, ``systemctl show -p NRestarts`` for
its unit) are made here and sent by the engine; their answers come back here to be judged.
A server is healthy only on a 200; a refused port, a timeout or another status is failing;
anything else (no curl, an odd exit) is "cannot tell", which never leads to an action.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.runbook import Subject
from runbook_runner.status import Word


class Health(Word):
    HEALTHY = "healthy"
    FAILING = "failing"
    CANNOT_TELL = "cannot-tell"
    NOT_CHECKED = "not-checked"  # no launcher alive: nothing to ask


@dataclass(frozen=True)
class Probe:
    """One health request to make on the host, for one live instance of the subject."""

    instance: int
    port: int
    url: str
    command: str


@dataclass(frozen=True)
class ProbeResult:
    instance: int
    health: Health
    detail: str
    refused: bool = False  # nothing listens on the port (a server may still be loading)


@dataclass(frozen=True)
class UnitProbe:
    """How often systemd restarted one of the subject's units by itself."""

    unit: str
    command: str


def unit_probes(subject: Subject, records: Sequence[ProcessOwner]) -> list[UnitProbe]:
    """One ``systemctl show -p NRestarts`` per unit of the subject that has a process."""
    units = sorted({r.unit for r in records if r.unit and subject.unit_matches(r.unit)})
    return [UnitProbe(u, f"systemctl show -p NRestarts {shlex.quote(u)}") for u in units]


def judge_unit(exit_status: int | None, stdout: str) -> int | None:
    """NRestarts from ``systemctl show``'s answer, or None (cannot tell)."""
    if exit_status != 0:
        return None
    for line in stdout.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "NRestarts" and value.isdigit():
            return int(value)
    return None


def judge_probe(probe: Probe, exit_status: int | None, stdout: str, stderr: str) -> ProbeResult:
    """curl's answer -> healthy, failing (with why), or cannot tell."""
    code = stdout.strip()[-3:]
    said = (stderr.strip().splitlines() or [""])[-1][:120]
    if exit_status == 0 and code == "200":
        return ProbeResult(probe.instance, Health.HEALTHY, f"{probe.url} answered 200")
    if exit_status == 0 and code.isdigit():
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} answered {code}")
    if exit_status == 7:
        return ProbeResult(
            probe.instance,
            Health.FAILING,
            f"nothing listens on port {probe.port} ({said})",
            refused=True,
        )
    if exit_status == 28:
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} did not answer in time")
    if exit_status in {52, 56}:
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} closed the connection")
    if exit_status == 127:
        return ProbeResult(probe.instance, Health.CANNOT_TELL, "curl is not installed on the host")
    return ProbeResult(
        probe.instance,
        Health.CANNOT_TELL,
        f"the health request exited {exit_status}" + (f": {said}" if said else ""),
    )


def launcher_port(subject: Subject, launcher: ProcessOwner) -> tuple[int | None, str]:
    """The port to ask a launcher's health on, and how it was told: its ``--port``; else the
    one port it listens on (``ss -ltnp``: a port set in a config file is not on the command
    line); else, of several, the kind's default if it is one of them; else the kind's
    default (a launcher that listens on nothing yet is loading). Several ports, none the
    default: (None, why). Never another process's command line: a port is the launcher's."""
    command = launcher.command or ""
    flagged = dataclasses.replace(subject, ports=()).port_of(command)
    if flagged is not None:
        return flagged, "its --port"
    default = subject.port_of(command)
    listening = [int(p) for p in (launcher.listening or "").split(",") if p.isdigit()]
    if len(listening) == 1:
        return listening[0], "the one port its launcher listens on (ss -ltnp)"
    if listening and default in listening:
        return default, "its kind's default, one of the ports its launcher listens on (ss -ltnp)"
    if listening:
        ports = ", ".join(str(p) for p in listening)
        return None, (
            f"its launcher listens on ports {ports} (ss -ltnp), no --port says which serves "
            "its health, and none is its kind's default"
        )
    return default, "its kind's default" if default is not None else ""
