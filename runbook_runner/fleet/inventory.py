"""Ansible inventories (YAML and INI) read into hosts, groups and connection variables.

Pure: text in, an :class:`Inventory` out, :class:`InventoryError` (``file:line: message``)
for anything it cannot read. Only the connection variables matter here:
``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``
(and their old ``ansible_ssh_*`` spellings), and one of ours: ``runbook_mode`` (observe, plan
or act: what a rollout may do on the host, fleet/rollout.py). Host ranges ``gpu[01:04]`` and
``node[1:9:2]`` expand as Ansible expands them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.fleet.rollout import Mode
from runbook_runner.format.yamlsource import DocumentError, load_data

ALIASES = {
    "ansible_host": "host",
    "ansible_ssh_host": "host",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_ssh_private_key_file": "identity",
    "ansible_private_key_file": "identity",
    "runbook_mode": "mode",
}


MAX_HOSTS = 100_000  # the default of --max-hosts
MAX_GROUP_DEPTH = 64  # groups nested in groups (children); Ansible has no limit, a stack has


class InventoryError(RunbookRunnerError):
    """The inventory file cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class HostVars:
    """How to reach one inventory host; None: not set (the command line or ssh_config decides)."""

    name: str
    host: str | None = None
    port: int | None = None
    user: str | None = None
    identity: str | None = None
    mode: Mode | None = None  # runbook_mode; None: act


@dataclass(frozen=True)
class Inventory:
    hosts: Mapping[str, HostVars]  # in the order the file names them
    groups: Mapping[str, frozenset[str]]  # every group, children folded in; "all" included
    source: str = ""

    def group(self, name: str) -> frozenset[str]:
        return self.groups.get(name, frozenset())


@dataclass
class _Builder:
    """Groups, their children and variables as read; folded into an Inventory at the end."""

    source: str
    max_hosts: int = MAX_HOSTS
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> its own vars
    members: dict[str, dict[str, None]] = field(default_factory=dict)  # group -> direct hosts
    children: dict[str, list[str]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def group(self, name: str) -> None:
        self.members.setdefault(name, {})
        self.children.setdefault(name, [])
        self.group_vars.setdefault(name, {})

    @property
    def room(self) -> int:
        """How many more hosts may be added before --max-hosts is passed."""
        return self.max_hosts - len(self.hosts)

    def add_host(self, group: str, name: str, variables: Mapping[str, Any]) -> None:
        if name not in self.hosts and self.room <= 0:
            raise InventoryError(
                f"{self.source}: more than {self.max_hosts:,} hosts (--max-hosts): split the "
                "inventory, or raise --max-hosts"
            )
        self.group(group)
        self.hosts.setdefault(name, {}).update(variables)
        self.members[group][name] = None

    def build(self) -> Inventory:
        self.group("all")
        has_parent = {child for kids in self.children.values() for child in kids}
        for name in list(self.members):
            if name != "all" and name not in has_parent:
                self.children["all"].append(name)
        closure = self._closure()  # first: it refuses a chain of groups too deep or a cycle
        depth = self._depths()
        groups = {name: frozenset(closure[name]) for name in self.members}
        groups["all"] = frozenset(self.hosts)
        member_of: dict[str, list[str]] = {}  # host -> its groups but all and ungrouped
        for group, members in groups.items():
            if group not in {"all", "ungrouped"}:
                for host in members:
                    member_of.setdefault(host, []).append(group)
        groups["ungrouped"] = frozenset(h for h in self.hosts if h not in member_of)
        hosts: dict[str, HostVars] = {}
        for name, own in self.hosts.items():
            merged: dict[str, Any] = {}
            in_groups = {*member_of.get(name, ()), "all"}
            if name not in member_of:
                in_groups.add("ungrouped")
            for group in sorted(in_groups, key=lambda g: (depth.get(g, 0), g)):
                merged.update(self.group_vars.get(group, {}))
            merged.update(own)
            hosts[name] = _host_vars(name, merged, self.source)
        return Inventory(hosts, groups, self.source)

    def _closure(self) -> dict[str, set[str]]:
        """Each group's hosts, its children's folded in; without recursion (an inventory may
        chain groups 100,000 deep), a chain deeper than MAX_GROUP_DEPTH or a cycle refused."""
        closure: dict[str, set[str]] = {}
        for root in self.members:
            if root in closure:
                continue
            stack = [(root, iter(self.children.get(root, [])))]
            on_path = {root}
            while stack:
                group, kids = stack[-1]
                child = next(kids, None)
                if child is None:
                    found = set(self.members.get(group, []))
                    for kid in self.children.get(group, []):
                        found |= closure[kid]
                    closure[group] = found
                    stack.pop()
                    on_path.discard(group)
                elif child in on_path:
                    raise InventoryError(f"{self.source}: group {child!r} is its own child")
                elif child not in closure:
                    if len(stack) >= MAX_GROUP_DEPTH:
                        raise InventoryError(
                            f"{self.source}: groups nested more than {MAX_GROUP_DEPTH} levels "
                            f"deep (at {child[:60]!r})"
                        )
                    stack.append((child, iter(self.children.get(child, []))))
                    on_path.add(child)
        return closure

    def _has_parent(self, name: str) -> bool:
        return any(name in kids for kids in self.children.values())

    def _depths(self) -> dict[str, int]:
        depth = {"all": 0}
        pending = ["all"]
        while pending:
            parent = pending.pop()
            for child in self.children.get(parent, []):
                if depth.get(child, -1) < depth[parent] + 1 and depth[parent] < len(self.members):
                    depth[child] = depth[parent] + 1
                    pending.append(child)
        return depth


def _host_vars(name: str, variables: Mapping[str, Any], source: str) -> HostVars:
    values: dict[str, Any] = {}
    for key, value in variables.items():
        field_name = ALIASES.get(key)
        if field_name is None or value is None:
            continue
        values[field_name] = value
    port = values.get("port")
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise InventoryError(
                f"{source}: host {name}: ansible_port {port!r} is not a number"
            ) from None
        if not 0 < port < 65536:
            raise InventoryError(f"{source}: host {name}: ansible_port {port} is out of range")
    mode = values.get("mode")
    if mode is not None and str(mode) not in {m.value for m in Mode}:
        raise InventoryError(
            f"{source}: host {name}: runbook_mode {str(mode)[:40]!r} is not one of "
            "observe, plan, act"
        )
    return HostVars(
        name=name,
        host=str(values["host"]) if "host" in values else None,
        port=port,
        user=str(values["user"]) if "user" in values else None,
        identity=str(values["identity"]) if "identity" in values else None,
        mode=Mode(str(mode)) if mode is not None else None,
    )


_RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")


def _range_values(match: re.Match[str], where: str) -> range:
    """The values of one ``[01:04]`` / ``[a:f]`` / ``[1:9:2]`` range, not yet made names."""
    start, end, stride = match.group(1), match.group(2), int(match.group(3) or 1)
    if stride < 1:
        raise InventoryError(f"{where}: host range {match.group()!r} has a step below 1")
    if start.isdigit() and end.isdigit():
        values = range(int(start), int(end) + 1, stride)
    elif len(start) == 1 and len(end) == 1 and start.isalpha() and end.isalpha():
        values = range(ord(start), ord(end) + 1, stride)
    else:
        raise InventoryError(
            f"{where}: host range {match.group()!r} is neither numeric nor one letter to one letter"
        )
    if not values:
        raise InventoryError(f"{where}: host range {match.group()!r} is empty")
    return values


def expand_host_pattern(pattern: str, where: str, room: int = MAX_HOSTS) -> list[str]:
    """``gpu[01:04]`` -> gpu01..gpu04, as Ansible expands inventory host ranges; a pattern
    naming more than ``room`` hosts is refused, counted before it is expanded."""
    named = 1
    for match in _RANGE.finditer(pattern):
        named *= len(_range_values(match, where))
    if named > 1 and named > room:  # one name: add_host says it
        raise InventoryError(
            f"{where}: host range {pattern[:80]!r} names {named:,} hosts, more than the "
            f"{room:,} left under --max-hosts: split the inventory, or raise --max-hosts"
        )
    return _expand(pattern, where)


def _expand(pattern: str, where: str) -> list[str]:
    match = _RANGE.search(pattern)
    if match is None:
        return [pattern]
    start = match.group(1)
    head, tail = pattern[: match.start()], pattern[match.end() :]
    numbers = _range_values(match, where)
    if start.isdigit():
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        values = [str(i).zfill(width) for i in numbers]
    else:
        values = [chr(c) for c in numbers]
    return [name for value in values for name in _expand(head + value + tail, where)]


# -- YAML ---------------------------------------------------------------------------------------


def parse_yaml(text: str, source: str, max_hosts: int = MAX_HOSTS) -> Inventory:
    try:
        # The runbook loader's bounds (depth, values, digits, duplicate keys, NUL).
        document = load_data(text, source)
    except DocumentError as problem:
        if "YAML syntax error" not in str(problem):
            raise InventoryError(str(problem)) from None
        try:
            yaml.safe_load(text)  # a syntax error, in PyYAML's own words
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{source}:{mark.line + 1}" if mark is not None else source
            raise InventoryError(
                f"{where}: not valid YAML ({getattr(error, 'problem', None) or error})"
            ) from None
        raise InventoryError(str(problem)) from None
    builder = _Builder(source, max_hosts)
    if document is None:
        return builder.build()
    if not isinstance(document, dict):
        raise InventoryError(f"{source}: an inventory is a mapping of groups (all: hosts: ...)")
    for name, body in document.items():
        _yaml_group(builder, str(name), body)
    return builder.build()


def _yaml_group(builder: _Builder, name: str, body: Any) -> None:
    where = f"{builder.source}: group {name}"
    builder.group(name)
    if body is None:
        return
    if not isinstance(body, dict):
        raise InventoryError(f"{where}: expected a mapping with hosts, children or vars")
    unknown = set(body) - {"hosts", "children", "vars"}
    if unknown:
        raise InventoryError(f"{where}: unknown key {sorted(unknown)[0]!r} (hosts, children, vars)")
    hosts = body.get("hosts") or {}
    if not isinstance(hosts, dict):
        raise InventoryError(f"{where}: hosts is a mapping of host names")
    for pattern, variables in hosts.items():
        if variables is not None and not isinstance(variables, dict):
            raise InventoryError(f"{where}: host {pattern}: variables are a mapping")
        for host in expand_host_pattern(str(pattern), where, builder.room):
            builder.add_host(name, host, variables or {})
    group_vars = body.get("vars") or {}
    if not isinstance(group_vars, dict):
        raise InventoryError(f"{where}: vars is a mapping")
    builder.group_vars[name].update(group_vars)
    children = body.get("children") or {}
    if not isinstance(children, dict):
        raise InventoryError(f"{where}: children is a mapping of groups")
    for child, child_body in children.items():
        if str(child) not in builder.children[name]:
            builder.children[name].append(str(child))
        _yaml_group(builder, str(child), child_body)


# -- INI ----------------------------------------------------------------------------------------


def _ini_value(text: str) -> Any:
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    return text


def _key_values(tokens: list[str], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for token in tokens:
        key, equals, value = token.partition("=")
        if not equals or not key:
            raise InventoryError(f"{where}: expected NAME=VALUE, found {token!r}")
        values[key] = _ini_value(value)
    return values


def parse_ini(text: str, source: str, max_hosts: int = MAX_HOSTS) -> Inventory:
    builder = _Builder(source, max_hosts)
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[([^\]:]+)(?::(\w+))?\]", line)
        if header:
            section, kind = header.group(1).strip(), header.group(2) or "hosts"
            if kind not in {"hosts", "vars", "children"}:
                raise InventoryError(f"{where}: unknown section kind :{kind} (vars, children)")
            builder.group(section)
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as error:
            raise InventoryError(f"{where}: {error}") from None
        if not tokens:
            continue
        if kind == "hosts":
            variables = _key_values(tokens[1:], where)
            for host in expand_host_pattern(tokens[0], where, builder.room):
                builder.add_host(section, host, variables)
        elif kind == "vars":
            builder.group_vars[section].update(_key_values(tokens, where))
        else:
            if len(tokens) != 1:
                raise InventoryError(f"{where}: a :children section lists one group a line")
            builder.group(tokens[0])
            if tokens[0] not in builder.children[section]:
                builder.children[section].append(tokens[0])
    return builder.build()


def parse(text: str, source: str, max_hosts: int = MAX_HOSTS) -> Inventory:
    """YAML when the file says so (.yml/.yaml, or a first line that reads like YAML), else INI."""
    first = next(
        (
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ),
        "",
    )
    if (
        source.endswith((".yml", ".yaml"))
        or first == "---"
        or re.fullmatch(r"[\w.-]+:\s*(#.*)?", first)
    ):
        return parse_yaml(text, source, max_hosts)
    return parse_ini(text, source, max_hosts)
