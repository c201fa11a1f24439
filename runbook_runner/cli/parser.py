"""The ``runbook`` command line: its parser, every command's options and help.

Part of the CLI layer (cli/). Only what parsing needs is imported here: each command's
handler is imported when that command runs (`run` and `check` start connecting to the
host first: see cli/connecting.py).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any, NoReturn

from runbook_runner import __version__, exitcodes
from runbook_runner.cli import habits
from runbook_runner.errors import UsageError

EPILOG = f"""\
examples:
  runbook plan gpu-oom-recovery --host root@10.1.230.174 --out plan.json
  runbook drill gpu-oom-recovery --scenario stuck-d-state
exit codes:
{exitcodes.describe()}

Runbooks: --runbooks DIR, else $RUNBOOK_PATH, else ./runbooks, else the bundled set.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a distinct exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def _add_host_options(sub: argparse.ArgumentParser, *, runbook_optional: bool = False) -> None:
    named = sub.add_argument(
        "runbook",
        metavar="NAME",
        nargs="?" if runbook_optional else None,
        help="runbook name, or a path to its YAML file"
        + (" (with --plan: the plan's)" if runbook_optional else ""),
    )
    habits.attach([named], habits.runbook_names)
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
        "-w",
        action="append",
        metavar="NODESET",
        help="hosts as a node set: gpu[001-128], user@gpu[1-4], @group (repeatable; -w as clush)",
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
    setting = sub.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a parameter (repeatable)",
    )
    habits.attach([setting], habits.parameter_settings)
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


def _add_plan_options(run: argparse.ArgumentParser) -> None:
    """A plan saved for review (--out), and a run that applies only it (--plan)."""
    run.add_argument(
        "--out", metavar="FILE", help="with --dry-run: save the plan for 'runbook run --plan'"
    )
    run.add_argument(
        "--plan",
        metavar="FILE",
        help="apply a saved plan: only its actions, on only its targets, after observing "
        "again (stops, exit 6, when a target moved since the plan was made); the plan names "
        "the runbook and the host",
    )
    run.add_argument(
        "--approved-by",
        metavar="NAME",
        help="with --plan: who approved it (recorded in the journal; with --allowed-signers, "
        "the signer expected)",
    )
    _add_approval_options(run)
    run.add_argument(
        "--sign-with",
        metavar="KEY",
        help="with --out: sign the saved plan (ssh-keygen -Y sign -n runbook-plan) with this "
        "SSH key, into FILE.sig",
    )


def _add_approval_options(run: argparse.ArgumentParser) -> None:
    """How a saved plan's approval is proved: one of them is needed with --plan."""
    run.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="with --plan: accept the plan signed (PLAN.sig, ssh-keygen -Y sign -n "
        "runbook-plan) by a key this OpenSSH allowed_signers file lists",
    )
    run.add_argument(
        "--approved-sha256",
        metavar="HASH",
        help="with --plan and no signature: the plan's SHA-256 as the reviewer gave it",
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
    sub.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every rung, the ones not needed too, and what read-only steps printed",
    )


SCENARIO_NAMES = "{scenarios}"
STATE_HELP = (
    "a YAML file describing the host: its keys are in docs/manual/authoring.md "
    "(step 4 of 'Add a runbook')"
)


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

    add(
        "list",
        _later("cli.runbooks", "cmd_list"),
        "list the runbooks: name, kind, title",
        "runbook list",
    )
    show = add(
        "show",
        _later("cli.runbooks", "cmd_show"),
        "show a runbook: steps, commands, checks, parameters",
        "runbook show gpu-node-health",
    )
    habits.attach(
        [
            show.add_argument(
                "runbook",
                metavar="NAME",
                nargs="?",
                help="runbook name, or a path to its YAML file",
            )
        ],
        habits.runbook_names,
    )
    show.add_argument(
        "--parsers", action="store_true", help="every parser and the fields it yields instead"
    )
    validate = add(
        "validate",
        _later("cli.runbooks", "cmd_validate"),
        "validate runbooks; every error as FILE:LINE:COL: MESSAGE",
        "runbook validate runbooks/",
    )
    validate.add_argument(
        "paths", nargs="*", metavar="PATH", help="files, folders or names (default: all)"
    )
    validate.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    check = add(
        "check",
        _later("cli", "cmd_check"),
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
        _later("cli", "cmd_run"),
        "run a runbook's steps on a host, then check its goal",
        "runbook run gpu-oom-recovery --host 10.1.230.174 --dry-run",
    )
    _add_host_options(run, runbook_optional=True)
    run.add_argument("-C", "--check", dest="ansible_check", action=habits.AnsibleCheck)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="observe once and print the plan (as 'runbook plan'): what runs first with its "
        "exact commands and targets, what runs later only if still needed, gates; the exit "
        "code is the one the run would end with",
    )
    _add_plan_options(run)
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
        "--serial",
        default="1",
        metavar="N|P%",
        help="many hosts: N hosts (or P%% of them) at a time (default 1)",
    )
    run.add_argument(
        "--max-fail",
        default="1",
        metavar="N|P%",
        help="many hosts: the breaker trips once N hosts (or P%% of them) failed: no further "
        "host starts, no host in flight starts another destructive step (default 1)",
    )
    plan = add(
        "plan",
        _later("cli", "cmd_plan"),
        "what a run would do, for review; --out saves it",
        "runbook plan gpu-oom-recovery --host 10.1.230.174 --out plan.json",
    )
    _add_host_options(plan)
    _add_consent_options(plan)
    plan.add_argument(
        "--out",
        metavar="FILE",
        help="save the plan (with the state it was made on and its SHA-256) for "
        "'runbook run --plan FILE'",
    )
    plan.add_argument(
        "--sign-with",
        metavar="KEY",
        help="sign the saved plan with this SSH key (ssh-keygen -Y sign -n runbook-plan), "
        "into FILE.sig: 'run --plan FILE --allowed-signers' checks it",
    )
    runs = add(
        "runs",
        _later("cli.runs", "cmd_runs"),
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
        _later("cli.runs", "cmd_postmortem"),
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
    habits.attach(
        [
            drill.add_argument(
                "runbook", metavar="NAME", help="runbook name, or a path to its YAML file"
            )
        ],
        habits.runbook_names,
    )
    habits.scenario_option(
        drill,
        default="oom-crash",
        help="a scenario of the matrix (runbook_runner/simhost/scenarios.py): "
        + SCENARIO_NAMES
        + "; or 'random' to be told which only in the debrief (default: oom-crash)",
    )
    _add_consent_options(drill)
    drill.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan the run would follow on this scenario, and change nothing",
    )
    drill.add_argument("--out", metavar="FILE", help="with --dry-run: save the plan")
    _add_value_options(drill)
    from runbook_runner.cli import sim

    sim.add_parser(add, _later("cli.sim", "cmd_sim"), SCENARIO_NAMES, STATE_HELP)
    _add_compare(add)
    new = add(
        "new",
        _later("cli.runbooks", "cmd_new"),
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
    habits.attach(
        [test.add_argument("runbook", metavar="FILE", help="a runbook's YAML file, or its name")],
        habits.runbook_names,
    )
    given = test.add_mutually_exclusive_group()
    habits.scenario_option(given, help="a drill scenario: " + SCENARIO_NAMES)
    given.add_argument("--state", metavar="STATE.yaml", help=STATE_HELP)
    test.add_argument(
        "--allow-reboot", action="store_true", help="let a step that reboots the simulated host run"
    )
    test.add_argument(
        "--allow-node-wide",
        action="store_true",
        help="let a node-wide step run while processes that are not the subject's use the node",
    )
    _add_value_options(test)
    # Not listed in 'runbook --help' (which fits a screen); docs/shell-completion.md tells it.
    completion = commands.add_parser(
        "completion",
        description="print the shell code that completes runbook's commands, runbook names\n"
        "and the --set names of the runbook on the line (argcomplete)",
        epilog='example:\n  eval "$(runbook completion bash)"   # ~/.bashrc; ~/.zshrc: zsh',
        formatter_class=_CommandFormatter,
    )
    completion.set_defaults(handler=_later("cli.habits", "cmd_completion"))
    completion.add_argument("shell", choices=habits.SHELLS, help="the shell: bash or zsh")
    return parser


def _scenarios() -> list[str]:
    from runbook_runner.simhost.scenarios import SCENARIOS  # no paramiko: model and text only

    return list(SCENARIOS)


def _later(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's handler, imported only when that command runs."""

    def handler(args: argparse.Namespace) -> int:
        command = getattr(importlib.import_module(f"runbook_runner.{module}"), name)
        return int(command(args))

    return handler


def _add_compare(add: Any) -> None:
    """``runbook compare`` (cli/compare.py runs it; its imports wait until it does)."""
    compare = add(
        "compare",
        _later("cli.compare", "cmd_compare"),
        "play two versions of a runbook on every scenario: what differs",
        "runbook compare gpu-oom-recovery",
    )
    compare.add_argument(
        "old", metavar="OLD", help="the runbook before the change (a YAML file), or a name"
    )
    compare.add_argument(
        "new",
        metavar="NEW",
        nargs="?",
        help="the runbook after the change; without it, OLD's file as of the last commit "
        "(git show HEAD:PATH) is compared with the working copy",
    )
    habits.scenario_option(
        compare,
        action="append",
        default=[],
        metavar="NAME",
        help="only this scenario (again for more): " + SCENARIO_NAMES,
    )
