"""The ``runbook`` command: the only module that prints, prompts, or picks an exit code."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from runbook_runner import __version__, exitcodes, render
from runbook_runner.catalog import Catalog, UnknownRunbook, search_path
from runbook_runner.errors import TransportError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.runbook import (
    ParameterError,
    Runbook,
    RunbookInvalid,
    load,
    resolve_parameters,
)

if TYPE_CHECKING:  # paramiko is slow to import: only commands that reach a host load it
    from runbook_runner.runner import ConfirmRequest, Event, RunReport
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


OUTPUT_LINES = 25  # of each command's output, shown under its step


class _Output:
    """Where people read progress: stdout, or stderr when stdout carries --json."""

    def __init__(self, as_json: bool) -> None:
        self.stream: IO[str] = sys.stderr if as_json else sys.stdout
        self.tty = self.stream.isatty()
        self.style = render.Style(render.use_colour(self.stream))
        self._live = False
        self._last_live = 0.0

    def line(self, text: str = "") -> None:
        self.end_live()
        print(text, file=self.stream, flush=True)

    def live(self, text: str) -> None:
        """A line rewritten in place on a terminal; elsewhere printed every 10 s at most."""
        import time

        if self.tty:
            print(f"\r\x1b[K{text}", end="", file=self.stream, flush=True)
            self._live = True
        elif time.monotonic() - self._last_live >= 10:
            print(text, file=self.stream, flush=True)
            self._last_live = time.monotonic()

    def end_live(self) -> None:
        if self._live:
            print(file=self.stream, flush=True)
            self._live = False


def _prompt_passphrase(prompt: str) -> str | None:
    if not sys.stdin.isatty():
        return None
    return getpass.getpass(prompt)


def _connect(args: argparse.Namespace, out: _Output) -> SshTransport:
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

    return SshTransport(target, _prompt_passphrase, recorded).connect()


def _load_with_params(args: argparse.Namespace) -> tuple[Runbook, dict[str, Any]]:
    runbook = _load_named(args)
    return runbook, resolve_parameters(runbook, args.set)


def _secret_free(runbook: Runbook, params: dict[str, Any]) -> dict[str, Any]:
    return {k: ("***" if runbook.parameters[k].secret else v) for k, v in params.items()}


def _host_label(args: argparse.Namespace, transport: SshTransport) -> str:
    user = transport.login_user or "?"
    return f"{transport.target.label} as {user}"


def _report_state(out: _Output, runbook: Runbook, observed: Any, title: str) -> None:
    out.line(out.style(title, "bold"))
    out.line(render.gpu_table(runbook, observed.state))
    out.line(render.check_lines(observed.results, runbook, out.style))


def cmd_check(args: argparse.Namespace) -> int:
    from runbook_runner.runner import Runner

    runbook, params = _load_with_params(args)
    out = _Output(args.json)
    with _connect(args, out) as transport:
        out.line(f"{runbook.name} on {_host_label(args, transport)} (read-only check)")
        observed = Runner(runbook, params, transport).check_goal("now")
    ok = all(r.ok for r in observed.results)
    _report_state(out, runbook, observed, "State:")
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


class _Confirmer:
    """Asks before each destructive step, naming the host and the exact commands."""

    def __init__(self, args: argparse.Namespace, out: _Output, host: str) -> None:
        self.yes, self.out, self.host = args.yes, out, host
        self.allow_reboot = args.allow_reboot
        self.refusal: str | None = None
        self.reboot_blocked = False

    def __call__(self, request: ConfirmRequest) -> bool:
        step = request.step
        if step.reboots:
            if self.allow_reboot:
                return True
            if not sys.stdin.isatty():
                self.reboot_blocked = True
                self.refusal = (
                    f"step {step.id!r} reboots the host, which needs --allow-reboot "
                    "(or a terminal to confirm it); not rebooting"
                )
                return False
        elif self.yes:
            return True
        if not sys.stdin.isatty():
            self.refusal = (
                f"step {step.id!r} is destructive (affects {step.affects}) and needs a confirmation, "
                "but stdin is not a terminal: re-run with --yes to allow it"
            )
            return False
        self.out.line(
            self.out.style(
                f"  {step.title}: DESTRUCTIVE, affects {step.affects}, on {self.host}",
                "yellow",
                "bold",
            )
        )
        for command in request.commands:
            self.out.line(f"    $ {command}")
        try:
            answer = input("  Run it? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() in {"y", "yes"}:
            return True
        self.refusal = f"declined step {step.id!r}"
        return False


def _printer(out: _Output, runbook: Runbook) -> Callable[[Event], None]:
    from runbook_runner.runner import Reconnecting, StepDone, StepStarting, Waiting

    numbers: dict[str, tuple[int, int]] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, StepStarting):
            numbers[event.step.id] = (event.number, event.total)
        elif isinstance(event, Waiting):
            out.live(render.wait_line(event))
        elif isinstance(event, Reconnecting):
            out.live(
                f"      waiting for the host to come back: {event.elapsed_s:.0f}s of {event.timeout_s:.0f}s"
            )
        elif isinstance(event, StepDone):
            number, total = numbers.get(event.step.id, (0, len(runbook.steps)))
            if not number:
                number = [s.id for s in runbook.steps].index(event.step.id) + 1
            out.line(render.step_line(event.record, number, total, out.style))
            if event.record.status == "planned":
                for command in event.record.commands:
                    out.line(f"        would run: $ {command}")
            for result in event.record.results:
                printed = (result.stdout + result.stderr).rstrip().splitlines()
                if len(printed) > OUTPUT_LINES:
                    out.line(
                        out.style(f"        | ... {len(printed) - OUTPUT_LINES} lines above", "dim")
                    )
                for text in printed[-OUTPUT_LINES:]:
                    out.line(out.style(f"        | {text}", "dim"))

    return on_event


def _closing(out: _Output, report: RunReport, host: str, confirmer: _Confirmer) -> None:
    runbook = report.runbook
    if report.before and report.after:
        out.line(out.style("Before:", "bold"))
        out.line(render.gpu_table(runbook, report.before.state))
        out.line(out.style("After:", "bold"))
        out.line(render.gpu_table(runbook, report.after.state))
        out.line(render.check_lines(report.after.results, runbook, out.style))
    if report.declined and confirmer.reboot_blocked:
        out.line(out.style(f"goal NOT reached on {host}", "red", "bold"))
        step = next(r.id for r in report.steps if r.status == "declined")
        out.line(
            f"  next: reboot the host: runbook run {runbook.name} --host ... --from {step} --allow-reboot"
        )
    elif report.declined:
        out.line(out.style(f"stopped: {confirmer.refusal or 'declined'}", "yellow", "bold"))
    elif report.ok:
        how = (
            f"by step {report.reached_by!r}"
            if report.reached_by
            else "already; nothing needed doing"
        )
        out.line(out.style(f"goal holds on {host}: reached {how}", "green", "bold"))
    else:
        out.line(out.style(f"goal NOT reached on {host}", "red", "bold"))
        stopped = [r for r in report.steps if r.status in {"failed", "timed_out"}]
        if stopped:
            out.line(f"  last failure: step {stopped[-1].id!r}: {stopped[-1].message}")
        hints = [runbook.checks[r.name].hint for r in report.failing if runbook.checks[r.name].hint]
        if hints:
            out.line(f"  next: {hints[0]}")


def cmd_run(args: argparse.Namespace) -> int:
    from runbook_runner.runner import Runner

    runbook, params = _load_with_params(args)
    if args.from_step and args.from_step not in [s.id for s in runbook.steps]:
        raise UsageError(
            f"--from {args.from_step}: {runbook.name} has no step {args.from_step!r} "
            f"(steps: {', '.join(s.id for s in runbook.steps)})",
            "runbook run",
        )
    out = _Output(args.json)
    with _connect(args, out) as transport:
        host = _host_label(args, transport)
        mode = " (dry run: observations only, nothing changes)" if args.dry_run else ""
        out.line(f"{runbook.name} on {host}{mode}")
        confirmer = _Confirmer(args, out, host)
        runner = Runner(
            runbook, params, transport, on_event=_printer(out, runbook), confirm=confirmer
        )
        report = runner.run(from_step=args.from_step, dry_run=args.dry_run)
    _closing(out, report, host, confirmer)
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
        return ExitCode.GOAL_NOT_MET if confirmer.reboot_blocked else ExitCode.DECLINED
    if args.dry_run:
        return ExitCode.OK
    return ExitCode.OK if report.ok else ExitCode.GOAL_NOT_MET


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
        "--allow-reboot",
        action="store_true",
        help="let a step that reboots the host run (it is asked for even with --yes otherwise)",
    )
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
