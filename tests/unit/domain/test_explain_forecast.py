"""Explanations (priority terms, per-pool blockers, position) and the start forecast (a replay
through the planner)."""

from __future__ import annotations

import random

import pytest

from spotline.domain import effective_priority
from spotline.domain.explain import explain_pools, position, priority_terms, scores
from spotline.domain.forecast import forecast_start, replay_start
from spotline.domain.preemption import estimated_remaining_s

from .builders import HOUR, NOW, cluster, config, job, pool, quota

OD8 = pool("od", capacity=8)


@pytest.mark.parametrize(
    "builder",
    [
        job("a").normal().gpus(4).submitted(NOW - HOUR),
        job("b").low().gpus(64).submitted(NOW - 30 * HOUR).preemptions(2),
        job("c").high().gpus(8).deadline(NOW + 2 * HOUR).expected_runtime(HOUR).interruptions(5),
    ],
)
def test_the_terms_add_up_to_the_effective_priority(builder: object) -> None:
    built = builder.build()  # type: ignore[attr-defined]
    policy = config()
    remaining = estimated_remaining_s(built, NOW, policy)
    terms = priority_terms(built, NOW, policy.weights, remaining_s=remaining, fairshare=0.5)
    expected = effective_priority(built, NOW, policy.weights, remaining_s=remaining, fairshare=0.5)
    assert sum(terms.values()) == pytest.approx(expected)
    assert terms["class"] == policy.weights.class_step * built.priority.rank


def test_pools_name_capacity_protection_and_delay() -> None:
    policy = config(protection_period_s=600.0, preemption_delay_s=300.0)
    low = job("low").low().gpus(8).team("b").running_since(NOW - 60).expected_runtime(HOUR).on("od")
    waiting = job("w").high().gpus(8).gpu_type("a100").team("a").submitted(NOW - 100).build()
    snapshot = cluster([OD8, pool("spot", capacity=8, purchase="spot", gpu_type="h100")], [low])

    pools = {p.pool: p for p in explain_pools(waiting, snapshot, NOW, policy)}

    od = pools["od"]
    assert od.blockers[0] == "capacity: pool od has 0 free GPUs of the 8 needed"
    assert any(b.startswith("protection: 1 would-be victim(s)") and "in 540 s" in b for b in od.blockers)
    assert "protection periods ending" in (od.unblock or "")
    assert not od.fits_now
    # The spot pool has another GPU type: a shape blocker, nothing else.
    assert pools["spot"].blockers == ["shape: the job asks for a100, the pool has h100"]
    # Once the victim is out of its protection period, the preemption delay is what blocks.
    (od,) = explain_pools(waiting, cluster([OD8], [low]), NOW, config(preemption_delay_s=300.0))
    assert any(b.startswith("preemption delay:") and "200 s to go" in b for b in od.blockers)
    assert "preempting 8 eligible GPU(s)" in (od.unblock or "")


def test_a_job_that_fits_says_so_and_position_counts_its_class() -> None:
    policy = config()
    queued = [job(f"n{i}").normal().gpus(1).submitted(NOW - i).build() for i in range(3)]
    queued.append(job("h").high().gpus(1).build())
    snapshot = cluster([OD8])
    (od,) = explain_pools(queued[0], snapshot, NOW, policy)
    assert od.fits_now and not od.blockers
    where = position(queued[0], queued, scores(snapshot, NOW, policy))
    assert where == {"class": "normal", "in_class": 3, "class_size": 3, "overall": 4, "queued": 4}


def test_forecast_is_when_the_running_job_ends_with_a_band() -> None:
    policy = config()
    running = job("r").normal().gpus(8).running_since(NOW - 600).expected_runtime(1600).on("od")
    waiting = job("w").normal().gpus(8).submitted(NOW - 10).build()
    snapshot = cluster([OD8], [running], [quota("default", 8)])

    forecast = forecast_start("w", snapshot, [waiting], NOW, policy, random.Random(1))

    assert forecast.at == pytest.approx(NOW + 1000)
    assert forecast.earliest == pytest.approx(NOW + 500)  # 0.5 x the remaining 1000 s
    assert forecast.latest == pytest.approx(NOW + 1500)


def test_forecast_follows_the_queue_order() -> None:
    # Two 8-GPU jobs wait behind one running for 1000 s more: the high one goes first, the
    # normal one after the high one's own 2000 s.
    policy = config()
    running = job("r").normal().gpus(8).running_since(NOW).expected_runtime(1000).on("od")
    high = job("h").high().gpus(8).expected_runtime(2000).build()
    normal = job("n").normal().gpus(8).expected_runtime(500).build()
    snapshot = cluster([OD8], [running])
    at, _ = replay_start("n", snapshot, [high, normal], NOW, policy, random.Random(1))
    assert at == pytest.approx(NOW + 3000)


def test_forecast_is_unknown_when_nothing_would_let_it_start() -> None:
    policy = config()
    huge = job("big").normal().gpus(8).build()
    snapshot = cluster([pool("small", capacity=4)])
    forecast = forecast_start("big", snapshot, [huge], NOW, policy, random.Random(1))
    assert forecast.at is None and "nothing running or queued" in forecast.reason


def test_forecast_replays_a_move_to_spot_that_frees_on_demand_gpus() -> None:
    # `w` runs only On-Demand, held for ten more hours by `long`; a Spot job ends in 1000 s.
    long = job("long").normal().gpus(8).running_since(NOW - HOUR).expected_runtime(11 * HOUR).on("od")
    spot_job = job("s").normal().gpus(8).running_since(NOW - 600).expected_runtime(1600).on("spot")
    waiting = job("w").normal().gpus(8).spot("never").submitted(NOW - 10).build()
    snapshot = cluster([OD8, pool("spot", capacity=8, purchase="spot")], [long, spot_job])

    stays = forecast_start("w", snapshot, [waiting], NOW, config(), random.Random(1))
    moves = forecast_start(
        "w", snapshot, [waiting], NOW, config(move_to_spot_min_remaining_s=HOUR), random.Random(1)
    )

    # Then without moves it waits for `long` to end; with them, `long` moves to Spot once `s`
    # ends and leaves after its checkpoint (60 s), and `w` takes its On-Demand GPUs
    assert stays.at == pytest.approx(NOW + 10 * HOUR)
    assert moves.at == pytest.approx(NOW + 1000 + 60)
