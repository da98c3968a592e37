"""Elastic jobs through the HTTP API, on moto: the spec is stored and shown, sizes that fit no pool
are refused naming the field, and each run learns its size from SPOTLINE_WORLD_SIZE."""

from __future__ import annotations

import json
from typing import Any

import functions.api
from spotline.control.lifecycle import launch_request
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState

from .helpers import SPEC, Deployment, api_event, context, start, submit

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}


def post(**spec: Any) -> tuple[int, Any]:
    event = api_event("POST", "/jobs", identity=VISION, body={**SPEC, **spec})
    response = functions.api.handler(event, context("api"))
    return response["statusCode"], json.loads(response["body"])


def test_an_elastic_job_is_stored_and_its_run_learns_its_size(deployment: Deployment) -> None:
    status, job = post(gpus=2, elastic={"min_gpus": 1, "max_gpus": 4})
    assert status == 201, job
    assert job["spec"]["elastic"] == {"min_gpus": 1, "max_gpus": 4, "cooldown_s": 600.0}
    scheduling_pass(deployment.plane)
    record = deployment.plane.jobs.get(job["id"])
    assert launch_request(deployment.plane, record).environment["SPOTLINE_WORLD_SIZE"] == "2"


def test_sizes_that_fit_no_pool_are_refused_naming_the_field(deployment: Deployment) -> None:
    status, body = post(gpus=2, elastic={"min_gpus": 1, "max_gpus": 4096})
    assert status == 422, body
    text = json.dumps(body)
    assert "max_gpus" in text and "no pool can host its size" in text


def test_a_shrink_the_control_plane_cannot_carry_out_is_a_whole_preemption_that_says_so(
    deployment: Deployment,
) -> None:
    # Given the On-Demand pool held by a low elastic job (4 to 8 GPUs) for an hour
    deployment.clock.freeze()
    spec = {"priority": "low", "spot": "never", "elastic": {"min_gpus": 4, "max_gpus": 8}}
    victim = start(deployment, submit(deployment, **spec), pool="a100-on-demand")
    deployment.clock.advance(3600)
    # When a high job that needs 4 On-Demand GPUs arrives
    urgent = submit(deployment, priority="high", spot="never", gpus=4, name="urgent")
    result = scheduling_pass(deployment.plane)
    # Then the planner's shrink is acted on as a preemption, and the timeline says so
    assert any(preemptor == urgent.id and victim.id in victims for preemptor, victims in result.preempted)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING
    assert "instead of preempting" in stored.state_reason
    assert "does not resize jobs yet, so it is preempted whole" in stored.state_reason
