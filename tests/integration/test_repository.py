"""The Jobs repository: conditional transitions, the timeline and ledger in the same
transaction, sparse indexes, team listing."""

from __future__ import annotations

import pytest

from spotline.aws.job_items import active_pk_for
from spotline.control.errors import CapacityExhausted, InvalidTransition, StaleJobError
from spotline.control.lifecycle import requeue_after_disruption
from spotline.control.records import Disruption
from spotline.control.scheduling import admit
from spotline.domain import JobState

from .helpers import Deployment, start, submit


def raw_item(dep: Deployment, job_id: str) -> dict[str, object]:
    item = dep.dynamodb.get_item(TableName=dep.tables["Jobs"], Key={"job_id": {"S": job_id}})["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


def timeline(dep: Deployment, job_id: str) -> list[tuple[str, str]]:
    entries, _ = dep.plane.timeline.list(job_id)
    return [(e.source, e.target) for e in entries]


def pool_used(dep: Deployment, pool: str) -> int:
    return dep.plane.ledger.usage([pool], [])[0].get(pool, 0)


def test_a_new_job_is_pending_in_its_class_queue_and_in_the_timeline(deployment: Deployment) -> None:
    # Given / When: a job is submitted
    record = submit(deployment, priority="high", deadline="2099-01-01T00:00:00Z")

    # Then: its item carries the queue and deadline index keys, not the active one
    item = raw_item(deployment, record.id)
    assert item["state"] == "PENDING"
    assert item["queue_pk"] == "Q#high"
    assert str(item["queue_sk"]).endswith(f"#{record.id}")
    assert item["deadline_pk"] == "D"
    assert "active_pk" not in item
    assert timeline(deployment, record.id) == [("-", "PENDING")]


def test_admission_moves_the_index_keys_and_reserves_capacity_in_one_write(deployment: Deployment) -> None:
    # Given a pending job
    record = submit(deployment, deadline="2099-01-01T00:00:00Z")

    # When it is admitted to the Spot pool
    admitted = admit(deployment.plane, record, "a100-spot", "fits", now=deployment.clock())

    # Then the queue keys are gone, the active key is there, the ledger holds its GPUs, and the
    # timeline has the transition
    item = raw_item(deployment, record.id)
    assert admitted.state is JobState.ADMITTED and item["state"] == "ADMITTED"
    assert "queue_pk" not in item and "deadline_pk" not in item
    assert item["active_pk"] == active_pk_for(record.id)
    assert pool_used(deployment, "a100-spot") == 8
    assert deployment.plane.ledger.usage([], ["vision"])[1] == {"vision": 8}
    assert timeline(deployment, record.id) == [("-", "PENDING"), ("PENDING", "ADMITTED")]


def test_a_transition_from_a_stale_read_is_refused_and_writes_nothing(deployment: Deployment) -> None:
    # Given a job read at version 0, then admitted by someone else
    stale = submit(deployment)
    admit(deployment.plane, stale, "a100-spot", "fits", now=deployment.clock())

    # When the stale copy is cancelled
    with pytest.raises(StaleJobError):
        deployment.plane.jobs.transition(stale, JobState.CANCELLED, "late", now=deployment.clock())

    # Then the job, its timeline and the ledger are as the winner left them
    assert deployment.plane.jobs.get(stale.id).state is JobState.ADMITTED
    assert timeline(deployment, stale.id) == [("-", "PENDING"), ("PENDING", "ADMITTED")]
    assert pool_used(deployment, "a100-spot") == 8


def test_a_transition_the_lifecycle_forbids_is_refused_before_writing(deployment: Deployment) -> None:
    record = submit(deployment)
    with pytest.raises(InvalidTransition):
        deployment.plane.jobs.transition(record, JobState.RUNNING, "skip admission", now=deployment.clock())
    assert deployment.plane.jobs.get(record.id).version == 0


def test_the_ledger_refuses_an_admission_beyond_pool_capacity(deployment: Deployment) -> None:
    # Given the 8-GPU On-Demand pool already full
    admit(deployment.plane, submit(deployment), "a100-on-demand", "fits", now=deployment.clock())
    second = submit(deployment)

    # When a second 8-GPU job is admitted there (a pass that raced the first)
    with pytest.raises(CapacityExhausted):
        admit(deployment.plane, second, "a100-on-demand", "raced", now=deployment.clock())

    # Then nothing of the second admission was written
    assert deployment.plane.jobs.get(second.id).state is JobState.PENDING
    assert timeline(deployment, second.id) == [("-", "PENDING")]
    assert pool_used(deployment, "a100-on-demand") == 8


def test_leaving_the_active_states_releases_the_ledger(deployment: Deployment) -> None:
    running = start(deployment, submit(deployment))
    assert pool_used(deployment, "a100-spot") == 8

    deployment.plane.jobs.transition(running, JobState.CANCELLED, "by test", now=deployment.clock())

    assert pool_used(deployment, "a100-spot") == 0
    assert "active_pk" not in raw_item(deployment, running.id)


def test_requeue_keeps_the_checkpointed_work_and_counts_the_lost_work(deployment: Deployment) -> None:
    # Given a job that started at t0 and checkpointed at t0 + 100
    t0 = deployment.clock.freeze(1_800_000_000.0)
    running = start(deployment, submit(deployment))
    deployment.plane.jobs.update_fields(
        running.id,
        states=[JobState.RUNNING],
        set_fields={
            "last_checkpoint_at": t0 + 100,
            "last_checkpoint_step": 42,
            "last_checkpoint_uri": "s3://b/k",
        },
    )
    running = deployment.plane.jobs.get(running.id)

    # When its host is lost at t0 + 150
    now = deployment.clock.advance(150)
    requeued = requeue_after_disruption(
        deployment.plane, running, JobState.INTERRUPTED, now=now, reason="host lost"
    )

    # Then it is pending again, keeps 100 s of work, lost 50 s, and resumes from step 42
    assert requeued.state is JobState.PENDING
    assert requeued.job.runtime_s == pytest.approx(100)
    assert requeued.job.lost_work_s == pytest.approx(50)
    assert requeued.job.interruptions == 1 and requeued.job.preemptions == 0
    assert requeued.job.enqueued_at == now and requeued.job.started_at is None and requeued.job.pool is None
    assert requeued.batch_job_id is None and running.batch_job_id in requeued.retired_batch_job_ids
    assert timeline(deployment, running.id)[-2:] == [("RUNNING", "INTERRUPTED"), ("INTERRUPTED", "PENDING")]
    entries, _ = deployment.plane.timeline.list(running.id)
    assert "latest durable checkpoint when stopped: step 42" in entries[-1].reason
    # A host lost with no warning is a host loss, not a Spot warning
    assert [e.kind for e in entries[-2:]] == ["host-loss", "requeue"]
    assert raw_item(deployment, running.id)["queue_pk"] == "Q#normal"
    assert pool_used(deployment, "a100-spot") == 0
    assert deployment.plane.instances.jobs_on("i-0aaaaaaaaaaaaaaa1") == []


def test_team_listing_is_paginated_and_filtered_by_state(deployment: Deployment) -> None:
    # Given five vision jobs (one cancelled) and one nlp job
    records = [submit(deployment, name=f"job-{i}") for i in range(5)]
    submit(deployment, team="nlp")
    deployment.plane.jobs.transition(records[0], JobState.CANCELLED, "by test", now=deployment.clock())

    # When listing two at a time
    first, token = deployment.plane.jobs.list_team("vision", limit=2)
    second, token2 = deployment.plane.jobs.list_team("vision", limit=2, next_token=token)
    third, token3 = deployment.plane.jobs.list_team("vision", limit=2, next_token=token2)

    # Then every vision job comes once, newest first, and no nlp job
    ids = [r.id for r in first + second + third]
    assert ids == [r.id for r in reversed(records)]
    assert token3 is None
    pending, _ = deployment.plane.jobs.list_team("vision", state=JobState.PENDING, limit=10)
    assert {r.id for r in pending} == {r.id for r in records[1:]}


def test_disruption_outcomes() -> None:
    assert Disruption.PREEMPT.outcome is JobState.PREEMPTED
    assert Disruption.INTERRUPT.outcome is JobState.INTERRUPTED
