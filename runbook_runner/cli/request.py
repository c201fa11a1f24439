"""What a command asks for, typed: built once from argparse's Namespace, at the CLI's edge.

:func:`request_of` is the one place that reads the Namespace by name (a command's parser
has only its own options: ``check`` has no ``--plan``, ``plan`` no ``--dry-run``); the rest
of the CLI reads fields of the request, each with the type it needs and the default argparse
gave. ``runbook plan`` is ``run --dry-run`` under its own name: its request says so
(:attr:`Request.dry_run`), no command rewrites another's options.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runbook_runner.plan.saved import SavedPlan
    from runbook_runner.ssh.target import PlanPin

__all__ = ["Approval", "Request", "Target", "request_of", "target_of"]


@dataclass(frozen=True)
class Target:
    """Where a command acts and how it gets there: one ``--host``, ``--local``, or many
    hosts (``--hosts``, ``--inventory``), and the SSH options."""

    host: str | None = None
    local: bool = False
    hosts: tuple[str, ...] = ()
    inventory: str | None = None
    limit: str | None = None
    forks: int = 32
    jsonl: bool = False
    workers: int = 0
    max_hosts: int = 100_000
    port: int | None = None
    user: str | None = None
    identity: tuple[str, ...] | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None
    ssh_client: str | None = "auto"
    ssh_options: tuple[str, ...] = ()
    jump: str | None = None
    connect_timeout: float | None = None
    ask_become_pass: bool = False

    @property
    def fleet(self) -> bool:
        """Many hosts: a node set or an inventory."""
        return bool(self.hosts or self.inventory)


@dataclass(frozen=True)
class Approval:
    """A plan saved for review (``--out``, signed ``--sign-with``), and one applied as it is
    (``--plan`` with its approval: ``--allowed-signers`` or ``--approved-sha256``)."""

    plan: str | None = None
    out: str | None = None
    sign_with: str | None = None
    approved_by: str | None = None
    allowed_signers: str | None = None
    approved_sha256: str | None = None


@dataclass(frozen=True)
class Request:
    """One command line, typed. Fields a command has no option for keep their defaults."""

    command: str | None
    runbook: str | None = None
    runbooks: str | None = None
    target: Target = Target()
    approval: Approval = Approval()
    settings: tuple[str, ...] = ()  # --set NAME=VALUE, in order
    gpus: str | None = None
    json: bool = False
    dry_run: bool = False
    from_step: str | None = None
    resume: str | None = None
    journal: Path | None = None
    force: bool = False
    break_lock: bool = False
    yes: bool = False
    allow_reboot: bool = False
    allow_node_wide: bool = False
    allow_local_changes: bool = False
    verbose: bool = False
    serial: str = "1"  # N or P% (fleet/rollout.py reads it)
    max_fail: str = "1"
    prometheus: str | None = None
    ansible_check: str | None = None
    scenario: str | None = None
    # run --plan FILE, once the file is read and its approval proved (cli/planfile.py):
    saved_plan: SavedPlan | None = None
    plan_approval: str | None = None  # how its approval was proved, in words
    plan_pin: PlanPin | None = None  # the host it was made on, pinned for the connection


HOST_COMMANDS = frozenset({"check", "run", "plan"})  # the commands with a target (--host ...)


def _given(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    """The option's value, or ``default`` where this command's parser has no such option."""
    return vars(args).get(name, default)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if value else ()


def target_of(args: argparse.Namespace) -> Target:
    """The target and SSH options of a command line (``Destination.from_args``'s source)."""
    identity = _given(args, "identity")
    return Target(
        host=_given(args, "host"),
        local=bool(_given(args, "local", False)),
        hosts=_strings(_given(args, "hosts")),
        inventory=_given(args, "inventory"),
        limit=_given(args, "limit"),
        forks=int(_given(args, "forks", 32)),
        jsonl=bool(_given(args, "jsonl", False)),
        workers=int(_given(args, "workers", 0)),
        max_hosts=int(_given(args, "max_hosts", 100_000)),
        port=_given(args, "port"),
        user=_given(args, "user"),
        identity=_strings(identity) if identity else None,
        known_hosts=_given(args, "known_hosts"),
        accept_new_host_key=bool(_given(args, "accept_new_host_key", False)),
        ssh_config=_given(args, "ssh_config"),
        ssh_client=_given(args, "ssh_client", "auto"),
        ssh_options=_strings(_given(args, "ssh_options")),
        jump=_given(args, "jump"),
        connect_timeout=_given(args, "connect_timeout"),
        ask_become_pass=bool(_given(args, "ask_become_pass", False)),
    )


def request_of(args: argparse.Namespace) -> Request:
    """The request of a parsed command line: read once, here (right after parse_args)."""
    command = _given(args, "command")
    journal = _given(args, "journal")
    planning = command == "plan"  # `run --dry-run` under its own name
    return Request(
        command=command,
        runbook=_given(args, "runbook"),
        runbooks=_given(args, "runbooks"),
        target=target_of(args) if command in HOST_COMMANDS else Target(),
        approval=Approval(
            plan=None if planning else _given(args, "plan"),
            out=_given(args, "out"),
            sign_with=_given(args, "sign_with"),
            approved_by=None if planning else _given(args, "approved_by"),
            allowed_signers=_given(args, "allowed_signers"),
            approved_sha256=_given(args, "approved_sha256"),
        ),
        settings=_strings(_given(args, "set")),
        gpus=_given(args, "gpus"),
        json=bool(_given(args, "json", False)),
        dry_run=planning or bool(_given(args, "dry_run", False)),
        from_step=None if planning else _given(args, "from_step"),
        resume=None if planning else _given(args, "resume"),
        journal=Path(journal) if journal and not planning else None,
        force=False if planning else bool(_given(args, "force", False)),
        break_lock=False if planning else bool(_given(args, "break_lock", False)),
        yes=False if planning else bool(_given(args, "yes", False)),
        allow_reboot=bool(_given(args, "allow_reboot", False)),
        allow_node_wide=bool(_given(args, "allow_node_wide", False)),
        allow_local_changes=bool(_given(args, "allow_local_changes", False)),
        verbose=bool(_given(args, "verbose", False)),
        serial="1" if planning else str(_given(args, "serial", "1")),
        max_fail="1" if planning else str(_given(args, "max_fail", "1")),
        prometheus=_given(args, "prometheus"),
        ansible_check=_given(args, "ansible_check"),
        scenario=_given(args, "scenario"),
    )
