"""``check`` and ``run`` on many hosts: node sets and inventories, bounded fan-out, one summary.

Part of the CLI layer (cli/): only this thread prints. Hosts are worked on
in threads (fleet/fanout.py); what they report comes back here to be printed, so lines
never interleave and a prompt is never shown while another host asks.
"""

from __future__ import annotations

import argparse
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
from typing import TYPE_CHECKING, Any, cast

from runbook_runner import localfile
from runbook_runner.cli import console, render
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
from runbook_runner.status import STOPPING, RunOutcome

if TYPE_CHECKING:
    from runbook_runner.events import ConfirmRequest, Event, RunReport
    from runbook_runner.fleet.inventory import Inventory
    from runbook_runner.fleet.selection import FleetHost
    from runbook_runner.transport import SshTarget, SshTransport


# -- selecting ------------------------------------------------------------------------------


class _Stop(Exception):
    """Bad fleet input, already explained: exit 2."""


def _select(args: argparse.Namespace) -> list[FleetHost]:
    from runbook_runner.fleet import inventory as inventories
    from runbook_runner.fleet.selection import SelectionError, select

    if args.max_hosts < 1:
        raise UsageError("--max-hosts must be at least 1", _prog(args))

    inventory: Inventory | None = None
    if args.inventory:
        path = Path(args.inventory)
        try:
            text = localfile.read_text(path, localfile.LIST_LIMIT)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--inventory {path}: cannot read it ({error})", _prog(args)) from None
        try:
            inventory = inventories.parse(text, str(path), args.max_hosts)
        except inventories.InventoryError as error:
            print(f"runbook: {error}", file=sys.stderr)
            raise _Stop from None
    specs = [*(args.hosts or [])] + ([args.host] if args.host else [])
    try:
        hosts = select(specs, inventory, args.limit, args.max_hosts)
    except SelectionError as error:
        raise UsageError(str(error), _prog(args)) from None
    # The SSH options are checked once, here (a missing --ssh-config or key file is bad
    # input, exit 2, before any host is contacted), not found wrong on every host.
    _target(args, hosts[0])
    return hosts


def _prog(args: argparse.Namespace) -> str:
    return f"runbook {args.command}"


def _target(args: argparse.Namespace, host: FleetHost) -> SshTarget:
    """As for --host; the inventory's ansible_* and USER@ in the node set win over --port/--user,
    as in Ansible. ssh_config is looked up for the address connected to (ansible_host)."""
    from runbook_runner.transport import resolve_target

    return resolve_target(
        host.address or host.name,
        port=host.port or args.port,
        user=host.user or args.user,
        identity_files=[host.identity] if host.identity else args.identity,
        known_hosts=Path(args.known_hosts) if args.known_hosts else None,
        accept_new_host_key=args.accept_new_host_key,
        connect_timeout=args.connect_timeout,
        ssh_config=Path(args.ssh_config) if args.ssh_config else None,
        options=getattr(args, "ssh_options", None) or (),
        jump=getattr(args, "jump", None),
    )


@dataclass
class _Messages:
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


def _connect(
    args: argparse.Namespace, host: FleetHost, messages: _Messages, stop: HostStop
) -> SshTransport:
    from runbook_runner.cli.connecting import become_password, key_recorded
    from runbook_runner.transport import SshTransport

    target = _target(args, host)

    def recorded(name: str, key: Any) -> None:
        messages.put(f"{host.name}: {key_recorded(name, key, target.known_hosts)}")

    # No passphrase prompt from a worker thread: an encrypted key needs ssh-agent here.
    transport = SshTransport(target, None, recorded)
    transport.become_password = become_password(args)
    # Worker threads get no signals: the main thread's stop reaches a running command here,
    # and the transport ends it on the host as it does after a signal on one host.
    transport.interrupt_check = stop.check
    try:
        return transport.connect()
    except BaseException:
        transport.close()  # a connection that failed half-way holds a thread and a socket
        raise


def _transport_outcome(
    args: argparse.Namespace, host: FleetHost, error: TransportError, started: float
) -> HostOutcome:
    labels = [host.name, host.address or ""]
    with contextlib.suppress(TransportError):
        labels.insert(0, _target(args, host).label)
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


def _error_outcome(
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


def _interrupted_outcome(
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


def _checks_line(results: Sequence[Any]) -> str:
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


def _announce_stop(out: console.Output, stop: Stop, told: list[bool], journalled: str = "") -> None:
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
def _signals_stop(stop: Stop) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the fleet: the handler only records the signal (the
    workers see it at their next wait, end their command on the host, journal the interrupt
    and release their lock); it raises Interrupted in the main thread only while it asks a
    question (``stop.raise_here``). Later signals change nothing, so the cleanup runs."""

    def handler(signum: int, frame: object) -> None:
        if stop.set(signum) and stop.raise_here:
            raise Interrupted(signum)

    with cli_host.stop_signals_handled_by(handler):
        yield


def _interrupted_exit(out: console.Output, stop: Stop, outcomes: Sequence[HostOutcome]) -> int:
    assert stop.signum is not None
    ended = sum(1 for o in outcomes if o.record.get("ended_on_host"))
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(
            f"runbook: interrupted ({signal.Signals(stop.signum).name})"
            + (f"; the running command was ended on {_count(ended)}" if ended else ""),
            file=sys.stderr,
        )
    return 128 + int(stop.signum)


# -- check ----------------------------------------------------------------------------------


def fleet_check(args: argparse.Namespace) -> int:
    from runbook_runner.format.parameters import gpu_range, resolve_parameters

    if args.json and args.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook check")
    if args.forks < 1:
        raise UsageError("--forks must be at least 1", "runbook check")
    if args.workers < 0:
        raise UsageError("--workers must be 0 (one per core) or more", "runbook check")
    try:
        hosts = _select(args)
    except _Stop:
        return ExitCode.BAD_INPUT
    runbook = cli_host.load_named(args)
    params = resolve_parameters(
        runbook, [*gpu_range(runbook, getattr(args, "gpus", None)), *args.set]
    )
    structured = args.json or args.jsonl
    out = console.Output(structured)
    messages = _Messages()
    stop = Stop()
    forks = max(1, min(args.forks, len(hosts)))
    out.line(f"{runbook.name} on {len(hosts)} hosts (read-only check, {forks} at a time)")

    want_record = bool(structured or args.prometheus)

    def work(host: FleetHost) -> HostOutcome:
        return _check_one(
            args, runbook, params, host, messages, stop.for_host(), want_record=want_record
        )

    workers = _workers(args, len(hosts))
    with _signals_stop(stop):
        if workers > 1:
            outcomes = _gather_processes(
                out, messages, stop, hosts, work, workers, forks, jsonl=args.jsonl
            )
        else:
            outcomes = _gather(out, messages, stop, hosts, work, forks, jsonl=args.jsonl)
        _print_summary(out, _in_order(outcomes, hosts))
        if args.prometheus:
            from runbook_runner.cli import metrics

            results = [
                metrics.host_result(
                    o.host, o.kind, int(o.code), o.duration_s, o.record.get("checks", ())
                )
                for o in _in_order(outcomes, hosts)
            ]
            metrics.write(args.prometheus, runbook.name, results, "runbook check")
        code = _fleet_end(args, runbook, params, hosts, outcomes)
        return _interrupted_exit(out, stop, outcomes) if stop.stopped else code


def _check_one(
    args: argparse.Namespace,
    runbook: Runbook,
    params: dict[str, Any],
    host: FleetHost,
    messages: _Messages,
    stop: HostStop,
    *,
    want_record: bool,
) -> HostOutcome:
    from runbook_runner.cli.outcomes import check_code
    from runbook_runner.runner import Runner

    started = time.monotonic()
    if stop.stop.stopped:
        return _not_started_outcome(host, stop.stop)
    try:
        with _connect(args, host, messages, stop) as transport:
            observed = Runner(runbook, params, transport, sleep=stop.sleep).check_goal("now")
    except Interrupted as interrupt:
        return _interrupted_outcome(host, interrupt, started, {})
    except TransportError as error:
        return _transport_outcome(args, host, error, started)
    except Exception as error:  # one host's surprise must not end the others' checks
        return _error_outcome(host, error, started)
    code = check_code(observed.results)
    record: dict[str, Any] = {"ok": code == ExitCode.OK}
    if want_record:
        record["state"] = render.state_json(runbook, observed.state)
        record["checks"] = [cli_host.check_json(r, runbook) for r in observed.results]
    elapsed = time.monotonic() - started
    if code == ExitCode.OK:
        return HostOutcome(host.name, summary.OK, code, "ok", elapsed, record)
    kind = summary.KIND_OF_CODE[code]
    return HostOutcome(host.name, kind, code, _checks_line(observed.results), elapsed, record)


def _gather(
    out: console.Output,
    messages: _Messages,
    stop: Stop,
    hosts: Sequence[FleetHost],
    work: Callable[[FleetHost], HostOutcome],
    forks: int,
    *,
    jsonl: bool,
    done_before: Sequence[HostOutcome] = (),
    total: int | None = None,
) -> list[HostOutcome]:
    from runbook_runner.fleet.fanout import fan_out

    outcomes: list[HostOutcome] = []
    everything = total if total is not None else len(hosts)
    told: list[bool] = []

    def tick() -> None:
        _announce_stop(out, stop, told, " (each journal records it)")
        messages.drain(out)
        if out.tty:
            seen = [*done_before, *outcomes]
            out.live(summary.progress(len(seen), everything, seen))

    tick()
    for outcome in fan_out(hosts, work, forks, tick=tick):
        outcomes.append(outcome)
        if jsonl:
            print(json.dumps(outcome.to_json()), flush=True)
    messages.drain(out)
    out.end_live()
    return outcomes


def _workers(args: argparse.Namespace, hosts: int) -> int:
    """Processes for a check: --workers, else one per core once the fleet is large enough
    to be worth a fork (each process has at least a few hosts and threads)."""
    import os

    from runbook_runner.cli import AUTO_WORKERS_FROM

    wanted: int
    if args.workers:
        wanted = int(args.workers)
    elif hosts >= AUTO_WORKERS_FROM:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    else:
        wanted = 1
    return max(1, min(wanted, hosts, int(args.forks)))


def _gather_processes(
    out: console.Output,
    messages: _Messages,
    stop: Stop,
    hosts: Sequence[FleetHost],
    work: Callable[[FleetHost], HostOutcome],
    workers: int,
    forks: int,
    *,
    jsonl: bool,
) -> list[HostOutcome]:
    """As _gather, with the hosts spread over ``workers`` forked processes (threads inside
    each). Each sends back its hosts' outcomes and messages as JSON lines; a signal to this
    process is passed on to them, and each stops its own hosts as _run_one/_check_one do."""
    from runbook_runner.fleet.fanout import fan_out_processes

    outcomes: list[HostOutcome] = []
    told: list[bool] = []

    def tick() -> None:
        _announce_stop(out, stop, told)
        messages.drain(out)
        if out.tty:
            out.live(summary.progress(len(outcomes), len(hosts), outcomes))

    def encode(outcome: HostOutcome) -> str:  # in the worker: its messages go along
        said: list[str] = []
        while not messages.lines.empty():
            said.append(messages.lines.get_nowait())
        return json.dumps({"said": said, **outcome.to_json()})

    def decode(text: str) -> HostOutcome:  # here
        record = json.loads(text)
        for line in record.pop("said", ()):
            messages.put(line)
        return _decode_outcome(record)

    tick()
    for outcome in fan_out_processes(
        hosts,
        work,
        workers,
        forks,
        encode=encode,
        decode=decode,
        signalled=lambda: stop.signum,
        tick=tick,
    ):
        outcomes.append(outcome)
        if jsonl:
            print(json.dumps(outcome.to_json()), flush=True)
    messages.drain(out)
    out.end_live()
    seen = {o.host for o in outcomes}
    for host in hosts:  # a worker that died (killed, out of memory) leaves its hosts untold
        if host.name not in seen:
            line = "internal error: its worker process ended before this host's result"
            lost = HostOutcome(host.name, summary.ERROR, ExitCode.INTERNAL, line, 0.0, {})
            outcomes.append(lost)
    return outcomes


def _decode_outcome(record: dict[str, Any]) -> HostOutcome:
    return HostOutcome(
        record.pop("host"),
        record.pop("outcome"),
        ExitCode(record.pop("exit_code")),
        record.pop("summary"),
        float(record.pop("duration_s")),
        record,
    )


def _in_order(outcomes: Sequence[HostOutcome], hosts: Sequence[FleetHost]) -> list[HostOutcome]:
    position = {host.name: index for index, host in enumerate(hosts)}
    return sorted(outcomes, key=lambda o: position.get(o.host, len(position)))


def _print_summary(out: console.Output, outcomes: Sequence[HostOutcome]) -> None:
    from runbook_runner.fleet.selection import fold

    for hosts, code, line in summary.grouped(outcomes, fold):
        colour = "green" if code == ExitCode.OK else "red"
        out.line(f"{out.style(printable(hosts), colour, 'bold')}: {printable(line)}")
    out.line(summary.totals(outcomes))


# -- run: a rollout -------------------------------------------------------------------------


def fleet_run(args: argparse.Namespace) -> int:
    from runbook_runner.fleet.rollout import batches, may_continue
    from runbook_runner.format.parameters import gpu_range, resolve_parameters

    for option, given in (("--journal", args.journal), ("--resume", args.resume)):
        if given:
            raise UsageError(
                f"{option} is for one host; on many hosts each gets its own journal",
                "runbook run",
            )
    if args.json and args.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook run")
    if args.serial < 1:
        raise UsageError("--serial must be at least 1", "runbook run")
    if args.max_fail is not None and args.max_fail < 1:
        raise UsageError("--max-fail must be at least 1", "runbook run")
    try:
        hosts = _select(args)
    except _Stop:
        return ExitCode.BAD_INPUT
    runbook = cli_host.load_named(args)
    params = resolve_parameters(
        runbook, [*gpu_range(runbook, getattr(args, "gpus", None)), *args.set]
    )
    if args.from_step and args.from_step not in [s.id for s in runbook.steps]:
        raise UsageError(
            f"--from {args.from_step}: {runbook.name} has no step {args.from_step!r}",
            "runbook run",
        )
    out = console.Output(args.json or args.jsonl)
    messages = _Messages()
    mode = " (dry run: observations only, nothing changes)" if args.dry_run else ""
    plan = batches(hosts, args.serial)
    out.line(
        f"{runbook.name} on {render.plural(len(hosts), 'host')}, {args.serial} at a time "
        f"({render.plural(len(plan), 'batch', 'batches')}){mode}"
    )
    asks = runbook.destructive and not args.dry_run and not args.yes and sys.stdin.isatty()
    outcomes: list[HostOutcome] = []
    stopped: str | None = None
    stop = Stop()
    with _signals_stop(stop):
        for number, batch in enumerate(plan, 1):
            if stop.stopped:
                break
            failures = sum(1 for o in outcomes if o.code != ExitCode.OK)
            if not may_continue(failures, args.max_fail):
                stopped = f"not started — {_count(failures)} failed (--max-fail {args.max_fail})"
                break
            approved = args.yes
            if asks:
                messages.drain(out)
                try:
                    stop.raise_here = True
                    if stop.stopped:
                        break
                    answer = _ask_batch(out, runbook, args, batch, number, len(plan))
                except Interrupted:
                    break
                finally:
                    stop.raise_here = False
                if not answer:
                    rest = [host for later in plan[number - 1 :] for host in later]
                    line = f"not started — batch {number} was declined"
                    outcomes += _not_started(rest, line, ExitCode.DECLINED)
                    break
                approved = True

            def work(host: FleetHost, approved: bool = approved) -> HostOutcome:
                return _run_one(args, runbook, params, host, messages, approved, stop.for_host())

            outcomes += _gather(
                out,
                messages,
                stop,
                batch,
                work,
                len(batch),
                jsonl=args.jsonl,
                done_before=outcomes,
                total=len(hosts),
            )
        if stop.stopped:
            started = {o.host for o in outcomes}
            for host in hosts:
                if host.name not in started:
                    outcomes.append(_not_started_outcome(host, stop, (args, runbook, params)))
        elif stopped is not None:
            started = {o.host for o in outcomes}
            outcomes += _not_started(
                [h for h in hosts if h.name not in started], stopped, ExitCode.GOAL_NOT_MET
            )
        _print_summary(out, _in_order(outcomes, hosts))
        code = _fleet_end(args, runbook, params, hosts, outcomes, dry_run=args.dry_run)
        return _interrupted_exit(out, stop, outcomes) if stop.stopped else code


def _fleet_end(
    args: argparse.Namespace,
    runbook: Any,
    params: dict[str, Any],
    hosts: list[Any],
    outcomes: list[HostOutcome],
    **extra: Any,
) -> int:
    """The fleet's exit code (the worst over hosts), and with --json its one document."""
    code = summary.worst(o.code for o in outcomes)
    if args.json:
        document = {
            "runbook": runbook.name,
            **extra,
            "parameters": cli_host._secret_free(runbook, params),
            "ok": code == ExitCode.OK,
            "exit_code": int(code),
            "summary": summary.totals(outcomes),
            "hosts": [o.to_json() for o in _in_order(outcomes, hosts)],
        }
        print(json.dumps(document, indent=2))
    return code


def _count(hosts: int) -> str:
    return "1 host" if hosts == 1 else f"{hosts} hosts"


def _not_started(hosts: Sequence[FleetHost], line: str, code: ExitCode) -> list[HostOutcome]:
    return [HostOutcome(h.name, summary.NOT_STARTED, code, line, 0.0, {"ok": False}) for h in hosts]


def _not_started_outcome(
    host: FleetHost,
    stop: Stop,
    journalled: tuple[argparse.Namespace, Runbook, dict[str, Any]] | None = None,
) -> HostOutcome:
    """A host a signal reached before its run started; with ``journalled`` (a rollout), a
    journal of its own says so (run-start, then a run-end: interrupted, not started)."""
    assert stop.signum is not None
    name = signal.Signals(stop.signum).name
    record: dict[str, Any] = {"ok": False, "signal": name}
    if journalled is not None:
        args, runbook, params = journalled
        try:
            record["journal"] = str(_journal_not_started(args, runbook, params, host, stop.signum))
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


def _journal_not_started(
    args: argparse.Namespace, runbook: Runbook, params: dict[str, Any], host: FleetHost, signum: int
) -> Path:
    from runbook_runner import __version__
    from runbook_runner import journal as journal_module
    from runbook_runner.journal import lines as journal_lines

    run_id = journal_module.new_run_id(runbook.name, host.name)
    journal = journal_module.Journal(cli_host._journal_folder() / f"{run_id}.jsonl")
    try:
        journal.append(
            journal_lines.run_start(
                run=run_id,
                runbook=runbook,
                parameters=cli_host._secret_free(runbook, params),
                operator=getpass.getuser(),
                host=host.name,
                tool_version=__version__,
                dry_run=args.dry_run,
            )
        )
        journal.append(
            journal_lines.run_end(RunOutcome.INTERRUPTED, signum=signum, not_started=True)
        )
    finally:
        journal.close()
    return journal.path


def _ask_batch(
    out: console.Output,
    runbook: Runbook,
    args: argparse.Namespace,
    batch: Sequence[FleetHost],
    number: int,
    total: int,
) -> bool:
    """One question for a batch: which hosts, which destructive steps may run on each."""
    from runbook_runner.fleet.selection import fold

    names = fold(h.name for h in batch)
    out.line(
        out.style(
            f"Batch {number}/{total}: {_count(len(batch))}: {printable(names)}", "yellow", "bold"
        )
    )
    out.line("  Destructive steps that run where the goal does not hold yet:")
    for step in runbook.steps:
        if not step.destructive:
            continue
        note = ""
        if step.reboots and not args.allow_reboot:
            note = " (reboots: not run without --allow-reboot)"
        out.line(f"    {step.id}: {step.title} (affects {step.affects}){note}")
        if step.run is not None:
            out.line(f"      $ {step.run.source}")
    try:
        answer = input(f"  Run on {'this host' if len(batch) == 1 else 'these hosts'}? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in {"y", "yes"}


def _named(transport: SshTransport, name: str) -> SshTransport:
    """The transport as the journal sees it: named as the inventory or node set names the host
    (``gpu07``), not by the address it was reached at."""
    import dataclasses
    import types

    target = dataclasses.replace(transport.target, host=name)
    view = types.SimpleNamespace(
        target=target, login_user=transport.login_user, host_key=transport.host_key
    )
    return cast("SshTransport", view)


def _run_one(
    args: argparse.Namespace,
    runbook: Runbook,
    params: dict[str, Any],
    host: FleetHost,
    messages: _Messages,
    approved: bool,
    stop: HostStop,
) -> HostOutcome:
    """One host's run: journal, lock, run, release, outcome, as ``runbook run`` on one host
    (cli/host.py) does it, with the fleet's stop in place of the signal handler."""
    from runbook_runner.cli.outcomes import run_code
    from runbook_runner.journal import lines as journal_lines
    from runbook_runner.journal.recording import Recorder
    from runbook_runner.runner import Runner
    from runbook_runner.ssh.hostlock import HostLock, HostLocked, LockUnavailable

    started = time.monotonic()
    if stop.stop.stopped:
        return _not_started_outcome(host, stop.stop, (args, runbook, params))
    refusals: list[str] = []
    reboot_blocked: list[bool] = []
    journal_path = ""
    report: RunReport | None = None
    try:
        with _connect(args, host, messages, stop) as transport:
            if stop.stop.stopped:  # connected after the stop: nothing runs here
                return _not_started_outcome(host, stop.stop, (args, runbook, params))
            journal, run_id = cli_host._open_journal(
                argparse.Namespace(**{**vars(args), "journal": None}),
                runbook,
                _named(transport, host.name),
                params,
                None,
            )
            journal_path = str(journal.path)
            recorder = Recorder(journal, runbook, params)
            messages.put(f"{host.name}: journal: {journal.path}")
            numbers = {step.id: index for index, step in enumerate(runbook.steps, 1)}
            style = render.Style(False)

            def on_event(event: Event) -> None:
                from runbook_runner.events import StepDone

                recorder.on_event(event)
                if isinstance(event, StepDone):
                    line = render.step_line(
                        event.record, numbers[event.step.id], len(runbook.steps), style
                    )
                    messages.put(f"{host.name}: {printable(line.strip())}")

            def confirm(request: ConfirmRequest) -> bool:
                step = request.step
                if step.reboots:
                    answer = bool(args.allow_reboot)
                    if not answer:
                        reboot_blocked.append(True)
                        refusals.append(f"step {step.id!r} reboots the host: needs --allow-reboot")
                else:
                    answer = approved
                    if not answer:
                        refusals.append(
                            f"step {step.id!r} is destructive and needs a confirmation: "
                            "run from a terminal, or with --yes"
                        )
                how = " (--yes)" if args.yes else " (batch confirmation)"
                recorder.confirmation(request, answer, getpass.getuser() + how)
                return answer

            runner = Runner(
                runbook,
                params,
                transport,
                on_event=on_event,
                confirm=confirm,
                sleep=stop.sleep,
                allow_node_wide=getattr(args, "allow_node_wide", False),
            )
            lock = None
            outcome = RunOutcome.INTERRUPTED
            ended: dict[str, Any] = {}
            try:
                if runbook.destructive and not args.dry_run:
                    lock = HostLock(transport, host.name, cli_host._lock_owner(run_id))
                    previous = lock.acquire(break_stale=args.break_lock)
                    journal.append(journal_lines.lock(taken_over_from=previous))
                report = runner.run(from_step=args.from_step, dry_run=args.dry_run)
                outcome = RunOutcome.DECLINED if report.declined else RunOutcome.FINISHED
            except Interrupted as interrupt:
                ended = {"signum": interrupt.signum, "ended_on_host": interrupt.ended_on_host}
                raise
            except BaseException as error:
                outcome, ended = RunOutcome.ERROR, {"error": str(error) or type(error).__name__}
                if isinstance(error, HostLocked | LockUnavailable):
                    ended["locked"] = True
                raise
            finally:
                # Cleanup never hides why the run stopped: its own failures are recorded.
                if lock is not None:
                    try:
                        lock.release()
                    except (TransportError, KeyboardInterrupt) as error:
                        ended["lock_release_failed"] = str(error)
                journal.append(journal_lines.run_end(outcome, report, **ended))
                journal.close()
    except Interrupted as interrupt:
        if not journal_path:  # stopped while connecting: its run never began
            return _not_started_outcome(host, stop.stop, (args, runbook, params))
        return _interrupted_outcome(host, interrupt, started, {"journal": journal_path})
    except (HostLocked, LockUnavailable) as error:
        return HostOutcome(
            host.name,
            summary.LOCKED,
            ExitCode.LOCKED,
            f"locked — {error}",
            time.monotonic() - started,
            {"ok": False, "error": str(error), "journal": journal_path},
        )
    except TransportError as error:
        return _transport_outcome(args, host, error, started)
    except Exception as error:  # one host's surprise must not end the rollout's accounting
        return _error_outcome(host, error, started, {"journal": journal_path or None})
    assert report is not None
    record: dict[str, Any] = {
        "ok": report.ok,
        "reached_by": report.reached_by,
        "journal": journal_path,
        "checks": [cli_host.check_json(r, report.runbook) for r in report.after.results]
        if report.after
        else [],
        "steps": [r.to_json() for r in report.steps],
    }
    elapsed = time.monotonic() - started
    code = run_code(report, dry_run=args.dry_run, reboot_blocked=bool(reboot_blocked))
    kind = summary.KIND_OF_CODE[code]
    if report.blocked is not None:  # evidence missing: stopped, never escalated (dry runs too)
        line = f"stopped: cannot tell — before {report.blocked.id}"
        return HostOutcome(
            host.name, kind, code, line, elapsed, {**record, "blocked": report.blocked.message}
        )
    if report.declined:
        reason = refusals[0] if refusals else "declined"
        return HostOutcome(
            host.name, summary.DECLINED, code, f"declined — {reason}", elapsed, record
        )
    if args.dry_run:
        return HostOutcome(host.name, kind, code, "planned (dry run)", elapsed, record)
    if report.ok:
        how = f"reached by {report.reached_by}" if report.reached_by else "held already"
        return HostOutcome(host.name, kind, code, f"ok — goal {how}", elapsed, record)
    stopped = [r for r in report.steps if r.status in STOPPING]
    line = "goal NOT reached"
    if stopped:
        line += f" — step {stopped[-1].id} {stopped[-1].status.replace('_', ' ')}"
    if report.failing:
        line += "; " + _checks_line(report.failing)
    return HostOutcome(host.name, kind, code, line, elapsed, record)
