"""Memory across runs (issue 47, item 1), with no SSH: generated journals -> attempts with
one outcome each -> the budget's decision (plan/history.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook_runner.plan.history import (
    Budget,
    Outcome,
    Verdict,
    attempts,
    decide,
    describe,
)

GPU = "GPU-5a1e0000-0000-4000-8000-000000000002"
OTHER = "GPU-5a1e0000-0000-4000-8000-000000000003"
RESETS = ("reset-gpus", "reset-gpus-again")
START = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def journal(
    at: datetime,
    run: str,
    step_status: str | None = "ok",
    run_ok: bool | None = True,
    *,
    step: str = "reset-gpus",
    gpus: tuple[str, ...] = (GPU,),
    dry_run: bool = False,
) -> list[dict]:
    """A run's journal as the session writes it: a reset started on ``gpus``; its step-end
    (None: the journal stops before it) and its run-end (None: none)."""
    items = [
        {"index": i, "uuid": g, "pci_bus_id": f"00000000:3{i}:00.0"} for i, g in enumerate(gpus)
    ]
    events = [
        {"t": stamp(at), "event": "run-start", "run": run, "runbook": "gpu-oom-recovery",
         "host": "gpu07", "dry_run": dry_run},
        {"t": stamp(at), "event": "step-start", "id": "assess-device-holders", "commands": []},
        {"t": stamp(at), "event": "step-end", "id": "assess-device-holders", "status": "ok"},
        {"t": stamp(at), "event": "step-start", "id": step, "commands": ["nvidia-smi --gpu-reset -i 0"],
         "items": items},
    ]  # fmt: skip
    if step_status is not None:
        done = {"t": stamp(at), "event": "step-end", "id": step, "status": step_status}
        if step_status not in {"declined", "blocked", "skipped"}:
            done["acted"] = items
        events.append(done)
    if run_ok is not None:
        events.append({"t": stamp(at), "event": "run-end", "ok": run_ok, "outcome": "finished"})
    return events


def test_each_attempt_has_one_outcome_from_its_step_and_its_run():
    cases = {
        ("ok", True): Outcome.SUCCEEDED,
        ("ok", False): Outcome.DID_NOT_HELP,
        ("failed", False): Outcome.DID_NOT_HELP,
        ("timed_out", False): Outcome.DID_NOT_HELP,
        ("unknown", False): Outcome.UNKNOWN,
        (None, None): Outcome.UNKNOWN,  # the journal stops mid-step: a crash, a lost host
        ("ok", None): Outcome.UNKNOWN,  # the step ended, the run never said if it helped
        ("declined", False): Outcome.CANCELLED,
        ("blocked", False): Outcome.CANCELLED,
    }
    for (status, ok), outcome in cases.items():
        (attempt,) = attempts(journal(START, "r1", status, ok), RESETS)
        assert (attempt.gpu, attempt.host, attempt.step, attempt.outcome) == (
            GPU, "gpu07", "reset-gpus", outcome,
        ), (status, ok)  # fmt: skip
    assert attempts(journal(START, "r1", "skipped", True), RESETS) == ()
    assert attempts(journal(START, "r1", dry_run=True), RESETS) == ()
    assert attempts(journal(START, "r1", step="persistence-off"), RESETS) == ()  # not counted


def test_a_reset_of_two_gpus_is_an_attempt_on_each():
    found = attempts(journal(START, "r1", gpus=(GPU, OTHER)), RESETS)
    assert [a.gpu for a in found] == [GPU, OTHER]


def test_the_third_incident_in_a_week_goes_to_a_person_with_its_history():
    history = [
        *attempts(journal(START, "r1"), RESETS),
        *attempts(journal(START + timedelta(days=2), "r2"), RESETS),
    ]
    now = START + timedelta(days=3)
    decision = decide(history, GPU, now)
    assert decision.verdict is Verdict.BUDGET_SPENT
    assert decision.incidents == 2
    assert describe(decision) == (
        f"3rd incident on {GPU} since 2026-11-20: reset-gpus in 2 runs, all succeeded; "
        "it came back within 2 days — handed to a person"
    )
    assert decide(history, OTHER, now).may_act  # another GPU has its own budget
    assert decide(history, GPU, START + timedelta(days=9, hours=1)).may_act  # r1 left the window


def test_one_runs_ladder_is_one_incident_and_a_cancelled_attempt_is_none():
    ladder = journal(START, "r1", "failed", True)  # reset-gpus failed ...
    ladder.insert(-1, {"t": stamp(START), "event": "step-start", "id": "reset-gpus-again",
                       "items": [{"uuid": GPU}]})  # fmt: skip
    ladder.insert(-1, {"t": stamp(START), "event": "step-end", "id": "reset-gpus-again",
                       "status": "ok", "acted": [{"uuid": GPU}]})  # fmt: skip
    history = [
        *attempts(ladder, RESETS),
        *attempts(journal(START + timedelta(hours=5), "r2", "declined", False), RESETS),
    ]
    assert [a.outcome for a in history] == [
        Outcome.DID_NOT_HELP, Outcome.SUCCEEDED, Outcome.CANCELLED,
    ]  # fmt: skip
    decision = decide(history, GPU, START + timedelta(days=1))
    assert decision.may_act
    assert decision.incidents == 1


def test_an_unknown_outcome_is_never_retried_automatically_whatever_the_budget():
    history = attempts(journal(START, "r1", None, None), RESETS)
    decision = decide(history, GPU, START + timedelta(hours=1), Budget(incidents=99))
    assert decision.verdict is Verdict.OUTCOME_UNKNOWN
    assert "has no known outcome: a person looks before any automatic retry" in describe(decision)


RUN = st.tuples(
    st.integers(min_value=0, max_value=40 * 24),  # hours after START
    st.sampled_from([("ok", True), ("ok", False), ("failed", False), ("timed_out", False),
                     ("unknown", False), (None, None), ("declined", False)]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN, max_size=25), st.integers(min_value=1, max_value=4))
def test_runs_that_obey_the_decision_never_exceed_the_budget_nor_retry_an_unknown(runs, budget):
    """Incidents arrive at random times with random outcomes; a run acts only when decide()
    says so. Then no window holds more than the budget's incidents, and nothing is sent after
    an unknown outcome inside the window."""
    limit = Budget(incidents=budget)
    history: list = []
    for number, (hours, (status, ok)) in enumerate(sorted(runs, key=lambda run: run[0])):
        now = START + timedelta(hours=hours)
        if not decide(history, GPU, now, limit).may_act:
            continue
        history += attempts(journal(now, f"r{number}", status, ok), RESETS)
    sent = [a for a in history if a.outcome is not Outcome.CANCELLED]
    for attempt in sent:
        window = [
            a for a in sent
            if timedelta(0) <= attempt.at - a.at <= timedelta(seconds=limit.window_s)
        ]  # fmt: skip
        assert len({a.run for a in window}) <= limit.incidents
        earlier = [a for a in window if a.at < attempt.at]
        assert not any(a.outcome is Outcome.UNKNOWN for a in earlier)
