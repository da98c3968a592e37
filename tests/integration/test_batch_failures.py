"""A FAILED Batch job: requeued only when its host was lost, and not forever."""

from __future__ import annotations

import functions.batch_state_change
import functions.reconciler
from spotline.control.records import JobRecord
from spotline.domain import JobState

from .helpers import Deployment, batch_event, context, load_event, start, submit

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


def _capped(deployment: Deployment, cap: int) -> None:
    plane = deployment.plane
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"max_interruptions": cap})}
    )


def _lose_heartbeat(deployment: Deployment) -> dict[str, object]:
    deployment.clock.advance(deployment.plane.config.heartbeat_timeout_s + 1)
    event = load_event("scheduled_event")
    result: dict[str, object] = functions.reconciler.handler(event, context("reconciler"))
    return result


def test_lost_heartbeats_count_against_max_interruptions_then_the_job_fails(deployment: Deployment) -> None:
    # Given a cap of two requeues after lost hosts
    deployment.clock.freeze()
    _capped(deployment, 2)
    plane = deployment.plane
    record = submit(deployment)
    runs = []
    outcomes = []
    for attempt in range(3):
        # When its current run goes silent three times (the reconciler finds each)
        running = start(deployment, plane.jobs.get(record.id), instance_id=f"i-0{attempt:016x}")
        runs.append(running.batch_job_id)
        outcomes.append(_lose_heartbeat(deployment)["requeued"])

    # Then the first two are requeued, and the third ends it FAILED with the reason
    assert outcomes[0] == [[record.id, "heartbeat lost"]]
    assert outcomes[1] == [[record.id, "heartbeat lost"]]
    assert outcomes[2] == [[record.id, "heartbeat lost: failed after max_interruptions"]]
    failed = plane.jobs.get(record.id)
    assert failed.state is JobState.FAILED
    assert failed.job.interruptions == 2
    assert "no heartbeat" in failed.state_reason and "max_interruptions 2" in failed.state_reason
    # its GPUs are free, and the silent run is stopped (pending until Batch confirms, which the
    # reconciler's same run asked: the recording launcher has it stopped at once)
    assert plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}
    assert [b for b, _ in deployment.launcher.terminated] == runs
    assert failed.terminating_batch_job_ids == ()


def host_lost(running: JobRecord, instance_id: str) -> str:
    """Batch's FAILED event for the run of `running`, its host lost; the handler's outcome."""
    assert running.batch_job_id is not None
    outcome: str = functions.batch_state_change.handler(
        batch_event(
            running.id,
            running.batch_job_id,
            "FAILED",
            reason=f"Host EC2 (instance {instance_id}) terminated.",
            run=running.run,
        ),
        context(),
    )["outcome"]
    return outcome


def test_host_losses_from_batch_and_the_reconciler_share_one_cap(deployment: Deployment) -> None:
    # Given a cap of two, and a job whose host Batch reported lost, then whose heartbeat was lost
    deployment.clock.freeze()
    _capped(deployment, 2)
    plane = deployment.plane
    record = submit(deployment)
    running = start(deployment, record, instance_id="i-0000000000000000a")
    assert running.batch_job_id is not None
    host_lost(running, "i-0000000000000000a")
    start(deployment, plane.jobs.get(record.id), instance_id="i-0000000000000000b")
    _lose_heartbeat(deployment)
    assert plane.jobs.get(record.id).job.interruptions == 2

    # When Batch reports the third run's host lost
    third = start(deployment, plane.jobs.get(record.id), instance_id="i-0000000000000000c")
    assert third.batch_job_id is not None
    outcome = host_lost(third, "i-0000000000000000c")

    # Then the cap counted the reconciler's interruption too: the job ends FAILED
    assert outcome == "failed"
    failed = plane.jobs.get(record.id)
    assert failed.state is JobState.FAILED and "max_interruptions 2" in failed.state_reason


def test_a_heartbeat_lost_after_the_cap_was_reached_by_batch_fails_the_job(deployment: Deployment) -> None:
    # Given a cap of one, reached by a host loss Batch reported
    deployment.clock.freeze()
    _capped(deployment, 1)
    plane = deployment.plane
    record = submit(deployment)
    running = start(deployment, record, instance_id="i-0000000000000000a")
    assert running.batch_job_id is not None
    host_lost(running, "i-0000000000000000a")

    # When the next run goes silent
    start(deployment, plane.jobs.get(record.id), instance_id="i-0000000000000000b")
    _lose_heartbeat(deployment)

    # Then the job is FAILED, not requeued a second time
    failed = plane.jobs.get(record.id)
    assert failed.state is JobState.FAILED and failed.job.interruptions == 1
    assert "max_interruptions 1" in failed.state_reason


TRANSIENT_PULL = "CannotPullContainerError: failed to do request: dial tcp 52.0.0.1:443: i/o timeout"


def test_a_transient_pull_failure_is_retried_then_failed_with_the_reason(deployment: Deployment) -> None:
    # Given a cap of two requeues
    plane = deployment.plane
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"max_interruptions": 2})}
    )
    record = submit(deployment)
    outcomes = []
    for _ in range(3):
        running = start(
            deployment, plane.jobs.get(record.id), pool="a100-spot", instance_id=f"i-0{len(outcomes):016x}"
        )
        assert running.batch_job_id is not None
        # When the registry times out
        result = functions.batch_state_change.handler(
            batch_event(running.id, running.batch_job_id, "FAILED", reason=TRANSIENT_PULL, run=running.run),
            context(),
        )
        outcomes.append(result["outcome"])
        if result["outcome"] == "failed":
            break
    # Then it is retried twice from its checkpoint, and the third failure ends it with the cause
    assert outcomes == ["interrupted: requeued", "interrupted: requeued", "failed"]
    failed = deployment.plane.jobs.get(record.id)
    assert failed.state is JobState.FAILED
    assert "container did not start (transient)" in failed.state_reason
    assert "i/o timeout" in failed.state_reason and "max_interruptions 2" in failed.state_reason
