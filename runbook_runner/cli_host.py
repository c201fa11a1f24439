"""The commands that reach a host: check, run and drill, and the run journal around them.

With cli.py the CLI layer: it prints (through console.py) and picks exit codes.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import __version__, console, render
from runbook_runner import journal as journal_module
from runbook_runner.catalog import Catalog, search_path
from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.hostlock import HostLock
from runbook_runner.parameters import resolve_parameters
from runbook_runner.runbook import Runbook, load

if TYPE_CHECKING:  # paramiko is slow to import: only commands that reach a host load it
    from runbook_runner.events import Event, RunReport
    from runbook_runner.transport import SshTransport


def catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(tuple(search_path(args.runbooks, os.environ)))


def load_named(args: argparse.Namespace) -> Runbook:
    return load(catalog(args).find(args.runbook))


def _connect(args: argparse.Namespace, out: console.Output) -> SshTransport:
    from runbook_runner.transport import SshTransport, fingerprint, resolve_target

    target = resolve_target(
        args.host,
        port=args.port,
        user=args.user,
        identity_files=args.identity,
        known_hosts=Path(args.known_hosts) if args.known_hosts else None,
        accept_new_host_key=args.accept_new_host_key,
        connect_timeout=args.connect_timeout,
        ssh_config=Path(args.ssh_config) if args.ssh_config else None,
    )

    def recorded(host: str, key: Any) -> None:
        out.line(
            f"recorded the host key of {host} ({key.get_name()} {fingerprint(key)}) in {target.known_hosts}"
        )

    return SshTransport(target, console.prompt_passphrase, recorded).connect()


def _load_with_params(args: argparse.Namespace) -> tuple[Runbook, dict[str, Any]]:
    runbook = load_named(args)
    return runbook, resolve_parameters(runbook, args.set)


def _secret_free(runbook: Runbook, params: dict[str, Any]) -> dict[str, Any]:
    return {k: ("***" if runbook.parameters[k].secret else v) for k, v in params.items()}


def _host_label(args: argparse.Namespace, transport: SshTransport) -> str:
    user = transport.login_user or "?"
    return f"{transport.target.label} as {user}"


def cmd_check(args: argparse.Namespace) -> int:
    from runbook_runner.runner import Runner

    runbook, params = _load_with_params(args)
    out = console.Output(args.json)
    with _connect(args, out) as transport:
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
            "checks": [r.to_json() for r in observed.results],
        }
        print(json.dumps(document, indent=2))
    if ok:
        return ExitCode.OK
    failing = any(not r.ok and not r.cannot_tell for r in observed.results)
    return ExitCode.GOAL_NOT_MET if failing else ExitCode.CANNOT_TELL


def cmd_run(args: argparse.Namespace) -> int:
    return _execute_run(args)[0]


def _execute_run(
    args: argparse.Namespace,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    drill: DrillHooks | None = None,
) -> tuple[int, RunReport | None]:
    """Run a runbook as ``runbook run`` does; the drill passes its simulated clock."""
    from runbook_runner.recording import Recorder
    from runbook_runner.runner import Runner

    runbook, params = _load_with_params(args)
    resume = _resume_point(args, runbook) if getattr(args, "resume", None) else None
    if resume is not None:
        args.from_step = resume[1]
    if args.from_step and args.from_step not in [s.id for s in runbook.steps]:
        raise UsageError(
            f"--from {args.from_step}: {runbook.name} has no step {args.from_step!r} "
            f"(steps: {', '.join(s.id for s in runbook.steps)})",
            "runbook run",
        )
    out = console.Output(args.json)
    with _connect(args, out) as transport:
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
        )
        lock = None
        if runbook.destructive and not args.dry_run and getattr(args, "lock", True):
            lock = HostLock(transport, transport.target.label, _lock_owner(run_id))
            lock.acquire(break_stale=getattr(args, "break_lock", False))
            journal.write("lock", held=True)
        report: RunReport | None = None
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
                stopped_by=_stopped_by(report, confirmer),
                blocked=report.blocked.message if report is not None and report.blocked else None,
                interrupted=report is None,
            )
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
            "checks": [r.to_json() for r in after.results] if after else [],
            "steps": [r.to_json() for r in report.steps],
        }
        if drill is not None:
            document["drill"] = drill.summary(report, code)
        print(json.dumps(document, indent=2))
    return code, report


def _exit_code(args: argparse.Namespace, report: RunReport, confirmer: console.Confirmer) -> int:
    if report.blocked is not None:
        code = ExitCode.CANNOT_TELL  # a dry run whose plan is blocked is not fine either
    elif report.declined:
        # A reboot that was not allowed leaves the goal unmet (1); an operator's "no" is 4.
        code = ExitCode.GOAL_NOT_MET if confirmer.reboot_blocked else ExitCode.DECLINED
    elif args.dry_run:
        code = ExitCode.OK
    else:
        code = ExitCode.OK if report.ok else ExitCode.GOAL_NOT_MET
    return code


def _stopped_by(report: RunReport | None, confirmer: console.Confirmer) -> str | None:
    """Who or what stopped a run before its end: 'operator', 'needs --allow-reboot', ..."""
    if report is None or not report.declined:
        return None
    declined = next((r for r in report.steps if r.status == "declined"), None)
    reason = declined.message if declined is not None else ""
    return "operator" if reason.startswith("declined by") else reason or "operator"


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
    resume: tuple[Path, str | None] | None,
    drill: DrillHooks | None = None,
) -> tuple[journal_module.Journal, str]:
    from runbook_runner.transport import fingerprint

    if resume is not None:
        journal = journal_module.Journal(resume[0])
        journal.write("resume", from_step=resume[1], operator=getpass.getuser())
        return journal, resume[0].stem
    run_id = journal_module.new_run_id(runbook.name, transport.target.host)
    path = (
        Path(args.journal)
        if getattr(args, "journal", None)
        else _journal_folder() / f"{run_id}.jsonl"
    )
    journal = journal_module.Journal(path, drill.journal_clock if drill is not None else None)
    marks: dict[str, Any] = {}
    if drill is not None:  # a drill: its scenario, on simulated time
        marks = {"drill": drill.scenario, "simulated_time": True}
    journal.write(
        "run-start",
        **marks,
        run=run_id,
        runbook=runbook.name,
        runbook_path=runbook.path,
        runbook_sha256=runbook.sha256,
        parameters=_secret_free(runbook, params),
        operator=getpass.getuser(),
        host=transport.target.label,
        login=transport.login_user,
        host_key=fingerprint(transport.host_key) if transport.host_key else None,
        tool_version=__version__,
        dry_run=args.dry_run,
    )
    return journal, run_id


def _resume_point(args: argparse.Namespace, runbook: Runbook) -> tuple[Path, str | None]:
    """The journal to continue and the first step that did not finish there."""
    path = journal_module.find(args.resume, _journal_folder())
    journal = journal_module.read(path)
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
    pending = journal.first_unfinished([step.id for step in runbook.steps])
    return path, pending


def cmd_runs(args: argparse.Namespace) -> int:
    folder = _journal_folder()
    if args.action == "show":
        if not args.run:
            raise UsageError("runs show needs a RUN id (see 'runbook runs')", "runbook runs")
        journal = journal_module.read(journal_module.find(args.run, folder))
        for problem in journal.problems:
            print(problem, file=sys.stderr)
        rows = journal_module.timeline(journal)
        if args.markdown:
            print("| Time (UTC) | Step | Event |")
            print("|---|---|---|")
            for t, step, what in rows:
                cell = what.replace("|", "\\|")
                print(f"| {t} | {step} | {cell} |")
        else:
            for t, step, what in rows:
                print(f"{t}  {step:<22} {what}")
        return ExitCode.OK
    paths = sorted(folder.glob("*.jsonl"))[-args.last :] if folder.is_dir() else []
    if not paths:
        print(f"no runs recorded in {folder}")
        return ExitCode.OK
    summaries = [journal_module.summary(p) for p in paths]
    print(
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
    return ExitCode.OK


class DrillHooks:
    """What a drill adds to a run: its scenario in the journal, simulated time stamps,
    and its judgement in the JSON document."""

    def __init__(self, scenario: str, clock: Callable[[], float], judge: Any) -> None:
        from runbook_runner.simhost.commands import EPOCH

        self.scenario = scenario
        self.journal_clock = lambda: EPOCH + clock()
        self.judge = judge  # (report, exit code) -> drill.Judgement
        self.journal: Path | None = None
        self.retry = f"runbook drill NAME --scenario {scenario} --yes --allow-reboot"

    def summary(self, report: RunReport, code: int) -> dict[str, Any]:
        return dict(self.judge(report, code).to_json())


def cmd_drill(args: argparse.Namespace) -> int:
    from runbook_runner import drill as drills
    from runbook_runner.simhost.scenarios import SCENARIOS

    named = args.scenario != "random"
    if named and args.scenario not in SCENARIOS:
        raise UsageError(
            f"--scenario {args.scenario}: no such scenario "
            f"(scenarios: {', '.join(SCENARIOS)}, or random)",
            "runbook drill",
        )
    runbook = load_named(args)  # a bad runbook name fails before anything starts
    name = drills.pick(args.scenario)
    drill = drills.start(name)
    scenario = drill.scenario
    out = console.Output(args.json)
    try:
        if named:
            out.line(out.style(f"Drill: {name}", "bold") + f": {scenario.teaches}.")
        else:
            out.line(
                out.style("Drill: a scenario picked at random", "bold") + " (the debrief names it)."
            )
        out.line(
            f"A simulated 8 x RTX PRO 6000 server with 449 GiB of RAM answers over SSH on "
            f"127.0.0.1:{drill.host.port}. Nothing on this machine is touched; simulated time runs fast."
        )
        given = {item.split("=", 1)[0] for item in args.set or []}
        known = [
            f"{k}={v}" for k, v in scenario.params if k not in given and k in runbook.parameters
        ]
        if known:
            args.set = [*known, *(args.set or [])]
            out.line("What the operator knows here: " + " ".join(f"--set {kv}" for kv in known))
        started = drill.host.clock.now()
        args.host, args.port, args.user = "127.0.0.1", drill.host.port, "root"
        args.identity, args.known_hosts = [str(drill.identity)], str(drill.known_hosts)
        args.ssh_config, args.accept_new_host_key, args.connect_timeout = (
            str(drill.ssh_config),
            False,
            5.0,
        )
        args.dry_run, args.from_step = False, None
        args.lock, args.journal, args.resume, args.break_lock, args.force = (
            False,
            None,
            None,
            False,
            False,
        )

        def judge(report: RunReport, code: int) -> drills.Judgement:
            said = " ".join(r.message for r in report.steps if r.status in {"blocked", "declined"})
            return drills.judge(
                scenario,
                drill.host.host.actions,
                started,
                drill.host.clock.now(),
                code,
                report.ok,
                said,
            )

        hooks = DrillHooks(name, drill.host.clock.now, judge)
        hooks.retry = hooks.retry.replace("NAME", args.runbook)
        code, report = _execute_run(
            args, clock=drill.host.clock.now, sleep=drill.host.clock.sleep, drill=hooks
        )
        if report is not None:
            judgement = judge(report, code)
            if hooks.journal is not None:
                journal = journal_module.Journal(hooks.journal, hooks.journal_clock)
                journal.write("drill-end", **judgement.to_json())
                journal.close()
            timeline = [(t - started, what, by) for t, what, by in drill.host.host.timeline]
            console.debrief(out, report, judgement, timeline)
        return code
    finally:
        drill.close()
