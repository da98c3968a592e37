"""Rebalance recommendations as a Spot signal (on moto): EC2's recommendation for an instance that
runs a Spotline job records the job's Spot pool at risk (once, however often it is delivered), and
the scheduling pass's deadline guard does not bet a job behind its line on a pool at risk."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import functions.rebalance
from spotline.control.scheduling import scheduling_pass
from spotline.domain.spot_watch import AT_RISK_S

from .helpers import Deployment, context, eventbridge, start, submit

SAMPLE_INSTANCE = "i-1234567890abcdef0"  # the instance in AWS's sample EC2 events
SPOT = "a100-spot"
H = 3600.0


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_rebalance_recommendation_records_the_pool_at_risk_once(deployment: Deployment) -> None:
    store = deployment.plane.spot_pools
    assert store is not None
    now = deployment.clock.freeze(float(int(deployment.clock())))
    running = start(deployment, submit(deployment), pool=SPOT, instance_id=SAMPLE_INSTANCE)
    event = eventbridge("rebalance_recommendation", time=iso(now - 10))

    first = functions.rebalance.handler(event, context("rebalance"))
    second = functions.rebalance.handler(event, context("rebalance"))  # delivered twice

    assert first == second == {"instance_id": SAMPLE_INSTANCE, "jobs": [running.id]}
    watch = store.watch(SPOT)
    assert watch is not None
    assert watch[0].at_risk_at == now - 10 and watch[0].available
    assert store.signals([SPOT], now)[SPOT].at_risk
    # the same recommendation again under a new event id: the record is not written again
    again = eventbridge("rebalance_recommendation", time=iso(now - 10))
    functions.rebalance.handler(again, context("rebalance"))
    assert store.watch(SPOT) == watch
    # a recommendation delivered late (older than the one kept) changes nothing either
    assert store.observe_risk(SPOT, now - 600) is False
    assert not store.signals([SPOT], now + AT_RISK_S)[SPOT].at_risk  # the risk passes


def test_a_recommendation_for_an_instance_without_spotline_jobs_records_nothing(
    deployment: Deployment,
) -> None:
    store = deployment.plane.spot_pools
    assert store is not None
    event = eventbridge("rebalance_recommendation", detail={"instance-id": "i-0ffffffffffffffff"})
    assert functions.rebalance.handler(event, context("rebalance"))["jobs"] == []
    assert store.signals([SPOT], deployment.clock()) == {}


def test_a_rebalance_recommendation_without_an_instance_id_is_rejected(deployment: Deployment) -> None:
    event = eventbridge("rebalance_recommendation")
    del event["detail"]["instance-id"]
    with pytest.raises(Exception, match="instance-id"):
        functions.rebalance.handler(event, context("rebalance"))
    assert deployment.plane.spot_pools is not None
    assert deployment.plane.spot_pools.signals([SPOT], deployment.clock()) == {}


def test_the_pass_does_not_bet_a_job_behind_its_line_on_a_pool_at_risk(deployment: Deployment) -> None:
    plane = deployment.plane
    store = plane.spot_pools
    assert store is not None
    now = deployment.clock.freeze()
    # a 4 h job due in 9 h, 3 h later still waiting: behind its line (3 * 4 / 9 = 1.3 h)
    late = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 9 * H))
    now = deployment.clock.advance(3 * H)
    store.observe(SPOT, True, now - 600)  # Spot there (a launch started) ...
    running = start(deployment, submit(deployment), pool=SPOT, instance_id=SAMPLE_INSTANCE)
    # ... and one of its instances gets a rebalance recommendation
    event = eventbridge("rebalance_recommendation", time=iso(now - 60))
    assert functions.rebalance.handler(event, context("rebalance"))["jobs"] == [running.id]

    result = scheduling_pass(plane)

    assert (late.id, "a100-on-demand") in result.admitted
    [entry] = [e for e in plane.timeline.list(late.id)[0] if e.target == "ADMITTED"]
    assert "Spot pool is at risk (a rebalance recommendation)" in entry.reason
