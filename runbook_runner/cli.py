"""The ``runbook`` command: the only module that prints, prompts, or picks an exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from runbook_runner import __version__, exitcodes, render
from runbook_runner.catalog import Catalog, UnknownRunbook, search_path
from runbook_runner.exitcodes import ExitCode
from runbook_runner.runbook import ParameterError, Runbook, RunbookInvalid, load

EPILOG = f"""\
examples:
  runbook list
  runbook show gpu-oom-recovery
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
    except KeyboardInterrupt:
        _err("runbook: interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (runbook show ... | head): not an error worth a traceback.
        sys.stderr.close()
        return ExitCode.OK
