"""Which hosts: node sets (ClusterShell), groups, an inventory, and an Ansible-like --limit.

Pure apart from ClusterShell's own group configuration (read when ``@group`` is used
without an inventory). Node sets are parsed and folded by the ClusterShell library.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import regex
from ClusterShell.NodeSet import STD_GROUP_RESOLVER, NodeSet, NodeSetException
from ClusterShell.NodeUtils import (
    GroupResolver,
    GroupResolverError,
    GroupSource,
    GroupSourceError,
)

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.fleet.inventory import HostVars, Inventory
from runbook_runner.fleet.rollout import Mode


class SelectionError(RunbookRunnerError):
    """A node set, group or --limit pattern that cannot be used."""


@dataclass(frozen=True)
class FleetHost:
    """One selected host: its name (for summaries), and what the selection says about reaching it."""

    name: str
    user: str | None = None  # from USER@nodeset, or the inventory's ansible_user
    address: str | None = (
        None  # the inventory's ansible_host: connect there, ssh_config applies to it
    )
    port: int | None = None
    identity: str | None = None
    mode: Mode = Mode.ACT  # the inventory's runbook_mode: observe, plan or act


MAX_HOSTS = 100_000  # the default of --max-hosts
LIMIT_REGEX_S = 2.0  # all of one --limit ~regex's searches together; each gives up sooner
LIMIT_REGEX_EACH_S = 0.25  # as the runbook's own matches() (format/expr.py)

_USER = re.compile(r"^([^@\[\],!&^]+)@(.+)$")
_GROUP = re.compile(r"@([\w.:-]+)")


def _resolver(inventory: Inventory | None) -> Any:
    if inventory is None:
        return STD_GROUP_RESOLVER
    groups = {name: fold(sorted(hosts)) for name, hosts in inventory.groups.items() if hosts}
    return GroupResolver(GroupSource("inventory", groups))


def _top_level_terms(text: str) -> list[tuple[str, str]]:
    """A node-set expression's (operator, term) pairs: split at ``,``, ``!``, ``&`` and ``^``
    outside brackets; the first term's operator is ``,``."""
    terms, depth, start, operator = [], 0, 0, ","
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and char in ",!&^":
            terms.append((operator, text[start:index].strip()))
            start, operator = index + 1, char
    terms.append((operator, text[start:].strip()))
    return [(op, term) for op, term in terms if term]


def _range_size(body: str) -> int:
    """How many values ``1-100,200-300/2`` names; a piece that does not read counts 1
    (ClusterShell says what is wrong with it)."""
    total = 0
    for piece in body.split(","):
        bounds, _, step_text = piece.strip().partition("/")
        first, dash, last = bounds.partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
            step = int(step_text) if step_text else 1
        except ValueError:
            total += 1
            continue
        total += (high - low) // step + 1 if high >= low and step > 0 else 1
    return total


def count(text: str, inventory: Inventory | None = None) -> int:
    """The most hosts a node set names, counted from its text without expanding it (which
    ClusterShell does, one Python object per host): each term's bracket ranges multiplied,
    the terms joined by ``,`` or ``^`` added (those after ``!`` or ``&`` only take hosts away:
    an upper bound); ``@group``: its size in the inventory."""
    total = 0
    for operator, term in _top_level_terms(text):
        if operator in "!&":
            continue
        if term.startswith("@"):
            name = term[1:]
            total += len(inventory.groups.get(name, ())) if inventory is not None else 0
            continue
        size = 1
        for body in re.findall(r"\[([^\[\]]*)\]", term):
            size *= _range_size(body)
        total += size
    return total


def expand(
    spec: str, inventory: Inventory | None = None, max_hosts: int = MAX_HOSTS
) -> tuple[str | None, list[str]]:
    """``user@gpu[1-4]`` -> ("user", [gpu1, ..., gpu4]); ``@group`` from the inventory or
    ClusterShell's groups configuration. Node-set operators (``!``, ``&``, ``^``) work.
    A node set naming more than ``max_hosts`` is refused before it is expanded."""
    failures = (NodeSetException, GroupResolverError, GroupSourceError)
    text = spec.strip()
    user = None
    match = _USER.match(text)
    if match:
        user, text = match.group(1), match.group(2)
    if not text:
        raise SelectionError(f"--hosts {spec!r}: no hosts named")
    named = count(text, inventory)
    if named > max_hosts:
        raise SelectionError(
            f"--hosts {_short(spec)}: names up to {named:,} hosts, more than --max-hosts "
            f"{max_hosts:,}; split the fleet, or raise --max-hosts"
        )
    resolver = _resolver(inventory)
    for group in _GROUP.findall(text):
        try:
            found = NodeSet(f"@{group}", resolver=resolver)
        except failures as error:
            raise SelectionError(f"--hosts {spec!r}: group @{group}: {error}") from None
        if len(found) == 0:
            where = (
                f"inventory {inventory.source} (groups: {', '.join(sorted(inventory.groups))})"
                if inventory is not None
                else "ClusterShell's groups configuration (give --inventory FILE for Ansible groups)"
            )
            raise SelectionError(f"--hosts {spec!r}: no group @{group} with hosts in {where}")
    try:
        nodes = NodeSet(text, resolver=resolver)
    except failures as error:
        raise SelectionError(f"--hosts {spec!r}: {error}") from None
    return user, list(nodes)


def fold(names: Iterable[str]) -> str:
    """Host names folded as a node set (``gpu[001-120,122-128]``); plain commas if they do not fold."""
    listed = list(names)
    quick = _fold_numbered(listed)
    if quick is not None:  # what ClusterShell says, in a tenth of a second for 100,000 names
        return quick
    try:
        return str(NodeSet.fromlist(listed))
    except (NodeSetException, ValueError, TypeError):
        return ",".join(listed)


_NUMBERED = re.compile(r"([A-Za-z_.-]*)([0-9]+)")


def _fold_numbered(names: Sequence[str]) -> str | None:
    """ClusterShell's fold of names that are each a digit-free prefix and one number, with
    one padding per prefix (``gpu007``, or ``gpu7`` without zeros); None for any other
    (ClusterShell folds those itself: slower past ten thousand names)."""
    by_prefix: dict[str, set[str]] = {}
    for name in names:
        found = _NUMBERED.fullmatch(name)
        if found is None:
            return None
        by_prefix.setdefault(found.group(1), set()).add(found.group(2))
    parts: list[str] = []
    for prefix in sorted(by_prefix):
        digits = by_prefix[prefix]
        widths = {len(d) for d in digits}
        padded = any(len(d) > 1 and d.startswith("0") for d in digits)
        if padded and len(widths) > 1:
            return None
        width = widths.pop() if padded else 0
        numbers = sorted(int(d) for d in digits)
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges: list[str] = []
        first = last = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == last + 1:
                last = number
                continue
            ranges.append(
                f"{first:0{width}d}" if first == last else f"{first:0{width}d}-{last:0{width}d}"
            )
            if number is not None:
                first = last = number
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _pattern_terms(pattern: str) -> list[str]:
    return [term.strip() for term in re.split(r"[:,]", pattern) if term.strip()]


def _term_hosts(term: str, universe: Sequence[str], inventory: Inventory | None) -> set[str]:
    if inventory is not None and term in inventory.groups:
        return set(inventory.groups[term]) & set(universe)
    if term.startswith("~"):
        return _regex_hosts(term, universe)
    found = {h for h in universe if fnmatch.fnmatchcase(h, term)}
    if inventory is not None:
        for group, members in inventory.groups.items():
            if fnmatch.fnmatchcase(group, term) and any(c in term for c in "*?["):
                found |= set(members) & set(universe)
    return found


def _regex_hosts(term: str, universe: Sequence[str]) -> set[str]:
    """``~regex``: searched in each name with a timeout, as the runbook's own matches() is
    (Python's ``re`` cannot be stopped: ``(a|aa)+$`` on a long name backtracks for minutes)."""
    try:
        pattern = regex.compile(term[1:])
    except (regex.error, re.error) as error:
        raise SelectionError(f"--limit {_short(term)}: not a regular expression: {error}") from None
    deadline = time.monotonic() + LIMIT_REGEX_S
    found = set()
    for host in universe:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            if pattern.search(host, timeout=min(LIMIT_REGEX_EACH_S, left)) is not None:
                found.add(host)
        except TimeoutError:
            raise SelectionError(
                f"--limit {_short(term)}: the regular expression takes too long (over "
                f"{LIMIT_REGEX_EACH_S:g}s on {host[:40]!r}, or {LIMIT_REGEX_S:g}s on "
                f"{len(universe):,} hosts): avoid nested repeats like (a+)+"
            ) from None
    return found


def _short(text: str, limit: int = 80) -> str:
    """A user's pattern quoted in an error, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def limit(names: Sequence[str], pattern: str, inventory: Inventory | None = None) -> list[str]:
    """Narrow ``names`` as Ansible's --limit does: terms joined by ``:`` or ``,`` are a union;
    ``&term`` intersects, ``!term`` excludes; a term is a group, a host name, a glob
    (``gpu0*``), or ``~regex``. The order of ``names`` is kept."""
    terms = _pattern_terms(pattern)
    if not terms:
        raise SelectionError(f"--limit {pattern!r}: an empty pattern")
    union: set[str] | None = None
    keep = set(names)
    for term in terms:
        if term.startswith("!"):
            keep -= _term_hosts(term[1:], names, inventory)
        elif term.startswith("&"):
            keep &= _term_hosts(term[1:], names, inventory)
        else:
            union = (union or set()) | _term_hosts(term, names, inventory)
    if union is not None:
        keep &= union
    return [name for name in names if name in keep]


def select(
    specs: Sequence[str],
    inventory: Inventory | None = None,
    limit_pattern: str | None = None,
    max_hosts: int = MAX_HOSTS,
) -> list[FleetHost]:
    """The hosts named by ``--host``/``--hosts`` (all of the inventory when none), narrowed by
    ``--limit``, each once, in node-set order, with what the inventory says about reaching it."""
    chosen: dict[str, str | None] = {}
    if not specs:
        if inventory is None:
            raise SelectionError("no hosts: give --hosts NODESET or --inventory FILE")
        for name in inventory.hosts:
            chosen.setdefault(name, None)
    for spec in specs:
        user, names = expand(spec, inventory, max_hosts)
        for name in names:
            if chosen.get(name) is None:
                chosen[name] = user
        if len(chosen) > max_hosts:
            raise SelectionError(
                f"--hosts: {len(chosen):,} hosts, more than --max-hosts {max_hosts:,}; "
                "split the fleet, or raise --max-hosts"
            )
    names = _ordered(list(chosen))
    if limit_pattern is not None:
        names = limit(names, limit_pattern, inventory)
    if not names:
        raise SelectionError(
            "no hosts left" + (f" after --limit {limit_pattern!r}" if limit_pattern else "")
        )
    hosts = []
    for name in names:
        known: HostVars | None = inventory.hosts.get(name) if inventory is not None else None
        hosts.append(
            FleetHost(
                name=name,
                user=chosen[name] or (known.user if known else None),
                address=known.host if known else None,
                port=known.port if known else None,
                identity=known.identity if known else None,
                mode=(known.mode or Mode.ACT) if known else Mode.ACT,
            )
        )
    return hosts


def _ordered(names: list[str]) -> list[str]:
    """Node-set order (gpu2 before gpu10) when the names fold; else as given."""
    try:
        ordered = list(NodeSet.fromlist(names))
    except (NodeSetException, ValueError, TypeError):
        return names
    return ordered if sorted(ordered) == sorted(names) else names
