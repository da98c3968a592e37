"""The deadline guard's plan (spotline.domain.deadline_plan): the pool's model and the solved plan."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from spotline.domain.deadline import GuardSettings, GuardState, Placement, SpotHistory, Why, decide
from spotline.domain.deadline_plan import DeadlinePlan, SpotChain, decide_planned, run_edges
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.deadline import HistoryTracker, JobSetup, simulate_deadline

STEP_H = 1 / 6  # the 600 s traces
SETTINGS = GuardSettings(changeover_h=0.2, price_ratio=3.0)


def test_run_lengths_are_bucketed_finely_first_then_doubling() -> None:
    assert run_edges(1.0, 12.0) == (1, 2, 3, 4, 6, 8, 12)
    assert run_edges(STEP_H, 0.0) == (1,)


def test_the_chain_learns_how_long_spells_and_outages_last() -> None:
    # Spot there for exactly 2 steps, then missing for 10, over and over
    observations = ([True] * 2 + [False] * 10) * 40
    chain = SpotChain.fit(observations, STEP_H)
    up_1, up_2 = chain.state(True, 1), chain.state(True, 2)
    assert chain.up_stay[up_1] > 0.9  # a spell one step old goes on
    assert chain.up_stay[up_2] < 0.1  # one two steps old ends
    down_9 = chain.state(False, 9) - chain.buckets
    assert chain.down_stay[0] > 0.9 and chain.down_stay[down_9] < 0.9
    to_up, to_down = chain.transitions()
    np.testing.assert_allclose(to_up.sum(axis=1) + to_down.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="step_h"):
        SpotChain.fit(observations, 0.0)


def spells(up: int, down: int, repeats: int) -> list[bool]:
    return ([True] * up + [False] * down) * repeats


def test_the_plan_skips_spot_spells_too_short_to_pay_back_a_changeover() -> None:
    # one-step spells (600 s) are shorter than the 720 s changeover: they never make progress
    chain = SpotChain.fit(spells(1, 5, 60), STEP_H)
    plan = DeadlinePlan.solve(chain, job_h=10.0, deadline_h=20.0, changeover_h=0.2, price_ratio=3.0)
    choice = plan.choose(0.0, 0.0, Placement.NONE, 0.0, True, 1)
    assert choice is not Placement.SPOT
    # the guard without a plan takes it (Exploitation)
    state = GuardState(10.0, 20.0, 0.0, 0.0, Placement.NONE, 0.0, True, 0.0, STEP_H)
    assert decide(state, SpotHistory(), SETTINGS).placement is Placement.SPOT


def test_the_plan_rides_long_spells() -> None:
    chain = SpotChain.fit(spells(30, 3, 10), STEP_H)
    plan = DeadlinePlan.solve(chain, job_h=10.0, deadline_h=20.0, changeover_h=0.2, price_ratio=3.0)
    assert plan.choose(0.0, 0.0, Placement.NONE, 0.0, True, 1) is Placement.SPOT
    assert plan.choose(1.0, 0.8, Placement.SPOT, 0.0, True, 6) is Placement.SPOT
    assert plan.choose(1.0, 0.8, Placement.NONE, 0.0, False, 1) is Placement.NONE  # short outages: wait
    assert plan.choose(25.0, 0.0, Placement.NONE, 0.0, True, 1) is None  # past the deadline: not planned


def test_the_plan_never_overrides_the_safety_net() -> None:
    chain = SpotChain.fit(spells(30, 3, 10), STEP_H)
    plan = DeadlinePlan.solve(chain, job_h=10.0, deadline_h=20.0, changeover_h=0.2, price_ratio=3.0)
    # 9.5 h to go and 9.2 h of work: no room for a Spot loss
    state = GuardState(10.0, 20.0, 10.5, 0.8, Placement.NONE, 0.0, True, 0.0, STEP_H)
    decision = decide_planned(state, SpotHistory(), SETTINGS, plan, 3)
    assert (decision.placement, decision.why) == (Placement.ON_DEMAND, Why.SAFETY_NET)
    early = GuardState(10.0, 20.0, 0.0, 0.0, Placement.NONE, 0.0, True, 0.0, STEP_H)
    assert decide_planned(early, SpotHistory(), SETTINGS, plan, 1).why is Why.PLAN_SPOT


def test_on_a_trace_like_its_history_the_plan_comes_close_to_the_optimum() -> None:
    # the history and the job's window follow the same pattern: short spells the plan should skip
    # (1 step), long ones it should ride, and outages it should cover
    pattern = spells(1, 2, 4) + spells(24, 12, 1)
    counts = [1 if up else 0 for up in pattern * 40]
    trace = AvailabilityTrace("pattern", 600, tuple(counts))
    setup = JobSetup(job_h=12.0, deadline_h=16.0, changeover_h=0.2, price_ratio=3.0)
    starts = [80.0, 90.0, 100.0]  # after the first refit (72 h in)
    planned = simulate_deadline(trace, setup, starts, "spotline")
    best = simulate_deadline(trace, setup, starts, "omniscient")
    uniform = simulate_deadline(trace, setup, starts, "uniform-progress")
    unplanned = simulate_deadline(trace, setup, starts, "spotline", replace(SETTINGS, plan_longest_h=None))
    assert all(o.met_deadline for o in planned)
    ours = sum(o.cost_fraction_of_on_demand for o in planned)
    optimum = sum(o.cost_fraction_of_on_demand for o in best)
    theirs = sum(o.cost_fraction_of_on_demand for o in uniform)
    # measured: 2.04 against 1.88 (optimum), 2.18 (Uniform Progress), 2.35 (the guard, no plan)
    assert ours - optimum <= 0.6 * (theirs - optimum)
    assert ours < sum(o.cost_fraction_of_on_demand for o in unplanned)


def test_the_simulator_s_run_length_is_what_the_policy_has_seen() -> None:
    tracker = HistoryTracker(STEP_H)
    for up in (True, True, False, False, False, True):
        tracker.observe(up)
    assert tracker.run == 1
    tracker.observe(True)
    assert tracker.run == 2


def test_a_plan_too_large_is_refused() -> None:
    chain = SpotChain.fit(spells(5, 5, 10), 1 / 3600)  # one-second steps: far too fine a grid
    with pytest.raises(ValueError, match="too large"):
        DeadlinePlan.solve(chain, job_h=48.0, deadline_h=80.0, changeover_h=0.2, price_ratio=3.0)
