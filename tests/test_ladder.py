"""The ladder (plan/ladder.py) with no host: its loop rules over state fixtures, every
matrix row's first state driven through it, the plan's actions against the run's, and a
property over generated states. No SSH, no shell: each test takes milliseconds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ladder_host import Host

from runbook_runner.plan import decide, identity, ladder, planner
from runbook_runner.plan.actions import REBOOT_GATE, Timing, changes_host
from runbook_runner.runbook import Runbook, load
from runbook_runner.simhost.hosts import oom_crash
from runbook_runner.simhost.scenarios import MATRIX, SCENARIOS, Scenario
from runbook_runner.status import StepStatus

RUNBOOK = Path(__file__).parent.parent / "runbooks" / "gpu-oom-recovery.yaml"


@cache
def runbook() -> Runbook:
    return load(RUNBOOK)


def params_of(scenario: Scenario | None = None) -> dict[str, Any]:
    book = runbook()
    found = {n: p.default for n, p in book.parameters.items()}
    for name, value in scenario.params if scenario is not None else ():
        found[name] = type(found[name])(value) if found.get(name) is not None else value
    return found


@cache
def first_state(name: str) -> Mapping[str, Any]:
    """A matrix row's host as the run's first look parses it (a state fixture)."""
    scenario = SCENARIOS[name]
    return Host(scenario.build()).state(runbook(), params_of(scenario))


def subject(params: Mapping[str, Any]) -> Any:
    book = runbook()
    assert book.subject is not None
    return book.subject.with_parameters(params)


def walk(
    state: Mapping[str, Any],
    params: Mapping[str, Any],
    gates: ladder.Gates | None = None,
    history: ladder.History | None = None,
) -> list[ladder.Move]:
    """The ladder's moves on one state, up to (and with) the first that changes the host
    or ends the run; each earlier rung taken to have ended as its move says."""
    book = runbook()
    history = history or ladder.History.start(book)
    moves: list[ladder.Move] = []
    while True:
        move = ladder.next_move(
            book, params, state, history, subject=subject(params), gates=gates or ladder.Gates()
        )
        moves.append(move)
        if isinstance(move, ladder.Done | ladder.Stop):
            return moves
        if isinstance(move, ladder.Wait) or (
            isinstance(move, ladder.Act) and changes_host(move.step)
        ):
            return moves
        status = move.status if isinstance(move, ladder.Skip) else StepStatus.OK
        holds = move.holds if isinstance(move, ladder.Skip) else False
        history = history.then(ladder.Rung(move.step.id, status, holds))


def acting(moves: list[ladder.Move]) -> ladder.Move:
    return moves[-1]


def plan_of(state: Mapping[str, Any], params: Mapping[str, Any], allow_reboot: bool) -> Any:
    return planner.make_plan(
        runbook(),
        params,
        state,
        render(params),
        subject=subject(params),
        allow_reboot=allow_reboot,
    )


def render(params: Mapping[str, Any]) -> Any:
    return lambda template, item: template.render(
        lambda n: getattr(item, n[5:]) if n.startswith("item.") else params[n]
    )


def sent(move: ladder.Move, params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The commands the run sends for ``move`` and the targets it names, as the actor
    makes them (one command per distinct text)."""
    if not isinstance(move, ladder.Act | ladder.Wait) or move.step.run is None:
        return [], []
    items = move.items if isinstance(move, ladder.Act) else ()
    by_command: dict[str, Any] = {}
    for item in items or (None,):
        by_command.setdefault(render(params)(move.step.run, item), item)
    named = identity.named_by(move.step)
    targets = sorted(identity.target(i, named).key for i in by_command.values() if i is not None)
    return list(by_command), targets


def keys(move: ladder.Move) -> tuple[str, ...]:
    items = move.items if isinstance(move, ladder.Act) else ()
    return tuple(sorted(str(getattr(i, "index", getattr(i, "pid", i))) for i in items))


# -- the loop's rules ---------------------------------------------------------------------


def test_the_first_moves_on_the_seed_are_the_reads_then_the_teardown_wait():
    moves = walk(first_state("oom-crash"), params_of())
    kinds = [(m.kind, m.step.id) for m in moves if not isinstance(m, ladder.Done)]
    reads = [
        "assess-device-holders",
        "assess-stuck-processes",
        "assess-kernel-messages",
        "assess-shm",
    ]
    assert kinds[:4] == [(ladder.Kind.ACT, s) for s in reads]
    assert all(not m.confirm for m in moves[:4] if isinstance(m, ladder.Act))
    assert kinds[-1] == (ladder.Kind.WAIT, "wait-for-teardown")
    skipped = [m for m in moves if isinstance(m, ladder.Skip)]
    assert {m.step.id for m in skipped} >= {"reboot-for-xid", "stop-server", "kill-server"}
    assert all(m.reason for m in skipped)


def test_after_the_wait_the_reset_acts_on_the_two_orphaned_gpus_only():
    book = runbook()
    history = ladder.History.start(book, from_step="reset-gpus")
    move = ladder.next_move(
        book, params_of(), first_state("oom-crash"), history, subject=subject(params_of())
    )
    assert isinstance(move, ladder.Act)
    assert move.step.id == "reset-gpus"
    assert move.confirm
    assert keys(move) == ("0", "2")


def test_a_no_stops_the_run_and_a_failure_stops_it_only_under_on_failure_stop():
    book = runbook()
    state = first_state("oom-crash")
    start = ladder.History.start(book)
    declined = start.then(ladder.Rung("assess-device-holders", StepStatus.DECLINED))
    assert isinstance(ladder.next_move(book, params_of(), state, declined), ladder.Stop)
    # assess-* continue on failure; reboot-for-xid stops the run (on_failure: stop).
    failed = start.then(ladder.Rung("assess-device-holders", StepStatus.FAILED))
    assert not isinstance(ladder.next_move(book, params_of(), state, failed), ladder.Stop)
    after = ladder.History.start(book, from_step="reboot-for-xid")
    stopped = after.then(ladder.Rung("reboot-for-xid", StepStatus.TIMED_OUT))
    move = ladder.next_move(book, params_of(), state, stopped)
    assert isinstance(move, ladder.Stop)
    assert move.step is None
    assert ladder.needs(book, stopped) == []


def test_whatever_stops_the_run_what_it_stopped_is_put_back_first():
    """The run stopped the GPU services, then the next rung was held back (a stranger's
    job on the node): the walk goes on to restart-gpu-services, and to nothing else; a
    run that stopped nothing has nothing to put back, and ends with the stop's reason."""
    book = runbook()
    history = ended(
        ladder.Rung("stop-gpu-services", StepStatus.OK),
        start="stop-gpu-services",
    )
    history = ladder.History(
        history.order, history.rungs, {"stop-gpu-services": [{"text": "nvidia-persistenced"}]}
    )
    blocked = ladder.Stop("blocked: another owner's job", ladder.step_of(book, "reload-driver"))
    halted = history.halt(book, blocked)
    assert halted.order[len(halted.rungs) :] == ("restart-gpu-services",)
    assert ladder.needs(book, halted)  # it looks before it puts back
    # a "no" to the put-back itself ends the walk there, with the first reason kept
    declined = halted.then(ladder.Rung("restart-gpu-services", StepStatus.DECLINED))
    stop = ladder.next_move(book, params_of(), {}, declined)
    assert isinstance(stop, ladder.Stop)
    done = ladder.next_move(book, params_of(), {}, declined.halt(book, stop))
    assert isinstance(done, ladder.Done)
    assert done.reason == "blocked: another owner's job"
    nothing = ended(ladder.Rung("stop-gpu-services", StepStatus.SKIPPED), start="stop-gpu-services")
    assert nothing.halt(book, blocked).next_step is None


def test_the_last_rung_done_is_done():
    book = runbook()
    history = ladder.History.start(book, remaining=[])
    assert isinstance(ladder.next_move(book, params_of(), {}, history), ladder.Done)


def test_an_in_flight_rung_whose_state_holds_is_not_sent_again():
    book = runbook()
    history = ladder.History.start(book, from_step="reset-gpus", in_flight="reset-gpus")
    assert "gpus" in ladder.needs(book, history)
    healthy = first_state("healthy-server")
    move = ladder.next_move(book, params_of(), healthy, history, subject=subject(params_of()))
    assert isinstance(move, ladder.Skip)
    assert move.status == StepStatus.OK
    assert "not sent again" in move.reason


def test_an_in_flight_destructive_rung_whose_state_fails_is_asked_again():
    book = runbook()
    history = ladder.History.start(book, from_step="reset-gpus", in_flight="reset-gpus")
    state = first_state("oom-crash")
    move = ladder.next_move(book, params_of(), state, history, subject=subject(params_of()))
    assert isinstance(move, ladder.Act)
    assert move.resend.startswith("step 'reset-gpus' was in flight")
    assert keys(move) == ("0", "2")


def test_a_wait_that_showed_waiting_cannot_help_is_not_a_failure():
    assert ladder.wait_verdict("reached", "reached after 3 s")[0] == StepStatus.OK
    status, message = ladder.wait_verdict("no-progress", "no progress for 30 s, nothing left")
    assert status == StepStatus.OK
    assert "on to the next rung" in message
    assert ladder.wait_verdict("deadline", "deadline (180 s)")[0] == StepStatus.FAILED


def ended(*rungs: ladder.Rung, start: str | None = None) -> ladder.History:
    """A history whose rungs ended as given, from ``start`` (else the first rung's step)."""
    history = ladder.History.start(runbook(), from_step=start or rungs[0].step)
    for rung in rungs:
        history = history.then(rung)
    return history


def test_reached_by_is_the_rung_before_the_one_skipped_because_the_goal_held():
    book = runbook()
    history = ended(
        ladder.Rung("wait-for-teardown", StepStatus.OK, wait="no-progress"),
        ladder.Rung("kill-stuck-server", StepStatus.SKIPPED),
        ladder.Rung("reboot-for-stuck", StepStatus.SKIPPED),
        ladder.Rung("reset-gpus", StepStatus.OK, wait="reached"),
        ladder.Rung("persistence-off", StepStatus.SKIPPED, holds=True),
    )
    assert ladder.reached_by(book, history, goal_holds=True) == "reset-gpus"
    nothing = ladder.History.start(book, remaining=[])
    assert ladder.reached_by(book, nothing, goal_holds=True) is None


def test_a_look_reaches_nothing_when_the_goal_held_from_the_start():
    """A healthy server: only the read-only looks ran; the goal was not 'reached by' one."""
    book = runbook()
    looks = [s for s in book.steps if not s.destructive and s.run is not None]
    history = ended(*(ladder.Rung(s.id, StepStatus.OK) for s in looks))
    assert ladder.reached_by(book, history, goal_holds=True) is None


def test_a_rung_that_puts_back_what_another_changed_reaches_nothing():
    """persistence-blocks-reset: the reset out of persistence mode freed the GPU;
    restore-persistence only put the mode back, and the goal held before it."""
    book = runbook()
    history = ended(
        ladder.Rung("reset-gpus", StepStatus.FAILED, wait="deadline"),
        ladder.Rung("reset-sick-gpus", StepStatus.SKIPPED),
        ladder.Rung("persistence-off", StepStatus.OK),
        ladder.Rung("reset-gpus-again", StepStatus.OK, wait="reached"),
        ladder.Rung("restore-persistence", StepStatus.OK),
    )
    assert ladder.reached_by(book, history, goal_holds=True) == "reset-gpus-again"


def test_an_unreadable_gpu_holds_back_the_gpu_rungs_only_not_rungs_with_nothing_to_act_on():
    """nvidia-smi cannot say (the driver was upgraded under its module): what each GPU holds
    is unknown, so the first rung that reads it stops the run (the driver's recovery action,
    then a reset); a rung told it has nothing to act on (no MPS
    client, no unit, no live server process) is skipped as not needed, never 'blocked'."""
    scenario = SCENARIOS["driver-upgraded-under-module"]
    state = first_state(scenario.name)
    params = params_of(scenario)
    book = runbook()
    history = ladder.History.start(book, from_step="end-mps-clients")
    moves = walk(state, params, history=history)
    said = {m.step.id: m for m in moves if isinstance(m, ladder.Skip)}
    for step in ("end-mps-clients", "stop-server-unit", "stop-server", "kill-server"):
        assert said[step].status == StepStatus.SKIPPED, (step, said[step].reason)
        assert "nothing to act on" in said[step].reason
    stop = moves[-1]
    assert isinstance(stop, ladder.Stop)
    assert stop.step is not None
    assert stop.step.id == "reboot-for-recovery-action"
    assert "cannot tell" in stop.reason
    assert "driver/library" in stop.reason.lower()


def test_a_healthy_server_holds_back_the_reboot_and_is_named_once_for_all_its_workers():
    scenario = SCENARIOS["driver-upgraded-healthy-server"]
    moves = walk(first_state(scenario.name), params_of(scenario), ladder.Gates(allow_reboot=True))
    stop = moves[-1]
    assert isinstance(stop, ladder.Stop)
    assert stop.step is not None
    assert stop.step.id == "reboot-for-driver-mismatch"
    pids = ", ".join(str(4120 + rank) for rank in range(8))
    assert f"PIDs {pids} (sglang::scheduler_TP0 and 7 more): the server is healthy" in stop.reason
    assert stop.reason.count("the server is healthy") == 1
    # ... and what held it back is left alone, so the verdict names it there too
    [left] = stop.left_alone
    assert left.startswith(f"PIDs {pids} (sglang::scheduler_TP0 and 7 more): the server is healthy")


def test_a_reboot_carries_its_gate_unless_it_is_allowed():
    state = first_state("xid-79")
    move = acting(walk(state, params_of()))
    assert isinstance(move, ladder.Act)
    assert move.step.id == "reboot-for-xid"
    assert move.gate == REBOOT_GATE
    allowed = acting(walk(state, params_of(), ladder.Gates(allow_reboot=True)))
    assert isinstance(allowed, ladder.Act)
    assert allowed.gate is None


@dataclasses.dataclass(frozen=True)
class Approved:
    allowed: Mapping[str, set[tuple[str, str]]]

    def steps(self) -> set[str]:
        return set(self.allowed)

    def targets_of(self, step: str) -> set[tuple[str, str]]:
        return self.allowed.get(step, set())


def test_under_a_saved_plan_a_rung_acts_only_on_its_targets_and_names_the_rest():
    book = runbook()
    history = ladder.History.start(book, from_step="reset-gpus")
    gates = ladder.Gates(approved=Approved({"reset-gpus": {("gpu", "0")}}))
    move = ladder.next_move(
        book,
        params_of(),
        first_state("oom-crash"),
        history,
        subject=subject(params_of()),
        gates=gates,
    )
    assert isinstance(move, ladder.Act)
    assert keys(move) == ("0",)
    assert any("GPU 2" in said and "not in the approved plan" in said for said in move.left_alone)
    beyond = ladder.Gates(approved=Approved({}))
    skipped = ladder.next_move(
        book,
        params_of(),
        first_state("oom-crash"),
        history,
        subject=subject(params_of()),
        gates=beyond,
    )
    assert isinstance(skipped, ladder.Skip)
    assert skipped.reason == "not in the approved plan"


def test_a_plan_whose_host_moved_stops_before_any_rung():
    book = runbook()
    history = ladder.History.start(book, moved=("PID 4101 is now another process",))
    assert ladder.needs(book, history) == []
    move = ladder.next_move(book, params_of(), {}, history)
    assert isinstance(move, ladder.Stop)
    assert "the host changed since the plan was made: PID 4101" in move.reason


# -- every row of the matrix ----------------------------------------------------------------


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.name for s in MATRIX])
def test_every_row_first_move_is_what_the_plan_shows_first(scenario):
    """Parity on every row: the plan's first actions (targets and commands) are the
    ladder's moves up to the first that changes the host; a plan that stops, stops there."""
    params = params_of(scenario)
    state = first_state(scenario.name)
    moves = walk(state, params, ladder.Gates(allow_reboot=scenario.allow_reboot))
    plan = plan_of(state, params, scenario.allow_reboot)
    ran = [m for m in moves if isinstance(m, ladder.Act | ladder.Wait)]
    first = [a for a in plan.actions if a.timing is Timing.FIRST]
    assert [a.step for a in first] == [m.step.id for m in ran]
    for action, move in zip(first, ran, strict=True):
        commands, targets = sent(move, params)
        assert list(action.commands) == commands, action.step
        assert sorted(t.key for t in action.targets) == targets, action.step
    end = moves[-1]
    if isinstance(end, ladder.Stop) and end.step is not None:
        stops = [a for a in plan.actions if a.timing in {Timing.STOPS, Timing.GATED}]
        assert stops
        assert stops[0].step == end.step.id
    if isinstance(end, ladder.Done):
        assert all(a.timing is not Timing.FIRST or not a.destructive for a in plan.actions)


# -- a property over generated states -------------------------------------------------------


@st.composite
def seed_variants(draw: st.DrawFn) -> dict[str, Any]:
    """The seed's host with its GPUs' memory drawn: some orphaned, some idle."""
    host = oom_crash()
    for gpu in host.gpus:
        gpu.orphaned_mib = draw(st.sampled_from([0, 0, 512, 2048, 96_413]))
    return dict(Host(host).state(runbook(), params_of()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed_variants(), st.sampled_from([s.id for s in runbook().steps if s.destructive]))
def test_the_plan_never_omits_nor_adds_a_destructive_action_the_run_would_take(state, step):
    """On any state, for every destructive rung: the plan shows it acting on exactly the
    targets the ladder would have the run act on there (or not at all when it would not)."""
    params = params_of()
    book = runbook()
    history = ladder.History.start(book, from_step=step)
    move = ladder.next_move(book, params, state, history, subject=subject(params))
    plan = plan_of(state, params, allow_reboot=False)
    shown = [a for a in plan.actions if a.step == step]
    runs = [a for a in shown if a.timing in {Timing.FIRST, Timing.IF_STILL, Timing.GATED}]
    if isinstance(move, ladder.Act):
        assert runs, (step, move)
        commands, targets = sent(move, params)
        assert list(runs[0].commands) == commands
        assert sorted(t.key for t in runs[0].targets) == targets
    else:
        assert not runs, (step, move, shown)


def test_decide_is_still_the_per_step_decision():
    """The ladder asks decide for each rung: same state, same verdict and items."""
    book = runbook()
    params = params_of()
    state = first_state("oom-crash")
    step = ladder.step_of(book, "reset-gpus")
    decision = decide.decide(book, params, state, {}, step, subject=subject(params))
    move = ladder.next_move(
        book,
        params,
        state,
        ladder.History.start(book, from_step="reset-gpus"),
        subject=subject(params),
    )
    assert decision.verdict is decide.Verdict.RUN
    assert isinstance(move, ladder.Act)
    assert move.items == decision.items
