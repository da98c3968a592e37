"""Elastic jobs through the HTTP API, on moto: the spec is stored and shown, sizes that fit no pool
are refused naming the field, and each run learns its size from SPOTLINE_WORLD_SIZE."""

from __future__ import annotations

import json
from typing import Any

import functions.api
from spotline.control.lifecycle import launch_request
from spotline.control.scheduling import scheduling_pass
from spotline.control.workflow_tasks import finish_preemption
from spotline.domain import JobState

from .helpers import SPEC, Deployment, api_event, batch_event, context, start, submit

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


def test_a_job_is_shrunk_for_an_urgent_job_then_grown_back(deployment: Deployment) -> None:
    # Given the On-Demand pool (8 GPUs) held by a low elastic job (4 to 8 GPUs) for an hour
    deployment.clock.freeze()
    spec = {
        "priority": "low",
        "spot": "never",
        "expected_runtime_s": 36000,
        "elastic": {"min_gpus": 4, "max_gpus": 8},
    }
    victim = start(deployment, submit(deployment, **spec), pool="a100-on-demand")
    deployment.clock.advance(3600)

    # When a high job that needs 4 On-Demand GPUs arrives
    urgent = submit(deployment, priority="high", spot="never", gpus=4, name="urgent")
    result = scheduling_pass(deployment.plane)

    # Then the elastic job is asked to checkpoint for a shrink to 4, not preempted whole
    assert any(preemptor == urgent.id and victim.id in victims for preemptor, victims in result.preempted)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING and stored.resize_to == 4
    assert stored.state_reason.startswith(f"shrunk from 8 to 4 GPUs for job {urgent.id}")

    # And once stopped it is requeued at 4 GPUs, keeping its place, with no preemption counted
    finish_preemption(deployment.plane, victim.id)
    shrunk = deployment.plane.jobs.get(victim.id)
    assert shrunk.state is JobState.PENDING and shrunk.resize_to is None
    assert (shrunk.job.spec.gpus, shrunk.job.preemptions) == (4, 0)
    assert shrunk.job.resized_at == deployment.clock() and shrunk.job.submitted_at == victim.job.submitted_at
    said = [e["reason"] for e in call_events(victim.id) if e["to"] == "PREEMPTED"]
    assert any(f"shrunk from 8 to 4 GPUs for job {urgent.id}" in reason for reason in said)

    # And a pass starts both: the urgent job and the shrunk one, on 4 GPUs each
    admitted = dict(scheduling_pass(deployment.plane).admitted)
    assert admitted == {urgent.id: "a100-on-demand", victim.id: "a100-on-demand"}
    record = deployment.plane.jobs.get(victim.id)
    assert launch_request(deployment.plane, record).environment["SPOTLINE_WORLD_SIZE"] == "4"
    running = start_admitted(deployment, victim.id)

    # When the urgent job is cancelled and the cooldown is over, the idle 4 GPUs grow it back
    assert call_delete(urgent.id) == 200
    deployment.clock.advance(700)
    grown = scheduling_pass(deployment.plane)
    assert grown.resized == [(victim.id, 8)]
    growing = deployment.plane.jobs.get(victim.id)
    assert growing.state is JobState.CHECKPOINTING and growing.resize_to == 8
    finish_preemption(deployment.plane, victim.id)
    back = deployment.plane.jobs.get(victim.id)
    assert (back.job.spec.gpus, back.job.base_gpus, back.job.preemptions) == (8, 4, 0)
    said = [e["reason"] for e in call_events(victim.id) if e["to"] == "PREEMPTED"]
    assert any("grown to 8 GPUs (from 4)" in reason for reason in said)
    assert running.state is JobState.RUNNING and back.run == running.run


def call_events(job_id: str) -> list[dict[str, Any]]:
    event = api_event("GET", f"/jobs/{job_id}/events", identity=VISION)
    body = json.loads(functions.api.handler(event, context("api"))["body"])
    return list(body["events"] if isinstance(body, dict) else body)


def call_delete(job_id: str) -> int:
    event = api_event("DELETE", f"/jobs/{job_id}", identity=VISION)
    return int(functions.api.handler(event, context("api"))["statusCode"])


def start_admitted(dep: Deployment, job_id: str) -> Any:
    """An ADMITTED job's run submitted and reported RUNNING by Batch (what `start` does after
    its own admission)."""
    import uuid

    import functions.batch_state_change
    from spotline.control.workflow_tasks import record_batch_job, submit_batch_job

    record = dep.plane.jobs.get(job_id)
    pool = record.job.pool
    assert pool is not None
    submitted = submit_batch_job(dep.plane, job_id, version=record.version, run=record.run, pool=pool)
    batch_job_id = submitted["batch_job_id"]
    record_batch_job(dep.plane, job_id, version=record.version, run=record.run, batch_job_id=batch_job_id)
    container = f"arn:aws:ecs:us-east-1:123456789012:container-instance/spotline-{pool}/{uuid.uuid4().hex}"
    dep.resolver.mapping[container] = "i-0aaaaaaaaaaaaaaa2"
    event = batch_event(
        job_id,
        batch_job_id,
        "RUNNING",
        container_instance=container,
        started_at_ms=int(dep.clock() * 1000),
        run=record.run,
    )
    functions.batch_state_change.handler(event, context("batch_state_change"))
    return dep.plane.jobs.get(job_id)
