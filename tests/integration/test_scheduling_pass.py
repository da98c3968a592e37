"""The scheduling pass on DynamoDB: admissions, preemptions, wait reasons, and a read that is
bounded whatever the queue's length."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

import functions.batch_state_change
import functions.scheduler
from functions.runtime import use_control_plane
from spotline.control import scheduling
from spotline.control.events import record_checkpoint
from spotline.control.jobs import job_view
from spotline.control.records import Disruption, JobRecord
from spotline.control.scheduling import note_wait, scheduling_pass
from spotline.domain import PRIORITIES_HIGH_FIRST, Job, JobSpec, JobState
from spotline.domain.queue import WINDOW_PER_CLASS
from spotline.domain.usage import decayed_usage_gpu_s, run_buckets

from .helpers import Deployment, batch_event, context, load_event, start, submit


def test_a_pass_admits_what_fits_and_starts_one_launch_workflow_each(deployment: Deployment) -> None:
    # Given two 8-GPU jobs and 16 free Spot GPUs
    deployment.clock.freeze()
    first, second = submit(deployment), submit(deployment)

    # When a pass runs
    result = scheduling_pass(deployment.plane)

    # Then both are admitted to the (cheaper) Spot pool, each with its launch workflow
    assert sorted(result.admitted) == sorted([(first.id, "a100-spot"), (second.id, "a100-spot")])
    for record in (first, second):
        stored = deployment.plane.jobs.get(record.id)
        assert stored.state is JobState.ADMITTED and stored.job.pool == "a100-spot" and stored.gpus_held == 8
    assert deployment.starter is not None
    assert sorted(deployment.starter.names()) == sorted([f"launch-{first.id}-v1", f"launch-{second.id}-v1"])
    _, _, payload = deployment.starter.started[0]
    assert set(payload) == {"job_id", "version", "run", "pool"} and payload["run"] == 1
    assert deployment.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 16}


def test_a_waiting_job_gets_its_reason_written_once(deployment: Deployment) -> None:
    # Given more demand than the 24 GPUs of both pools
    deployment.clock.freeze()
    jobs = [submit(deployment) for _ in range(4)]
    first = scheduling_pass(deployment.plane)
    waiting = [j for j in jobs if deployment.plane.jobs.get(j.id).state is JobState.PENDING]
    assert len(first.admitted) == 3 and len(waiting) == 1

    # Then the waiting job says why
    reason = deployment.plane.jobs.get(waiting[0].id).wait_reason
    assert reason is not None and "free GPUs" in reason

    # When the next pass finds nothing changed, it writes nothing
    deployment.clock.advance(5)
    second = scheduling_pass(deployment.plane)
    assert second.waiting == 1 and second.wait_reasons_written == 0
    assert deployment.plane.jobs.get(waiting[0].id).wait_reason == reason


def test_a_high_job_preempts_a_low_priority_job_by_checkpoint(deployment: Deployment) -> None:
    # Given the On-Demand pool held by a low-priority job for an hour
    now = deployment.clock.freeze()
    victim = start(deployment, submit(deployment, priority="low", spot="never"), pool="a100-on-demand")
    now = deployment.clock.advance(3600)

    # When a high job that runs only On-Demand arrives and a pass runs
    critical = submit(deployment, priority="high", spot="never", name="urgent")
    result = scheduling_pass(deployment.plane)

    # Then the victim is asked to checkpoint (CHECKPOINTING, draining for the critical job, a
    # deadline one grace period away) and its preempt workflow starts
    assert any(preemptor == critical.id and victim.id in victims for preemptor, victims in result.preempted)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING
    assert stored.draining_for == critical.id and stored.disruption is Disruption.PREEMPT
    assert stored.checkpoint_requested_at == now
    assert stored.checkpoint_deadline_at == now + deployment.plane.config.grace_period_s
    assert deployment.starter is not None
    assert f"preempt-{victim.id}-v{stored.version}" in deployment.starter.names()
    assert "preempted job(s)" in (deployment.plane.jobs.get(critical.id).wait_reason or "")

    # And a second pass waits for the checkpoint instead of preempting again
    deployment.clock.advance(1)
    again = scheduling_pass(deployment.plane)
    assert again.preempted == [] and critical.id not in [job for job, _ in again.admitted]


def test_a_critical_job_stops_a_victim_within_its_write_without_waiting_for_a_checkpoint(
    deployment: Deployment,
) -> None:
    # Given the On-Demand pool (where critical jobs run) held by a low-priority job for an hour,
    # whose agent made a durable checkpoint 30 s ago (less unsaved work than a 60 s write)
    now = deployment.clock.freeze()
    victim = start(deployment, submit(deployment, priority="low", spot="never"), pool="a100-on-demand")
    now = deployment.clock.advance(3570)
    recorded = record_checkpoint(
        deployment.plane,
        victim.id,
        run_id=victim.run_id,
        checkpoint_uri="s3://bucket/ckpt/manifest-000000000010.json",
        step=10,
        captured_at=now,
        team="vision",
    )
    assert recorded is not None
    now = deployment.clock.advance(30)

    # When a critical job arrives and a pass runs
    critical = submit(deployment, priority="critical", name="urgent")
    result = scheduling_pass(deployment.plane)

    # Then the victim's preempt workflow gets no time for a checkpoint (deadline now, the
    # shortest task timeout of 1 s) and the victim will resume from its last durable checkpoint
    assert any(preemptor == critical.id and victim.id in victims for preemptor, victims in result.preempted)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING and stored.draining_for == critical.id
    assert stored.checkpoint_deadline_at == now
    assert deployment.starter is not None
    [payload] = [
        p for _, name, p in deployment.starter.started if name == f"preempt-{victim.id}-v{stored.version}"
    ]
    assert payload["timeout_s"] == 1


def test_a_critical_job_lets_a_victim_with_more_unsaved_work_checkpoint(deployment: Deployment) -> None:
    # Given the On-Demand pool held by a low-priority job that has run an hour without a checkpoint
    now = deployment.clock.freeze()
    victim = start(deployment, submit(deployment, priority="low", spot="never"), pool="a100-on-demand")
    now = deployment.clock.advance(3600)

    # When a critical job arrives and a pass runs
    critical = submit(deployment, priority="critical", name="urgent")
    result = scheduling_pass(deployment.plane)

    # Then it preempts at once (no preemption delay), and the victim gets its grace to checkpoint
    assert any(preemptor == critical.id and victim.id in victims for preemptor, victims in result.preempted)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING and stored.draining_for == critical.id
    assert stored.checkpoint_deadline_at is not None and stored.checkpoint_deadline_at > now


def test_the_scheduler_handler_runs_one_pass_for_a_batch_of_triggers(deployment: Deployment) -> None:
    # Given a pending job and three triggers delivered together by the FIFO queue
    record = submit(deployment)
    event = {"Records": [_sqs_record(i) for i in range(3)]}

    # When the scheduler function handles them
    response = functions.scheduler.handler(event, context("scheduler"))

    # Then one pass admitted the job
    assert response["admitted"] == [[record.id, "a100-spot"]]


def test_the_periodic_tick_runs_a_pass(deployment: Deployment) -> None:
    # Given a pending job and the scheduler's scheduled event (aging and deadlines)
    record = submit(deployment)

    # When the tick invokes the scheduler directly
    response = functions.scheduler.handler(load_event("scheduled_event"), context("scheduler"))

    # Then the pass ran
    assert response["admitted"] == [[record.id, "a100-spot"]]


def _sqs_record(i: int) -> dict[str, Any]:
    return {
        "messageId": f"0000000{i}-0000-0000-0000-000000000000",
        "receiptHandle": "AQEB",
        "body": '{"detail-type": "Job Submitted"}',
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1793613600000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1793613600001",
            "MessageGroupId": "scheduling-pass",
            "MessageDeduplicationId": f"dedup-{i}",
            "SequenceNumber": f"1867392930{i}",
        },
        "messageAttributes": {},
        "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:spotline-scheduler.fifo",
        "awsRegion": "us-east-1",
    }


# --- bounded reads ----------------------------------------------------------------------------


@contextmanager
def counting_reads(dep: Deployment) -> Iterator[dict[str, int]]:
    """Count DynamoDB read calls and the items they return, from botocore's events on the
    client the repositories use."""
    counts = {"calls": 0, "items": 0, "scans": 0}

    def after_call(http_response: Any, parsed: dict[str, Any], model: Any, **kwargs: Any) -> None:
        name = model.name
        if name == "Scan":
            counts["scans"] += 1
        if name in ("Query", "Scan", "GetItem", "BatchGetItem"):
            counts["calls"] += 1
            if "Items" in parsed:
                counts["items"] += len(parsed["Items"])
            elif "Item" in parsed:
                counts["items"] += 1
            elif "Responses" in parsed:
                counts["items"] += sum(len(v) for v in parsed["Responses"].values())

    events = dep.dynamodb.meta.events
    events.register("after-call.dynamodb", after_call)
    try:
        yield counts
    finally:
        events.unregister("after-call.dynamodb", after_call)


def pending_jobs(start: int, count: int, base: float) -> list[JobRecord]:
    """`count` pending jobs spread over the four classes, every fifth with a deadline. Their GPU
    type exists in no pool, so a pass leaves them all waiting and the queue keeps its length."""
    records = []
    for i in range(start, start + count):
        priority = PRIORITIES_HIGH_FIRST[i % 4]
        deadline = datetime.fromtimestamp(base + 86_400 + i, UTC) if i % 5 == 0 else None
        spec = JobSpec(
            name=f"bulk-{i}",
            priority=priority,
            gpus=8,
            image="img",
            command=["train"],
            gpu_type="h100",
            deadline=deadline,
        )
        at = base + i
        job = Job(id=f"job-bulk-{i:07d}", team="vision", spec=spec, submitted_at=at, enqueued_at=at)
        records.append(JobRecord(job=job, updated_at=at))
    return records


def test_a_pass_reads_the_same_bounded_number_of_items_at_2k_and_10k_pending_jobs(
    deployment: Deployment,
) -> None:
    window = WINDOW_PER_CLASS
    bound = (len(PRIORITIES_HIGH_FIRST) + 1) * window  # the head of each class + nearest deadlines
    base = deployment.clock.freeze(1_800_000_000.0) - 20_000

    # Given 2,000 pending jobs (more than a window in each class and in the deadline index)
    assert window < 2_000 // 5
    deployment.plane.jobs.bulk_load(pending_jobs(0, 2_000, base))
    with counting_reads(deployment) as at_1k:
        small = scheduling_pass(deployment.plane)

    # When 8,000 more (newer) jobs join the queue
    started = time.perf_counter()
    deployment.plane.jobs.bulk_load(pending_jobs(2_000, 8_000, base))
    load_s = time.perf_counter() - started
    deployment.clock.advance(1)
    with counting_reads(deployment) as at_10k:
        large = scheduling_pass(deployment.plane)

    # Then both passes read the same items, within the window bound, with no Scan
    print(f"\nitems read per pass: 2k pending -> {at_1k}, 10k pending -> {at_10k} (bulk load {load_s:.1f}s)")
    # (The second also read the fair-share usage the first kept for the API: one item.)
    assert at_1k["calls"] == at_10k["calls"] and at_1k["items"] + 1 == at_10k["items"]
    assert at_10k["scans"] == 0
    assert at_10k["items"] <= bound + 1
    assert small.queue_items_read == large.queue_items_read <= bound
    assert small.candidates == large.candidates <= bound
    assert small.waiting == large.waiting == small.candidates
    # Nothing changed between the passes, so the second wrote no wait reason again.
    assert small.wait_reasons_written == small.candidates and large.wait_reasons_written == 0


@pytest.mark.parametrize("priority", ["critical", "low"])
def test_window_reads_the_oldest_of_each_class(deployment: Deployment, priority: str) -> None:
    base = deployment.clock.freeze(1_800_000_000.0) - 20_000
    window = WINDOW_PER_CLASS
    deployment.plane.jobs.bulk_load(pending_jobs(0, 4 * window + 100, base))
    head = deployment.plane.jobs.queue_head(
        PRIORITIES_HIGH_FIRST[[p.value for p in PRIORITIES_HIGH_FIRST].index(priority)], window
    )
    submitted = [r.job.submitted_at for r in head]
    assert len(head) == window and submitted == sorted(submitted)
    assert all(r.job.priority.value == priority for r in head)


def test_fair_share_puts_the_team_that_used_fewer_gpus_first(deployment: Deployment) -> None:
    # Given vision ran 8 GPUs for 10 hours, and nlp used nothing
    plane = deployment.plane
    t0 = deployment.clock.freeze(1_800_000_000.0)
    used = start(deployment, submit(deployment, team="vision"))
    assert used.batch_job_id is not None
    now = deployment.clock.advance(10 * 3600)
    functions.batch_state_change.handler(
        batch_event(used.id, used.batch_job_id, "SUCCEEDED", started_at_ms=int(t0 * 1000)),
        context("batch_state_change"),
    )

    # Then releasing its GPUs kept the run in vision's usage buckets on the ledger
    half_life = plane.config.scheduler.usage_half_life_s
    assert plane.ledger.usage_buckets(["vision", "nlp"]) == {
        "vision": pytest.approx(run_buckets(8, t0, now, half_life)),
        "nlp": {},
    }

    # When a vision job and then an nlp job ask for the 8 On-Demand GPUs and a pass runs
    deployment.clock.advance(60)
    first = submit(deployment, team="vision", spot="never")
    deployment.clock.advance(60)
    second = submit(deployment, team="nlp", spot="never")
    result = scheduling_pass(plane)

    # Then the nlp job is admitted first: vision's usage lowers its fair-share factor
    assert result.admitted == [(second.id, "a100-on-demand")]
    assert plane.jobs.get(first.id).state is JobState.PENDING
    usage = plane.ledger.fairshare_usage()
    buckets = run_buckets(8, t0, now, half_life)
    expected_vision = decayed_usage_gpu_s(buckets, [], deployment.clock(), half_life)
    assert usage["vision"] == pytest.approx(expected_vision / 3600.0)
    assert usage["vision"] == pytest.approx(80.0, rel=0.03)  # 80 GPU-hours, barely decayed yet
    assert usage["nlp"] == 0.0

    # And the API shows the effective priority with the same usage: vision holds all of the
    # usage on half of the shares, so its factor is 2^-2 and it gets a quarter of the weight
    view = job_view(plane, plane.jobs.get(first.id), deployment.clock())
    weights = plane.config.scheduler.weights
    assert view.effective_priority is not None
    fixed = weights.class_step + weights.size * 8 / 64 + weights.fairshare / 4
    assert view.effective_priority == pytest.approx(fixed, abs=weights.age * 120 / weights.max_age_s + 0.01)


def test_a_wait_reason_whose_figures_changed_is_not_rewritten(deployment: Deployment) -> None:
    """A pass rewrites a wait reason only when what it says changes: the free-GPU count that moves
    with every finish is a figure, not a new reason; the API computes the time waited when read."""
    # Given a job waiting for GPUs behind running jobs
    deployment.clock.freeze()
    jobs = [submit(deployment) for _ in range(4)]
    scheduling_pass(deployment.plane)
    waiting = next(j for j in jobs if deployment.plane.jobs.get(j.id).state is JobState.PENDING)
    written = deployment.plane.jobs.get(waiting.id)
    assert written.wait_reason is not None

    first_pass = written.wait_reason_at
    assert first_pass == deployment.clock()  # dated by the pass that decided it

    # When the same reason comes back with other figures, nothing is written: the figures shown
    # stay those of the pass they are dated by
    later = deployment.clock.advance(5)
    moved = "".join("9" if c.isdigit() else c for c in written.wait_reason)
    assert moved != written.wait_reason
    assert note_wait(deployment.plane, written, moved, now=later) is False
    kept = deployment.plane.jobs.get(waiting.id)
    assert (kept.wait_reason, kept.wait_reason_at) == (written.wait_reason, first_pass)

    # But a different cause is written, with its pass's time
    assert note_wait(deployment.plane, written, "waiting: team research is at its quota", now=later) is True
    noted = deployment.plane.jobs.get(waiting.id)
    assert (noted.wait_reason, noted.wait_reason_at) == ("waiting: team research is at its quota", later)
    assert job_view(deployment.plane, noted, later).wait_reason_at == later

    # And the time waited is computed when the job is read, not stored in the reason
    deployment.clock.advance(42)
    record = deployment.plane.jobs.get(waiting.id)
    view = job_view(deployment.plane, record, deployment.clock())
    assert view.waited_s is not None and view.waited_s >= 42


class RecordingTrigger:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def request(self, reason: str, dedup_key: str) -> None:
        self.requests.append((reason, dedup_key))


def test_a_pass_that_admitted_a_full_window_asks_for_the_next_at_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a backlog beyond the window and capacity left, passes follow each other at once (one
    trigger each) until the backlog no longer fills a window or nothing more fits."""
    # Given a window of 2 jobs per class (free GPUs cannot widen it: at most 2), 24 GPUs, and
    # 4 jobs of 8 GPUs queued
    monkeypatch.setattr(scheduling, "WINDOW_PER_CLASS", 2)
    monkeypatch.setattr(scheduling, "MAX_WINDOW_PER_CLASS", 2)
    trigger = RecordingTrigger()
    plane = dataclasses.replace(deployment.plane, trigger=trigger)
    use_control_plane(plane)
    deployment.clock.freeze()
    jobs = [submit(deployment) for _ in range(4)]

    # When the scheduler runs: its window of 2 is admitted, so it asks for another pass
    first = functions.scheduler.handler(load_event("scheduled_event"), context("scheduler"))
    assert len(first["admitted"]) == 2 and len(trigger.requests) == 1

    # The next pass admits the one job that still fits; two jobs are still queued behind a full
    # window, so it asks again
    second = functions.scheduler.handler(load_event("scheduled_event"), context("scheduler"))
    assert len(second["admitted"]) == 1 and len(trigger.requests) == 2
    assert trigger.requests[0][1] != trigger.requests[1][1]

    # And a pass that admits nothing stops the chain (the next start or finish triggers again)
    deployment.clock.advance(1)
    third = functions.scheduler.handler(load_event("scheduled_event"), context("scheduler"))
    assert third["admitted"] == [] and len(trigger.requests) == 2
    states = sorted(deployment.plane.jobs.get(j.id).state.value for j in jobs)
    assert states == ["ADMITTED", "ADMITTED", "ADMITTED", "PENDING"]


def test_a_long_job_on_demand_moves_to_spot_room_and_resumes_there(deployment: Deployment) -> None:
    # Given a ten-hour job that started On-Demand an hour ago, and 8 free Spot GPUs, with moves on
    deployment.clock.freeze()
    settings = deployment.plane.settings
    scheduler = settings.config.scheduler.model_copy(update={"move_to_spot_min_remaining_s": 3600.0})
    config = settings.config.model_copy(update={"scheduler": scheduler})
    plane = dataclasses.replace(deployment.plane, settings=settings.model_copy(update={"config": config}))
    long = start(deployment, submit(deployment, expected_runtime_s=36000), pool="a100-on-demand")
    start(deployment, submit(deployment, name="other"), pool="a100-spot", instance_id="i-0aaaaaaaaaaaaaaa2")
    deployment.clock.advance(3600)
    before = plane.jobs.get(long.id)

    # When a pass runs with nothing pending
    result = scheduling_pass(plane)

    # Then the job checkpoints to move (its preempt workflow started, a grace period's deadline)
    assert result.moved == [(long.id, "a100-spot")] and result.admitted == []
    stored = plane.jobs.get(long.id)
    assert stored.state is JobState.CHECKPOINTING and stored.disruption is Disruption.PREEMPT
    assert stored.draining_for == "a move to a100-spot"
    assert deployment.starter is not None
    assert f"preempt-{long.id}-v{stored.version}" in deployment.starter.names()

    # And a concurrent pass that read the job before this one moved it does not move it again
    from spotline.control.scheduling import move
    from spotline.domain import Move

    started = len(deployment.starter.names())
    again = Move(before.job, "a100-on-demand", "a100-spot", 0.0, "a stale pass")
    assert move(plane, before, again, now=deployment.clock()) is False
    assert len(deployment.starter.names()) == started
    assert plane.jobs.get(long.id).version == stored.version

    # And while it checkpoints, the Spot GPUs it goes to are kept for it: a job that only Spot
    # would take waits, and no second move is made
    squeezed = submit(deployment, spot="required", name="squeezed")
    deployment.clock.advance(1)
    meanwhile = scheduling_pass(plane)
    assert meanwhile.moved == [] and squeezed.id not in [job for job, _ in meanwhile.admitted]

    # When its checkpoint is done it is requeued, and the next pass admits it to Spot
    from spotline.control.workflow_tasks import finish_preemption

    assert finish_preemption(plane, long.id)["finished"] is True
    requeued = plane.jobs.get(long.id)
    assert requeued.state is JobState.PENDING and requeued.job.preemptions == 1
    deployment.clock.advance(1)
    assert (long.id, "a100-spot") in scheduling_pass(plane).admitted
