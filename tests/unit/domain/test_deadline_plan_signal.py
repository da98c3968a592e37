"""The deadline guard's plan in the control plane: fitted on the pool's interval history
(`PoolWatch` -> `SpotPoolSignal`), solved for what is left of the job, and used by the guard."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotline.domain.deadline import (
    GuardSettings,
    GuardState,
    Placement,
    Why,
    explain_deadline,
    plan_asked,
)
from spotline.domain.deadline_plan import (
    PLAN_STEP_H,
    PLAN_WINDOW_H,
    DeadlinePlan,
    SpotChain,
    decide_from_signal,
    observations,
    plan_now,
    run_steps,
)
from spotline.domain.models import ClusterSnapshot, Job, Pool, Purchase, SpotPoolSignal
from spotline.domain.spot_watch import PoolWatch

from .builders import job

H = 3600.0
GAP = PLAN_STEP_H
SETTINGS = GuardSettings(changeover_h=0.2, price_ratio=3.0)


def pattern(seed: int, length: int) -> list[bool]:
    """Spells and outages of 1 to 17 steps, deterministic."""
    out: list[bool] = []
    up = seed % 2 == 0
    x = seed
    while len(out) < length:
        x = (x * 1103515245 + 12345) % 2**31
        out += [up] * (1 + x % 17)
        up = not up
    return out[:length]


def watch_of(seen: list[bool], gap_h: float, start: float = 0.0) -> PoolWatch:
    """What the control plane would have kept, observing the pool at each step of `seen`."""
    watch = PoolWatch.first(seen[0], start)
    for i, up in enumerate(seen[1:], start=1):
        watch = watch.observe(up, start + i * gap_h * H) or watch
    return watch


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_observations_from_the_interval_history_are_the_trace_before_now(seed: int) -> None:
    seen = pattern(seed, 400)
    now = 400 * GAP * H
    signal = watch_of(seen, GAP).signal(now)
    assert observations(signal, GAP, window_h=400 * GAP) == seen
    # the plan's window: the week before now
    week = int(PLAN_WINDOW_H / GAP)
    long = pattern(seed, week + 250)
    assert observations(watch_of(long, GAP).signal(len(long) * GAP * H), GAP) == long[-week:]
    # only the past: the same history read 5 steps earlier gives the trace up to then
    early = watch_of(seen, GAP).signal(now - 5 * GAP * H)
    assert observations(early, GAP, window_h=400 * GAP) == seen[:-5]


def test_the_control_plane_fits_the_chain_the_single_job_benchmark_fits() -> None:
    # the benchmark fits its plan on the trace's week before the refit; the control plane, on the
    # same trace kept as intervals, gets the same observations, so the same chain
    seen = pattern(7, int(PLAN_WINDOW_H / GAP))
    signal = watch_of(seen, GAP, start=1_700_000_000.0).signal(1_700_000_000.0 + len(seen) * GAP * H)
    assert SpotChain.fit(observations(signal, GAP), GAP) == SpotChain.fit(seen, GAP)


def test_run_steps_counts_now_and_the_steps_alike_before_it() -> None:
    missing = SpotPoolSignal(available=False, outage_s=35 * 60, observed_s=48 * H)
    assert run_steps(missing, False, GAP) == 4  # 35 min: 3 whole steps before now, and now
    assert run_steps(missing, True, GAP) == 1  # Spot back now
    back = SpotPoolSignal(observed_s=48 * H, outages_s=(H,), spans_s=((2 * H, H),))
    assert run_steps(back, True, GAP) == 7
    assert run_steps(SpotPoolSignal(observed_s=2 * H), True, GAP) == 13
    assert run_steps(None, True, GAP) == 1


def test_the_plan_from_now_takes_the_action_of_the_plan_from_the_start() -> None:
    # The model does not change with time, so solving what is left of the job now gives the action
    # that the benchmark's plan, solved at the job's start, gives in the same state.
    chain = SpotChain.fit(pattern(5, 600), GAP)
    job_h, deadline_h = 4.0, 7.0
    start = DeadlinePlan.solve(chain, job_h, deadline_h, 0.2, 3.0)
    compared = 0
    for t in range(0, start.steps, 3):
        elapsed = t * GAP
        for progress in (0.0, 0.5, 1.0, 2.0):
            if job_h - progress > deadline_h - elapsed:
                continue
            now = DeadlinePlan.solve(chain, job_h - progress, deadline_h - elapsed, 0.2, 3.0)
            for placement in Placement:
                for there in (True, False):
                    for run in (1, 3, 20):
                        a = start.choose(elapsed, progress, placement, 0.0, there, run)
                        b = now.choose(0.0, 0.0, placement, 0.0, there, run)
                        if a is None:  # a state the start's plan cannot reach (e.g. progress at 0 h)
                            continue
                        assert a == b, (t, progress, placement, there, run)
                        compared += 1
    assert compared > 100


def flapping(now: float, missing_for_h: float) -> SpotPoolSignal:
    """A pool whose Spot comes and goes every hour over the two weeks before `now`, there until
    `missing_for_h` ago."""
    seen = [(i // 6) % 2 == 0 for i in range(2010)]  # ends with Spot there
    watch = watch_of(seen, GAP, start=now - missing_for_h * H - len(seen) * GAP * H)
    changed = watch.observe(False, now - missing_for_h * H)
    assert changed is not None
    return changed.signal(now)


def state(**changes: object) -> GuardState:
    base = GuardState(
        job_h=10.0,
        deadline_h=12.5,
        elapsed_h=6.0,
        progress_h=5.0,
        placement=Placement.NONE,
        changeover_left_h=0.0,
        spot_available=False,
        outage_h=0.5,
        step_h=5 / 60,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_with_enough_history_the_plan_decides_and_otherwise_the_rules() -> None:
    now = 6 * H
    signal = flapping(now, 0.5)
    planned = decide_from_signal(state(), signal, SETTINGS)
    assert planned.why is Why.PLAN_ON_DEMAND and planned.placement is Placement.ON_DEMAND
    assert "cheapest expected schedule" in planned.describe()
    # the rules alone: the caller asked for no plan, the plan is off, or too little history
    assert decide_from_signal(state(), signal, SETTINGS, use_plan=False).why is Why.OUTAGE_TOO_LONG
    off = replace(SETTINGS, plan_longest_h=None)
    assert decide_from_signal(state(), signal, off).why is Why.OUTAGE_TOO_LONG
    thin = SpotPoolSignal(available=False, outage_s=0.5 * H, observed_s=20 * H, available_s=10 * H)
    assert decide_from_signal(state(), thin, SETTINGS).why not in {
        Why.PLAN_SPOT,
        Why.PLAN_WAIT,
        Why.PLAN_ON_DEMAND,
    }
    assert plan_now(state(), thin, SETTINGS) is None
    # outage lengths without their places in time (not what PoolWatch gives): no plan
    unplaced = signal.model_copy(update={"spans_s": ()})
    assert plan_now(state(), unplaced, SETTINGS) is None


def test_the_safety_net_stays_final_whatever_the_plan() -> None:
    # 1 h of slack minus the step: the net fires before the plan is asked
    tight = state(progress_h=4.0, elapsed_h=6.0, deadline_h=12.25, spot_available=True, outage_h=0.0)
    signal = flapping(6 * H, 0.5).model_copy(update={"available": True, "outage_s": 0.0})
    assert decide_from_signal(tight, signal, SETTINGS).why is Why.SAFETY_NET


def half_done_with_deadline(now: float) -> Job:
    """A 10 h job submitted 6 h before `now`, half done, due 12.5 h after its submission."""
    submitted = now - 6 * H
    return (
        job("j")
        .expected_runtime(10 * H)
        .deadline(submitted + 12.5 * H)
        .submitted(submitted)
        .progress(0.5)
        .build()
    )


def test_explain_says_when_the_plan_decided() -> None:
    now = 1_700_000_000.0 + 6 * H
    deadline_job = half_done_with_deadline(now)
    pools = [
        Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8),
        Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
    ]
    snapshot = ClusterSnapshot.build(pools, spot={"spot": flapping(now, 0.5)})
    guard = explain_deadline(deadline_job, now, snapshot, changeover_h=0.2)
    assert guard is not None
    assert guard["why"] == "plan-on-demand" and guard["planned"] is True
    assert guard["spot_history"] == {
        "pool": "spot",
        "spot_there": False,
        "missing_for_h": 0.5,
        "observed_h": 335.5,  # 2010 steps of 10 min, then the half hour missing
        "availability": 0.501,  # 168 h of 335.5
        "outages": 167,
    }
    rules = explain_deadline(deadline_job, now, ClusterSnapshot.build(pools), changeover_h=0.2)
    assert rules is not None and rules["planned"] is False


def test_the_plan_never_sends_a_job_back_to_a_pool_at_risk() -> None:
    # far ahead on On-Demand, Spot there: without the risk the plan may send it back to Spot
    ahead = state(placement=Placement.ON_DEMAND, progress_h=9.0, spot_available=True, outage_h=0.0)
    signal = flapping(6 * H, 0.5).model_copy(update={"available": True, "outage_s": 0.0})
    risky = signal.model_copy(update={"at_risk": True})
    decision = decide_from_signal(replace(ahead, at_risk=True), risky, SETTINGS)
    assert decision.why is Why.SPOT_AT_RISK and decision.placement is Placement.ON_DEMAND
    assert decide_from_signal(ahead, signal, SETTINGS).placement is Placement.SPOT


def test_the_plan_is_asked_where_the_pass_asks_it() -> None:
    assert plan_asked(Placement.ON_DEMAND, True)  # back to Spot or not
    assert plan_asked(Placement.NONE, False) and plan_asked(Placement.SPOT, False)  # wait or On-Demand
    assert not plan_asked(Placement.ON_DEMAND, False)  # stays On-Demand while Spot is missing
    assert not plan_asked(Placement.NONE, True) and not plan_asked(Placement.SPOT, True)  # rules 1, 7
    # explain says what the pass does: with Spot there, a waiting job follows the rules
    now = 1_700_000_000.0 + 6 * H
    waiting = half_done_with_deadline(now)
    pools = [Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8)]
    there = flapping(now, 0.5).model_copy(update={"available": True, "outage_s": 0.0})
    guard = explain_deadline(
        waiting, now, ClusterSnapshot.build(pools, spot={"spot": there}), changeover_h=0.2
    )
    assert guard is not None and guard["planned"] is False and guard["why"] == "spot-runs"
    # (asked, the plan would have decided this state itself)
    asked = decide_from_signal(state(spot_available=True, outage_h=0.0), there, SETTINGS)
    assert asked.why in {Why.PLAN_SPOT, Why.PLAN_WAIT, Why.PLAN_ON_DEMAND}
