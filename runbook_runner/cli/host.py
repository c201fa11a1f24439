"""The commands that reach a host: check, run and drill, and the run journal around them.

Part of the CLI layer (cli/): it prints (through console.py) and picks exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import __version__
from runbook_runner import journal as journal_module
from runbook_runner.cli import console, outcomes, render
from runbook_runner.cli.connecting import started
from runbook_runner.errors import (
    Interrupted,
    NeedsConfirmation,
    TransportError,
    UsageError,
)
from runbook_runner.exitcodes import ExitCode
from runbook_runner.format.catalog import Catalog, search_path
from runbook_runner.format.parameters import gpu_range, resolve_parameters
from runbook_runner.journal import lines as journal_lines
from runbook_runner.journal import resume as resume_module
from runbook_runner.journal.resume import ResumePlan
from runbook_runner.runbook import Runbook, load
from runbook_runner.safetext import markdown_cell, visible
from runbook_runner.ssh.hostlock import HostLock
from runbook_runner.status import RunOutcome

if TYPE_CHECKING:  # paramiko is slow to import: only commands that reach a host load it
    from runbook_runner.cli.drill import DrillHooks
    from runbook_runner.events import Event, RunReport
    from runbook_runner.expect import CheckResult
    from runbook_runner.transport import SshTransport


def catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(tuple(search_path(args.runbooks, os.environ)))


def load_named(args: argparse.Namespace) -> Runbook:
    return load(catalog(args).find(args.runbook))


def _load_and_connect(
    args: argparse.Namespace, out: console.Output
) -> tuple[Runbook, dict[str, Any], SshTransport]:
    """Load the runbook and its parameters while the connection is being opened."""
    connecting = started(args)
    try:
        runbook, params = _load_with_params(args)
    except BaseException:
        connecting.abandon()  # bad input is reported as such, whatever the host does
        raise
    return runbook, params, connecting.result(out.line)


def _load_with_params(args: argparse.Namespace) -> tuple[Runbook, dict[str, Any]]:
    runbook = load_named(args)
    narrowed = gpu_range(runbook, getattr(args, "gpus", None))
    return runbook, resolve_parameters(runbook, [*narrowed, *args.set])


def _secret_free(runbook: Runbook, params: dict[str, Any]) -> dict[str, Any]:
    return {k: ("***" if runbook.parameters[k].secret else v) for k, v in params.items()}


def check_json(result: CheckResult, runbook: Runbook) -> dict[str, Any]:
    """A check's verdict for --json; a failing one carries its hint (what a human does)."""
    document = result.to_json()
    check = runbook.checks.get(result.name)
    if not result.ok and check is not None and check.hint:
        document["hint"] = check.hint
    return document


def _host_label(args: argparse.Namespace, transport: SshTransport) -> str:
    user = transport.login_user or "?"
    return f"{transport.target.label} as {user}"


def cmd_check(args: argparse.Namespace) -> int:
    from runbook_runner.runner import Runner

    began = time.monotonic()
    out = console.Output(args.json)
    runbook, params, connected = _load_and_connect(args, out)
    with connected as transport:
        out.line(f"{runbook.name} on {_host_label(args, transport)} (read-only check)")
        observed = Runner(runbook, params, transport).check_goal("now")
    ok = all(r.ok for r in observed.results)
    console.report_state(out, runbook, observed, "State:")
    if ok:
        out.line(out.style("goal holds", "green"))
    elif any(not r.ok and not r.cannot_tell for r in observed.results):
        out.line(out.style("goal does NOT hold", "red", "bold"))
    else:
        out.line(out.style("cannot tell whether the goal holds: see ???? above", "yellow", "bold"))
    if args.json:
        document = {
            "runbook": runbook.name,
            "host": transport.target.host,
            "ok": ok,
            "parameters": _secret_free(runbook, params),
            "state": render.state_json(runbook, observed.state),
            "checks": [check_json(r, runbook) for r in observed.results],
        }
        print(json.dumps(document, indent=2))
    code = outcomes.check_code(observed.results)
    if getattr(args, "prometheus", None):
        from runbook_runner.cli import metrics
        from runbook_runner.fleet.summary import KIND_OF_CODE

        checks = [r.to_json() for r in observed.results]
        result = metrics.host_result(
            _metrics_host(args, transport),
            KIND_OF_CODE[code],
            int(code),
            time.monotonic() - began,
            checks,
        )
        metrics.write(args.prometheus, runbook.name, [result], "runbook check")
    return code


def _metrics_host(args: argparse.Namespace, transport: Any) -> str:
    """The host label of one host's metrics: as given to --host (without USER@)."""
    return str(args.host or transport.target.host).rsplit("@", 1)[-1]


def cmd_run(args: argparse.Namespace) -> int:
    return execute_run(args)[0]


def execute_run(
    args: argparse.Namespace,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    drill: DrillHooks | None = None,
) -> tuple[int, RunReport | None]:
    """Run a runbook as ``runbook run`` does; the drill passes its simulated clock."""
    from runbook_runner.journal.recording import Recorder
    from runbook_runner.runner import Runner

    out = console.Output(args.json)
    connecting = started(args)
    try:
        runbook, params = _load_with_params(args)
        resume = _resume_point(args, runbook) if getattr(args, "resume", None) else None
        if (
            getattr(args, "local", False)
            and runbook.destructive
            and not args.dry_run
            and not getattr(args, "allow_local_changes", False)
        ):
            raise UsageError(
                f"{runbook.name} changes the host (destructive steps): with --local it runs "
                "only with --allow-local-changes (or --dry-run)",
                "runbook run",
            )
        if args.from_step and args.from_step not in [s.id for s in runbook.steps]:
            raise UsageError(
                f"--from {args.from_step}: {runbook.name} has no step {args.from_step!r} "
                f"(steps: {', '.join(s.id for s in runbook.steps)})",
                "runbook run",
            )
    except BaseException:
        connecting.abandon()  # bad input is reported as such, whatever the host does
        raise
    with connecting.result(out.line) as transport, _signals_raise_interrupted():
        host = _host_label(args, transport)
        mode = " (dry run: observations only, nothing changes)" if args.dry_run else ""
        out.line(f"{runbook.name} on {host}{mode}")
        journal, run_id = _open_journal(args, runbook, transport, params, resume, drill)
        recorder = Recorder(journal, runbook, params)
        out.line(out.style(f"journal: {journal.path}", "dim"))
        confirmer = console.Confirmer(args, out, host, record=recorder.confirmation)
        printer = console.printer(out, runbook)

        def on_event(event: Event) -> None:
            recorder.on_event(event)
            printer(event)

        runner = Runner(
            runbook,
            params,
            transport,
            on_event=on_event,
            confirm=confirmer,
            clock=clock,
            sleep=sleep,
            changed=resume[1].changed if resume is not None else None,
            allow_node_wide=getattr(args, "allow_node_wide", False),
        )
        lock = None
        report: RunReport | None = None
        outcome = RunOutcome.INTERRUPTED
        ended: dict[str, Any] = {}
        try:
            if runbook.destructive and not args.dry_run and getattr(args, "lock", True):
                lock = HostLock(transport, transport.target.label, _lock_owner(run_id))
                previous = lock.acquire(break_stale=getattr(args, "break_lock", False))
                journal.append(journal_lines.lock(taken_over_from=previous))
            report = runner.run(
                from_step=args.from_step,
                dry_run=args.dry_run,
                resume=resume[1] if resume is not None else None,
            )
            outcome = RunOutcome.DECLINED if report.declined else RunOutcome.FINISHED
        except Interrupted as interrupt:
            ended = {"signum": interrupt.signum, "ended_on_host": interrupt.ended_on_host}
            raise
        except NeedsConfirmation:
            outcome = RunOutcome.NEEDS_CONFIRMATION
            raise
        except BaseException as error:
            outcome, ended = RunOutcome.ERROR, {"error": str(error) or type(error).__name__}
            raise
        finally:
            # Cleanup never hides why the run stopped: its own failures are recorded, not raised.
            if lock is not None:
                try:
                    lock.release()
                except (TransportError, KeyboardInterrupt) as error:
                    ended["lock_release_failed"] = str(error)
            journal.append(journal_lines.run_end(outcome, report, **ended))
            if drill is not None:
                drill.journal = journal.path
            journal.close()
    console.closing(out, report, host, confirmer, drill.retry if drill is not None else None)
    code = _exit_code(args, report, confirmer)
    if args.json:
        after = report.after
        document = {
            "runbook": runbook.name,
            "host": transport.target.host,
            "ok": report.ok,
            "dry_run": args.dry_run,
            "reached_by": report.reached_by,
            "parameters": _secret_free(runbook, params),
            "state": render.state_json(runbook, after.state) if after else None,
            "checks": [check_json(r, runbook) for r in after.results] if after else [],
            "steps": [r.to_json() for r in report.steps],
        }
        if drill is not None:
            document["drill"] = drill.summary(report, code)
        print(json.dumps(document, indent=2))
    return code, report


def _exit_code(args: argparse.Namespace, report: RunReport, confirmer: console.Confirmer) -> int:
    return outcomes.run_code(report, dry_run=args.dry_run, reboot_blocked=confirmer.reboot_blocked)


@contextlib.contextmanager
def _signals_raise_interrupted() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted (once: a second signal during the
    cleanup it starts is ignored, so the remote command is ended and the lock released)."""
    raised: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if raised:
            return
        raised.append(signum)
        raise Interrupted(signum)

    with stop_signals_handled_by(handler):
        yield


@contextlib.contextmanager
def stop_signals_handled_by(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP go to ``handler`` for the block (main thread only: a
    worker thread cannot take signals), and back to what they were after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, handler) for signum in wanted}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _lock_owner(run_id: str) -> dict[str, Any]:
    import socket

    return {
        "operator": getpass.getuser(),
        "run": run_id,
        "client": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _journal_folder() -> Path:
    return journal_module.default_dir(os.environ)


def _open_journal(
    args: argparse.Namespace,
    runbook: Runbook,
    transport: SshTransport,
    params: dict[str, Any],
    resume: tuple[Path, ResumePlan] | None,
    drill: DrillHooks | None = None,
) -> tuple[journal_module.Journal, str]:
    from runbook_runner.transport import fingerprint

    if resume is not None:
        path, plan = resume
        journal = journal_module.Journal(path)
        partial = journal.drop_cut_short_tail()
        journal.append(
            journal_lines.resume(
                from_step=plan.first,
                operator=getpass.getuser(),
                skipped_as_finished=plan.finished,
                in_flight=plan.in_flight,
                dropped_cut_short_line=partial,
            )
        )
        return journal, plan.run
    run_id = journal_module.new_run_id(runbook.name, transport.target.host)
    path = (
        Path(args.journal)
        if getattr(args, "journal", None)
        else _journal_folder() / f"{run_id}.jsonl"
    )
    journal = journal_module.Journal(path, drill.journal_clock if drill is not None else None)
    journal.append(
        journal_lines.run_start(
            run=run_id,
            runbook=runbook,
            parameters=_secret_free(runbook, params),
            operator=getpass.getuser(),
            host=transport.target.label,
            login=transport.login_user,
            host_key=fingerprint(transport.host_key) if transport.host_key else None,
            tool_version=__version__,
            dry_run=args.dry_run,
            drill=drill.scenario if drill is not None else None,  # on simulated time
        )
    )
    return journal, run_id


def _latest_run(run: str, folder: Path) -> Path:
    """A run by id, path or prefix; of several runs with that prefix, the latest, with a note."""
    candidate = Path(run)
    matches = sorted(folder.glob(f"{run}*.jsonl")) if folder.is_dir() and "/" not in run else []
    if len(matches) > 1 and not (candidate.suffix == ".jsonl" and candidate.is_file()):
        print(
            f"{run!r} matches {len(matches)} runs; showing the latest, {matches[-1].stem}",
            file=sys.stderr,
        )
        return matches[-1]
    return journal_module.find(run, folder)


def _resume_point(args: argparse.Namespace, runbook: Runbook) -> tuple[Path, ResumePlan]:
    """The journal to continue (a run id, or the path of a --journal FILE) and its plan."""
    try:
        path = journal_module.find(args.resume, _journal_folder())
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
    if start.get("runbook_sha256") != runbook.sha256 and not args.force:
        raise journal_module.JournalError(
            f"{runbook.path} changed since run {path.stem} started; resume anyway with --force"
        )
    try:
        return path, resume_module.plan(journal.events, runbook, path.stem)
    except resume_module.NotResumable as error:
        raise journal_module.JournalError(str(error)) from None


def cmd_runs(args: argparse.Namespace) -> int:
    folder = _journal_folder()
    if args.action == "show":
        if not args.run:
            raise UsageError("runs show needs a RUN id (see 'runbook runs')", "runbook runs")
        journal = journal_module.read(_latest_run(args.run, folder))
        for problem in journal.problems:
            print(visible(str(problem)), file=sys.stderr)
        rows = journal_module.timeline(journal)
        if args.markdown:
            print("| Time (UTC) | Step | Event |")
            print("|---|---|---|")
            for t, step, what in rows:
                cells = " | ".join(markdown_cell(cell) for cell in (t, step, what))
                print(f"| {cells} |")
        else:
            for t, step, what in rows:
                print(visible(f"{t}  {step:<22} {what}", lines=False))
        return ExitCode.OK
    paths = sorted(folder.glob("*.jsonl"))[-args.last :] if folder.is_dir() else []
    if not paths:
        print(f"no runs recorded in {folder}")
        return ExitCode.OK
    summaries = [journal_module.summary(p) for p in paths]
    print(
        visible(
            render.table(
                [
                    (
                        x["run"],
                        x["operator"],
                        x["result"] + (f" (drill: {x['drill']})" if x.get("drill") else ""),
                    )
                    for x in summaries
                ],
                ("RUN", "OPERATOR", "RESULT"),
            )
        )
    )
    return ExitCode.OK


def cmd_postmortem(args: argparse.Namespace) -> int:
    from runbook_runner.kb import postmortem

    journal = journal_module.read(journal_module.find(args.from_run, _journal_folder()))
    for problem in journal.problems:
        print(problem, file=sys.stderr)
    if journal.first("run-start") is None:
        raise journal_module.JournalError(f"{args.from_run}: no run-start line: not a run journal")
    docs = Path(args.docs)
    mkdocs_yml = docs.parent / "mkdocs.yml"
    if not (docs / "postmortems").is_dir() or not mkdocs_yml.is_file():
        raise UsageError(
            f"--docs {docs}: needs {docs}/postmortems/ and {mkdocs_yml} (run it in the repository)",
            "runbook postmortem",
        )
    known = {p.stem for p in (docs.parent / "runbooks").glob("*.yaml")}
    page = _postmortem_draft(journal.events, args.title, known, docs)
    target = docs / "postmortems" / page.filename
    try:
        nav = postmortem.add_to_nav(
            mkdocs_yml.read_text(encoding="utf-8"), page.title, f"postmortems/{target.name}"
        )
    except ValueError as error:
        raise UsageError(f"{mkdocs_yml}: {error}", "runbook postmortem") from None
    target.write_text(page.markdown, encoding="utf-8")
    mkdocs_yml.write_text(nav, encoding="utf-8")
    print(f"wrote {target}" + (" (a drill)" if page.drill else ""))
    print(f"added it to the nav in {mkdocs_yml}; fill in the TODO sections, then build the site")
    return ExitCode.OK


def _postmortem_draft(
    events: list[dict[str, Any]], title: str | None, known: set[str], docs: Path
) -> Any:
    """The draft, dated today where the journal dates nothing, with the drill's scenario for
    its debrief, and a title no other page under docs/postmortems/ has (' (2)', ' (3)')."""
    import datetime

    from runbook_runner.kb import postmortem
    from runbook_runner.simhost.scenarios import SCENARIOS

    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    start = next((e for e in events if e.get("event") == "run-start"), {})
    scenario = SCENARIOS.get(str(start.get("drill") or ""))
    about = (
        {
            "wrong": scenario.wrong,
            "expert": scenario.expert,
            "lesson": scenario.lesson,
            "page": scenario.page,
        }
        if scenario is not None
        else None
    )
    taken = {
        line.split(":", 1)[1].strip().strip('"')
        for page in (docs / "postmortems").glob("*.md")
        for line in page.read_text(encoding="utf-8", errors="replace").splitlines()[:5]
        if line.startswith("title:")
    }
    page = postmortem.draft(events, title, known, today, about)
    base, counter = page.title, 2
    while page.title in taken or (docs / "postmortems" / page.filename).exists():
        page = postmortem.draft(events, f"{base} ({counter})", known, today, about)
        counter += 1
    return page
