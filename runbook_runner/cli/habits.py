"""What Ansible, ClusterShell and shell users type without reading, answered in their terms.

- ``-i hosts.ini``: Ansible's ``-i`` is the inventory; ours (as ssh's) is a key file. A file
  that is an inventory and not a key is refused with the option it was meant for.
- ``run --check`` / ``-C``: Ansible's dry run; ours is ``runbook plan`` (``run --dry-run``).
- ``-w NODESET``: clush's spelling of ``--hosts`` (see cli/parser.py).
- Shell completion (bash, zsh) through argcomplete: subcommands, runbook names, and the
  ``--set`` parameter names of the runbook already on the line, the ``--scenario`` names. argcomplete is imported only
  when the shell asks for completions (``_ARGCOMPLETE`` in the environment), never on a
  normal start.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import localfile
from runbook_runner.errors import RunbookRunnerError, UsageError

if TYPE_CHECKING:
    from runbook_runner.cli.request import Request, Target

_KEY_MARKS = (b"PRIVATE KEY-----", b"PuTTY-User-Key-File", b"ssh-", b"ecdsa-", b"sk-ssh-")
_INI_GROUP = re.compile(r"\[[A-Za-z0-9_.:-]+\]\Z")
_INI_HOST = re.compile(r"[A-Za-z0-9_.\[\]:-]+(\s+[A-Za-z_][A-Za-z0-9_]*=\S*)*\Z")
_YAML_KEY = re.compile(r"[A-Za-z0-9_.-]+:\s*(\{\}|null|~)?\Z")
_YAML_INVENTORY_KEY = re.compile(r"\s+(hosts|children|vars):\s*(\{\}|null|~)?\Z")


def looks_like_inventory(head: bytes) -> bool:
    """The first bytes of a file: an Ansible inventory (INI or YAML), and not an SSH key."""
    if any(mark in head[:4096] for mark in _KEY_MARKS):
        return False
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", ";"))
    ]
    if not lines:
        return False
    first = lines[0].strip()
    if _INI_GROUP.match(first):
        return True
    if first == "---" or _YAML_KEY.match(first):
        return any(_YAML_INVENTORY_KEY.match(line) for line in lines[1:])
    # Bare host lines: at least two of them, or one with a host variable (a single word
    # is as likely a damaged key file as a one-host inventory: the SSH layer names it).
    hosts = all(_INI_HOST.match(line.strip()) for line in lines)
    return hosts and (len(lines) > 1 or "=" in lines[0])


def refuse_inventory_as_identity(target: Target, prog: str) -> None:
    """``-i FILE`` where FILE is an inventory: say which option takes it (exit 2)."""
    for path in target.identity or ():
        try:
            head = localfile.read_bytes(Path(path).expanduser(), localfile.CONFIG_LIMIT)
        except OSError:
            continue  # the SSH layer says what is wrong with a key file it cannot read
        if looks_like_inventory(head):
            raise UsageError(f"-i {path}: that is an inventory: use --inventory {path}", prog)


class AnsibleCheck(argparse.Action):
    """``run --check`` / ``-C``: not a dry run of ours; recorded, then refused in cmd_run with
    the runbook's own name (see refuse_ansible_check)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=None, help=argparse.SUPPRESS)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, option_string)


def refuse_ansible_check(request: Request) -> None:
    given = request.ansible_check
    if given:
        name = request.runbook or "NAME"
        raise UsageError(
            f"{given} is Ansible's dry run: 'runbook plan {name} ...' is the dry run "
            "(the same options; it changes nothing)",
            "runbook run",
        )


# Completion ---------------------------------------------------------------------------------


def runbook_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The runbooks of the catalog the command line names (--runbooks, $RUNBOOK_PATH, ...)."""
    from runbook_runner.format.catalog import Catalog, search_path

    folders = search_path(getattr(parsed_args, "runbooks", None), os.environ)
    return [name for name in Catalog(tuple(folders)).paths() if name.startswith(prefix)]


def parameter_settings(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> dict[str, str]:
    """``NAME=`` for each parameter of the runbook already on the command line, with its
    description (zsh shows it) and default."""
    chosen = getattr(parsed_args, "runbook", None)
    if not chosen:
        return {}
    from runbook_runner.format.catalog import Catalog, search_path
    from runbook_runner.runbook import load

    folders = search_path(getattr(parsed_args, "runbooks", None), os.environ)
    try:
        runbook = load(Catalog(tuple(folders)).find(chosen))
    except (RunbookRunnerError, OSError):  # a runbook that does not load completes nothing
        return {}
    return {
        f"{name}=": f"{spec.description} (default {spec.default})"
        for name, spec in runbook.parameters.items()
        if f"{name}=".startswith(prefix)
    }


def scenario_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The rows of the scenario matrix (``drill`` also takes 'random')."""
    from runbook_runner.simhost.scenarios import SCENARIOS

    names = [*SCENARIOS, *(["random"] if getattr(parsed_args, "command", None) == "drill" else [])]
    return [name for name in names if name.startswith(prefix)]


def scenario_option(group: Any, **kwargs: Any) -> argparse.Action:
    """``--scenario`` on ``group`` (a parser or a group of one), completing the names."""
    action: argparse.Action = group.add_argument("--scenario", **kwargs)
    attach([action], scenario_names)
    return action


def complete_if_asked(parser: argparse.ArgumentParser) -> None:
    """When the shell asks for completions (argcomplete's protocol), answer and exit."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


SHELLS = ("bash", "zsh")


def shell_code(shell: str) -> str:
    """The code a shell sources to complete ``runbook``: ``eval "$(runbook completion bash)"``."""
    from argcomplete.shell_integration import shellcode

    return str(shellcode(["runbook"], shell=shell))


def cmd_completion(args: argparse.Namespace) -> int:
    print(shell_code(args.shell), end="")
    return 0


def attach(actions: Iterable[argparse.Action], completer: Any) -> None:
    for action in actions:
        action.completer = completer  # type: ignore[attr-defined]
