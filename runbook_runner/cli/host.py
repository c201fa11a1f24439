"""The commands that reach one host: check and run (through the run session), runs, postmortem.

Part of the CLI layer (cli/): it prints (through console.py) and picks exit codes.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import journal as journal_module
from runbook_runner import session
from runbook_runner.cli import console, outcomes, render
from runbook_runner.cli.connecting import started
from runbook_runner.errors import UsageError
from runbook_runner.format.catalog import Catalog, search_path
from runbook_runner.format.parameters import gpu_range, resolve_parameters
from runbook_runner.journal import resume as resume_module
from runbook_runner.plan import saved as saved_plan
from runbook_runner.runbook import Runbook, load

if TYPE_CHECKING:  # paramiko is slow to import: only commands that reach a host load it
    from runbook_runner.cli.connecting import Connecting
    from runbook_runner.cli.drill import DrillHooks
    from runbook_runner.cli.request import Request
    from runbook_runner.events import RunReport
    from runbook_runner.transport import SshTransport


def catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(tuple(search_path(args.runbooks, os.environ)))


def load_named(args: argparse.Namespace) -> Runbook:
    return load(catalog(args).find(args.runbook))


def _load_and_connect(
    args: argparse.Namespace, request: Request, out: console.Output
) -> tuple[Runbook, dict[str, Any], SshTransport]:
    """Load the runbook and its parameters while the connection is being opened."""
    connecting = started(args)
    try:
        runbook, params = load_with_params(request)
    except BaseException:
        connecting.abandon()  # bad input is reported as such, whatever the host does
        raise
    return runbook, params, connecting.result(out.line)


def load_requested(request: Request) -> Runbook:
    """The runbook the request names (``--runbooks`` and $RUNBOOK_PATH's catalog, or a path)."""
    catalogued = Catalog(tuple(search_path(request.runbooks, os.environ)))
    return load(catalogued.find(str(request.runbook)))


def load_with_params(request: Request) -> tuple[Runbook, dict[str, Any]]:
    """The runbook the request names, and its parameters (--gpus, then --set)."""
    runbook = load_requested(request)
    narrowed = gpu_range(runbook, request.gpus)  # check, run and plan all have --gpus
    return runbook, resolve_parameters(runbook, [*narrowed, *request.settings])


def _host_label(transport: SshTransport) -> str:
    user = transport.login_user or "?"
    return f"{transport.target.label} as {user}"


def cmd_check(args: argparse.Namespace, request: Request) -> int:
    from runbook_runner.engine import Runner

    began = time.monotonic()
    out = console.Output(request.json)
    runbook, params, connected = _load_and_connect(args, request, out)
    with connected as transport:
        out.line(f"{runbook.name} on {_host_label(transport)} (read-only check)")
        observed = Runner(runbook, params, transport).check_goal("now")
    ok = all(r.ok for r in observed.results)
    console.report_state(out, runbook, observed, "State:")
    if ok:
        out.line(out.style("goal holds", "green"))
    elif any(not r.ok and not r.cannot_tell for r in observed.results):
        out.line(out.style("goal does NOT hold", "red", "bold"))
    else:
        out.line(out.style("cannot tell whether the goal holds: see ???? above", "yellow", "bold"))
    if request.json:
        document = {
            "runbook": runbook.name,
            "host": transport.target.host,
            "ok": ok,
            "parameters": session.secret_free(runbook, params),
            "state": render.state_json(runbook, observed.state),
            "checks": [render.check_json(r, runbook) for r in observed.results],
        }
        print(json.dumps(document, indent=2))
    code = outcomes.check_code(observed.results)
    if request.prometheus:
        from runbook_runner.cli import metrics
        from runbook_runner.fleet.summary import KIND_OF_CODE

        checks = [r.to_json() for r in observed.results]
        result = metrics.host_result(
            _metrics_host(request, transport),
            KIND_OF_CODE[code],
            int(code),
            time.monotonic() - began,
            checks,
        )
        metrics.write(request.prometheus, runbook.name, [result], "runbook check")
    return code


def _metrics_host(request: Request, transport: Any) -> str:
    """The host label of one host's metrics: as given to --host (without USER@)."""
    return str(request.target.host or transport.target.host).rsplit("@", 1)[-1]


@dataclass(frozen=True)
class RunSettings:
    """``run`` on one host as the command line asked for it (a drill and ``test`` give
    their own: no lock, no journal file of the operator's, their simulated host)."""

    dry_run: bool = False
    from_step: str | None = None
    yes: bool = False
    allow_reboot: bool = False
    allow_node_wide: bool = False
    journal: Path | None = None  # default: a new file in the journal folder
    lock: bool = True
    break_lock: bool = False
    as_json: bool = False
    out: str | None = None  # with dry_run: save the plan here
    sign_with: str | None = None  # with out: sign the saved plan with this SSH key
    asked: tuple[tuple[str, Any], ...] = ()  # the runbook and host as the command line named them
    simulated: bool = False  # a drill's host: a saved plan is for reading only
    approved: saved_plan.SavedPlan | None = None  # run --plan: only what it holds
    plan_file: str | None = None
    approved_by: str | None = None
    approval: str | None = None  # how the saved plan's approval was proved, in words
    verbose: bool = False  # -v: every rung, and what read-only steps printed

    @classmethod
    def of(cls, request: Request) -> RunSettings:
        """``run`` (or ``plan``) on one host as the request asks for it."""
        approval = request.approval
        return cls(
            out=approval.out,
            sign_with=approval.sign_with,
            asked=(
                ("runbook", str(request.runbook)),
                ("host", request.target.host),
                ("port", request.target.port),
            ),
            plan_file=approval.plan,
            approved_by=approval.approved_by,
            approval=request.plan_approval,
            dry_run=request.dry_run,
            from_step=request.from_step,
            yes=request.yes,
            allow_reboot=request.allow_reboot,
            allow_node_wide=request.allow_node_wide,
            journal=request.journal,
            lock=True,
            break_lock=request.break_lock,
            as_json=request.json,
            verbose=request.verbose,
        )


def cmd_run(args: argparse.Namespace, request: Request) -> int:
    """``runbook run`` on one host: check the command line while connecting, then run."""
    out = console.Output(request.json)
    connecting = started(args)
    approved = None
    try:
        runbook, params = load_with_params(request)
        if request.journal is not None:
            journal_module.check_target(request.journal)
        if request.approval.plan:
            approved, params, request = _approved_plan(request, runbook, params)
        resume = _resume_point(request, runbook) if request.resume else None
        if resume is not None and request.saved_plan is not None:
            # the plan the run applied, its approval proved again (cli/planfile.py): its gates
            approved = request.saved_plan
            saved_plan.check_runbook(approved, runbook)
            request = _gated(request, saved_plan.gates_for(approved, {}))
        if (
            request.target.local
            and runbook.destructive
            and not request.dry_run
            and not request.allow_local_changes
        ):
            raise UsageError(
                f"{runbook.name} changes the host (destructive steps): with --local it runs "
                "only with --allow-local-changes (or --dry-run)",
                "runbook run",
            )
        step = request.from_step
        if step and step not in [s.id for s in runbook.steps]:
            raise UsageError(
                f"--from {step}: {runbook.name} has no step {step!r} "
                f"(steps: {', '.join(s.id for s in runbook.steps)})",
                "runbook run",
            )
    except BaseException:
        connecting.abandon()  # bad input is reported as such, whatever the host does
        raise
    settings = replace(RunSettings.of(request), approved=approved)
    code, _ = run_on_host(settings, runbook, params, connecting, out, resume=resume)
    return code


def _gated(request: Request, granted: dict[str, bool]) -> Request:
    """The request with a saved plan's gates (plan/saved.py's GATES) in place of its own."""
    return replace(
        request,
        allow_reboot=granted.get("allow_reboot", False),
        allow_node_wide=granted.get("allow_node_wide", False),
    )


def _approved_plan(
    request: Request, runbook: Runbook, params: dict[str, Any]
) -> tuple[saved_plan.SavedPlan, dict[str, Any], Request]:
    """The saved plan --plan names, checked against this runbook, with the parameters it
    was made with (a --set may give only a secret, which the plan does not hold), and its
    gates (a gate the plan was not made with is refused). The file was read, checked and
    its approval proved before connecting (cli/planfile.py)."""
    approved = request.saved_plan
    assert approved is not None  # read before connecting (cli/planfile.py)
    saved_plan.check_runbook(approved, runbook)
    given = [item.split("=", 1)[0] for item in request.settings]
    merged = saved_plan.parameters_for(approved, runbook, params, given)
    asked = {"allow_reboot": request.allow_reboot, "allow_node_wide": request.allow_node_wide}
    return approved, merged, _gated(request, saved_plan.gates_for(approved, asked))


def run_on_host(
    settings: RunSettings,
    runbook: Runbook,
    params: dict[str, Any],
    connecting: Connecting,
    out: console.Output,
    *,
    resume: session.ResumePoint | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    drill: DrillHooks | None = None,
) -> tuple[int, RunReport | None]:
    """One host's run through the run session (session.py), as ``runbook run`` prints it;
    a drill passes its simulated clock and its hooks."""
    with connecting.result(out.line) as transport, session.signals_raise_interrupted():
        host = _host_label(transport)
        mode = " (dry run: observations only, nothing changes)" if settings.dry_run else ""
        out.line(f"{runbook.name} on {host}{mode}")
        if settings.dry_run:  # the plan: one look, nothing sent that changes anything
            from runbook_runner.cli import planview

            looked = planview.look(
                runbook,
                params,
                transport,
                allow_reboot=settings.allow_reboot,
                allow_node_wide=settings.allow_node_wide,
                asked=dict(settings.asked),
                clock=clock,
                sleep=sleep,
            )
            return planview.print_plan(out, runbook, looked, settings), None
        approved: dict[str, Any] | None = None
        if settings.approved is not None:
            _check_plans_host(settings.approved, transport)
            out.line(
                f"applying the approved plan {settings.plan_file} (sha256 "
                f"{settings.approved.sha256[:16]}"
                + (f", approved by {settings.approved_by}" if settings.approved_by else "")
                + "): only its steps, on only its targets"
            )
            if settings.approval:
                out.line(f"approval: {settings.approval}")
            approved = {  # what was reviewed, and by whom
                "file": settings.plan_file,
                "sha256": settings.approved.sha256,
                "approved_by": settings.approved_by,
            }
        confirmer = console.Confirmer(
            out, host, yes=settings.yes, allow_reboot=settings.allow_reboot
        )
        printer = console.printer(out, runbook, verbose=settings.verbose)

        def on_event(event: session.SessionEvent) -> None:
            if isinstance(event, session.JournalOpened):
                out.line(out.style(f"journal: {event.path}", "dim"))
            else:
                printer(event)

        outcome = session.run(
            session.RunRequest(
                runbook,
                params,
                transport,
                confirmer,
                session.JournalPolicy(
                    journal_folder(),
                    path=settings.journal,
                    resume=resume,
                    clock=drill.journal_clock if drill is not None else None,
                    drill=drill.scenario if drill is not None else None,
                    plan=approved,
                ),
                getpass.getuser(),
                lock=session.LockPolicy(settings.lock, settings.break_lock),
                dry_run=settings.dry_run,
                from_step=settings.from_step,
                allow_node_wide=settings.allow_node_wide,
                approved=settings.approved,
                on_event=on_event,
                clock=clock,
                sleep=sleep,
            )
        )
        if drill is not None:
            drill.journal = outcome.journal
        if outcome.error is not None:
            raise outcome.error  # cli/outcomes.py's table says it and picks the exit code
    report = outcome.report
    assert report is not None
    printer.flush()
    console.closing(out, report, host, confirmer, drill.retry if drill is not None else None)
    code = outcomes.run_code(
        report, dry_run=settings.dry_run, reboot_blocked=confirmer.reboot_blocked
    )
    if settings.as_json:
        after = report.after
        document = {
            "runbook": runbook.name,
            "host": transport.target.host,
            "ok": report.ok,
            "dry_run": settings.dry_run,
            "reached_by": report.reached_by,
            "parameters": session.secret_free(runbook, params),
            "state": render.state_json(runbook, after.state) if after else None,
            "checks": [render.check_json(r, runbook) for r in after.results] if after else [],
            "steps": [r.to_json() for r in report.steps],
            "verdict": report.verdict.to_json(),
        }
        if drill is not None:
            document["drill"] = drill.summary(report, code)
        print(json.dumps(document, indent=2))
    return code, report


def _check_plans_host(approved: saved_plan.SavedPlan, transport: Any) -> None:
    """run --plan: the host named as the plan names it; over SSH the connection already
    refused another destination or host key before logging in (ssh/connect.py); a plan
    made over SSH is not applied to this machine (--local), which offers no key."""
    saved_plan.check_host(approved, transport.target.label)
    if transport.host_key is None and approved.host_key is not None:
        raise saved_plan.PlanInvalid(
            f"the plan was made over SSH on the host with the key {approved.host_key}, not "
            "on this machine (--local): a plan is applied only where it was made"
        )


def journal_folder() -> Path:
    """Where run journals go: $XDG_STATE_HOME/runbook-runner/runs."""
    return journal_module.default_dir(os.environ)


def _resume_point(request: Request, runbook: Runbook) -> session.ResumePoint:
    """The journal to continue (a run id, or the path of a --journal FILE) and its plan."""
    try:
        path = journal_module.find(str(request.resume), journal_folder())
    except journal_module.UnknownRun as error:  # nothing to resume from: exit 7, not 2
        raise journal_module.JournalError(f"cannot resume: {error}") from None
    journal = journal_module.read(path)
    if journal.damaged:
        line = journal.damaged[0]
        raise journal_module.JournalError(
            f"{path}:{line}: the journal is damaged (this line is not a whole JSON event), so "
            "what the run did cannot be told; not resuming. Read it with 'runbook runs show', "
            "check the host, then start a new run"
        )
    start = journal.first("run-start")
    if start is None:
        raise journal_module.JournalError(f"{path} has no run-start line: not a run journal")
    if start.get("runbook") != runbook.name:
        raise journal_module.JournalError(
            f"run {path.stem} ran {start.get('runbook')}, not {runbook.name}"
        )
    if start.get("runbook_sha256") != runbook.sha256 and not request.force:
        raise journal_module.JournalError(
            f"{runbook.path} changed since run {path.stem} started; resume anyway with --force"
        )
    try:
        return session.ResumePoint(path, resume_module.plan(journal.events, runbook, path.stem))
    except resume_module.NotResumable as error:
        raise journal_module.JournalError(str(error)) from None
