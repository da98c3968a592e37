"""The deadline guard (spotline.domain.deadline): its rules and its guarantee."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotline.domain.deadline import (
    GuardSettings,
    GuardState,
    Placement,
    SpotHistory,
    Why,
    decide,
    guard_job,
    wait_limit_h,
)
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.deadline import JobSetup, simulate_deadline

SETTINGS = GuardSettings(changeover_h=0.2, price_ratio=3.0)
RICH = SpotHistory(observed_h=168.0, available_h=120.0, outages=(0.5, 0.5, 1.0, 2.0, 8.0, 20.0))


def state(**changes: object) -> GuardState:
    base = dict(
        job_h=48.0, deadline_h=60.0, elapsed_h=10.0, progress_h=9.0, placement=Placement.NONE,
        changeover_left_h=0.0, spot_available=False, outage_h=0.0, step_h=1 / 6,
    )  # fmt: skip
    base.update(changes)
    return GuardState(**base)  # type: ignore[arg-type]


def test_spot_while_it_is_there_and_the_deadline_is_safe() -> None:
    d = decide(state(spot_available=True), RICH, SETTINGS)
    assert (d.placement, d.why) == (Placement.SPOT, Why.SPOT_RUNS)
    assert d.slack_h == pytest.approx(60 - 10 - 39 - 0.2)
    assert d.line_h == pytest.approx(9 - 10 * 48 / 60)


def test_the_safety_net_moves_to_on_demand_when_a_spot_loss_would_no_longer_fit() -> None:
    # 2 h left, 1.7 h of work: one more step off On-Demand and a 0.2 h restart would not fit
    tight = state(elapsed_h=58.0, progress_h=46.3, spot_available=True, placement=Placement.SPOT)
    d = decide(tight, RICH, SETTINGS)
    assert (d.placement, d.why) == (Placement.ON_DEMAND, Why.SAFETY_NET)
    roomy = state(elapsed_h=58.0, progress_h=46.5, spot_available=True, placement=Placement.SPOT)
    assert decide(roomy, RICH, SETTINGS).placement is Placement.SPOT


def test_short_outages_are_waited_out_long_ones_covered_on_demand() -> None:
    tight = {"deadline_h": 54.0}  # slack 4.8 h for 40 h of horizon: some outages must be covered
    wait = decide(state(outage_h=0.0, **tight), RICH, SETTINGS)
    assert wait.placement is Placement.NONE and wait.wait_limit_h is not None
    assert 0 < wait.wait_limit_h < 20
    waited = wait.wait_limit_h + 1 / 6  # the outage went on that long: the slack burned with it
    long_outage = decide(state(outage_h=waited, elapsed_h=10.0 + waited, **tight), RICH, SETTINGS)
    assert (long_outage.placement, long_outage.why) == (Placement.ON_DEMAND, Why.OUTAGE_TOO_LONG)


def test_the_wait_limit_shrinks_with_the_slack() -> None:
    limits = [wait_limit_h(s, 40.0, RICH, 0.2) for s in (0.0, 2.0, 5.0, 10.0, 100.0)]
    assert limits == sorted(limits)
    assert limits[0] == 0.0 and limits[-1] == float("inf")


def test_back_to_spot_only_when_far_enough_ahead() -> None:
    ahead = state(placement=Placement.ON_DEMAND, spot_available=True, progress_h=12.0)
    assert decide(ahead, RICH, SETTINGS).why is Why.SPOT_BACK
    # the line two changeovers on stands at (10 + 0.4) * 48 / 60 = 8.32 h of work
    behind = state(placement=Placement.ON_DEMAND, spot_available=True, progress_h=8.3)
    assert decide(behind, RICH, SETTINGS).why is Why.STAY_ON_DEMAND


def test_thin_history_follows_uniform_progress_line() -> None:
    thin = SpotHistory(observed_h=2.0, available_h=1.0, outages=(0.5,))
    assert decide(state(progress_h=7.0), thin, SETTINGS).why is Why.BEHIND_LINE
    assert decide(state(progress_h=8.5), thin, SETTINGS).placement is Placement.NONE


def test_history_summary_counts_completed_outages_only() -> None:
    h = SpotHistory.summarise([False, True, False, False, True, True, False], 0.5)
    assert h.outages == (1.0,)
    assert h.observed_h == 3.5 and h.available_h == 1.5


def test_a_job_from_the_control_plane_maps_onto_the_guard() -> None:
    d = guard_job(
        job_h=10.0, submitted_at=1000.0, deadline_at=1000.0 + 20 * 3600, now=1000.0 + 5 * 3600,
        done_s=4 * 3600, placement=Placement.SPOT, spot_available=True, history=RICH, settings=SETTINGS,
    )  # fmt: skip
    assert d.placement is Placement.SPOT
    assert d.line_h == pytest.approx(4 - 5 * 10 / 20)
    assert "ahead of its line" in d.describe()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    up_share=st.floats(0.05, 0.95),
    ratio=st.floats(0.5, 0.97),
    changeover_steps=st.integers(0, 3),
)
def test_the_guard_meets_every_feasible_deadline_on_any_trace(
    seed: int, up_share: float, ratio: float, changeover_steps: int
) -> None:
    rng = random.Random(seed)
    counts, up = [], True
    for _ in range(800):  # bursty availability: spells that flip with a small chance each step
        if rng.random() < 0.1:
            up = rng.random() < up_share
        counts.append(1 if up else 0)
    trace = AvailabilityTrace("random", 600, tuple(counts))
    job_h = 20.0
    setup = JobSetup(job_h, job_h / ratio, changeover_steps * 0.1, 3.0)
    [out] = simulate_deadline(trace, setup, [450 / 6], "spotline")  # after the first refit: planned
    assert out.met_deadline


def test_a_deadline_job_on_demand_moves_to_spot_only_when_far_enough_ahead() -> None:
    from .builders import HOUR, NOW, cluster, config, job, pool, run_plan, summary

    od, spot = pool("od", capacity=16), pool("spot", capacity=16, purchase="spot")
    moves = config(move_to_spot_min_remaining_s=2 * HOUR, protection_period_s=600.0)
    # 10 h declared, submitted 4 h ago, run 1 h On-Demand so far
    base = job("d").gpus(8).expected_runtime(10 * HOUR).submitted(NOW - 4 * HOUR).running_since(NOW - HOUR)
    behind = base.deadline(NOW + 8 * HOUR)  # line at 4 * 10 / 12 = 3.3 h of work; 1 h done
    ahead = base.deadline(NOW + 60 * HOUR)  # line two changeovers on: 4.4 * 10 / 64 = 0.7 h; 1 h done
    for running, expected in ((behind, []), (ahead, [("move", "d", "od", "spot")])):
        snapshot = cluster([od, spot], [running.on("od"), job("s").gpus(8).on("spot")])
        assert summary(run_plan(snapshot, [], moves)) == expected
