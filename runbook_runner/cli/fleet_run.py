"""``runbook run`` on many hosts: a rollout in batches, each host's run through the run
session (session.py) as on one host, with the fleet's consent and stop.

Part of the CLI layer (cli/); the selecting, gathering and summary are cli/fleet.py's.
"""

from __future__ import annotations

import dataclasses
import getpass
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runbook_runner import session
from runbook_runner.cli import console, fleet, render
from runbook_runner.cli import host as cli_host
from runbook_runner.errors import Interrupted, TransportError, UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet import summary
from runbook_runner.fleet.stop import HostStop, Stop
from runbook_runner.fleet.summary import HostOutcome, printable
from runbook_runner.runbook import Runbook
from runbook_runner.status import STOPPING

if TYPE_CHECKING:
    from runbook_runner.cli.request import Request
    from runbook_runner.events import Answer, ConfirmRequest
    from runbook_runner.fleet.selection import FleetHost


def fleet_run(request: Request, become: str | None) -> int:
    """``become``: the sudo password -K asked for, if any."""
    from runbook_runner.fleet.rollout import batches, may_continue

    for option, given in (("--journal", request.journal), ("--resume", request.resume)):
        if given:
            raise UsageError(
                f"{option} is for one host; on many hosts each gets its own journal",
                "runbook run",
            )
    if request.json and request.target.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook run")
    if request.serial < 1:
        raise UsageError("--serial must be at least 1", "runbook run")
    if request.max_fail is not None and request.max_fail < 1:
        raise UsageError("--max-fail must be at least 1", "runbook run")
    try:
        hosts = fleet.select_hosts(request)
    except fleet.BadFleetInput:
        return ExitCode.BAD_INPUT
    runbook, params = cli_host.load_with_params(request)
    if request.from_step and request.from_step not in [s.id for s in runbook.steps]:
        raise UsageError(
            f"--from {request.from_step}: {runbook.name} has no step {request.from_step!r}",
            "runbook run",
        )
    out = console.Output(request.json or request.target.jsonl)
    messages = fleet.Messages()
    mode = " (dry run: observations only, nothing changes)" if request.dry_run else ""
    plan = batches(hosts, request.serial)
    out.line(
        f"{runbook.name} on {render.plural(len(hosts), 'host')}, {request.serial} at a time "
        f"({render.plural(len(plan), 'batch', 'batches')}){mode}"
    )
    asks = runbook.destructive and not request.dry_run and not request.yes and sys.stdin.isatty()
    outcomes: list[HostOutcome] = []
    stopped: str | None = None
    stop = Stop()
    with fleet.signals_stop(stop):
        for number, batch in enumerate(plan, 1):
            if stop.stopped:
                break
            failures = sum(1 for o in outcomes if o.code != ExitCode.OK)
            if not may_continue(failures, request.max_fail):
                stopped = (
                    f"not started — {fleet.count(failures)} failed (--max-fail {request.max_fail})"
                )
                break
            approved = request.yes
            if asks:
                messages.drain(out)
                try:
                    stop.raise_here = True
                    if stop.stopped:
                        break
                    answer = _ask_batch(out, runbook, request, batch, number, len(plan))
                except Interrupted:
                    break
                finally:
                    stop.raise_here = False
                if not answer:
                    rest = [host for later in plan[number - 1 :] for host in later]
                    line = f"not started — batch {number} was declined"
                    outcomes += fleet.not_started(rest, line, ExitCode.DECLINED)
                    break
                approved = True

            def work(host: FleetHost, approved: bool = approved) -> HostOutcome:
                return _run_one(
                    request, become, runbook, params, host, messages, approved, stop.for_host()
                )

            outcomes += fleet.gather(
                out,
                messages,
                stop,
                batch,
                work,
                len(batch),
                jsonl=request.target.jsonl,
                done_before=outcomes,
                total=len(hosts),
            )
        if stop.stopped:
            started = {o.host for o in outcomes}
            for host in hosts:
                if host.name not in started:
                    outcomes.append(
                        fleet.not_started_outcome(host, stop, (request, runbook, params))
                    )
        elif stopped is not None:
            started = {o.host for o in outcomes}
            outcomes += fleet.not_started(
                [h for h in hosts if h.name not in started], stopped, ExitCode.GOAL_NOT_MET
            )
        fleet.print_summary(out, fleet.in_order(outcomes, hosts))
        code = fleet.fleet_end(request, runbook, params, hosts, outcomes, dry_run=request.dry_run)
        return fleet.interrupted_exit(out, stop, outcomes) if stop.stopped else code


def _ask_batch(
    out: console.Output,
    runbook: Runbook,
    request: Request,
    batch: Sequence[FleetHost],
    number: int,
    total: int,
) -> bool:
    """One question for a batch: which hosts, which destructive steps may run on each."""
    from runbook_runner.fleet.selection import fold

    names = fold(h.name for h in batch)
    out.line(
        out.style(
            f"Batch {number}/{total}: {fleet.count(len(batch))}: {printable(names)}",
            "yellow",
            "bold",
        )
    )
    out.line("  Destructive steps that run where the goal does not hold yet:")
    for step in runbook.steps:
        if not step.destructive:
            continue
        note = ""
        if step.reboots and not request.allow_reboot:
            note = " (reboots: not run without --allow-reboot)"
        out.line(f"    {step.id}: {step.title} (affects {step.affects}){note}")
        if step.run is not None:
            out.line(f"      $ {step.run.source}")
    try:
        answer = input(f"  Run on {'this host' if len(batch) == 1 else 'these hosts'}? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in {"y", "yes"}


class _BatchConsent:
    """A fleet's consent (the run session's, for each host): nobody is asked on a host. A
    destructive step runs with --yes or the batch's answer, a reboot with --allow-reboot;
    the journal says 'not asked', and why, where neither was given."""

    def __init__(self, approved: bool, *, yes: bool, allow_reboot: bool) -> None:
        self.approved, self.yes, self.allow_reboot = approved, yes, allow_reboot
        self.refusals: list[str] = []
        self.reboot_blocked = False

    def __call__(self, request: ConfirmRequest) -> Answer:
        from runbook_runner.events import Answer

        step = request.step
        if step.reboots:
            if self.allow_reboot:
                return Answer(True, "--allow-reboot", asked=False)
            self.reboot_blocked = True
            self.refusals.append(f"step {step.id!r} reboots the host: needs --allow-reboot")
            return Answer(False, "needs --allow-reboot", asked=False)
        if self.yes:
            return Answer(True, "--yes", asked=False)
        if self.approved:
            return Answer(True, f"confirmed by {getpass.getuser()} for its batch")
        self.refusals.append(
            f"step {step.id!r} is destructive and needs a confirmation: "
            "run from a terminal, or with --yes"
        )
        return Answer(False, "no terminal to ask (use --yes)", asked=False)

    def answered_by(self, request: ConfirmRequest, answer: Answer) -> str:
        return getpass.getuser() + (" (--yes)" if self.yes else " (batch confirmation)")


def _run_one(
    request: Request,
    become: str | None,
    runbook: Runbook,
    params: dict[str, Any],
    host: FleetHost,
    messages: fleet.Messages,
    approved: bool,
    stop: HostStop,
) -> HostOutcome:
    """One host's run: connect, then the run session (session.py) as on one host, with the
    fleet's stop in place of the signal handler; its outcome as one line of the summary."""
    from runbook_runner.cli.outcomes import run_code
    from runbook_runner.events import StepDone
    from runbook_runner.ssh.hostlock import HostLocked, LockUnavailable

    started = time.monotonic()
    if stop.stop.stopped:
        return fleet.not_started_outcome(host, stop.stop, (request, runbook, params))
    consent = _BatchConsent(approved, yes=request.yes, allow_reboot=request.allow_reboot)
    numbers = {step.id: index for index, step in enumerate(runbook.steps, 1)}
    style = render.Style(False)

    def on_event(event: session.SessionEvent) -> None:
        if isinstance(event, session.JournalOpened):
            messages.put(f"{host.name}: journal: {event.path}")
        elif isinstance(event, StepDone):
            line = render.step_line(event.record, numbers[event.step.id], len(runbook.steps), style)
            messages.put(f"{host.name}: {printable(line.strip())}")

    try:
        with fleet.connect(request.target, become, host, messages, stop) as transport:
            if stop.stop.stopped:  # connected after the stop: nothing runs here
                return fleet.not_started_outcome(host, stop.stop, (request, runbook, params))
            if request.dry_run:  # the plan, as on one host: one look, no lock, no journal
                return _planned(request, runbook, params, host.name, transport, started)
            # Named as the inventory or node set names the host (gpu07), not by its address.
            named = dataclasses.replace(transport.target, host=host.name)
            outcome = session.run(
                session.RunRequest(
                    runbook,
                    params,
                    transport,
                    consent,
                    session.JournalPolicy(cli_host.journal_folder()),
                    getpass.getuser(),
                    names=session.HostNames(named.label, host.name, host.name),
                    lock=session.LockPolicy(True, request.break_lock),
                    dry_run=request.dry_run,
                    from_step=request.from_step,
                    allow_node_wide=request.allow_node_wide,
                    on_event=on_event,
                    sleep=stop.sleep,
                )
            )
    except Interrupted:  # stopped while connecting: its run never began
        return fleet.not_started_outcome(host, stop.stop, (request, runbook, params))
    except TransportError as error:
        return fleet.transport_outcome(request.target, host, error, started)
    except Exception as error:  # one host's surprise must not end the rollout's accounting
        return fleet.error_outcome(host, error, started)
    journal_path = str(outcome.journal) if outcome.journal is not None else ""
    raised = outcome.error
    if isinstance(raised, Interrupted) and outcome.journal is None:
        return fleet.not_started_outcome(host, stop.stop, (request, runbook, params))
    if isinstance(raised, Interrupted):
        return fleet.interrupted_outcome(host, raised, started, {"journal": journal_path})
    if isinstance(raised, HostLocked | LockUnavailable):
        return HostOutcome(
            host.name,
            summary.LOCKED,
            ExitCode.LOCKED,
            f"locked — {raised}",
            time.monotonic() - started,
            {"ok": False, "error": str(raised), "journal": journal_path},
        )
    if isinstance(raised, TransportError):
        return fleet.transport_outcome(request.target, host, raised, started)
    if isinstance(raised, Exception):
        return fleet.error_outcome(host, raised, started, {"journal": journal_path or None})
    if raised is not None:
        raise raised  # a KeyboardInterrupt that is no fleet stop: as on one host
    report = outcome.report
    assert report is not None
    record: dict[str, Any] = {
        "ok": report.ok,
        "reached_by": report.reached_by,
        "journal": journal_path,
        "checks": [render.check_json(r, report.runbook) for r in report.after.results]
        if report.after
        else [],
        "steps": [r.to_json() for r in report.steps],
        "verdict": report.verdict.to_json(),
    }
    elapsed = time.monotonic() - started
    code = run_code(report, dry_run=request.dry_run, reboot_blocked=consent.reboot_blocked)
    kind = summary.KIND_OF_CODE[code]
    if report.blocked is not None:  # evidence missing: stopped, never escalated (dry runs too)
        line = f"stopped: cannot tell — before {report.blocked.id}"
        return HostOutcome(
            host.name, kind, code, line, elapsed, {**record, "blocked": report.blocked.message}
        )
    if report.declined:
        reason = consent.refusals[0] if consent.refusals else "declined"
        return HostOutcome(
            host.name, summary.DECLINED, code, f"declined — {reason}", elapsed, record
        )
    held = report.verdict.held
    if report.ok and held:  # exit 9: the checks hold, a GPU of the subject does not
        more = f" (and {len(held) - 1} more)" if len(held) > 1 else ""
        line = f"goal holds, but still held: {held[0]}{more}"
        return HostOutcome(host.name, kind, code, line, elapsed, record)
    if report.ok:
        how = f"reached by {report.reached_by}" if report.reached_by else "held already"
        left = report.verdict.left_alone
        alone = f"; left alone: {len(left)}" if left else ""
        return HostOutcome(host.name, kind, code, f"ok — goal {how}{alone}", elapsed, record)
    stopped = [r for r in report.steps if r.status in STOPPING]
    line = "goal NOT reached"
    if stopped:
        line += f" — step {stopped[-1].id} {stopped[-1].status.replace('_', ' ')}"
    if report.failing:
        line += "; " + fleet.checks_line(report.failing)
    return HostOutcome(host.name, kind, code, line, elapsed, record)


def _planned(
    request: Request,
    runbook: Runbook,
    params: dict[str, Any],
    name: str,
    transport: Any,
    started: float,
) -> HostOutcome:
    """One host's plan (cli/planview.py): its line says what runs first and how the run
    would end; its record is the plan's JSON document."""
    from runbook_runner.cli import planview

    looked = planview.look(
        runbook,
        params,
        transport,
        allow_reboot=request.allow_reboot,
        allow_node_wide=request.allow_node_wide,
        asked={"runbook": str(request.runbook), "host": name, "port": None},
    )
    plan, document = looked.plan, looked.document
    code = plan.exit_code
    record = {"ok": code == ExitCode.OK, "plan": document}
    line = "plan: " + planview.summary(plan)
    return HostOutcome(
        name, summary.KIND_OF_CODE[code], code, line, time.monotonic() - started, record
    )
