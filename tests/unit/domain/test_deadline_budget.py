"""A pass's deadline plans (`deadline_budget.PassPlans`): at most `deadline_plans_per_pass` jobs get
the plan, the soonest deadlines first; within the budget the decisions are those of a pass without
one; a plan is solved once per (signal, work left, steps left) in a pass; `explain` decides as
the pass does and says when the budget left a job to the rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spotline.domain.deadline import (
    GuardSettings,
    GuardState,
    PassPlans,
    Placement,
    explain_deadline,
    spot_unsafe,
)
from spotline.domain.deadline_budget import may_ask
from spotline.domain.deadline_plan import DeadlinePlan, decide_from_signal, plan_now
from spotline.domain.models import Allocation, ClusterSnapshot, Job, JobState, SpotPoolSignal

from .builders import NOW, config, job, pool, run_plan
from .test_deadline_plan_signal import GAP, H, pattern, watch_of

WEEK = int(7 * 24 / GAP)


def signal(*, missing: bool) -> SpotPoolSignal:
    """A week of a flapping pool, ending with Spot missing for 30 minutes (or there)."""
    seen = pattern(5, WEEK)
    seen = [*seen[:-3], False, False, False] if missing else [*seen[:-1], True]
    start = NOW - len(seen) * GAP * H
    return watch_of(seen, GAP, start=start).signal(NOW)


def pending(n: int) -> list[Job]:
    """`n` pending deadline jobs of 4-9 h, deadlines 2x their runtime, the later ids sooner."""
    return [
        job(f"j{i}")
        .gpus(8)
        .expected_runtime((4 + i) * H)
        .deadline(NOW + (2 * (4 + i) - 3 * i) * H + 10 * H)
        .submitted(NOW - H)
        .build()
        for i in range(n)
    ]


def missing_spot(od_gpus: int = 16) -> ClusterSnapshot:
    pools = [pool("spot", purchase="spot", capacity=256), pool("od", capacity=od_gpus)]
    return ClusterSnapshot.build(pools, spot={"spot": signal(missing=True)})


@pytest.fixture
def solves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The work left (hours) of each plan solved (`DeadlinePlan.solve`), in order."""
    seen: list[float] = []
    original = DeadlinePlan.solve

    def counting(*args: Any, **kwargs: Any) -> DeadlinePlan:
        solved = original(*args, **kwargs)  # a grid too large raises: not counted
        seen.append(args[1])
        return solved

    monkeypatch.setattr(DeadlinePlan, "solve", counting)
    yield seen


def reasons(decisions: list[Any]) -> list[tuple[str, str, str]]:
    return [(type(d).__name__, d.job.id, str(getattr(d, "reason", ""))) for d in decisions]


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_a_pass_solves_plans_for_at_most_the_budget_the_soonest_deadlines(
    budget: int, solves: list[float]
) -> None:
    jobs = pending(6)
    snapshot = missing_spot()
    run_plan(snapshot, jobs, config(deadline_plans_per_pass=budget))
    soonest = sorted(jobs, key=lambda j: (j.spec.deadline_at or 0.0, j.id))[:budget]
    # each job solved once (its admission's reason reuses its plan), and only the soonest
    assert sorted(solves) == sorted((j.spec.expected_runtime_s or 0.0) / H for j in soonest)
    plans = PassPlans.for_pass(snapshot, jobs, config(deadline_plans_per_pass=budget), NOW)
    assert plans.allowed == frozenset(j.id for j in soonest)
    assert plans.left_to_rules == frozenset(j.id for j in jobs) - plans.allowed


def test_within_the_budget_the_decisions_are_those_of_a_pass_without_one(solves: list[float]) -> None:
    jobs = pending(6)
    for snapshot in (missing_spot(), missing_spot(od_gpus=64)):
        unbounded = run_plan(snapshot, jobs, config(deadline_plans_per_pass=None))
        solved = len(solves)
        assert solved > 0
        assert reasons(run_plan(snapshot, jobs, config(deadline_plans_per_pass=6))) == reasons(unbounded)
        assert reasons(run_plan(snapshot, jobs, config(deadline_plans_per_pass=60))) == reasons(unbounded)
        solves.clear()


def test_the_plan_decides_some_job_so_the_budget_matters() -> None:
    # the test above compares passes where the plan changes something: without it (budget 0) the
    # same pass decides otherwise, or the comparison would prove nothing
    jobs = pending(6)
    snapshot = missing_spot(od_gpus=64)
    with_plan = run_plan(snapshot, jobs, config(deadline_plans_per_pass=None))
    assert reasons(run_plan(snapshot, jobs, config(deadline_plans_per_pass=0))) != reasons(with_plan)


def test_a_plan_is_solved_once_per_work_and_time_left_and_decides_as_plan_now(solves: list[float]) -> None:
    sig = signal(missing=True)
    settings = GuardSettings(changeover_h=0.2)
    state = GuardState(
        job_h=6.0,
        deadline_h=14.0,
        elapsed_h=1.0,
        progress_h=0.5 + 60 / 3600,  # mid-way through a unit of the grid (2 minutes)
        placement=Placement.NONE,
        changeover_left_h=0.0,
        spot_available=False,
        outage_h=0.5,
        step_h=1 / 12,
    )
    plans = PassPlans()
    first = decide_from_signal(state, sig, settings, solve=plans.plan)
    # another job with the same work and time left on the grid (a few seconds apart)
    alike = GuardState(**{**_fields(state), "job_h": 6.0 + 1 / 3600, "deadline_h": 14.0 + 2 / 3600})
    second = decide_from_signal(alike, sig, settings, solve=plans.plan)
    assert plans.solved == 1 and len(solves) == 1
    assert first == decide_from_signal(state, sig, settings, solve=plan_now)
    assert second == decide_from_signal(alike, sig, settings, solve=plan_now)
    # more work left: a plan of its own
    more = GuardState(**{**_fields(state), "job_h": 7.0})
    decide_from_signal(more, sig, settings, solve=plans.plan)
    assert plans.solved == 2
    # the same numbers on another signal object: not shared
    decide_from_signal(state, signal(missing=True), settings, solve=plans.plan)
    assert plans.solved == 3


def _fields(state: GuardState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in GuardState.__dataclass_fields__}


def test_moves_to_spot_solve_plans_for_at_most_the_budget(solves: list[float]) -> None:
    # Spot back, the Spot pool empty: each deadline job running On-Demand asks the plan
    running: list[Allocation] = []
    for i in range(5):
        built = (
            job(f"r{i}")
            .gpus(8)
            .expected_runtime((8 + i) * H)
            .deadline(NOW + (14 + i) * H)
            .submitted(NOW - 2 * H)
            .progress(0.05)
        )
        running.append(built.running_since(NOW - 2 * H).on("od"))
    pools = [pool("spot", purchase="spot", capacity=64), pool("od", capacity=64)]
    snapshot = ClusterSnapshot.build(pools, running, spot={"spot": signal(missing=False)})
    policy = {"move_to_spot_min_remaining_s": 3600.0}
    assert all(may_ask(a.job, snapshot, config(**policy), NOW, pending=False) for a in running)
    # with moves to Spot off, or less left than they ask, a running job takes no place
    assert not may_ask(running[0].job, snapshot, config(), NOW, pending=False)
    assert not may_ask(
        running[0].job, snapshot, config(move_to_spot_min_remaining_s=40 * H), NOW, pending=False
    )
    unbounded = run_plan(snapshot, [], config(**policy, deadline_plans_per_pass=None))
    assert len(solves) == 5
    solves.clear()
    assert reasons(run_plan(snapshot, [], config(**policy, deadline_plans_per_pass=5))) == reasons(unbounded)
    solves.clear()
    run_plan(snapshot, [], config(**policy, deadline_plans_per_pass=2))
    assert sorted(solves) == pytest.approx([8 * 0.95, 9 * 0.95])  # the two soonest deadlines' work left


def test_explain_decides_as_the_pass_and_says_when_the_budget_left_a_job_to_the_rules() -> None:
    jobs = pending(4)
    snapshot = missing_spot()
    plans = PassPlans.for_pass(snapshot, jobs, config(deadline_plans_per_pass=1), NOW)
    assert plans.allowed is not None and len(plans.allowed) == 1
    (allowed,) = plans.allowed
    for j in jobs:
        guard = explain_deadline(j, NOW, snapshot, plans=plans)
        alone = explain_deadline(
            j, NOW, snapshot, plans=PassPlans.for_pass(snapshot, [j], config(deadline_plans_per_pass=0), NOW)
        )
        assert guard is not None and alone is not None
        if j.id == allowed:
            assert "plan_left_to_rules" not in guard
            assert guard == explain_deadline(j, NOW, snapshot)  # no budget: the same plan
        else:
            assert "deadline_plans_per_pass = 1" in str(guard["plan_left_to_rules"])
            assert guard["planned"] is False
            assert guard["advice"] == alone["advice"] and guard["why"] == alone["why"]
        # the pass's refusal of Spot for the job follows the same decision
        refused = spot_unsafe(j, NOW, on_spot=False, spot=snapshot.spot["spot"], plans=plans)
        said = guard["advice"] == Placement.ON_DEMAND.value
        assert (refused is not None) == said


def test_jobs_that_cannot_ask_take_no_place_in_the_budget() -> None:
    snapshot = missing_spot()
    never = job("n").gpus(8).expected_runtime(4 * H).deadline(NOW + 5 * H).spot("never").build()
    undeclared = job("u").gpus(8).deadline(NOW + 5 * H).build()
    on_spot = job("s").gpus(8).expected_runtime(4 * H).deadline(NOW + 5 * H).on("spot")
    # beyond the plan's grid (PLAN_NOW_MAX_CELLS): the rules decide it whatever the budget
    too_large = job("x").gpus(8).expected_runtime(48 * H).deadline(NOW + 60 * H).submitted(NOW).build()
    asking = pending(2)
    assert not may_ask(too_large, snapshot, config(), NOW, pending=True)
    assert all(may_ask(j, snapshot, config(), NOW, pending=True) for j in asking)
    with_spot = ClusterSnapshot.build(snapshot.pools.values(), [on_spot], spot=snapshot.spot)
    plans = PassPlans.for_pass(
        with_spot, [never, undeclared, too_large, *asking], config(deadline_plans_per_pass=2), NOW
    )
    assert plans.allowed == frozenset(j.id for j in asking)
    assert plans.left_to_rules == frozenset()
    assert on_spot.job.state is JobState.RUNNING


@pytest.mark.parametrize("budget", [0, 2, None])
def test_the_reconcilers_look_at_waiting_jobs_keeps_the_budget(
    budget: int | None, solves: list[float]
) -> None:
    # Jobs admitted to a missing Spot pool, waiting on their launch (the reconciler's
    # `leave_missing_spot`): the same budget, the soonest deadlines get the plan.
    jobs = pending(5)
    policy = config(deadline_plans_per_pass=budget)
    plans = PassPlans.for_waiting([*jobs, job("plain").gpus(8).build()], policy, NOW)
    sooner = sorted(jobs, key=lambda j: j.spec.deadline_at or 0.0)
    if budget is None:
        assert plans.allowed is None
    else:
        assert plans.allowed == {j.id for j in sooner[:budget]}
        assert plans.left_to_rules == {j.id for j in sooner[budget:]}
    for waiting in jobs:
        spot_unsafe(waiting, NOW, on_spot=False, spot=signal(missing=True), plans=plans)
    assert len(solves) <= (len(jobs) if budget is None else budget)
    if budget == 0:
        assert solves == []
    else:
        assert solves
