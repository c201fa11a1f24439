"""A plan saved for review (``runbook plan --out``), and what a saved plan allows a run.

Pure. The document holds the plan, the state it was made on (each target with what
identifies it), the runbook's digest and parameters, and a SHA-256 over all of it. Applied
with ``runbook run --plan FILE``, the run observes again first: a target that moved (a PID
now another process, a GPU with a new holder, a file replaced), a new instance of the
subject, another runbook file or other parameters stop it before it acts. Then each step
runs only if the plan has it, and only on the plan's targets: what the run would act on
beyond them is left alone, and said so; and each command a destructive step would send is
the plan's own command for that step and target (:func:`check_sent`), else the run stops
before sending it (:class:`NotApproved`, exit 10).

A plan file is input like any other (:func:`load`): at most :data:`MAX_DEPTH` levels deep,
the shape of ``schema/plan.schema.json`` (shipped in the package), its digest its own. The
plan also records the host it was made on: the host key's fingerprint and the destination
OpenSSH resolved (``ssh -G``'s hostname, port, user), so that it is not applied elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import identity
from runbook_runner.plan.identity import Target
from runbook_runner.plan.planner import Action, Plan, Timing
from runbook_runner.runbook import Runbook

FORMAT = "runbook-runner/plan"
VERSION = 1
RUNS = {Timing.FIRST, Timing.IF_STILL, Timing.RESTORES, Timing.GATED}
MAX_DEPTH = 32  # a plan is about 8 levels deep; a JSON bomb is 100,000
SIGNATURE_NAMESPACE = "runbook-plan"  # ssh-keygen -Y sign/verify -n: what the key signs


class PlanInvalid(Exception):
    """A plan file that cannot be used: unreadable, changed after it was made, or for
    another runbook. Bad input (exit 2)."""


class PlanMoved(Exception):
    """The host changed since the plan was made: the run stops before acting (exit 6)."""

    def __init__(self, changes: list[str]) -> None:
        super().__init__("the host changed since the plan was made: " + "; ".join(changes))
        self.changes = changes


class NotApproved(Exception):
    """Under a saved plan, the run would send a command the plan does not have for that
    step and target: it stops before sending it (exit 10)."""

    def __init__(self, step: str, target: str | None, sent: str, approved: Sequence[str]) -> None:
        on = f" on {target}" if target else ""
        plan = (
            "the approved plan has " + " or ".join(repr(c) for c in approved)
            if approved
            else "the approved plan has no command for it"
        )
        super().__init__(
            f"step {step}{on}: the run would send {sent!r}, and {plan}: nothing of it was "
            "sent (make the plan again and have it approved again)"
        )
        self.step, self.target, self.sent, self.approved = step, target, sent, tuple(approved)


def digest(document: Mapping[str, Any]) -> str:
    body = {k: v for k, v in document.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def instances(state: Mapping[str, Any]) -> list[str]:
    """The subject's instances on the host: 'PID command (health)', one per launcher."""
    found: dict[int, str] = {}
    for records in state.values():
        if not isinstance(records, tuple):
            continue
        for row in records:
            if isinstance(row, ProcessOwner) and row.subject and row.instance is not None:
                found.setdefault(row.instance, f"{row.instance} ({row.health or '?'})")
    return [found[k] for k in sorted(found)]


def holders(state: Mapping[str, Any]) -> dict[int, list[str]]:
    rows = [
        row
        for records in state.values()
        if isinstance(records, tuple)
        for row in records
        if isinstance(row, ProcessOwner)
    ]
    return identity.gpu_holders(rows)


def action_json(action: Action, gpu_holders: Mapping[int, list[str]]) -> dict[str, Any]:
    return {
        "step": action.step,
        "title": action.title,
        "timing": str(action.timing),
        "destructive": action.destructive,
        "affects": action.affects,
        "commands": list(action.commands),
        "targets": [
            {
                "kind": t.kind,
                "key": t.key,
                "text": t.text,
                "record": t.record,
                "fingerprint": identity.fingerprint(t, gpu_holders),
            }
            for t in action.targets
        ],
        "condition": action.condition,
        "gate": action.gate,
        "restores": action.restores,
        "restored_by": list(action.restored_by),
        "left_alone": list(action.left_alone),
        "reason": action.reason,
        "waits": action.waits,
    }


def document(
    plan: Plan,
    runbook: Runbook,
    state: Mapping[str, Any],
    *,
    host: str,
    parameters: Mapping[str, Any],
    made_at: str,
    gates: Mapping[str, bool],
    state_json: Mapping[str, Any],
    goal_json: list[dict[str, Any]],
    asked: Mapping[str, Any] | None = None,
    host_key: Mapping[str, str] | None = None,
    destination: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan as JSON (``--dry-run --json`` and ``--out``), with its hash. ``host_key``
    ({type, sha256}) and ``destination`` ({hostname, port, user}, as ``ssh -G`` resolved
    them) bind it to its host; None for this machine (``--local``)."""
    gpu_holders = holders(state)
    body: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "runbook": runbook.name,
        "runbook_sha256": runbook.sha256,
        "host": host,
        "host_key": dict(host_key) if host_key is not None else None,
        "destination": dict(destination) if destination is not None else None,
        "asked": dict(asked or {}),
        "parameters": dict(parameters),
        "made_at": made_at,
        "gates": dict(gates),
        "ending": str(plan.ending),
        "exit_code": int(plan.exit_code),
        "gate": plan.gate,
        "goal": goal_json,
        "actions": [action_json(a, gpu_holders) for a in plan.actions],
        "not_applicable": [{"step": s, "why": why} for s, why in plan.not_applicable],
        "not_reached": list(plan.not_reached),
        "left_alone": list(plan.left_alone),
        "unfixable": list(plan.unfixable),
        "instances": instances(state),
        "state": dict(state_json),
    }
    body["sha256"] = digest(body)
    return body


@dataclass(frozen=True)
class SavedPlan:
    """A plan file read back and checked: what a run under it may do."""

    document: Mapping[str, Any]

    @property
    def sha256(self) -> str:
        return str(self.document["sha256"])

    @property
    def runbook(self) -> str:
        return str(self.document["runbook"])

    @property
    def host(self) -> str:
        return str(self.document["host"])

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.document["parameters"])

    @property
    def host_key(self) -> str | None:
        """The SHA256 fingerprint of the host key the plan was made with (None: --local)."""
        found = self.document.get("host_key")
        return str(found["sha256"]) if isinstance(found, Mapping) else None

    @property
    def destination(self) -> tuple[str, int, str | None] | None:
        """(hostname, port, user) as ``ssh -G`` resolved them when the plan was made."""
        found = self.document.get("destination")
        if not isinstance(found, Mapping):
            return None
        user = found.get("user")
        return str(found["hostname"]), int(found["port"]), None if user is None else str(user)

    def commands_of(self, step: str) -> tuple[dict[tuple[str, str], str], list[str]]:
        """The plan's commands for ``step``: by (kind, key) of the target each acts on, and
        all of them (a command that names no target is matched among these)."""
        by_target: dict[tuple[str, str], str] = {}
        every: list[str] = []
        for action in self.actions():
            if action["step"] != step:
                continue
            commands, targets = list(action["commands"]), list(action["targets"])
            every += commands
            if targets and len(commands) == len(targets):
                for command, tgt in zip(commands, targets, strict=True):
                    by_target.setdefault((tgt["kind"], tgt["key"]), command)
        return by_target, every

    def actions(self) -> list[Mapping[str, Any]]:
        return [a for a in self.document["actions"] if a["timing"] in RUNS]

    def steps(self) -> set[str]:
        return {a["step"] for a in self.actions()}

    def targets_of(self, step: str) -> set[tuple[str, str]]:
        """The (kind, key) pairs the plan lets ``step`` act on."""
        found: set[tuple[str, str]] = set()
        for action in self.actions():
            if action["step"] == step:
                found |= {(t["kind"], t["key"]) for t in action["targets"]}
        return found


def parse(text: str | bytes, where: str) -> Any:
    """A plan file's text as JSON, at most :data:`MAX_DEPTH` deep; :class:`PlanInvalid`
    (one line, naming ``where``) for anything else: not UTF-8, not JSON, a JSON bomb."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        found = json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise PlanInvalid(f"{where}: not a plan (not UTF-8 text)") from None
    except RecursionError:
        raise PlanInvalid(f"{where}: not a plan (nested deeper than {MAX_DEPTH} levels)") from None
    except ValueError as error:  # JSONDecodeError, NaN, a number of 100,000 digits
        said = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        raise PlanInvalid(f"{where}: not a plan (not JSON: {said})") from None
    if _depth(found) > MAX_DEPTH:
        raise PlanInvalid(f"{where}: not a plan (nested deeper than {MAX_DEPTH} levels)")
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (without recursion: a bomb must not raise here)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


@cache
def schema() -> dict[str, Any]:
    """``schema/plan.schema.json``, as the package ships it."""
    text = resources.files("runbook_runner").joinpath("schema/plan.schema.json").read_text("utf-8")
    found: dict[str, Any] = json.loads(text)
    return found


def shape_problem(found: Any) -> str | None:
    """The first way ``found`` is not the shape of a plan (the schema), in one line."""
    from jsonschema import Draft202012Validator  # slow to import: only a plan file needs it

    validator = Draft202012Validator(schema())
    error = next(iter(sorted(validator.iter_errors(found), key=lambda e: list(e.path))), None)
    if error is None:
        return None
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    kind = error.validator
    if kind == "required":
        said = str(error.message).split(" is a required", 1)[0]
        message = f"missing {said}"
    elif kind == "additionalProperties":
        message = "unknown key(s): " + str(error.message).rsplit("(", 1)[-1].rstrip(")")
    elif kind == "type":
        message = f"must be {error.validator_value}"
    elif kind in {"enum", "const"}:
        message = f"must be one of {error.validator_value!r}"
    else:
        message = f"fails {kind}"
    text = f"{path.lstrip('.') or 'the document'}: {message}"
    return " ".join(text.split())[:300]


def load(text: str | bytes, where: str) -> SavedPlan:
    """A plan file's text -> a checked :class:`SavedPlan`; :class:`PlanInvalid` says why not,
    in one line naming ``where``."""
    found = parse(text, where)
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        raise PlanInvalid(f"{where}: not a plan (make one with 'runbook plan ... --out FILE')")
    if found.get("version") != VERSION:
        raise PlanInvalid(
            f"{where}: plan format version {repr(found.get('version'))[:20]}; this "
            f"runbook-runner reads version {VERSION}: make the plan again"
        )
    problem = shape_problem(found)
    if problem is not None:
        raise PlanInvalid(f"{where}: not a plan of this runbook-runner ({problem})")
    if found.get("sha256") != digest(found):
        raise PlanInvalid(
            f"{where}: the plan was changed after it was made (its SHA-256 does not match): "
            "make it again and have it approved again"
        )
    return SavedPlan(found)


def check_approved_sha256(saved: SavedPlan, given: str, where: str) -> None:
    """``--approved-sha256``: the plan's SHA-256 as the reviewer gave it out of band."""
    if given.strip().lower() != saved.sha256:
        raise PlanInvalid(
            f"{where}: its SHA-256 is {saved.sha256}, not the approved {given.strip()[:64]}: "
            "this is not the plan that was approved"
        )


def check_sent(saved: SavedPlan, step: str, sent: Iterable[tuple[Target | None, str]]) -> None:
    """Under ``saved``, each (target, command) a destructive ``step`` would send must be the
    plan's command for that step and target; :class:`NotApproved` for the first that is not.
    Commands are compared as shown (secret parameters as ``***``: the plan holds no secret).
    """
    by_target, every = saved.commands_of(step)
    for tgt, command in sent:
        key = (tgt.kind, tgt.key) if tgt is not None else None
        if key is not None and key in by_target:
            if command != by_target[key]:
                raise NotApproved(step, tgt.text if tgt else None, command, [by_target[key]])
            continue
        if command not in every:
            raise NotApproved(step, tgt.text if tgt else None, command, every)


def check_runbook(saved: SavedPlan, runbook: Runbook) -> None:
    if runbook.name != saved.runbook:
        raise PlanInvalid(f"the plan is for runbook {saved.runbook!r}, not {runbook.name!r}")
    if saved.document.get("runbook_sha256") != runbook.sha256:
        raise PlanInvalid(
            f"runbook {runbook.name} changed since the plan was made (its SHA-256 differs): "
            "make the plan again with this version"
        )


GATES = (("allow_reboot", "--allow-reboot"), ("allow_node_wide", "--allow-node-wide"))


def parameters_for(
    saved: SavedPlan, runbook: Runbook, params: Mapping[str, Any], given: Iterable[str]
) -> dict[str, Any]:
    """The run's parameters under ``saved``: the plan's own, where ``given`` (the names the
    command line set) may add only a secret, which the plan does not hold."""
    named = set(given)
    merged = dict(params)
    for name, value in saved.parameters.items():
        parameter = runbook.parameters.get(name)
        if parameter is None or parameter.secret:
            continue
        if name in named and params.get(name) != value:
            raise PlanInvalid(
                f"the plan was made with {name}={value!r}, and --set gives "
                f"{params.get(name)!r}: a saved plan runs with its own parameters (make a "
                "new plan to change them)"
            )
        merged[name] = value
    return merged


def gates_for(saved: SavedPlan, asked: Mapping[str, bool]) -> dict[str, bool]:
    """The gates a run under ``saved`` has: the plan's. One the command line asks for and
    the plan was not made with is refused (it was not approved)."""
    granted = saved.document.get("gates", {})
    for gate, flag in GATES:
        if asked.get(gate) and not granted.get(gate):
            raise PlanInvalid(
                f"the plan was made without {flag}: make it again with {flag} to have that "
                "approved too"
            )
    return {gate: bool(granted.get(gate)) for gate, _ in GATES}


def check_host(saved: SavedPlan, label: str) -> None:
    if label != saved.host:
        raise PlanInvalid(f"the plan was made for host {saved.host}, not {label}")


def fingerprints(state: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every listed item of ``state`` by (record type, kind, key) -> its fingerprint."""
    gpu_holders = holders(state)
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for records in state.values():
        if not isinstance(records, tuple):
            continue
        for item in records:
            tgt = identity.target(item)
            found.setdefault(
                (tgt.record, tgt.kind, tgt.key), identity.fingerprint(tgt, gpu_holders)
            )
    return found


def what_moved(saved: SavedPlan, state: Mapping[str, Any]) -> list[str]:
    """What differs, on the new look at the host, from what the plan was approved on."""
    now = fingerprints(state)
    changes: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for action in saved.actions():
        for tgt in action["targets"]:
            key = (tgt.get("record", ""), tgt["kind"], tgt["key"])
            if key in seen:
                continue
            seen.add(key)
            why = identity.moved(tgt["kind"], tgt["key"], tgt.get("fingerprint", {}), now.get(key))
            if why is not None:
                changes.append(why)
    before = set(saved.document.get("instances", ()))
    new = [i for i in instances(state) if i.split(" ", 1)[0] not in _pids(before)]
    changes += [f"a new instance of the server started: PID {i}" for i in new]
    return changes


def _pids(described: Iterable[str]) -> set[str]:
    return {d.split(" ", 1)[0] for d in described}
