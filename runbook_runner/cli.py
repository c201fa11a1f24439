"""The ``runbook`` command: the only module that prints, prompts, or picks an exit code."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from runbook_runner import __version__, console, exitcodes, render
from runbook_runner import journal as journal_module
from runbook_runner.catalog import Catalog, UnknownRunbook, search_path
from runbook_runner.errors import TransportError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.hostlock import HostLock, HostLocked
from runbook_runner.runbook import (
    ParameterError,
    Runbook,
    RunbookInvalid,
    load,
    resolve_parameters,
)

if TYPE_CHECKING:  # paramiko is slow to import: only commands that reach a host load it
    from runbook_runner.runner import Event, RunReport
    from runbook_runner.transport import SshTransport

EPILOG = f"""\
examples:
  runbook list
  runbook show gpu-node-health
  runbook check gpu-node-health --host 10.1.230.174
  runbook run gpu-oom-recovery --host root@10.1.230.174 --dry-run
  runbook validate runbooks/my-new-runbook.yaml

exit codes:
{exitcodes.describe()}

Runbooks are read from --runbooks DIR, else $RUNBOOK_PATH, else ./runbooks,
else the set bundled with runbook-runner.
"""


class UsageError(Exception):
    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a distinct exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(tuple(search_path(args.runbooks, os.environ)))


def _load_named(args: argparse.Namespace) -> Runbook:
    return load(_catalog(args).find(args.runbook))


def cmd_list(args: argparse.Namespace) -> int:
    runbooks, broken = [], []
    for name, path in _catalog(args).paths().items():
        try:
            runbooks.append(load(path))
        except RunbookInvalid as error:
            broken.append((name, len(error.problems)))
    if not runbooks and not broken:
        folders = ", ".join(str(f) for f in _catalog(args).folders)
        _err(f"no runbooks found in {folders}")
        return ExitCode.BAD_INPUT
    print(render.runbook_list(runbooks))
    for name, count in broken:
        _err(f"{name}: invalid ({count} errors); see 'runbook validate {name}'")
    return ExitCode.BAD_INPUT if broken else ExitCode.OK


def cmd_show(args: argparse.Namespace) -> int:
    print(render.runbook_details(_load_named(args)))
    return ExitCode.OK


def _validation_targets(args: argparse.Namespace) -> list[Path]:
    catalog = _catalog(args)
    if not args.paths:
        return list(catalog.paths().values())
    targets: list[Path] = []
    for given in args.paths:
        path = Path(given)
        if path.is_dir():
            targets += sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        elif path.exists():
            targets.append(path)
        else:
            targets.append(catalog.find(given))
    return targets


def cmd_validate(args: argparse.Namespace) -> int:
    targets = _validation_targets(args)
    if not targets:
        _err("nothing to validate: no runbook files found")
        return ExitCode.BAD_INPUT
    invalid = errors = 0
    for path in targets:
        try:
            runbook = load(path)
        except RunbookInvalid as error:
            invalid += 1
            errors += len(error.lines)
            for line in error.lines:
                print(line)
            continue
        if not args.quiet:
            print(f"{runbook.path}: ok ({len(runbook.steps)} steps)")
    if invalid:
        _err(f"{invalid} of {len(targets)} runbooks invalid, {errors} errors")
        return ExitCode.BAD_INPUT
    _err(f"{len(targets)} runbook{'s' if len(targets) != 1 else ''} valid")
    return ExitCode.OK


# -- running against a host ------------------------------------------------------------


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
    runbook = _load_named(args)
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
    out.line(
        out.style("goal holds", "green") if ok else out.style("goal does NOT hold", "red", "bold")
    )
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
    return ExitCode.OK if ok else ExitCode.GOAL_NOT_MET


def cmd_run(args: argparse.Namespace) -> int:
    return _execute_run(args)[0]


def _execute_run(
    args: argparse.Namespace,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
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
        journal, run_id = _open_journal(args, runbook, transport, params, resume)
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
            ended = report is not None
            journal.write(
                "run-end",
                ok=ended and report.ok,
                reached_by=report.reached_by if ended else None,
                declined=report.declined if ended else None,
                interrupted=not ended,
            )
            journal.close()
    console.closing(out, report, host, confirmer)
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
        print(json.dumps(document, indent=2))
    if report.declined:
        # A reboot that was not allowed leaves the goal unmet (1); an operator's "no" is 4.
        code = ExitCode.GOAL_NOT_MET if confirmer.reboot_blocked else ExitCode.DECLINED
    elif args.dry_run:
        code = ExitCode.OK
    else:
        code = ExitCode.OK if report.ok else ExitCode.GOAL_NOT_MET
    return code, report


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
    journal = journal_module.Journal(path)
    journal.write(
        "run-start",
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
    finished = {
        e.get("id")
        for e in journal.events
        if e.get("event") == "step-end" and e.get("status") in {"ok", "skipped"}
    }
    pending = next((step.id for step in runbook.steps if step.id not in finished), None)
    return path, pending


def cmd_runs(args: argparse.Namespace) -> int:
    folder = _journal_folder()
    if args.action == "show":
        if not args.run:
            raise UsageError("runs show needs a RUN id (see 'runbook runs')", "runbook runs")
        journal = journal_module.read(journal_module.find(args.run, folder))
        for problem in journal.problems:
            _err(problem)
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
            [(x["run"], x["operator"], x["result"]) for x in summaries],
            ("RUN", "OPERATOR", "RESULT"),
        )
    )
    return ExitCode.OK


def cmd_drill(args: argparse.Namespace) -> int:
    from runbook_runner import drill as drills
    from runbook_runner.simhost.scenarios import SCENARIOS

    if args.scenario not in SCENARIOS:
        raise UsageError(
            f"--scenario {args.scenario}: no such scenario (scenarios: {', '.join(SCENARIOS)})",
            "runbook drill",
        )
    _load_named(args)  # a bad runbook name fails before anything starts
    drill = drills.start(args.scenario)
    out = console.Output(args.json)
    try:
        out.line(out.style(f"Drill: {args.scenario}", "bold") + f": {drill.scenario.teaches}.")
        out.line(
            f"A simulated 8 x RTX PRO 6000 server with 449 GiB of RAM answers over SSH on "
            f"127.0.0.1:{drill.host.port}. Nothing on this machine is touched; simulated time runs fast."
        )
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
        code, report = _execute_run(args, clock=drill.host.clock.now, sleep=drill.host.clock.sleep)
        console.debrief(
            out, report, drills.changes(drill.host.calls), drill.host.clock.now() - started
        )
        return code
    finally:
        drill.close()


def _add_host_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    sub.add_argument("--host", required=True, help="HOST, USER@HOST, or a Host of ~/.ssh/config")
    ssh = sub.add_argument_group("SSH")
    ssh.add_argument("--port", type=int, help="SSH port (default: ~/.ssh/config, else 22)")
    ssh.add_argument("--user", help="login user (default: ~/.ssh/config, else yours)")
    ssh.add_argument(
        "-i", "--identity", action="append", metavar="FILE", help="private key file (repeatable)"
    )
    ssh.add_argument(
        "--known-hosts",
        metavar="FILE",
        help="known_hosts to verify against (default ~/.ssh/known_hosts)",
    )
    ssh.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="record the key of a host not yet known (a changed key is always refused)",
    )
    ssh.add_argument(
        "--ssh-config", metavar="FILE", help="ssh_config to read (default ~/.ssh/config)"
    )
    ssh.add_argument(
        "--connect-timeout", type=float, default=10.0, metavar="SECONDS", help="default 10"
    )
    sub.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a parameter (repeatable)",
    )
    sub.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout; progress goes to stderr",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="runbook",
        description="Run executable runbooks on GPU servers over SSH, and check their state.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"runbook-runner {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, handler: Callable[[argparse.Namespace], int], help_text: str, example: str):
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=f"example:\n  {example}\n\nexit codes:\n{exitcodes.describe()}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("--runbooks", metavar="DIR", help="folder of runbook YAML files")
        sub.set_defaults(handler=handler)
        return sub

    add("list", cmd_list, "list the runbooks: name, kind, title", "runbook list")
    show = add(
        "show",
        cmd_show,
        "show a runbook: steps, commands, checks, parameters",
        "runbook show gpu-node-health",
    )
    show.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    validate = add(
        "validate",
        cmd_validate,
        "validate runbooks and print every error as FILE:LINE:COL: FIELD: MESSAGE",
        "runbook validate runbooks/",
    )
    validate.add_argument(
        "paths", nargs="*", metavar="PATH", help="files, folders or names (default: all)"
    )
    validate.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    check = add(
        "check",
        cmd_check,
        "observe a host and check a runbook's goal (read-only)",
        "runbook check gpu-node-health --host 10.1.230.174",
    )
    _add_host_options(check)
    run = add(
        "run",
        cmd_run,
        "run a runbook's steps on a host, then check its goal",
        "runbook run gpu-oom-recovery --host 10.1.230.174 --dry-run",
    )
    _add_host_options(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and every command; run only observations",
    )
    run.add_argument("--yes", action="store_true", help="do not ask before destructive steps")
    run.add_argument("--from", dest="from_step", metavar="STEP", help="start at this step id")
    run.add_argument(
        "--journal",
        metavar="FILE",
        help="write the run journal here (default: under $XDG_STATE_HOME)",
    )
    run.add_argument(
        "--resume", metavar="RUN", help="continue a run that stopped, at its first unfinished step"
    )
    run.add_argument(
        "--force", action="store_true", help="with --resume: even if the runbook file changed"
    )
    run.add_argument(
        "--break-lock", action="store_true", help="remove a stale lock left by a dead run"
    )
    run.add_argument(
        "--allow-reboot",
        action="store_true",
        help="let a step that reboots the host run (it is asked for even with --yes otherwise)",
    )
    runs = add(
        "runs",
        cmd_runs,
        "list recent runs, or show one as a timeline",
        "runbook runs show 20261130T",
    )
    runs.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    runs.add_argument(
        "run", nargs="?", metavar="RUN", help="a run id (or its beginning), with show"
    )
    runs.add_argument(
        "--markdown", action="store_true", help="a Markdown table for a postmortem timeline"
    )
    runs.add_argument(
        "--last", type=int, default=20, metavar="N", help="how many runs to list (default 20)"
    )
    drill = add(
        "drill",
        cmd_drill,
        "practise a runbook on a simulated crashed GPU server over real SSH (changes nothing here)",
        "runbook drill gpu-oom-recovery --scenario stuck-d-state",
    )
    drill.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    drill.add_argument(
        "--scenario",
        default="oom-crash",
        help="oom-crash (default), slow-teardown, persistence-blocks-reset, stuck-d-state",
    )
    drill.add_argument("--yes", action="store_true", help="do not ask before destructive steps")
    drill.add_argument("--allow-reboot", action="store_true", help="let the reboot rung run")
    drill.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="set a parameter"
    )
    drill.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help()
            return ExitCode.BAD_INPUT
        return int(args.handler(args))
    except UsageError as error:
        _err(f"{error.prog}: {error}; see '{error.prog} --help'")
        return ExitCode.BAD_INPUT
    except RunbookInvalid as error:
        for line in error.lines:
            _err(line)
        return ExitCode.BAD_INPUT
    except HostLocked as error:
        _err(
            f"runbook: {error}; wait for it to finish, or if that run is dead, re-run with --break-lock"
        )
        return ExitCode.LOCKED
    except journal_module.JournalError as error:
        _err(f"runbook: {error}")
        return ExitCode.BAD_INPUT
    except (UnknownRunbook, ParameterError) as error:
        _err(f"runbook: {error}")
        return ExitCode.BAD_INPUT
    except TransportError as error:
        _err(f"runbook: {error}" + (f"; {error.hint}" if error.hint else ""))
        return ExitCode.HOST_UNREACHABLE
    except KeyboardInterrupt:
        _err("runbook: interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (runbook show ... | head): not an error worth a traceback.
        sys.stderr.close()
        return ExitCode.OK
