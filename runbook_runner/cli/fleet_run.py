"""``runbook run`` on many hosts: a rollout in batches, each host's run through the run
session (session.py) as on one host, with the fleet's consent and stop.

Part of the CLI layer (cli/); the selecting, gathering and summary are cli/fleet.py's.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
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
from runbook_runner.fleet.rollout import Mode
from runbook_runner.fleet.stop import HostStop, Stop
from runbook_runner.fleet.summary import HostOutcome, printable
from runbook_runner.runbook import Runbook
from runbook_runner.status import STOPPING

if TYPE_CHECKING:
    from runbook_runner.cli.request import Request
    from runbook_runner.events import Answer, ConfirmRequest
    from runbook_runner.fleet.rollout import Breaker, Share
    from runbook_runner.fleet.selection import FleetHost


def fleet_run(request: Request, become: str | None) -> int:
    """``become``: the sudo password -K asked for, if any."""
    from runbook_runner.fleet.rollout import Breaker, batch_size, batches

    for option, given in (("--journal", request.journal), ("--resume", request.resume)):
        if given:
            raise UsageError(
                f"{option} is for one host; on many hosts each gets its own journal",
                "runbook run",
            )
    if request.json and request.target.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook run")
    serial, max_fail = _share("--serial", request.serial), _share("--max-fail", request.max_fail)
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
    dry = " (dry run: observations only, nothing changes)" if request.dry_run else ""
    plan = batches(hosts, batch_size(serial, len(hosts)))
    rollout = _Rollout(Breaker.of(max_fail, len(hosts)), hosts, request.dry_run)
    out.line(
        f"{runbook.name} on {render.plural(len(hosts), 'host')}, "
        f"{len(plan[0])} at a time ({render.plural(len(plan), 'batch', 'batches')}){dry}; "
        f"the breaker trips at {render.plural(rollout.breaker.trips_at, 'failed host')}"
        + rollout.modes_said()
    )
    asks = runbook.destructive and not request.dry_run and not request.yes and sys.stdin.isatty()
    outcomes: list[HostOutcome] = []
    stop = Stop()
    with fleet.signals_stop(stop):
        for number, batch in enumerate(plan, 1):
            if stop.stopped or rollout.breaker.tripped:
                break
            approved = request.yes
            acting = [host for host in batch if rollout.mode(host) is Mode.ACT]
            if asks and acting:
                messages.drain(out)
                try:
                    stop.raise_here = True
                    if stop.stopped:
                        break
                    answer = _ask_batch(out, runbook, request, acting, number, len(plan))
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
                    request,
                    become,
                    runbook,
                    params,
                    host,
                    messages,
                    _BatchConsent(approved, request, rollout),
                    stop.for_host(),
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
                ended=rollout.count,
            )
        started = {o.host for o in outcomes}
        if stop.stopped:
            for host in hosts:
                if host.name not in started:
                    outcomes.append(
                        fleet.not_started_outcome(host, stop, (request, runbook, params))
                    )
        elif rollout.breaker.tripped:
            left = [h for h in hosts if h.name not in started]
            line = f"not started — the breaker tripped: {rollout.why()}"
            record = {"ok": False, "breaker": rollout.breaker.to_json()}
            for host in left:
                outcome = HostOutcome(
                    host.name, summary.NOT_STARTED, ExitCode.BREAKER, line, 0.0, dict(record)
                )
                outcomes.append(outcome)
                if request.target.jsonl:
                    print(json.dumps(outcome.to_json()), flush=True)
        fleet.print_summary(out, fleet.in_order(outcomes, hosts))
        if any(o.code == ExitCode.BREAKER for o in outcomes):  # it kept something from running
            out.line(out.style(f"The breaker tripped: {rollout.tripped_said()}", "red", "bold"))
        code = fleet.fleet_end(
            request,
            runbook,
            params,
            hosts,
            outcomes,
            dry_run=request.dry_run,
            breaker=rollout.breaker.to_json(),
        )
        return fleet.interrupted_exit(out, stop, outcomes) if stop.stopped else code


def _share(option: str, text: str) -> Share:
    from runbook_runner.fleet.rollout import share

    try:
        return share(text)
    except ValueError as error:
        raise UsageError(f"{option} must be {error}, not {text!r}", "runbook run") from None


class _Rollout:
    """The breaker as the rollout goes: counted on the main thread as each host ends, read
    by every host's consent before a destructive step (a worker thread reads one reference)."""

    def __init__(self, breaker: Breaker, hosts: Sequence[FleetHost], dry_run: bool) -> None:
        self.breaker = breaker
        self.dry_run = dry_run
        self._modes = {host.name: host.mode for host in hosts}

    def mode(self, host: FleetHost) -> Mode:
        """What the host may do: its group's mode; a dry run plans where it would act."""
        return self._effective(host.mode)

    def count(self, outcome: HostOutcome) -> None:
        mode = self._effective(self._modes.get(outcome.host, Mode.ACT))
        self.breaker = self.breaker.then(outcome.host, outcome.code, mode)

    def _effective(self, mode: Mode) -> Mode:
        return Mode.PLAN if self.dry_run and mode is Mode.ACT else mode

    def why(self) -> str:
        failed = len(self.breaker.failed)
        return f"{fleet.count(failed)} failed (--max-fail {self.breaker.limit})"

    def tripped_said(self) -> str:
        from runbook_runner.fleet.selection import fold

        return f"{self.why()}: {printable(fold(self.breaker.failed))}; no further host started"

    def modes_said(self) -> str:
        """``; observe: gpu[1-4], plan: gpu[5-8]`` where the inventory gives modes."""
        from runbook_runner.fleet.selection import fold

        said = []
        for mode in (Mode.OBSERVE, Mode.PLAN):
            named = [name for name, given in self._modes.items() if given is mode]
            if named:
                said.append(f"{mode}: {printable(fold(named))}")
        return "; " + ", ".join(said) + " (runbook_mode)" if said else ""


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
    none once the rollout's breaker has tripped (the step in flight ends as it would). The
    journal says 'not asked', and why, where none was given."""

    def __init__(self, approved: bool, request: Request, rollout: _Rollout) -> None:
        self.approved, self.yes, self.allow_reboot = approved, request.yes, request.allow_reboot
        self.rollout = rollout
        self.refusals: list[str] = []
        self.reboot_blocked = False
        self.breaker_stopped: str | None = None  # the step the breaker kept from starting

    def __call__(self, request: ConfirmRequest) -> Answer:
        from runbook_runner.events import Answer

        step = request.step
        if self.rollout.breaker.tripped:
            self.breaker_stopped = self.breaker_stopped or step.id
            self.refusals.append(f"the breaker tripped before step {step.id!r}")
            return Answer(False, f"the breaker tripped: {self.rollout.why()}", asked=False)
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
    consent: _BatchConsent,
    stop: HostStop,
) -> HostOutcome:
    """One host's run: connect, then the run session (session.py) as on one host, with the
    fleet's stop in place of the signal handler; its outcome as one line of the summary.
    A host of an ``observe`` group is checked, one of a ``plan`` group planned, as
    ``runbook check`` and ``run --dry-run`` would: no lock, no journal, nothing sent that
    changes the host."""
    from runbook_runner.cli.outcomes import run_code
    from runbook_runner.events import StepDone
    from runbook_runner.ssh.hostlock import HostLocked, LockUnavailable

    started = time.monotonic()
    if stop.stop.stopped:
        return fleet.not_started_outcome(host, stop.stop, (request, runbook, params))
    mode = consent.rollout.mode(host)
    if mode is Mode.OBSERVE:
        from runbook_runner.cli.fleet_check import check_one

        seen = check_one(request.target, become, runbook, params, host, messages, stop)
        return dataclasses.replace(
            seen, line=f"observe: {seen.line}", record={**seen.record, "mode": str(mode)}
        )
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
            if mode is Mode.PLAN:  # the plan, as on one host: one look, no lock, no journal
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
        "mode": str(Mode.ACT),
        "reached_by": report.reached_by,
        "journal": journal_path,
        "checks": [render.check_json(r, report.runbook) for r in report.after.results]
        if report.after
        else [],
        "steps": [r.to_json() for r in report.steps],
        "verdict": report.verdict.to_json(),
    }
    elapsed = time.monotonic() - started
    if consent.breaker_stopped is not None:  # ended its step in flight, started no other
        line = f"stopped — the breaker tripped before step {consent.breaker_stopped}"
        return HostOutcome(host.name, summary.STOPPED, ExitCode.BREAKER, line, elapsed, record)
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
    record = {"ok": code == ExitCode.OK, "mode": str(Mode.PLAN), "plan": document}
    line = "plan: " + planview.summary(plan)
    return HostOutcome(
        name, summary.KIND_OF_CODE[code], code, line, time.monotonic() - started, record
    )
