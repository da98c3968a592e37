"""Unsettled Spot pools last (`SchedulerConfig.spot_settle_s`, `placement.unsettled`): a Spot pool
seen losing capacity, or seen with it back, less than `spot_settle_s` ago goes after the On-Demand
pools."""

from __future__ import annotations

import pytest

from spotline.domain import candidate_pools
from spotline.domain.models import SpotPoolSignal
from spotline.domain.placement import unsettled

from .builders import DAY, HOUR, NOW, cluster, config, job, pool, run_plan, summary

SPOT_A = pool("spot-a", purchase="spot")
SPOT_B = pool("spot-b", purchase="spot")
OD = pool("od")
POOLS = [SPOT_A, SPOT_B, OD]


def back_since(seconds: float) -> SpotPoolSignal:
    """A pool seen for a day whose one outage (an hour) ended `seconds` ago."""
    return SpotPoolSignal(
        available=True,
        observed_s=DAY,
        available_s=DAY - HOUR,
        outages_s=(HOUR,),
        spans_s=((seconds + HOUR, seconds),),
    )


MISSING = SpotPoolSignal(available=False, outage_s=600.0, observed_s=DAY, available_s=DAY - 600.0)


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        (None, False),  # nothing seen
        (SpotPoolSignal(observed_s=DAY, available_s=DAY), False),  # never missing
        (MISSING, True),  # missing for 10 minutes
        (MISSING.model_copy(update={"outage_s": 2 * HOUR}), False),  # for two hours: no longer
        (back_since(600.0), True),
        (back_since(1800.0), False),
        (back_since(3 * HOUR), False),
    ],
)
def test_unsettled(signal: SpotPoolSignal | None, expected: bool) -> None:
    assert unsettled(signal, 1800.0) is expected


@pytest.mark.parametrize(
    ("settle_s", "spot", "expected"),
    [
        (0.0, {"spot-a": back_since(60.0)}, ["spot-a", "spot-b", "od"]),  # off
        (1800.0, {}, ["spot-a", "spot-b", "od"]),  # nothing seen
        (1800.0, {"spot-a": back_since(60.0)}, ["spot-b", "od", "spot-a"]),
        (1800.0, {"spot-a": back_since(60.0), "spot-b": MISSING}, ["od", "spot-a", "spot-b"]),
        (1800.0, {"spot-a": back_since(2 * HOUR)}, ["spot-a", "spot-b", "od"]),
    ],
)
def test_unsettled_spot_pools_go_after_on_demand(
    settle_s: float, spot: dict[str, SpotPoolSignal], expected: list[str]
) -> None:
    subject = job("j").gpus(8).build()
    found = candidate_pools(subject, POOLS, NOW, HOUR, config(spot_settle_s=settle_s), spot)
    assert [p.name for p in found] == expected


def test_a_job_that_requires_spot_still_gets_the_unsettled_pool() -> None:
    subject = job("j").gpus(8).spot("required").build()
    found = candidate_pools(
        subject, POOLS, NOW, HOUR, config(spot_settle_s=1800.0), {"spot-a": back_since(60.0)}
    )
    assert [p.name for p in found] == ["spot-b", "spot-a"]


def test_the_pass_admits_on_demand_before_a_pool_whose_capacity_just_came_back() -> None:
    snapshot = cluster([pool("spot-a", purchase="spot", capacity=8), pool("od", capacity=8)])
    snapshot = snapshot.model_copy(update={"spot": {"spot-a": back_since(300.0)}})
    first, second = job("j1").gpus(8).build(), job("j2").gpus(8).submitted(NOW + 1).build()
    assert summary(run_plan(snapshot, [first, second], config(spot_settle_s=1800.0))) == [
        ("admit", "j1", "od"),
        ("admit", "j2", "spot-a"),  # nothing else has room: it still runs there
    ]
    assert summary(run_plan(snapshot, [first, second], config())) == [
        ("admit", "j1", "spot-a"),
        ("admit", "j2", "od"),
    ]
