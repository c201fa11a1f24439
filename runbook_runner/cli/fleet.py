"""Many hosts for ``check`` and ``run``: selecting them (node sets, inventories), connecting
to each from a worker thread, gathering their outcomes, signals, and the one summary.

Part of the CLI layer (cli/): only the main thread prints. Hosts are worked on in threads
(fleet/fanout.py); what they report comes back here to be printed, so lines never
interleave and a prompt is never shown while another host asks. The commands themselves:
cli/fleet_check.py and cli/fleet_run.py.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import localfile, session
from runbook_runner.cli import console
from runbook_runner.cli import host as cli_host
from runbook_runner.errors import (
    AuthenticationFailed,
    HostKeyChanged,
    Interrupted,
    SshSetupError,
    TransportError,
    UnknownHostKey,
    UsageError,
)
from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet import summary
from runbook_runner.fleet.stop import HostStop, Stop
from runbook_runner.fleet.summary import HostOutcome, printable
from runbook_runner.journal import JournalError
from runbook_runner.runbook import Runbook

if TYPE_CHECKING:
    from runbook_runner.cli.request import Request, Target
    from runbook_runner.fleet.inventory import Inventory
    from runbook_runner.fleet.selection import FleetHost
    from runbook_runner.transport import SshTarget, SshTransport


# -- selecting ------------------------------------------------------------------------------


class BadFleetInput(Exception):
    """Bad fleet input, already explained: exit 2."""


def select_hosts(request: Request) -> list[FleetHost]:
    from runbook_runner.fleet import inventory as inventories
    from runbook_runner.fleet.selection import SelectionError, select

    target = request.target
    if target.max_hosts < 1:
        raise UsageError("--max-hosts must be at least 1", prog(request))

    inventory: Inventory | None = None
    if target.inventory:
        path = Path(target.inventory)
        try:
            text = localfile.read_text(path, localfile.LIST_LIMIT)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(
                f"--inventory {path}: cannot read it ({error})", prog(request)
            ) from None
        try:
            inventory = inventories.parse(text, str(path), target.max_hosts)
        except inventories.InventoryError as error:
            print(f"runbook: {error}", file=sys.stderr)
            raise BadFleetInput from None
    specs = [*target.hosts] + ([target.host] if target.host else [])
    try:
        hosts = select(specs, inventory, target.limit, target.max_hosts)
    except SelectionError as error:
        raise UsageError(str(error), prog(request)) from None
    # The SSH options are checked once, here (a missing --ssh-config or key file is bad
    # input, exit 2, before any host is contacted), not found wrong on every host.
    ssh_target(request.target, hosts[0])
    return hosts


def prog(request: Request) -> str:
    return f"runbook {request.command}"


def ssh_target(target: Target, host: FleetHost) -> SshTarget:
    """As for --host; the inventory's ansible_* and USER@ in the node set win over --port/--user,
    as in Ansible. ssh_config is looked up for the address connected to (ansible_host)."""
    from runbook_runner.transport import resolve_target

    return resolve_target(
        host.address or host.name,
        port=host.port or target.port,
        user=host.user or target.user,
        identity_files=[host.identity] if host.identity else target.identity,
        known_hosts=Path(target.known_hosts) if target.known_hosts else None,
        accept_new_host_key=target.accept_new_host_key,
        connect_timeout=target.connect_timeout,
        ssh_config=Path(target.ssh_config) if target.ssh_config else None,
        options=target.ssh_options,
        jump=target.jump,
    )


@dataclass
class Messages:
    """Lines from worker threads, printed by the main thread in order."""

    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def put(self, text: str) -> None:
        self.lines.put(text)

    def drain(self, out: console.Output) -> None:
        while True:
            try:
                text = self.lines.get_nowait()
            except queue.Empty:
                return
            out.line(text)


def connect(
    to: Target,
    become: str | None,
    host: FleetHost,
    messages: Messages,
    stop: HostStop,
) -> SshTransport:
    """Connect to one host of the fleet; ``become``: the sudo password -K asked for."""
    from dataclasses import replace

    from runbook_runner.cli.connecting import key_recorded
    from runbook_runner.transport import SshTransport

    with stop.connecting():  # `ssh -G` killed by the Ctrl-C that stopped the fleet: interrupted
        target = replace(ssh_target(to, host), on_open=stop.opened)  # a stop ends a handshake

    def recorded(name: str, key: Any) -> None:
        messages.put(f"{host.name}: {key_recorded(name, key, target.known_hosts)}")

    # No passphrase prompt from a worker thread: an encrypted key needs ssh-agent here.
    transport = SshTransport(target, None, recorded)
    transport.become_password = become
    # Worker threads get no signals: the main thread's stop reaches a running command here,
    # and the transport ends it on the host as it does after a signal on one host.
    transport.interrupt_check = stop.check
    try:
        with stop.connecting():
            return transport.connect()
    except BaseException:
        transport.close()  # a connection that failed half-way holds a thread and a socket
        raise


def transport_outcome(
    target: Target, host: FleetHost, error: TransportError, started: float
) -> HostOutcome:
    labels = [host.name, host.address or ""]
    with contextlib.suppress(TransportError):
        labels.insert(0, ssh_target(target, host).label)
    message = summary.without_label(str(error), *labels)
    refused = isinstance(error, AuthenticationFailed | UnknownHostKey | HostKeyChanged)
    setup = isinstance(error, SshSetupError)  # this host's key file or ssh_config: exit 2
    kind = summary.REFUSED if refused else summary.BAD_INPUT if setup else summary.UNREACHABLE
    return HostOutcome(
        host.name,
        kind,
        ExitCode.BAD_INPUT if setup else ExitCode.HOST_UNREACHABLE,
        f"{kind} — {message}",
        time.monotonic() - started,
        {"ok": False, "error": str(error), "hint": error.hint},
    )


def error_outcome(
    host: FleetHost, error: Exception, started: float, record: dict[str, Any] | None = None
) -> HostOutcome:
    """An error on one host, with the exit code one host would have exited with (the table in
    cli/outcomes.py): a journal that cannot be written is 7, a bug 70."""
    from runbook_runner.cli.outcomes import failure, internal

    found = failure(error)
    if found is None:
        code, text = ExitCode.INTERNAL, internal(error)
    else:
        code, text = found.code, " ".join(found.lines)
    kind = summary.KIND_OF_CODE.get(code, summary.ERROR)
    text = summary.without_label(text, host.name)
    line = text if text.startswith(f"{kind}:") else f"{kind} — {text}"
    return HostOutcome(
        host.name,
        kind,
        code,
        line,
        time.monotonic() - started,
        {**(record or {}), "ok": False, "error": text},
    )


def interrupted_outcome(
    host: FleetHost, interrupt: Interrupted, started: float, record: dict[str, Any]
) -> HostOutcome:
    name = signal.Signals(interrupt.signum).name
    how = (
        "the command running there was ended"
        if interrupt.ended_on_host
        else "between commands: nothing was left running"
    )
    return HostOutcome(
        host.name,
        summary.INTERRUPTED,
        ExitCode.INTERRUPTED,
        f"interrupted ({name}) — {how}",
        time.monotonic() - started,
        {
            **record,
            "ok": False,
            "signal": name,
            "ended_on_host": (
                f"process group {interrupt.ended_on_host}" if interrupt.ended_on_host else None
            ),
        },
    )


def checks_line(results: Sequence[Any]) -> str:
    """A check that cannot be told is said by its reason alone (what was not observed), so
    checks that share it share one part of the line."""
    return summary.checks_line(
        [
            (r.name, (r.found or r.message) if r.cannot_tell else r.message, r.cannot_tell)
            for r in results
            if not r.ok
        ]
    )


# -- signals --------------------------------------------------------------------------------


def announce_stop(out: console.Output, stop: Stop, told: list[bool], journalled: str = "") -> None:
    """Once, when a signal has stopped the fleet: what happens to the hosts now."""
    if stop.signum is None or told:
        return
    told.append(True)
    out.end_live()
    out.line(
        f"interrupted ({signal.Signals(stop.signum).name}): ending the commands in flight "
        f"on their hosts{journalled}; no further host starts"
    )


@contextlib.contextmanager
def signals_stop(stop: Stop) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the fleet: the handler only records the signal (the
    workers see it at their next wait, end their command on the host, journal the interrupt
    and release their lock); it raises Interrupted in the main thread only while it asks a
    question (``stop.raise_here``). Later signals change nothing, so the cleanup runs."""

    def handler(signum: int, frame: object) -> None:
        if stop.set(signum) and stop.raise_here:
            raise Interrupted(signum)

    with session.stop_signals_handled_by(handler):
        yield


def interrupted_exit(out: console.Output, stop: Stop, outcomes: Sequence[HostOutcome]) -> int:
    assert stop.signum is not None
    ended = sum(1 for o in outcomes if o.record.get("ended_on_host"))
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(
            f"runbook: interrupted ({signal.Signals(stop.signum).name})"
            + (f"; the running command was ended on {count(ended)}" if ended else ""),
            file=sys.stderr,
        )
    return 128 + int(stop.signum)


def gather(
    out: console.Output,
    messages: Messages,
    stop: Stop,
    hosts: Sequence[FleetHost],
    work: Callable[[FleetHost], HostOutcome],
    forks: int,
    *,
    jsonl: bool,
    done_before: Sequence[HostOutcome] = (),
    total: int | None = None,
    skipped: Callable[[FleetHost], HostOutcome] | None = None,
    ended: Callable[[HostOutcome], None] = lambda outcome: None,
) -> list[HostOutcome]:
    """Each host's outcome as it ends (``ended`` hears it at once, on this thread: a
    rollout's breaker), in the order hosts end; a line of --jsonl each."""
    from runbook_runner.fleet.fanout import fan_out

    outcomes: list[HostOutcome] = []
    everything = total if total is not None else len(hosts)
    told: list[bool] = []

    def tick() -> None:
        announce_stop(out, stop, told, " (each journal records it)")
        messages.drain(out)
        if out.tty:
            seen = [*done_before, *outcomes]
            out.live(summary.progress(len(seen), everything, seen))

    tick()
    for outcome in fan_out(
        hosts, work, forks, tick=tick, stopped=lambda: stop.stopped, skipped=skipped
    ):
        outcomes.append(outcome)
        ended(outcome)
        if jsonl:
            print(json.dumps(outcome.to_json()), flush=True)
    messages.drain(out)
    out.end_live()
    return outcomes


def in_order(outcomes: Sequence[HostOutcome], hosts: Sequence[FleetHost]) -> list[HostOutcome]:
    position = {host.name: index for index, host in enumerate(hosts)}
    return sorted(outcomes, key=lambda o: position.get(o.host, len(position)))


def print_summary(out: console.Output, outcomes: Sequence[HostOutcome]) -> None:
    from runbook_runner.fleet.selection import fold

    for hosts, code, line in summary.grouped(outcomes, fold):
        colour = "green" if code == ExitCode.OK else "red"
        out.line(f"{out.style(printable(hosts), colour, 'bold')}: {printable(line)}")
    out.line(summary.totals(outcomes))


def fleet_end(
    request: Request,
    runbook: Any,
    params: dict[str, Any],
    hosts: list[Any],
    outcomes: list[HostOutcome],
    **extra: Any,
) -> int:
    """The fleet's exit code (the worst over hosts), and with --json its one document."""
    code = summary.worst(o.code for o in outcomes)
    if request.json:
        document = {
            "runbook": runbook.name,
            **extra,
            "parameters": session.secret_free(runbook, params),
            "ok": code == ExitCode.OK,
            "exit_code": int(code),
            "summary": summary.totals(outcomes),
            "hosts": [o.to_json() for o in in_order(outcomes, hosts)],
        }
        print(json.dumps(document, indent=2))
    return code


def count(hosts: int) -> str:
    return "1 host" if hosts == 1 else f"{hosts} hosts"


def not_started(hosts: Sequence[FleetHost], line: str, code: ExitCode) -> list[HostOutcome]:
    return [HostOutcome(h.name, summary.NOT_STARTED, code, line, 0.0, {"ok": False}) for h in hosts]


def not_started_outcome(
    host: FleetHost,
    stop: Stop,
    journalled: tuple[Request, Runbook, dict[str, Any]] | None = None,
) -> HostOutcome:
    """A host a signal reached before its run started; with ``journalled`` (a rollout), a
    journal of its own says so (run-start, then a run-end: interrupted, not started)."""
    assert stop.signum is not None
    name = signal.Signals(stop.signum).name
    record: dict[str, Any] = {"ok": False, "signal": name}
    if journalled is not None:
        request, runbook, params = journalled
        try:
            journalled_at = journal_not_started(request, runbook, params, host, stop.signum)
            record["journal"] = str(journalled_at)
        except JournalError as error:
            record["journal_error"] = str(error)
    return HostOutcome(
        host.name,
        summary.NOT_STARTED,
        ExitCode.INTERRUPTED,
        f"not started — interrupted ({name}) before its run began",
        0.0,
        record,
    )


def journal_not_started(
    request: Request, runbook: Runbook, params: dict[str, Any], host: FleetHost, signum: int
) -> Path:
    return session.record_not_started(
        runbook,
        params,
        host.name,
        cli_host.journal_folder(),
        operator=getpass.getuser(),
        dry_run=request.dry_run,
        signum=signum,
    )
