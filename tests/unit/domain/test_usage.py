"""Decayed usage for fair-share: the bucketed form that the ledger stores gives the usage that
the simulator integrates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotline.domain.usage import HORIZON_HALF_LIVES, bucket_start, decayed_usage_gpu_s, run_buckets
from spotline.sim.usage import DecayedUsage
from tests.budget import examples

DAY = 86400.0
WEEK = 7 * DAY
T0 = 1_800_000_000.0  # a few hours into a day


def test_one_gpu_for_one_half_life_counts_half_of_what_it_would_undecayed_at_its_end() -> None:
    # One GPU held for a half-life: the integral of 2^(-age / half-life) is half-life / ln 2 / 2
    buckets = run_buckets(1, T0, T0 + WEEK, WEEK)
    assert len(buckets) == 2  # the run touches two half-life buckets
    expected = WEEK / math.log(2.0) * 0.5
    assert decayed_usage_gpu_s(buckets, [], T0 + WEEK, WEEK) == pytest.approx(expected, rel=1e-12)
    # And a half-life later, half of that
    assert decayed_usage_gpu_s(buckets, [], T0 + 2 * WEEK, WEEK) == pytest.approx(expected / 2, rel=1e-12)


def test_a_running_job_counts_from_its_start() -> None:
    expected = 4 * WEEK / math.log(2.0) * 0.5
    assert decayed_usage_gpu_s({}, [(4, T0)], T0 + WEEK, WEEK) == pytest.approx(expected, rel=1e-12)
    assert decayed_usage_gpu_s({}, [(4, T0)], T0, WEEK) == 0.0


def test_a_bucket_keeps_a_run_inside_it_scaled_to_the_bucket_start() -> None:
    begins = bucket_start(T0, WEEK)
    assert begins <= T0 < begins + WEEK and begins % WEEK == 0
    [(start, value)] = run_buckets(2, begins + 100, begins + 400, WEEK).items()
    k = math.log(2.0) / WEEK
    assert start == begins
    assert value == pytest.approx(2 * (math.exp(k * 400) - math.exp(k * 100)) / k, rel=1e-12)


def test_a_long_run_touches_at_most_the_horizon_in_buckets() -> None:
    # (each bucket is one SET in the release's update expression)
    buckets = run_buckets(8, T0, T0 + 365 * DAY, DAY)
    assert len(buckets) <= HORIZON_HALF_LIVES + 1


def test_usage_older_than_the_horizon_is_dropped() -> None:
    end = T0 + 100 * DAY
    buckets = run_buckets(8, T0, end, WEEK)
    assert min(buckets) >= end - (HORIZON_HALF_LIVES + 1) * WEEK
    # What is dropped weighs under 0.1% of what a run of the same length would count
    full = 8 * WEEK / math.log(2.0) * -math.expm1(-math.log(2.0) * 100 * DAY / WEEK)
    assert decayed_usage_gpu_s(buckets, [], end, WEEK) == pytest.approx(full, rel=1e-3)
    assert decayed_usage_gpu_s(buckets, [], end + 100 * WEEK, WEEK) == 0.0


def test_a_non_positive_half_life_is_refused() -> None:
    with pytest.raises(ValueError, match="half-life"):
        run_buckets(1, T0, T0 + 1, 0.0)


runs = st.lists(
    st.tuples(
        st.integers(1, 64),  # gpus
        st.floats(0, 30 * DAY),  # start, after T0
        st.floats(1, 10 * DAY),  # length
        st.booleans(),  # still running at the end
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=examples(200), deadline=None)
@given(runs=runs, half_life_days=st.sampled_from([1.0, 7.0, 30.0]), later=st.floats(0, 20 * DAY))
def test_the_bucketed_usage_is_what_the_simulator_integrates(
    runs: list[tuple[int, float, float, bool]], half_life_days: float, later: float
) -> None:
    half_life = half_life_days * DAY
    now = T0 + max(start + length for _, start, length, _ in runs) + later
    sim = DecayedUsage(half_life)
    changes: list[tuple[float, int]] = []
    buckets: dict[int, float] = {}
    running: list[tuple[int, float]] = []
    for gpus, start, length, still in runs:
        begin, end = T0 + start, T0 + start + length
        changes.append((begin, gpus))
        if still:
            running.append((gpus, begin))
        else:
            changes.append((end, -gpus))
            for day, value in run_buckets(gpus, begin, end, half_life).items():
                buckets[day] = buckets.get(day, 0.0) + value
    for at, gpus in sorted(changes):
        sim.change("team", gpus, at)
    expected = sim.gpu_hours(now)["team"] * 3600.0
    got = decayed_usage_gpu_s(buckets, running, now, half_life)
    # The horizon drops usage more than 10 half-lives old: each GPU-second of it weighs < 2^-10
    dropped_at_most = 2.0**-HORIZON_HALF_LIVES * sum(gpus * length for gpus, _, length, _ in runs)
    assert got == pytest.approx(expected, rel=1e-9, abs=dropped_at_most + 1e-6)
    if now - T0 < HORIZON_HALF_LIVES * half_life:
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-6)
