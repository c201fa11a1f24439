"""A plan saved for review (``runbook plan --out``), and what a saved plan allows a run.

Pure. The document holds the plan, the state it was made on (each target with what
identifies it), the runbook's digest and parameters, and a SHA-256 over all of it. Applied
with ``runbook run --plan FILE``, the run observes again first: a target that moved (a PID
now another process, a GPU with a new holder, a file replaced), a new instance of the
subject, another runbook file or other parameters stop it before it acts. Then each step
runs only if the plan has it, and only on the plan's targets: what the run would act on
beyond them is left alone, and said so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.plan import identity
from runbook_runner.plan.planner import Action, Plan, Timing
from runbook_runner.runbook import Runbook

FORMAT = "runbook-runner/plan"
VERSION = 1
RUNS = {Timing.FIRST, Timing.IF_STILL, Timing.RESTORES, Timing.GATED}


class PlanInvalid(Exception):
    """A plan file that cannot be used: unreadable, changed after it was made, or for
    another runbook. Bad input (exit 2)."""


class PlanMoved(Exception):
    """The host changed since the plan was made: the run stops before acting (exit 6)."""

    def __init__(self, changes: list[str]) -> None:
        super().__init__("the host changed since the plan was made: " + "; ".join(changes))
        self.changes = changes


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
) -> dict[str, Any]:
    """The plan as JSON (``--dry-run --json`` and ``--out``), with its hash."""
    gpu_holders = holders(state)
    body: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "runbook": runbook.name,
        "runbook_sha256": runbook.sha256,
        "host": host,
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


def load(text: str, where: str) -> SavedPlan:
    """A plan file's text -> a checked :class:`SavedPlan`; :class:`PlanInvalid` says why not."""
    try:
        found = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanInvalid(f"{where}: not a plan (not JSON: {error})") from error
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        raise PlanInvalid(f"{where}: not a plan (make one with 'runbook plan ... --out FILE')")
    if found.get("version") != VERSION:
        raise PlanInvalid(
            f"{where}: plan format version {found.get('version')!r}; this runbook-runner "
            f"reads version {VERSION}: make the plan again"
        )
    if found.get("sha256") != digest(found):
        raise PlanInvalid(
            f"{where}: the plan was changed after it was made (its SHA-256 does not match): "
            "make it again and have it approved again"
        )
    for name in ("runbook", "host", "parameters", "actions"):
        if name not in found:
            raise PlanInvalid(f"{where}: the plan has no {name!r}")
    return SavedPlan(found)


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
