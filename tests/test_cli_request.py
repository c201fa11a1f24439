"""The command line typed once (cli/request.py): every command's parsed arguments become a
request, with the types and defaults the rest of the CLI reads; and the Namespace is read by
name (getattr/setattr) in fewer and fewer places of cli/."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from runbook_runner.cli.connecting import Destination
from runbook_runner.cli.parser import build_parser
from runbook_runner.cli.request import Approval, Request, Target, request_of

CLI = Path(__file__).resolve().parent.parent / "runbook_runner" / "cli"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def _example(sub: argparse.ArgumentParser) -> list[str]:
    """The command line of a command's 'example:' in its --help, without 'runbook'."""
    line = (sub.epilog or "").split("\n")[1].split("#")[0]
    words = shlex.split(line)
    if words[0] == "eval":  # completion: eval "$(runbook completion bash)"
        words = shlex.split(words[1].strip("$()"))
    assert words[0] == "runbook", line
    return words[1:]


def test_every_command_has_an_example_that_parses_into_a_request():
    commands = _commands()
    assert {"check", "run", "plan", "drill", "test", "list", "completion"} <= set(commands)
    for name, sub in commands.items():
        argv = _example(sub)
        assert argv[0] == name
        request = request_of(build_parser().parse_args(argv))
        assert isinstance(request, Request)
        assert request.command == name


TYPICAL = [
    "check gpu-node-health --host root@10.0.0.5 -o Port=2222 -J bastion --connect-timeout 5",
    "check gpu-node-health --inventory hosts.ini --limit 'gpus:!gpu3' --forks 8 --jsonl",
    "check gpu-node-health --local --json --prometheus /tmp/node.prom",
    "run gpu-oom-recovery --host gpu1 --yes --allow-reboot --journal /tmp/j.jsonl --from kill",
    "run --plan plan.json --allowed-signers signers --approved-by alice",
    "run gpu-oom-recovery --hosts 'gpu[1-4]' --serial 2 --max-fail 3 --set port=30001",
    "run gpu-oom-recovery --host gpu1 --resume 20261130T --force --break-lock -K",
    "run gpu-oom-recovery --host gpu1 --dry-run --out plan.json --sign-with ~/.ssh/id_ed25519",
    "plan gpu-oom-recovery --host gpu1 --out plan.json --gpus 0-3 -v",
    "drill gpu-oom-recovery --scenario stuck-d-state --dry-run --allow-node-wide",
    "test gpu-oom-recovery --state state.yaml --allow-reboot",
]


@pytest.mark.parametrize("line", TYPICAL)
def test_a_typical_command_line_parses_into_a_request(line):
    request = request_of(build_parser().parse_args(shlex.split(line)))
    assert request.command == line.split()[0]


def test_the_target_and_ssh_options_are_typed():
    args = build_parser().parse_args(
        shlex.split(
            "check gpu-node-health --host root@10.0.0.5 --port 2200 -i k1 -i k2 "
            "-o Port=2222 -o User=x -J bastion --connect-timeout 5 --accept-new-host-key"
        )
    )
    target = request_of(args).target
    assert target == Target(
        host="root@10.0.0.5",
        port=2200,
        identity=("k1", "k2"),
        ssh_options=("Port=2222", "User=x"),
        jump="bastion",
        connect_timeout=5.0,
        accept_new_host_key=True,
    )
    assert not target.fleet
    to = Destination.of(target)
    assert (to.host, to.port, to.identity, to.ssh_options, to.jump, to.connect_timeout) == (
        "root@10.0.0.5",
        2200,
        ("k1", "k2"),
        ("Port=2222", "User=x"),
        "bastion",
        5.0,
    )
    assert Destination.from_args(args) == to


def test_many_hosts_are_a_fleet_target():
    args = build_parser().parse_args(
        shlex.split("check gpu-node-health -w 'gpu[1-4]' -w gpu9 --forks 8 --max-hosts 10")
    )
    target = request_of(args).target
    assert target.fleet
    assert (target.hosts, target.forks, target.max_hosts) == (("gpu[1-4]", "gpu9"), 8, 10)


def test_plan_is_a_dry_run_whose_request_says_so():
    """`runbook plan` is `run --dry-run`: its request has the run's fields, as a dry run,
    built from plan's own options (its parser has no --dry-run, --plan or --serial)."""
    args = build_parser().parse_args(
        shlex.split("plan gpu-oom-recovery --host gpu1 --out p.json --sign-with key --yes")
    )
    request = request_of(args)
    assert request.dry_run
    assert request.approval == Approval(out="p.json", sign_with="key")
    assert (request.yes, request.serial, request.max_fail, request.journal) == (
        False,
        "1",
        "1",
        None,
    )
    assert (request.from_step, request.resume, request.force, request.break_lock) == (
        None,
        None,
        False,
        False,
    )


def test_run_defaults_are_argparse_defaults():
    request = request_of(build_parser().parse_args(["run", "gpu-oom-recovery", "--host", "h"]))
    assert not request.dry_run
    assert request.approval == Approval()
    assert (request.serial, request.max_fail, request.settings, request.journal) == (
        "1",
        "1",
        (),
        None,
    )
    journaled = request_of(
        build_parser().parse_args(
            ["run", "gpu-oom-recovery", "--host", "h", "--journal", "j.jsonl", "--set", "a=1"]
        )
    )
    assert journaled.journal == Path("j.jsonl")
    assert journaled.settings == ("a=1",)


def test_a_saved_plans_approval_is_typed():
    request = request_of(
        build_parser().parse_args(
            shlex.split("run --plan p.json --approved-sha256 abc --approved-by bob")
        )
    )
    assert request.runbook is None  # the plan names it (cli/planfile.py)
    assert request.approval == Approval(plan="p.json", approved_by="bob", approved_sha256="abc")


# The Namespace read or written by name in cli/: only ever fewer (cli/request.py's
# request_of is the one place that reads it; see issue 32, item 6).
NAMESPACE_BY_NAME = 0


def test_the_namespace_is_read_by_name_in_ever_fewer_places():
    pattern = re.compile(r"\b(?:getattr|setattr)\(args\b")
    found = [
        f"{path.name}:{number}"
        for path in sorted(CLI.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for _ in pattern.finditer(line)
    ]
    assert len(found) <= NAMESPACE_BY_NAME, found
    assert len(found) == NAMESPACE_BY_NAME, (
        f"down to {len(found)}: lower NAMESPACE_BY_NAME to it",
        found,
    )
    assert not [
        f for f in found if f.split(":")[0] in {"__init__.py", "connecting.py", "planfile.py"}
    ]
