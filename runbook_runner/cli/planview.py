"""``runbook plan`` and ``runbook run --dry-run``: observe once, print the plan, save it.

The plan itself is pure (plan/planner.py); here it is made from one look at the host,
printed for people (or as JSON, which validates against ``schema/plan.schema.json``),
and written with ``--out`` for ``runbook run --plan FILE`` to apply.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runbook_runner import session
from runbook_runner.cli import console, render
from runbook_runner.events import Verdict
from runbook_runner.plan import planner, saved
from runbook_runner.plan.planner import Action, Plan, Timing
from runbook_runner.runbook import Runbook

ENDING_TEXT = {
    planner.Ending.NOTHING_TO_DO: "nothing to do: the goal holds",
    planner.Ending.WOULD_ACT: "the run would act as above (exit 0 once the goal holds)",
    planner.Ending.CANNOT_TELL: "the run would stop before acting: something it needs cannot "
    "be told (exit 6)",
    planner.Ending.NEEDS_GATE: "the run would stop at a gate the command line does not give",
    planner.Ending.GOAL_OUT_OF_REACH: "the run cannot reach the goal: a failing check no step "
    "fixes needs a human (exit 1)",
}


@dataclass(frozen=True)
class Looked:
    """One look at a host, the plan made on it, and the plan's JSON document."""

    plan: Plan
    state: dict[str, Any]
    document: dict[str, Any]


def look(
    runbook: Runbook,
    params: dict[str, Any],
    transport: Any,
    *,
    allow_reboot: bool,
    allow_node_wide: bool,
    asked: Mapping[str, Any],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Looked:
    """Observe the host once (nothing sent changes anything) and make the plan on it."""
    from runbook_runner.engine import Runner

    runner = Runner(
        runbook, params, transport, clock=clock, sleep=sleep, allow_node_wide=allow_node_wide
    )
    state = runner.observe()
    plan = planner.make_plan(
        runbook,
        params,
        state,
        lambda template, item: runner.render(template, item, masked=True),
        subject=runner.subject,
        allow_reboot=allow_reboot,
        allow_node_wide=allow_node_wide,
    )
    made_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    document = saved.document(
        plan,
        runbook,
        state,
        host=transport.target.label,
        parameters=session.secret_free(runbook, params),
        made_at=made_at,
        gates={"allow_reboot": allow_reboot, "allow_node_wide": allow_node_wide},
        state_json=render.state_json(runbook, state),
        goal_json=[render.check_json(r, runbook) for r in plan.goal],
        asked=asked,
        **bound_to(transport),
    )
    return Looked(plan, state, document)


def bound_to(transport: Any) -> dict[str, Any]:
    """The host a plan is bound to: the key it offered and where ``ssh -G`` resolved it
    (both None for this machine, ``--local``)."""
    key = getattr(transport, "host_key", None)
    if key is None:
        return {"host_key": None, "destination": None}
    from runbook_runner.ssh.hostkeys import fingerprint

    target = transport.target
    return {
        "host_key": {"type": key.get_name(), "sha256": fingerprint(key)},
        "destination": {"hostname": target.hostname, "port": target.port, "user": target.user},
    }


def write(path: str, document: dict[str, Any]) -> None:
    """The plan file, whole or not at all (a temporary file renamed over it)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=".plan-", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def lines(plan: Plan, runbook: Runbook, state: dict[str, Any], style: render.Style) -> list[str]:
    """The plan for people: what runs first, what runs only if still needed, the gates,
    the restoring steps with what they restore, and one line for what cannot run."""
    shown: list[str] = []
    shown.append(render.check_lines(list(plan.goal), runbook, style))
    shown += render.owner_lines(runbook, state)
    first = plan.first
    numbered = 0
    if first:
        shown.append(style("first, on this state (exactly these commands):", "bold"))
        for action in first:
            numbered += 1
            shown += _action_lines(numbered, action)
    later = [a for a in plan.actions if a.timing is not Timing.FIRST]
    if later:
        shown.append(
            style("then, only while still needed (what they act on is read then):", "bold")
        )
        for action in later:
            numbered += 1
            shown += _action_lines(numbered, action)
    if plan.left_alone:
        shown.append("left alone (not the subject's, or not broken):")
        shown += [f"  {said}" for said in plan.left_alone]
    if plan.not_applicable:
        folded = ", ".join(f"{step} ({why})" for step, why in plan.not_applicable)
        shown.append(f"will not run on this state: {folded}")
    if plan.not_reached:
        shown.append("not reached (the run stops before them): " + ", ".join(plan.not_reached))
    if plan.unfixable:
        shown.append("no step fixes: " + ", ".join(plan.unfixable) + " (see the checks' hints)")
    ending = ENDING_TEXT[plan.ending]
    stops = any(a.timing is Timing.STOPS for a in plan.actions)
    if plan.ending is planner.Ending.CANNOT_TELL and not stops:
        ending = "the goal cannot be told: what it reads cannot be observed (exit 6)"
    if plan.ending is planner.Ending.NEEDS_GATE:
        ending += f" ({plan.gate}; exit {int(plan.exit_code)})"
    shown.append(style(f"the plan: {ending}", "bold"))
    shown += _verdict(plan, runbook)
    return shown


def _verdict(plan: Plan, runbook: Runbook) -> list[str]:
    """The plan's verdict, in the shape a run ends with: what it would do, what it leaves
    alone, what is wrong now, and what a person does next."""
    first = [a for a in plan.first if a.destructive or a.waits]
    later = [a for a in plan.actions if a.timing in {Timing.IF_STILL, Timing.GATED}]
    stops = [a for a in plan.actions if a.timing is Timing.STOPS]

    def named(action: Action) -> str:
        return action.step + (
            f" ({', '.join(t.key for t in action.targets)})" if action.targets else ""
        )

    would = "; ".join(named(a) for a in first) or "nothing first"
    if later:
        would += "; then, if still needed: " + ", ".join(named(a) for a in later[:4])
        would += ", ..." if len(later) > 4 else ""
    if stops:
        would += f"; stops before {stops[0].step}"
    wrong = [f"{r.name}: {r.message}" for r in plan.goal if not r.ok]
    hints = [
        " ".join(runbook.checks[r.name].hint.split())
        for r in plan.goal
        if not r.ok and (r.name in plan.unfixable or stops) and runbook.checks[r.name].hint
    ]
    nexts = (
        hints
        or (list(runbook.next) if plan.ending is planner.Ending.NOTHING_TO_DO else [])
        or ["review the plan, then run it (runbook run ..., or --plan FILE to apply exactly it)"]
    )
    return render.verdict_lines(
        Verdict(done=(would,), left_alone=plan.left_alone, still_wrong=tuple(wrong)),
        nexts,
        done="would do",
    )


def summary(plan: Plan) -> str:
    """The plan in one line, for a fleet's folded output."""
    acting = [a for a in plan.first if a.destructive or a.waits]
    first = ", ".join(
        a.step + (f" ({', '.join(t.key for t in a.targets)})" if a.targets else "") for a in acting
    )
    later = [a.step for a in plan.actions if a.timing is not Timing.FIRST]
    said = f"first {first}" if first else "nothing to act on first"
    if later:
        said += f"; then, if still needed, up to {len(later)} more ({later[0]}, ...)"
    ending = str(plan.ending) + (f" {plan.gate}" if plan.gate else "")
    return f"{said}; {ending} (exit {int(plan.exit_code)})"


def _action_lines(number: int, action: Action) -> list[str]:
    flags = f"destructive, affects {action.affects}" if action.destructive else "read-only"
    head = f"  {number}. {action.step}: {action.title} [{flags}]"
    if action.timing is Timing.STOPS:
        return [head, f"     STOPS here: {action.reason}"]
    out = [head]
    if action.condition:
        out.append(f"     {action.timing}: {action.condition}")
    if action.timing is Timing.STOPS_IF_REACHED:
        out.append(f"     {action.reason}")
    if action.waits:
        out.append(f"     then waits {action.waits}")
    if action.restored_by:
        out.append(f"     put back by: {', '.join(action.restored_by)}")
    if action.targets:
        now = "" if action.timing is Timing.FIRST else " (as of now)"
        out.append(f"     targets{now}:")
        out += [f"       {t.text}" for t in action.targets]
    verb = "would run" if action.timing is Timing.FIRST else "would run then"
    for command in action.commands:
        first, *rest = command.rstrip("\n").split("\n")
        out.append(f"     {verb}: $ {first}")
        out += [f"       {line}" for line in rest]
    out += [f"     left alone: {said}" for said in action.left_alone]
    return out


def print_plan(out: console.Output, runbook: Runbook, looked: Looked, settings: Any) -> int:
    """Print the plan (or its JSON), save it with ``settings.out``; the exit code says how
    the run would end on the state it was made on."""
    plan, doc = looked.plan, looked.document
    for line in lines(plan, runbook, looked.state, out.style):
        out.line(line)
    if settings.out:
        write(settings.out, doc)
        out.line(f"plan saved: {settings.out} (sha256 {doc['sha256'][:16]})")
        _approval_lines(out, settings, doc)
        if settings.simulated:
            out.line("(a drill's simulated host ends with the drill: this plan is for reading)")
        else:
            out.line(
                f"apply exactly this: runbook run --plan {settings.out} --approved-by NAME "
                f"--approved-sha256 {doc['sha256']} (or, signed, --allowed-signers FILE; "
                "with the SSH options given here, if any)"
            )
    if settings.as_json:
        return _print_json(doc, plan)
    return int(plan.exit_code)


def _approval_lines(out: console.Output, settings: Any, doc: dict[str, Any]) -> None:
    """The saved plan's SHA-256 in full (what a reviewer gives --approved-sha256), and its
    signature with --sign-with (what --allowed-signers checks)."""
    out.line(f"plan sha256: {doc['sha256']}")
    key = getattr(settings, "sign_with", None)
    if key:
        from runbook_runner.cli import planfile

        signature = planfile.sign(settings.out, key)
        out.line(f"plan signed: {signature} (ssh-keygen -Y sign -n runbook-plan with {key})")


def _print_json(doc: dict[str, Any], plan: Plan) -> int:
    print(json.dumps(doc, indent=2))
    return int(plan.exit_code)
