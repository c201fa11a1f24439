"""The ``runbook`` command: its parser, dispatch and exit codes.

The cli package is the only code that prints, prompts, or picks an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from runbook_runner import __version__, exitcodes
from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.safetext import visible

# Only what parsing the command line needs is imported here: a command imports the rest
# when it runs (`run` and `check` start connecting to the host first: see cli/connecting.py).


EPILOG = f"""\
examples:
  runbook check gpu-node-health --host 10.1.230.174
  runbook run gpu-oom-recovery --host root@10.1.230.174 --dry-run

exit codes:
{exitcodes.describe()}

Runbooks: --runbooks DIR, else $RUNBOOK_PATH, else ./runbooks, else the bundled set.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a distinct exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def _err(message: str) -> None:
    print(visible(message), file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from runbook_runner.cli import host as cli_host
    from runbook_runner.cli import render
    from runbook_runner.runbook import RunbookInvalid, load

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
        _err(f"{name}: invalid ({render.plural(count, 'error')}); see 'runbook validate {name}'")
    return ExitCode.BAD_INPUT if broken else ExitCode.OK


def cmd_show(args: argparse.Namespace) -> int:
    if args.parsers:
        from runbook_runner.observe import reference

        print(reference.text(), end="")
        return ExitCode.OK
    if not args.runbook:
        raise UsageError("show needs a runbook NAME (or --parsers)", "runbook show")
    from runbook_runner.cli import host as cli_host
    from runbook_runner.cli import render

    print(render.runbook_details(cli_host.load_named(args)))
    return ExitCode.OK


def _validation_targets(args: argparse.Namespace) -> list[Path]:
    from runbook_runner.cli import host as cli_host

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
    from runbook_runner.cli import render
    from runbook_runner.runbook import RunbookInvalid, load

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
                print(visible(line, lines=False))
            continue
        for warning in runbook.warnings:
            print(warning)
        if not args.quiet:
            print(f"{runbook.path}: ok ({render.plural(len(runbook.steps), 'step')})")
    if invalid:
        _err(
            f"{invalid} of {render.plural(len(targets), 'runbook')} invalid, "
            f"{render.plural(errors, 'error')}"
        )
        return ExitCode.BAD_INPUT
    _err(f"{render.plural(len(targets), 'runbook')} valid")
    return ExitCode.OK


# -- running against a host ------------------------------------------------------------


def _add_host_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    sub.add_argument("--host", help="HOST, USER@HOST, or a Host of ~/.ssh/config")
    sub.add_argument(
        "--local",
        action="store_true",
        help="run on this machine itself, without SSH (Slurm HealthCheckProgram, a "
        "Kubernetes DaemonSet); a destructive runbook also needs --allow-local-changes",
    )
    _add_fleet_options(sub)
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
        "-F", "--ssh-config", metavar="FILE", help="ssh_config to read (default ~/.ssh/config)"
    )
    ssh.add_argument(
        "-o",
        dest="ssh_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an ssh option, as ssh -o (repeatable; the first of a key wins): -o Port=2222",
    )
    ssh.add_argument(
        "-K",
        "--ask-become-pass",
        action="store_true",
        help="ask the sudo password once, on a terminal, for root steps on hosts whose sudo "
        "wants one (sent only to sudo -S there, never journaled)",
    )
    ssh.add_argument(
        "-J",
        dest="jump",
        metavar="[USER@]JUMP[:PORT]",
        help="reach the host through these jump hosts (comma-separated), as ssh -J",
    )
    ssh.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="default: ConnectTimeout of the ssh config, else 10",
    )
    _add_value_options(sub)


AUTO_WORKERS_FROM = 256  # hosts: from here on a check is spread over one process per core


def _add_fleet_options(sub: argparse.ArgumentParser) -> None:
    """Many hosts: node sets, an Ansible inventory, --limit; see cli/fleet.py."""
    fleet = sub.add_argument_group("many hosts")
    fleet.add_argument(
        "--hosts",
        action="append",
        metavar="NODESET",
        help="hosts as a node set: gpu[001-128], user@gpu[1-4], @group (repeatable)",
    )
    fleet.add_argument(
        "--inventory", metavar="FILE", help="an Ansible inventory (YAML or INI): hosts and groups"
    )
    fleet.add_argument(
        "--limit", metavar="PATTERN", help="narrow the hosts as Ansible does: 'gpus:!gpu3'"
    )
    fleet.add_argument(
        "--forks", type=int, default=32, metavar="N", help="hosts at once for check (default 32)"
    )
    fleet.add_argument(
        "--jsonl", action="store_true", help="one JSON line per host on stdout as each finishes"
    )
    fleet.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="check: processes sharing the hosts and --forks, past one core (default: one "
        f"per core from {AUTO_WORKERS_FROM} hosts, else 1)",
    )
    fleet.add_argument(
        "--max-hosts",
        type=int,
        default=100_000,
        metavar="N",
        help="refuse a node set or inventory naming more hosts, before expanding it "
        "(default 100000)",
    )


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
        "--gpus",
        metavar="A-B",
        help="narrow a recovery to these GPU indexes (e.g. 0-3); it only narrows: "
        "GPUs another owner or a healthy server uses are left alone without it",
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
    sub.add_argument(
        "--allow-node-wide",
        action="store_true",
        help="let a node-wide step (driver reload, reboot) run while processes that are not "
        "the subject's use the node (it stops and names them otherwise, exit 6)",
    )


SCENARIO_NAMES = "{scenarios}"


class _CommandFormatter(argparse.RawDescriptionHelpFormatter):
    """A command's help; the scenario names are looked up only when help is printed (the
    scenario matrix is not imported just to parse a command line)."""

    def _expand_help(self, action: argparse.Action) -> str:
        text = super()._expand_help(action)
        if SCENARIO_NAMES in text:
            text = text.replace(SCENARIO_NAMES, ", ".join(_scenarios()))
        return text


class _CommandsFormatter(argparse.RawDescriptionHelpFormatter):
    """A command column wide enough for "postmortem", so each command's help is one line
    (argparse sizes the column from the options only)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)
        self._action_max_length = len("    postmortem")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="runbook",
        description="Run executable runbooks on GPU servers over SSH, and check their state.",
        epilog=EPILOG,
        formatter_class=_CommandsFormatter,
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
            # The exit codes are listed once, in 'runbook --help'.
            epilog=f"example:\n  {example}\n\nexit codes: see 'runbook --help'",
            formatter_class=_CommandFormatter,
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
    show.add_argument(
        "runbook", metavar="NAME", nargs="?", help="runbook name, or a path to its YAML file"
    )
    show.add_argument(
        "--parsers", action="store_true", help="every parser and the fields it yields instead"
    )
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
        cmd_check,
        "observe a host and check a runbook's goal (read-only)",
        "runbook check gpu-node-health --hosts 'gpu[001-128]'",
    )
    _add_host_options(check)
    check.add_argument(
        "--prometheus",
        metavar="FILE",
        help="also write each host's and check's result as Prometheus gauges to FILE, for "
        "node_exporter's textfile collector (written to a temporary file, then renamed)",
    )
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
        help="print the plan and every command; run only observations (exit 6 when a "
        "destructive step is blocked because what it acts on cannot be observed)",
    )
    _add_consent_options(run)
    run.add_argument(
        "--allow-local-changes",
        action="store_true",
        help="with --local: let a destructive runbook change this machine",
    )
    run.add_argument("--from", dest="from_step", metavar="STEP", help="start at this step id")
    run.add_argument(
        "--journal",
        metavar="FILE",
        help="write the run journal here (default: under $XDG_STATE_HOME)",
    )
    run.add_argument(
        "--resume",
        metavar="RUN",
        help="continue a run that stopped: RUN is a run id (or its beginning) or the path of "
        "its journal file (--journal FILE); steps that ended are not run again, a step that "
        "was in flight is re-observed first, a finished run is refused",
    )
    run.add_argument(
        "--force", action="store_true", help="with --resume: even if the runbook file changed"
    )
    run.add_argument(
        "--break-lock", action="store_true", help="remove a stale lock left by a dead run"
    )
    run.add_argument(
        "--serial", type=int, default=1, metavar="N", help="many hosts: N at a time (default 1)"
    )
    run.add_argument(
        "--max-fail",
        type=int,
        default=1,
        metavar="K",
        help="many hosts: start no more after K failed (default 1)",
    )
    runs = add(
        "runs",
        _later("cli.host", "cmd_runs"),
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
    postmortem = add(
        "postmortem",
        _later("cli.host", "cmd_postmortem"),
        "a postmortem page under docs/postmortems/ from a run's journal",
        "runbook postmortem new --from-run 20261130T --title 'GPU 3 held after a crash'",
    )
    postmortem.add_argument("action", choices=["new"])
    postmortem.add_argument(
        "--from-run",
        required=True,
        metavar="RUN",
        help="a run id (or its beginning), or a journal file",
    )
    postmortem.add_argument("--title", help="the page's title (default: runbook, host and date)")
    postmortem.add_argument(
        "--docs",
        default="docs",
        metavar="DIR",
        help="the site's docs folder; mkdocs.yml is next to it (default: docs)",
    )
    drill = add(
        "drill",
        _later("cli.drill", "cmd_drill"),
        "practise a runbook on a simulated crashed GPU server",
        "runbook drill gpu-oom-recovery --scenario stuck-d-state",
    )
    drill.add_argument("runbook", metavar="NAME", help="runbook name, or a path to its YAML file")
    drill.add_argument(
        "--scenario",
        default="oom-crash",
        help="a scenario of the matrix (runbook_runner/simhost/scenarios.py): "
        + SCENARIO_NAMES
        + "; or 'random' to be told which only in the debrief (default: oom-crash)",
    )
    _add_consent_options(drill)
    _add_value_options(drill)
    new = add(
        "new",
        cmd_new,
        "write a runbook skeleton that validates, linked to a docs page",
        "runbook new tmp-free-space --docs pitfalls/host-memory-after-kill.md",
    )
    new.add_argument("name", metavar="NAME", help="lower-case kebab-case, e.g. tmp-free-space")
    new.add_argument(
        "--docs", metavar="PAGE", help="the docs page it belongs to (asked if omitted)"
    )
    test = add(
        "test",
        _later("cli.drill", "cmd_test"),
        "run a runbook on a simulated host in a given state",
        "runbook test gpu-oom-recovery --scenario stuck-d-state",
    )
    test.add_argument("runbook", metavar="FILE", help="a runbook's YAML file, or its name")
    given = test.add_mutually_exclusive_group()
    given.add_argument("--scenario", help="a drill scenario: " + SCENARIO_NAMES)
    given.add_argument(
        "--state", metavar="STATE.yaml", help="a YAML file describing the host (see the README)"
    )
    test.add_argument(
        "--allow-reboot", action="store_true", help="let a step that reboots the simulated host run"
    )
    test.add_argument(
        "--allow-node-wide",
        action="store_true",
        help="let a node-wide step run while processes that are not the subject's use the node",
    )
    _add_value_options(test)
    from runbook_runner.cli import sim

    sim.add_parser(add, _later("cli.sim", "cmd_sim"), SCENARIO_NAMES)
    return parser


def _scenarios() -> list[str]:
    from runbook_runner.simhost.scenarios import SCENARIOS  # no paramiko: model and text only

    return list(SCENARIOS)


def cmd_new(args: argparse.Namespace) -> int:
    """Write runbooks/NAME.yaml, link it from a docs page, and say what to run next."""
    import os

    from runbook_runner.cli import authoring
    from runbook_runner.format.catalog import search_path

    try:
        authoring.check_name(args.name)
    except authoring.AuthoringError as error:
        raise UsageError(str(error), "runbook new") from None
    folder = (
        search_path(args.runbooks, os.environ)[0]
        if args.runbooks or os.environ.get("RUNBOOK_PATH")
        else Path("runbooks")
    )
    target = folder / f"{args.name}.yaml"
    if target.exists():
        raise UsageError(f"{target} already exists; edit it, or pick another name", "runbook new")
    docs = folder.parent / "docs"
    pages = authoring.docs_pages(docs)
    page = args.docs or _ask_page(pages)
    if pages and page not in pages:
        raise UsageError(
            f"--docs {page}: no such page under {docs} (pages: {', '.join(pages)})", "runbook new"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with open(target, "x", encoding="utf-8") as handle:  # "x": never overwrite
        handle.write(authoring.skeleton(args.name, page))
    print(f"wrote {target}")
    if pages:
        title = args.name.replace("-", " ").capitalize()
        with open(docs / page, "a", encoding="utf-8") as handle:
            handle.write(authoring.docs_link(page, args.name, title))
        print(f"linked it from {docs / page}")
        _add_runbook_to_nav(folder.parent / "mkdocs.yml", args.name, title)
    print("next:")
    print(f"  runbook validate {target}")
    print(f"  runbook show {target}")
    print(f"  runbook test {target} --state STATE.yaml   # or --scenario oom-crash")
    return ExitCode.OK


def _add_runbook_to_nav(mkdocs_yml: Path, name: str, title: str) -> None:
    """List the runbook's page under the site's Runbooks nav, when the site has one."""
    from runbook_runner.kb.postmortem import add_to_nav

    if not mkdocs_yml.is_file():
        return
    try:
        nav = add_to_nav(
            mkdocs_yml.read_text(encoding="utf-8"), title, f"runbooks/{name}.md", "Runbooks"
        )
    except ValueError:
        return  # a site without a Runbooks section: its nav is the author's to arrange
    mkdocs_yml.write_text(nav, encoding="utf-8")
    print(f"added it to the nav in {mkdocs_yml}")


def _ask_page(pages: list[str]) -> str:
    if not pages:
        raise UsageError("no docs pages found: give --docs PAGE", "runbook new")
    if not sys.stdin.isatty():
        raise UsageError(
            f"which docs page does it belong to? give --docs PAGE (pages: {', '.join(pages)})",
            "runbook new",
        )
    for number, page in enumerate(pages, start=1):
        print(f"  {number}. {page}")
    answer = input("Docs page it belongs to (number): ").strip()
    if not answer.isdigit() or not 1 <= int(answer) <= len(pages):
        raise UsageError(f"{answer!r} is not one of the numbers above", "runbook new")
    return pages[int(answer) - 1]


def _later(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's handler, imported only when that command runs."""

    def handler(args: argparse.Namespace) -> int:
        command = getattr(importlib.import_module(f"runbook_runner.{module}"), name)
        return int(command(args))

    return handler


def _is_fleet(args: argparse.Namespace) -> bool:
    fleet = bool(getattr(args, "hosts", None) or getattr(args, "inventory", None))
    if fleet and getattr(args, "local", False):
        raise UsageError("--local runs on this machine: not with --hosts or --inventory", "runbook")
    return fleet


def _one_host(args: argparse.Namespace, prog: str) -> None:
    """Refuse what one --host cannot take, then start connecting to it at once, before
    the rest of the command is even imported (see cli/connecting.py)."""
    if getattr(args, "local", False):
        if args.host:
            raise UsageError("--local or --host, not both", prog)
        if getattr(args, "jsonl", False):
            raise UsageError("--jsonl is for many hosts; use --json", prog)
        from runbook_runner.local import LocalConnecting

        args.connecting = LocalConnecting()
        return
    if not args.host:
        raise UsageError("name a host: --host HOST, --hosts NODESET or --inventory FILE", prog)
    if getattr(args, "jsonl", False):
        raise UsageError("--jsonl is for many hosts (--hosts, --inventory); use --json", prog)
    from runbook_runner.cli.connecting import Connecting

    args.connecting = Connecting(args)


def _ask_become_pass(args: argparse.Namespace, prog: str) -> None:
    """-K: the sudo password, asked once before any host is reached (as ansible -K)."""
    args.become_password = None
    if not getattr(args, "ask_become_pass", False):
        return
    from runbook_runner.cli import console

    if not console.stdin_is_terminal():
        raise UsageError("-K asks the sudo password on a terminal, and stdin is not one", prog)
    args.become_password = console.Secret(console.ask_secret("BECOME password: "))


def cmd_check(args: argparse.Namespace) -> int:
    _ask_become_pass(args, "runbook check")
    if _is_fleet(args):
        from runbook_runner.cli import fleet as cli_fleet

        return cli_fleet.fleet_check(args)
    _one_host(args, "runbook check")
    from runbook_runner.cli import host as cli_host

    return cli_host.cmd_check(args)


def cmd_run(args: argparse.Namespace) -> int:
    if args.resume and (args.from_step or args.dry_run):
        # A resume continues exactly where the journal says; a dry run's "planned" steps
        # in that journal would read as decided ones.
        raise UsageError(
            "--resume continues where the run stopped: it cannot be combined with "
            + ("--from" if args.from_step else "--dry-run"),
            "runbook run",
        )
    _ask_become_pass(args, "runbook run")
    if _is_fleet(args):
        from runbook_runner.cli import fleet as cli_fleet

        return cli_fleet.fleet_run(args)
    _one_host(args, "runbook run")
    from runbook_runner.cli import host as cli_host

    return cli_host.cmd_run(args)


def entry() -> NoReturn:
    """The `runbook` command (and `python -m runbook_runner`)."""
    code = main()
    # Every object left is about to go; freezing them spares the interpreter's last garbage
    # collections a walk over all of them (a tenth of a short run). Files are still closed
    # and flushed as usual.
    gc.freeze()
    raise SystemExit(code)


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
    except KeyboardInterrupt as interrupt:
        # 130 for Ctrl-C (SIGINT); 128 + the signal for SIGTERM (143) and SIGHUP (129).
        signum = getattr(interrupt, "signum", signal.SIGINT)
        ended = getattr(interrupt, "ended_on_host", None)
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            _err(
                f"runbook: interrupted ({signal.Signals(signum).name})"
                + (
                    f"; the running command was ended on the host (process group {ended})"
                    if ended
                    else ""
                )
            )
        return 128 + int(signum)
    except Exception as error:
        code = _failed(error)
        if code is None:  # the last guard: a bug is one line and its own code
            if os.environ.get("RUNBOOK_DEBUG"):
                raise
            from runbook_runner.cli.outcomes import internal

            _err(f"runbook: {internal(error)}")
            return ExitCode.INTERNAL
        return code


def _failed(error: Exception) -> int | None:
    """Say why a command failed, in one line (a runbook's problems: one line each), and pick
    its exit code (the table in cli/outcomes.py, shared with each host of a fleet); None for
    a failure nobody planned for (a bug)."""
    from runbook_runner.cli.outcomes import failure
    from runbook_runner.runbook import RunbookInvalid

    if isinstance(error, BrokenPipeError):
        # The reader went away (runbook show ... | head): not an error worth a traceback.
        sys.stderr.close()
        return ExitCode.OK
    found = failure(error)
    if found is None:
        return None
    prefix = "" if isinstance(error, RunbookInvalid) else "runbook: "
    for line in found.lines:
        _err(prefix + line)
    return found.code
