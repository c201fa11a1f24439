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
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from runbook_runner import localfile
from runbook_runner.cli import console, render
from runbook_runner.cli import host as cli_host
from runbook_runner.errors import (
    AuthenticationFailed,
    HostKeyChanged,
    TransportError,
    UnknownHostKey,
    UsageError,
)
from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet import summary
from runbook_runner.fleet.summary import HostOutcome, printable
from runbook_runner.runbook import Runbook

if TYPE_CHECKING:
    from runbook_runner.events import ConfirmRequest, Event
    from runbook_runner.fleet.inventory import Inventory
    from runbook_runner.fleet.selection import FleetHost
    from runbook_runner.transport import SshTarget, SshTransport


# -- selecting ------------------------------------------------------------------------------


class _Stop(Exception):
    """Bad fleet input, already explained: exit 2."""


def _select(args: argparse.Namespace) -> list[FleetHost]:
    from runbook_runner.fleet import inventory as inventories
    from runbook_runner.fleet.selection import SelectionError, select

    inventory: Inventory | None = None
    if args.inventory:
        path = Path(args.inventory)
        try:
            text = localfile.read_text(path, localfile.LIST_LIMIT)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--inventory {path}: cannot read it ({error})", _prog(args)) from None
        try:
            inventory = inventories.parse(text, str(path))
        except inventories.InventoryError as error:
            print(f"runbook: {error}", file=sys.stderr)
            raise _Stop from None
    specs = [*(args.hosts or [])] + ([args.host] if args.host else [])
    try:
        return select(specs, inventory, args.limit)
    except SelectionError as error:
        raise UsageError(str(error), _prog(args)) from None


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


def _connect(args: argparse.Namespace, host: FleetHost, messages: _Messages) -> SshTransport:
    from runbook_runner.cli.connecting import become_password, key_recorded
    from runbook_runner.transport import SshTransport

    target = _target(args, host)

    def recorded(name: str, key: Any) -> None:
        messages.put(f"{host.name}: {key_recorded(name, key, target.known_hosts)}")

    # No passphrase prompt from a worker thread: an encrypted key needs ssh-agent here.
    transport = SshTransport(target, None, recorded)
    transport.become_password = become_password(args)
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
    kind = summary.REFUSED if refused else summary.UNREACHABLE
    return HostOutcome(
        host.name,
        kind,
        ExitCode.HOST_UNREACHABLE,
        f"{kind} — {message}",
        time.monotonic() - started,
        {"ok": False, "error": str(error), "hint": error.hint},
    )


def _error_outcome(host: FleetHost, error: Exception, started: float) -> HostOutcome:
    text = f"{type(error).__name__}: {error}"
    return HostOutcome(
        host.name,
        summary.ERROR,
        ExitCode.CANNOT_TELL,
        f"error — {text}",
        time.monotonic() - started,
        {"ok": False, "error": text},
    )


def _failing(results: Sequence[Any]) -> list[tuple[str, str]]:
    return [(r.name, r.message) for r in results if not r.ok]


# -- check ----------------------------------------------------------------------------------


def fleet_check(args: argparse.Namespace) -> int:
    from runbook_runner.format.parameters import gpu_range, resolve_parameters

    if args.json and args.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook check")
    if args.forks < 1:
        raise UsageError("--forks must be at least 1", "runbook check")
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
    forks = max(1, min(args.forks, len(hosts)))
    out.line(f"{runbook.name} on {len(hosts)} hosts (read-only check, {forks} at a time)")

    def work(host: FleetHost) -> HostOutcome:
        return _check_one(args, runbook, params, host, messages, want_record=structured)

    outcomes = _gather(out, messages, hosts, work, forks, jsonl=args.jsonl)
    _print_summary(out, outcomes)
    return _fleet_end(args, runbook, params, hosts, outcomes)


def _check_one(
    args: argparse.Namespace,
    runbook: Runbook,
    params: dict[str, Any],
    host: FleetHost,
    messages: _Messages,
    *,
    want_record: bool,
) -> HostOutcome:
    from runbook_runner.runner import Runner

    started = time.monotonic()
    try:
        with _connect(args, host, messages) as transport:
            observed = Runner(runbook, params, transport).check_goal("now")
    except TransportError as error:
        return _transport_outcome(args, host, error, started)
    except Exception as error:  # one host's surprise must not end the others' checks
        return _error_outcome(host, error, started)
    failing = _failing(observed.results)
    record: dict[str, Any] = {"ok": not failing}
    if want_record:
        record["state"] = render.state_json(runbook, observed.state)
        record["checks"] = [cli_host.check_json(r, runbook) for r in observed.results]
    if failing:
        return HostOutcome(
            host.name,
            summary.FAILING,
            ExitCode.GOAL_NOT_MET,
            summary.failing_line(failing),
            time.monotonic() - started,
            record,
        )
    return HostOutcome(host.name, summary.OK, ExitCode.OK, "ok", time.monotonic() - started, record)


def _gather(
    out: console.Output,
    messages: _Messages,
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

    def tick() -> None:
        messages.drain(out)
        if out.tty:
            seen = [*done_before, *outcomes]
            out.live(summary.progress(len(seen), everything, seen))

    tick()
    try:
        for outcome in fan_out(hosts, work, forks, tick=tick):
            outcomes.append(outcome)
            if jsonl:
                print(json.dumps(outcome.to_json()), flush=True)
    except KeyboardInterrupt:
        out.end_live()
        out.line(
            "interrupted: no further host starts; hosts already started finish what they are "
            "doing (each run's journal records it) before this command exits"
        )
        raise
    messages.drain(out)
    out.end_live()
    return outcomes


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
    for number, batch in enumerate(plan, 1):
        failures = sum(1 for o in outcomes if o.code != ExitCode.OK)
        if not may_continue(failures, args.max_fail):
            stopped = f"not started — {_count(failures)} failed (--max-fail {args.max_fail})"
            break
        approved = args.yes
        if asks:
            messages.drain(out)
            if not _ask_batch(out, runbook, args, batch, number, len(plan)):
                rest = [host for later in plan[number - 1 :] for host in later]
                line = f"not started — batch {number} was declined"
                outcomes += _not_started(rest, line, ExitCode.DECLINED)
                break
            approved = True

        def work(host: FleetHost, approved: bool = approved) -> HostOutcome:
            return _run_one(args, runbook, params, host, messages, approved)

        outcomes += _gather(
            out,
            messages,
            batch,
            work,
            len(batch),
            jsonl=args.jsonl,
            done_before=outcomes,
            total=len(hosts),
        )
    if stopped is not None:
        started = {o.host for o in outcomes}
        outcomes += _not_started(
            [h for h in hosts if h.name not in started], stopped, ExitCode.GOAL_NOT_MET
        )
    _print_summary(out, _in_order(outcomes, hosts))
    return _fleet_end(args, runbook, params, hosts, outcomes, dry_run=args.dry_run)


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
) -> HostOutcome:
    from runbook_runner.journal import JournalError
    from runbook_runner.journal.recording import Recorder
    from runbook_runner.runner import Runner
    from runbook_runner.ssh.hostlock import HostLock, HostLocked, LockUnavailable

    started = time.monotonic()
    refusals: list[str] = []
    journal_path = ""
    try:
        with _connect(args, host, messages) as transport:
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
                allow_node_wide=getattr(args, "allow_node_wide", False),
            )
            lock = None
            if runbook.destructive and not args.dry_run:
                lock = HostLock(transport, host.name, cli_host._lock_owner(run_id))
                try:
                    lock.acquire(break_stale=args.break_lock)
                except (HostLocked, LockUnavailable):
                    journal.write("run-end", ok=False, locked=True, outcome="error")
                    journal.close()
                    raise
                journal.write("lock", held=True)
            report = None
            try:
                report = runner.run(from_step=args.from_step, dry_run=args.dry_run)
            finally:
                if lock is not None:
                    lock.release()
                journal.write(
                    "run-end",
                    ok=report is not None and report.ok,
                    reached_by=report.reached_by if report is not None else None,
                    declined=report.declined if report is not None else None,
                    interrupted=report is None,
                    blocked=(
                        report.blocked.message
                        if report is not None and report.blocked is not None
                        else None
                    ),
                    outcome=(
                        "interrupted"
                        if report is None
                        else "declined"
                        if report.declined
                        else "finished"
                    ),
                )
                journal.close()
    except (HostLocked, LockUnavailable) as error:
        return HostOutcome(
            host.name,
            summary.LOCKED,
            ExitCode.LOCKED,
            f"locked — {error}",
            time.monotonic() - started,
            {"ok": False, "error": str(error), "journal": journal_path},
        )
    except JournalError as error:
        return HostOutcome(
            host.name,
            summary.ERROR,
            ExitCode.JOURNAL,
            f"journal — {error}",
            time.monotonic() - started,
            {"ok": False, "error": str(error)},
        )
    except TransportError as error:
        return _transport_outcome(args, host, error, started)
    except Exception as error:  # one host's surprise must not end the rollout's accounting
        return _error_outcome(host, error, started)
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
    if report.blocked is not None:  # evidence missing: stopped, never escalated (dry runs too)
        return HostOutcome(
            host.name,
            summary.FAILING,
            ExitCode.CANNOT_TELL,
            f"stopped: cannot tell — before {report.blocked.id}",
            elapsed,
            {**record, "blocked": report.blocked.message},
        )
    if report.declined:
        blocked = any("reboots" in r for r in refusals)
        reason = refusals[0] if refusals else "declined"
        code = ExitCode.GOAL_NOT_MET if blocked else ExitCode.DECLINED
        return HostOutcome(
            host.name, summary.DECLINED, code, f"declined — {reason}", elapsed, record
        )
    if args.dry_run:
        return HostOutcome(host.name, summary.OK, ExitCode.OK, "planned (dry run)", elapsed, record)
    if report.ok:
        how = f"reached by {report.reached_by}" if report.reached_by else "held already"
        return HostOutcome(host.name, summary.OK, ExitCode.OK, f"ok — goal {how}", elapsed, record)
    stopped = [r for r in report.steps if r.status in {"failed", "timed_out", "unknown"}]
    line = "goal NOT reached"
    if stopped:
        line += f" — step {stopped[-1].id} {stopped[-1].status}"
    failing = _failing(report.after.results if report.after else ())
    if failing:
        line += "; " + summary.failing_line(failing)
    return HostOutcome(host.name, summary.FAILING, ExitCode.GOAL_NOT_MET, line, elapsed, record)
