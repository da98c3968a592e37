"""A FAILED Batch job: requeued only when its host was lost, and not forever (issue 12, finding 4)."""

from __future__ import annotations

import functions.batch_state_change
from spotline.domain import JobState

from .conftest import Deployment, batch_event, context, start, submit

PULL_FAILURE = (
    "Task failed to start; CannotPullContainerError: pull image manifest has been retried 5 time(s): "
    "failed to resolve ref 123456789012.dkr.ecr.us-east-1.amazonaws.com/spotline-train:latest: not found"
)


def test_an_image_pull_failure_on_a_spot_pool_ends_failed_with_the_reason(deployment: Deployment) -> None:
    # Given a job on the Spot pool whose image (named spotline-train) cannot be pulled
    running = start(deployment, submit(deployment, image="spotline-train:latest"), pool="a100-spot")
    assert running.batch_job_id is not None

    # When Batch reports the job FAILED for it
    result = functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "FAILED", reason=PULL_FAILURE), context()
    )

    # Then the job is FAILED, not requeued (it would fail the same way again, forever)
    assert result["outcome"] == "failed"
    failed = deployment.plane.jobs.get(running.id)
    assert failed.state is JobState.FAILED
    assert failed.job.interruptions == 0
    assert "image could not be pulled" in failed.state_reason
    assert "CannotPullContainerError" in failed.state_reason


def test_host_loss_is_requeued_up_to_max_interruptions_then_failed(deployment: Deployment) -> None:
    # Given a cap of two requeues after lost hosts
    plane = deployment.plane
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"max_interruptions": 2})}
    )
    record = submit(deployment)
    outcomes = []
    for attempt in range(3):
        # When its host is lost under it three times
        running = start(deployment, plane.jobs.get(record.id), instance_id=f"i-0{attempt:016x}")
        assert running.batch_job_id is not None
        reason = f"Host EC2 (instance i-0{attempt:016x}) terminated."
        outcomes.append(
            functions.batch_state_change.handler(
                batch_event(record.id, running.batch_job_id, "FAILED", reason=reason, run=running.run),
                context(),
            )["outcome"]
        )

    # Then the first two are requeued, and the third ends it FAILED with the reason
    assert outcomes == ["interrupted: requeued", "interrupted: requeued", "failed"]
    failed = plane.jobs.get(record.id)
    assert failed.state is JobState.FAILED
    assert failed.job.interruptions == 2
    assert "host lost" in failed.state_reason and "max_interruptions 2" in failed.state_reason
