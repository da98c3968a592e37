"""GET /jobs/{id}/explain through the API handler: priority terms, per-pool blockers, position,
the estimated start; placement of a running job; who preempted a job."""

from __future__ import annotations

import json
from typing import Any

import pytest

import functions.api
from spotline.control.scheduling import scheduling_pass
from spotline.domain import SchedulerConfig

from .helpers import NLP_ROLE, Deployment, api_event, context, start, submit

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
NLP = {"userArn": NLP_ROLE}


def explain(job_id: str, identity: dict[str, Any]) -> tuple[int, Any]:
    response = functions.api.handler(
        api_event("GET", f"/jobs/{job_id}/explain", identity=identity), context("api")
    )
    return response["statusCode"], json.loads(response["body"])


def test_a_waiting_job_is_explained_with_terms_blockers_position_and_a_forecast(
    deployment: Deployment,
) -> None:
    now = deployment.clock.freeze()
    # Given the cluster full: two 8-GPU vision jobs on Spot (one ends in ~10 min), one nlp job On-Demand
    short = start(deployment, submit(deployment, "vision", expected_runtime_s=600), pool="a100-spot")
    start(
        deployment,
        submit(deployment, "vision", expected_runtime_s=7200),
        pool="a100-spot",
        instance_id="i-0aaaaaaaaaaaaaaa2",
    )
    start(
        deployment,
        submit(deployment, "nlp", expected_runtime_s=7200, spot="never"),
        pool="a100-on-demand",
        instance_id="i-0aaaaaaaaaaaaaaa3",
    )
    waiting = submit(deployment, "nlp", expected_runtime_s=300)
    deployment.clock.advance(60)

    status, body = explain(waiting.id, NLP)

    assert status == 200
    assert body["state"] == "PENDING"
    terms = body["priority"]["terms"]
    assert set(terms) == {
        "class",
        "age",
        "urgency",
        "size",
        "fairshare",
        "disruptions",
        "shortest",
    }
    assert abs(sum(terms.values()) - body["priority"]["effective"]) < 0.01
    assert body["position"]["in_class"] == 1 and body["position"]["queued"] == 1
    pools = {p["pool"]: p for p in body["pools"]}
    assert set(pools) == {"a100-spot", "a100-on-demand"}
    assert any(
        b.startswith("capacity: pool a100-spot has 0 free GPUs") for b in pools["a100-spot"]["blockers"]
    )
    assert any(b.startswith("priority:") for b in pools["a100-spot"]["blockers"])  # same class: no victim
    assert "running jobs ending" in pools["a100-spot"]["unblock"]
    # The replay: the short job ends about 600 s after its start (540 s from now), and it starts then.
    forecast = body["estimated_start"]
    assert forecast["at_s"] is not None and abs(forecast["at_s"] - (now + 600)) < 1.0
    assert forecast["earliest"] <= forecast["at"] <= forecast["latest"]
    assert short.id != waiting.id
    # Another team does not see it.
    assert explain(waiting.id, VISION)[0] == 404


def test_a_running_job_says_where_and_why_and_a_preempted_job_names_its_preemptor(
    deployment: Deployment,
) -> None:
    deployment.clock.freeze()
    low = start(
        deployment, submit(deployment, "vision", priority="low", expected_runtime_s=7200), pool="a100-spot"
    )
    status, body = explain(low.id, VISION)
    assert status == 200 and body["state"] == "RUNNING"
    assert body["placement"]["pool"] == "a100-spot" and body["placement"]["purchase"] == "Spot"
    assert body["placement"]["reason"] == "admitted by the test"
    # Started just now (the clock is frozen): its whole protection period is left.
    protection = deployment.plane.config.scheduler.protection_period_s
    assert body["placement"]["protection_left_s"] == pytest.approx(protection, abs=1.0)

    # Fill the rest so that a critical job must preempt the low one.
    start(
        deployment,
        submit(deployment, "vision", expected_runtime_s=7200),
        pool="a100-spot",
        instance_id="i-0b",
    )
    start(
        deployment,
        submit(deployment, "nlp", expected_runtime_s=7200, spot="never"),
        pool="a100-on-demand",
        instance_id="i-0c",
    )
    critical = submit(deployment, "vision", priority="critical", spot="auto")
    deployment.clock.advance(5)
    result = scheduling_pass(deployment.plane)
    assert result.preempted and result.preempted[0][0] == critical.id

    (victim,) = result.preempted[0][1]
    owner = VISION if deployment.plane.jobs.get(victim).team == "vision" else NLP
    status, body = explain(victim, owner)
    assert status == 200
    assert body["preempted_by"]["by"] == critical.id
    assert SchedulerConfig().strategy.value in body["preempted_by"]["reason"]  # the strategy, named
    assert "GPU-s of unsaved work and restart" in body["preempted_by"]["reason"]  # the criterion's number
