"""The ``runbook`` command: the only module that prints, prompts, or picks an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from runbook_runner import __version__, cli_host, exitcodes, render
from runbook_runner import journal as journal_module
from runbook_runner.catalog import UnknownRunbook
from runbook_runner.errors import TransportError, UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.hostlock import HostLocked
from runbook_runner.parameters import ParameterError
from runbook_runner.runbook import RunbookInvalid, load

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


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a distinct exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    runbooks, broken = [], []
    for name, path in cli_host.catalog(args).paths().items():
        try:
            runbooks.append(load(path))
        except RunbookInvalid as error:
            broken.append((name, len(error.problems)))
    if not runbooks and not broken:
        folders = ", ".join(str(f) for f in cli_host.catalog(args).folders)
        _err(f"no runbooks found in {folders}")
        return ExitCode.BAD_INPUT
    print(render.runbook_list(runbooks))
    for name, count in broken:
        _err(f"{name}: invalid ({count} errors); see 'runbook validate {name}'")
    return ExitCode.BAD_INPUT if broken else ExitCode.OK


def cmd_show(args: argparse.Namespace) -> int:
    print(render.runbook_details(cli_host.load_named(args)))
    return ExitCode.OK


def _validation_targets(args: argparse.Namespace) -> list[Path]:
    catalog = cli_host.catalog(args)
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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
        for warning in runbook.warnings:
            print(warning)
        if not args.quiet:
            print(f"{runbook.path}: ok ({_plural(len(runbook.steps), 'step')})")
    if invalid:
        _err(f"{invalid} of {_plural(len(targets), 'runbook')} invalid, {_plural(errors, 'error')}")
        return ExitCode.BAD_INPUT
    _err(f"{len(targets)} runbook{'s' if len(targets) != 1 else ''} valid")
    return ExitCode.OK


# -- running against a host ------------------------------------------------------------


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
    _add_value_options(sub)


def _add_value_options(sub: argparse.ArgumentParser) -> None:
    """--set and --json: the same on check, run and drill."""
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


def _add_consent_options(sub: argparse.ArgumentParser) -> None:
    """--yes and --allow-reboot: the same on run and drill."""
    sub.add_argument("--yes", action="store_true", help="do not ask before destructive steps")
    sub.add_argument(
        "--allow-reboot",
        action="store_true",
        help="let a step that reboots the host run (it is asked for even with --yes otherwise)",
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

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help_text: str, example: str
    ) -> argparse.ArgumentParser:
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
        "validate runbooks; every error as FILE:LINE:COL: MESSAGE",
        "runbook validate runbooks/",
    )
    validate.add_argument(
        "paths", nargs="*", metavar="PATH", help="files, folders or names (default: all)"
    )
    validate.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    check = add(
        "check",
        cli_host.cmd_check,
        "observe a host and check a runbook's goal (read-only)",
        "runbook check gpu-node-health --host 10.1.230.174",
    )
    _add_host_options(check)
    run = add(
        "run",
        cli_host.cmd_run,
        "run a runbook's steps on a host, then check its goal",
        "runbook run gpu-oom-recovery --host 10.1.230.174 --dry-run",
    )
    _add_host_options(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and every command; run only observations (exit 6 when a "
        "destructive step is blocked because what it acts on cannot be observed)",
    )
    _add_consent_options(run)
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
    runs = add(
        "runs",
        cli_host.cmd_runs,
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
        cli_host.cmd_drill,
        "practise a runbook on a simulated crashed GPU server over real SSH (changes nothing here)",
        "runbook drill gpu-oom-recovery --scenario stuck-d-state",
    )
    from runbook_runner.simhost.scenarios import SCENARIOS

    drill.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    drill.add_argument(
        "--scenario",
        default="oom-crash",
        help="a scenario of the matrix (runbook_runner/simhost/scenarios.py): "
        + ", ".join(SCENARIOS)
        + "; or 'random' to be told which only in the debrief (default: oom-crash)",
    )
    _add_consent_options(drill)
    _add_value_options(drill)
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
