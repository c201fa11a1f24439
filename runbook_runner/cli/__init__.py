"""The ``runbook`` command: dispatch and exit codes (its parser: cli/parser.py).

The cli package is the only code that prints, prompts, or picks an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from runbook_runner.cli import habits
from runbook_runner.cli.parser import AUTO_WORKERS_FROM, build_parser
from runbook_runner.cli.request import Request, Target, request_of
from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.safetext import visible

# Only what parsing the command line needs is imported here: a command imports the rest
# when it runs (`run` and `check` start connecting to the host first: see cli/connecting.py).

__all__ = ["AUTO_WORKERS_FROM", "build_parser", "entry", "main"]


def _err(message: str) -> None:
    print(visible(message), file=sys.stderr)


def _is_fleet(target: Target) -> bool:
    if target.fleet and target.local:
        raise UsageError("--local runs on this machine: not with --hosts or --inventory", "runbook")
    return target.fleet


def _one_host(args: argparse.Namespace, request: Request, prog: str) -> None:
    """Refuse what one --host cannot take, then start connecting to it at once, before
    the rest of the command is even imported (see cli/connecting.py)."""
    target = request.target
    if target.local:
        if target.host:
            raise UsageError("--local or --host, not both", prog)
        if target.jsonl:
            raise UsageError("--jsonl is for many hosts; use --json", prog)
        from runbook_runner.local import LocalConnecting

        args.connecting = LocalConnecting()
        return
    if not target.host:
        raise UsageError("name a host: --host HOST, --hosts NODESET or --inventory FILE", prog)
    if target.jsonl:
        raise UsageError("--jsonl is for many hosts (--hosts, --inventory); use --json", prog)
    from runbook_runner.cli.connecting import Connecting, Destination

    args.connecting = Connecting(
        Destination.of(target, become=args.become_password, plan_pin=request.plan_pin)
    )


def _ask_become_pass(args: argparse.Namespace, request: Request, prog: str) -> None:
    """-K: the sudo password, asked once before any host is reached (as ansible -K)."""
    args.become_password = None
    if not request.target.ask_become_pass:
        return
    from runbook_runner.cli import console

    if not console.stdin_is_terminal():
        raise UsageError("-K asks the sudo password on a terminal, and stdin is not one", prog)
    args.become_password = console.Secret(console.ask_secret("BECOME password: "))


def cmd_check(args: argparse.Namespace) -> int:
    request = request_of(args)
    habits.refuse_inventory_as_identity(request.target, "runbook check")
    _ask_become_pass(args, request, "runbook check")
    if _is_fleet(request.target):
        from runbook_runner.cli.connecting import become_password
        from runbook_runner.cli.fleet_check import fleet_check

        return fleet_check(request, become_password(args))
    _one_host(args, request, "runbook check")
    from runbook_runner.cli import host as cli_host

    return cli_host.cmd_check(args, request)


def cmd_plan(args: argparse.Namespace) -> int:
    """``runbook plan``: ``run --dry-run`` under its own name (its request says so)."""
    return _run(args, request_of(args))


def cmd_run(args: argparse.Namespace) -> int:
    return _run(args, request_of(args))


def _run(args: argparse.Namespace, request: Request) -> int:
    habits.refuse_ansible_check(request)
    habits.refuse_inventory_as_identity(request.target, f"runbook {request.command or 'run'}")
    approval = request.approval
    if approval.out and _is_fleet(request.target):
        raise UsageError(
            "--out saves one host's plan: name one --host (a fleet's plans are in --json)",
            "runbook run",
        )
    if approval.out and not request.dry_run:
        raise UsageError(
            "--out saves a plan: use it with --dry-run (or 'runbook plan')", "runbook run"
        )
    if approval.plan and (request.dry_run or request.from_step or request.resume):
        raise UsageError(
            "--plan applies a saved plan as it is: not with --dry-run, --from or --resume",
            "runbook run",
        )
    if approval.plan:
        if _is_fleet(request.target):
            raise UsageError(
                "a saved plan is for the one host it was made on: not with --hosts or --inventory",
                "runbook run",
            )
        # ``run --plan FILE`` names the runbook and the host the plan was made for unless
        # the command line does (a different one is refused once the runbook is loaded). The
        # file is read, checked and its approval proved here, before anything connects.
        from runbook_runner.cli import planfile

        request = planfile.read(request)
    elif request.resume and not _is_fleet(request.target):
        from runbook_runner.cli import planfile

        request = planfile.resumed(request)  # a plan's run resumes under the same proof
        approval = request.approval
    if not request.runbook:
        raise UsageError(
            f"--plan {approval.plan}: not a plan (it names no runbook); make one with "
            "'runbook plan ... --out FILE'"
            if approval.plan
            else "name a runbook (or give --plan FILE)",
            "runbook run",
        )
    if approval.approved_by and not approval.plan:
        raise UsageError(
            "--approved-by names who approved a saved plan: use it with --plan", "runbook run"
        )
    for flag, given in (
        ("allowed-signers", approval.allowed_signers),
        ("approved-sha256", approval.approved_sha256),
    ):
        if given and not approval.plan:
            raise UsageError(
                f"--{flag} proves a saved plan's approval: use it with --plan", "runbook run"
            )
    if approval.sign_with and not approval.out:
        raise UsageError("--sign-with signs the plan --out saves: give --out FILE", "runbook run")
    if request.resume and (request.from_step or request.dry_run):
        # A resume continues exactly where the journal says; a dry run's "planned" steps
        # in that journal would read as decided ones.
        raise UsageError(
            "--resume continues where the run stopped: it cannot be combined with "
            + ("--from" if request.from_step else "--dry-run"),
            "runbook run",
        )
    _ask_become_pass(args, request, "runbook run")
    if _is_fleet(request.target):
        from runbook_runner.cli.connecting import become_password
        from runbook_runner.cli.fleet_run import fleet_run

        return fleet_run(request, become_password(args))
    _one_host(args, request, "runbook run")
    from runbook_runner.cli import host as cli_host

    return cli_host.cmd_run(args, request)


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
    habits.complete_if_asked(parser)  # only when the shell asks (argcomplete's protocol)
    try:
        args = parser.parse_args(argv)
        if args.command is None:  # every command has its handler
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
