"""Faults around runs (RUN_IDENTITY): each test is named after the fault
it injects, and checks that no healthy run is killed, no job runs twice, and no run the record
does not own keeps running.

The handlers are called as Lambda would call them, on moto; the launcher is the recording one
of helpers.py (it answers ListJobs / DescribeJobs for what it submitted, and injects failures).
"""

from __future__ import annotations

from typing import Any

import pytest

import functions.batch_state_change
import functions.checkpoint_completed
import functions.heartbeat
import functions.rebalance
import functions.spot_interruption
from spotline.control.errors import BatchThrottled, PublishFailed
from spotline.control.jobs import JobChanges, cancel_job, update_job
from spotline.control.reconciler import CHECKPOINT_OVERRUN_S, LAUNCH_TIMEOUT_S, reconcile
from spotline.control.records import JobRecord, run_id_for
from spotline.control.scheduling import admit
from spotline.control.workflow_tasks import (
    mark_launch_failed,
    record_batch_job,
    submit_batch_job,
)
from spotline.domain import JobState, Priority

from .helpers import CONFIG, Deployment, batch_event, context, eventbridge, heartbeat_recorded, start, submit

HOST_LOST = "Host EC2 (instance i-0aaaaaaaaaaaaaaa1) terminated."
OTHER_QUEUE = next(p["job_queue"] for p in CONFIG["pools"] if p["name"] == "a100-on-demand")


def heartbeat(record: JobRecord, step: int, *, run: int | None = None, **detail: Any) -> bool:
    event = eventbridge(
        "job_heartbeat",
        detail={
            "job_id": record.id,
            "run_id": run_id_for(record.id, run or record.run),
            "step": step,
            "instance_id": None,
            **detail,
        },
    )
    return heartbeat_recorded(event)


def checkpoint(record: JobRecord, step: int, *, run: int | None = None, **detail: Any) -> bool:
    event = eventbridge(
        "checkpoint_completed",
        detail={
            "job_id": record.id,
            "run_id": run_id_for(record.id, run or record.run),
            "step": step,
            "checkpoint_uri": f"s3://ckpt/{record.id}/step-{step}/",
            **detail,
        },
    )
    return bool(functions.checkpoint_completed.handler(event, context("checkpoint_completed"))["recorded"])


def batch(record: JobRecord, batch_job_id: str, status: str, **kwargs: Any) -> str:
    kwargs.setdefault("run", record.run)
    event = batch_event(record.id, batch_job_id, status, **kwargs)
    return str(functions.batch_state_change.handler(event, context("batch_state_change"))["outcome"])


def lose_host(dep: Deployment, record: JobRecord) -> JobRecord:
    assert record.batch_job_id is not None
    assert batch(record, record.batch_job_id, "FAILED", reason=HOST_LOST) == "interrupted: requeued"
    return dep.plane.jobs.get(record.id)


def keep_beating(dep: Deployment, record: JobRecord, steps: range) -> None:
    """The run heartbeats every half heartbeat timeout and the reconciler runs after each."""
    for step in steps:
        dep.clock.advance(dep.plane.config.heartbeat_timeout_s / 2)
        assert heartbeat(record, step), f"heartbeat at step {step} dropped"
        assert reconcile(dep.plane).requeued == []


def used(dep: Deployment) -> dict[str, int]:
    return dep.plane.ledger.usage(["a100-spot", "a100-on-demand"], [])[0]


# --- finding 2: a restarted run is not killed as a lost host ------------------------------------


def test_restarted_run_resuming_from_an_older_checkpoint_keeps_heartbeating_and_is_not_killed(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.clock.freeze()
    first = start(dep, submit(dep))
    # Run 1 checkpoints at step 300 and gets to step 500, then its host is lost.
    assert checkpoint(first, 300) and heartbeat(first, 500)
    requeued = lose_host(dep, first)
    assert requeued.state is JobState.PENDING and requeued.step is None

    # Run 2 resumes from step 300: its heartbeats (below the old run's 500) count, and the
    # reconciler leaves it alone while they come.
    second = start(dep, requeued)
    assert second.run == 2 and second.run_id == run_id_for(second.id, 2)
    keep_beating(dep, second, range(300, 306))
    stored = dep.plane.jobs.get(second.id)
    assert stored.state is JobState.RUNNING and stored.step == 305
    assert dep.launcher.terminated == []


def test_a_job_with_no_usable_checkpoint_restarts_from_zero_without_looping(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    record = start(dep, submit(dep))
    assert heartbeat(record, 1000)
    record = lose_host(dep, record)
    assert record.job.last_checkpoint_step is None

    # Run 2 starts over from step 0 and keeps running: no second requeue, no third run.
    second = start(dep, record)
    keep_beating(dep, second, range(0, 5))
    stored = dep.plane.jobs.get(second.id)
    assert (stored.state, stored.run, stored.job.interruptions) == (JobState.RUNNING, 2, 1)


def test_a_delayed_checkpoint_of_an_earlier_run_is_not_credited(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    first = start(dep, submit(dep))
    assert checkpoint(first, 200)
    second = start(dep, lose_host(dep, first))

    # Run 1's checkpoint at step 900 arrives late (after run 2 started): dropped.
    assert not checkpoint(second, 900, run=1)
    # Run 2 resumed from an older checkpoint than run 1's last (say it was unreadable): its
    # checkpoint at step 150 is the newest state and is recorded; within run 2 the step only
    # moves forward.
    assert checkpoint(second, 150)
    assert not checkpoint(second, 120)
    stored = dep.plane.jobs.get(second.id)
    assert (stored.job.last_checkpoint_step, stored.last_checkpoint_run) == (150, 2)


def test_heartbeats_of_an_earlier_run_or_without_a_run_id_are_dropped(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    second = start(dep, lose_host(dep, start(dep, submit(dep))))
    before = dep.plane.jobs.get(second.id)

    assert not heartbeat(second, 10_000, run=1)  # the old run's agent, still alive
    assert not heartbeat(second, 10, run=3)  # a run that does not exist yet
    no_run = eventbridge("job_heartbeat", detail={"job_id": second.id, "step": 10, "run_id": None})
    assert heartbeat_recorded(no_run) is False
    other_job = eventbridge(
        "job_heartbeat", detail={"job_id": second.id, "step": 10, "run_id": run_id_for("job-other", 2)}
    )
    assert heartbeat_recorded(other_job) is False
    after = dep.plane.jobs.get(second.id)
    assert (after.step, after.last_heartbeat_at) == (before.step, before.last_heartbeat_at)


def test_agent_death_then_the_restarted_run_stays_alive(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    first = start(dep, submit(dep))
    assert heartbeat(first, 400)
    # The agent dies: no heartbeat for longer than the timeout; the reconciler stops the run.
    dep.clock.advance(dep.plane.config.heartbeat_timeout_s + 1)
    assert [why for _, why in reconcile(dep.plane).requeued] == ["heartbeat lost"]
    assert first.batch_job_id in [b for b, _ in dep.launcher.terminated]

    # The job is admitted again; the new run starts from step 0 (no checkpoint) and lives on,
    # even when a zombie heartbeat of the first run shows up.
    second = start(dep, dep.plane.jobs.get(first.id))
    assert not heartbeat(second, 401, run=1)
    keep_beating(dep, second, range(0, 4))
    assert dep.plane.jobs.get(second.id).state is JobState.RUNNING


# --- finding 3: one Batch job per admission, orphans stopped ------------------------------------


def test_submitjob_succeeds_then_the_step_is_retried_and_no_second_job_is_submitted(
    deployment: Deployment,
) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    # The task crashes after SubmitJob returned (a Lambda timeout, say): Step Functions retries.
    dep.launcher.crash_after_submit.append(RuntimeError("task timed out after SubmitJob"))
    with pytest.raises(RuntimeError):
        submit_batch_job(dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot")
    retried = submit_batch_job(
        dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot"
    )

    # The retry adopts the live Batch job of the run's name: one job for one admission.
    assert len(dep.launcher.submitted) == 1
    assert retried == {"submitted": True, "batch_job_id": dep.launcher.live()[0], "adopted": True}
    assert dep.launcher.submitted[0].job_name == run_id_for(record.id, 1)


def test_an_error_after_submitjob_stops_the_submitted_run_before_requeueing(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    dep.launcher.crash_after_submit.append(RuntimeError("crash after SubmitJob"))
    with pytest.raises(RuntimeError):
        submit_batch_job(dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot")
    [orphan] = dep.launcher.live()

    # The workflow's Catch requeues the job: the run it had submitted is stopped.
    result = mark_launch_failed(
        dep.plane, record.id, version=admitted.version, run=admitted.run, error="States.Timeout"
    )
    assert result == {"requeued": True}
    assert [b for b, _ in dep.launcher.terminated] == [orphan]
    stored = dep.plane.jobs.get(record.id)
    assert stored.state is JobState.PENDING and orphan in stored.terminating_batch_job_ids
    assert dep.launcher.live() == [] and used(dep)["a100-spot"] == 0


def test_a_failed_launch_workflow_leaves_no_run_behind(deployment: Deployment) -> None:
    # The launch workflow dies after SubmitJob, before recording it (no Catch ran either).
    dep = deployment
    dep.clock.freeze()
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    dep.launcher.crash_after_submit.append(RuntimeError("crash"))
    with pytest.raises(RuntimeError):
        submit_batch_job(dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot")
    [orphan] = dep.launcher.live()

    # The reconciler requeues after the launch timeout and stops the run found by its name.
    dep.clock.advance(LAUNCH_TIMEOUT_S + 1)
    assert [why for _, why in reconcile(dep.plane).requeued] == ["launch timed out"]
    assert [b for b, _ in dep.launcher.terminated] == [orphan] and dep.launcher.live() == []


def test_an_orphan_run_of_an_earlier_admission_is_stopped_and_never_adopted(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    record = submit(dep)
    first = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    orphan = submit_batch_job(dep.plane, record.id, version=first.version, run=1, pool="a100-spot")[
        "batch_job_id"
    ]
    # Preempted before the id was recorded; admitted again (run 2), not yet launched.
    timed_out = dep.clock() - LAUNCH_TIMEOUT_S - 1
    dep.plane.jobs.update_fields(record.id, states=[JobState.ADMITTED], set_fields={"admitted_at": timed_out})
    reconcile(dep.plane)  # launch timeout: requeued, the run found by name is stopped
    second = admit(dep.plane, dep.plane.jobs.get(record.id), "a100-on-demand", "fits", now=dep.clock())
    assert second.run == 2 and second.batch_job_id is None
    dep.launcher.terminated.clear()

    # Run 1's RUNNING event arrives: it is not adopted into run 2 (nor into run 2's pool).
    outcome = batch(second, orphan, "RUNNING", run=1)
    assert outcome.startswith("event of a run that ended")
    stored = dep.plane.jobs.get(record.id)
    assert (stored.state, stored.batch_job_id, stored.job.pool) == (JobState.ADMITTED, None, "a100-on-demand")


def test_an_unrecorded_run_of_an_earlier_admission_is_terminated(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    record = submit(dep)
    admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    # Cancelled and requeued paths aside: run 1's Batch job exists under its name, unrecorded,
    # and the job went on to run 2 (ADMITTED, launch in flight).
    first = dep.plane.jobs.get(record.id)
    dep.plane.jobs.transition(first, JobState.PENDING, "requeued by the test", now=dep.clock())
    second = admit(dep.plane, dep.plane.jobs.get(record.id), "a100-spot", "fits", now=dep.clock())

    outcome = batch(second, "batch-stray-1", "RUNNING", run=1)
    assert outcome.startswith("orphan stopped: run 1")
    assert dep.launcher.terminated[-1][0] == "batch-stray-1"
    stored = dep.plane.jobs.get(record.id)
    assert stored.state is JobState.ADMITTED and stored.batch_job_id is None
    assert "batch-stray-1" in stored.terminating_batch_job_ids


def test_an_orphan_in_another_pools_queue_is_not_adopted(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())

    outcome = batch(admitted, "batch-elsewhere", "RUNNING", job_queue=OTHER_QUEUE)

    assert outcome.startswith("orphan stopped: queue")
    stored = dep.plane.jobs.get(record.id)
    assert (stored.state, stored.batch_job_id) == (JobState.ADMITTED, None)
    assert dep.launcher.terminated[-1][0] == "batch-elsewhere"


def test_a_second_batch_job_of_the_same_run_is_stopped(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    outcome = batch(running, "batch-duplicate", "RUNNING")
    assert outcome.startswith("orphan stopped")
    assert dep.launcher.terminated == [("batch-duplicate", dep.launcher.terminated[0][1])]
    stored = dep.plane.jobs.get(running.id)
    assert (stored.state, stored.batch_job_id) == (JobState.RUNNING, running.batch_job_id)


# --- finding 4: a termination stays pending until Batch confirms --------------------------------


def test_terminatejob_throttled_on_cancel_is_retried_until_batch_confirms(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None
    dep.launcher.terminate_ends = False
    dep.launcher.terminate_failures.append(BatchThrottled("Rate exceeded"))

    # The cancel is accepted (the throttle is not the user's problem) and the termination is
    # recorded as pending in the same write.
    cancelled = cancel_job(dep.plane, "vision", running.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.terminating_batch_job_ids == (running.batch_job_id,)
    assert dep.launcher.terminated == []

    # The reconciler asks again while Batch has not confirmed; then sees it stopped.
    assert reconcile(dep.plane).terminations_retried == [running.batch_job_id]
    assert reconcile(dep.plane).terminations_retried == [running.batch_job_id]
    dep.launcher.end(running.batch_job_id)
    assert reconcile(dep.plane).terminations_confirmed == [running.batch_job_id]
    stored = dep.plane.jobs.get(running.id)
    assert stored.terminating_batch_job_ids == () and stored.state is JobState.CANCELLED
    assert dep.plane.jobs.terminating() == []
    assert [r.id for r in dep.plane.jobs.active()] == []


def test_a_terminal_batch_event_confirms_a_pending_termination(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None
    dep.launcher.terminate_ends = False
    cancel_job(dep.plane, "vision", running.id)
    assert dep.plane.jobs.get(running.id).terminating_batch_job_ids == (running.batch_job_id,)

    outcome = batch(running, running.batch_job_id, "FAILED", reason="Terminated by Spotline")

    assert outcome.startswith("termination confirmed")
    assert dep.plane.jobs.get(running.id).terminating_batch_job_ids == ()
    assert dep.plane.jobs.terminating() == []


def test_a_heartbeat_loss_with_terminatejob_failing_keeps_the_run_a_pending_termination(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.clock.freeze()
    running = start(dep, submit(dep))
    dep.launcher.terminate_ends = False
    dep.launcher.terminate_failures.append(BatchThrottled("Rate exceeded"))
    dep.clock.advance(dep.plane.config.heartbeat_timeout_s + 1)

    first = reconcile(dep.plane)  # requeues; TerminateJob throttled

    assert [why for _, why in first.requeued] == ["heartbeat lost"]
    assert first.terminations_retried == [running.batch_job_id]  # the same run retried it
    stored = dep.plane.jobs.get(running.id)
    assert stored.state is JobState.PENDING and stored.terminating_batch_job_ids == (running.batch_job_id,)


# --- finding 5: a field change does not invalidate a launch in flight ---------------------------


def test_a_priority_change_during_a_launch_does_not_drop_it(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    # The team raises the priority while the launch workflow is starting.
    update_job(dep.plane, "vision", record.id, JobChanges(priority=Priority.HIGH))
    assert dep.plane.jobs.get(record.id).version == admitted.version + 1

    submitted = submit_batch_job(
        dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot"
    )
    assert submitted["submitted"] is True
    # And again between SubmitJob and the record.
    update_job(dep.plane, "vision", record.id, JobChanges(priority=Priority.CRITICAL))
    recorded = record_batch_job(
        dep.plane,
        record.id,
        version=admitted.version,
        run=admitted.run,
        batch_job_id=submitted["batch_job_id"],
    )

    assert recorded == {"recorded": True}
    assert dep.launcher.terminated == []
    stored = dep.plane.jobs.get(record.id)
    assert stored.batch_job_id == submitted["batch_job_id"] and stored.job.priority is Priority.CRITICAL


def test_a_priority_change_during_a_failed_launch_still_requeues_it(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    update_job(dep.plane, "vision", record.id, JobChanges(priority=Priority.HIGH))

    result = mark_launch_failed(dep.plane, record.id, version=admitted.version, run=admitted.run)

    assert result == {"requeued": True}
    assert dep.plane.jobs.get(record.id).state is JobState.PENDING and used(dep)["a100-spot"] == 0


# --- duplicates and reordering ------------------------------------------------------------------


def test_duplicate_delivery_of_every_event_type_has_one_effect(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    running = start(dep, submit(dep), instance_id="i-1234567890abcdef0")
    assert running.batch_job_id is not None

    def state() -> tuple[Any, ...]:
        r = dep.plane.jobs.get(running.id)
        entries, _ = dep.plane.timeline.list(running.id)
        return (r.state, r.version, r.step, r.job.last_checkpoint_step, len(entries), used(dep))

    deliveries = [
        lambda: heartbeat(running, 10),
        lambda: checkpoint(running, 10),
        lambda: batch(running, running.batch_job_id or "", "RUNNING"),
        lambda: functions.rebalance.handler(eventbridge("rebalance_recommendation"), context()),
    ]
    for deliver in deliveries:
        deliver()
        once = state()
        deliver()  # the same event again (a fresh EventBridge id: not deduplicated upstream)
        assert state() == once

    warning = eventbridge("spot_interruption_warning")
    functions.spot_interruption.handler(warning, context())
    once = state()
    functions.spot_interruption.handler(eventbridge("spot_interruption_warning"), context())
    assert state() == once and once[0] is JobState.CHECKPOINTING

    for status in ("SUCCEEDED", "FAILED"):
        other = start(dep, submit(dep), instance_id="i-0bbbbbbbbbbbbbbb2")
        assert other.batch_job_id is not None
        batch(other, other.batch_job_id, status, exit_code=1 if status == "FAILED" else None)
        first = dep.plane.jobs.get(other.id)
        batch(other, other.batch_job_id, status, exit_code=1 if status == "FAILED" else None)
        assert dep.plane.jobs.get(other.id) == first
        assert first.state.value == status
    assert dep.launcher.terminated == []


def test_reordering_running_after_succeeded_changes_nothing_and_stops_nothing(
    deployment: Deployment,
) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None
    batch(running, running.batch_job_id, "SUCCEEDED")
    finished = dep.plane.jobs.get(running.id)

    outcome = batch(running, running.batch_job_id, "RUNNING")

    assert outcome.startswith("event of a run that ended")
    assert dep.plane.jobs.get(running.id) == finished
    assert dep.launcher.terminated == []


def test_a_checkpoint_landing_after_the_requeue_is_recorded_and_gives_back_the_lost_work(
    deployment: Deployment,
) -> None:
    dep = deployment
    at = dep.clock.freeze()
    first = start(dep, submit(dep))
    assert checkpoint(first, 50, created_at=at)
    dep.clock.advance(100)
    requeued = lose_host(dep, first)
    assert requeued.job.lost_work_s == pytest.approx(100)

    # Delivered after the requeue, before the next admission: a checkpoint captured 90 s into
    # the 100 s the requeue counted as lost. It is what the next run restores: recorded, and
    # those 90 s are given back (to the job and to its GPU-seconds).
    assert checkpoint(first, 80, created_at=at + 90)
    stored = dep.plane.jobs.get(first.id)
    assert stored.state is JobState.PENDING and stored.job.last_checkpoint_step == 80
    assert stored.job.lost_work_s == pytest.approx(10)
    assert stored.job.runtime_s == pytest.approx(requeued.job.runtime_s + 90)
    assert first.gpus_held > 0
    assert stored.lost_gpu_s == pytest.approx(requeued.lost_gpu_s - 90 * first.gpus_held)
    # A duplicate, an older checkpoint and a heartbeat change nothing more.
    assert not checkpoint(first, 80, created_at=at + 90)
    assert not checkpoint(first, 60, created_at=at + 20)
    assert not heartbeat(first, 90)
    again = dep.plane.jobs.get(first.id)
    assert again.version == stored.version and again.step is None
    entries, _ = dep.plane.timeline.list(first.id)
    assert "checkpoint step 80 of run 1 became durable after the run was stopped" in entries[-1].reason


def test_reordering_a_late_failed_event_of_an_earlier_run_leaves_the_current_run_alone(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.clock.freeze()
    first = start(dep, submit(dep))
    assert first.batch_job_id is not None
    second = start(dep, lose_host(dep, first))

    outcome = batch(second, first.batch_job_id, "FAILED", run=1, reason=HOST_LOST)

    assert outcome.startswith("event of a run that ended")
    assert dep.plane.jobs.get(second.id).state is JobState.RUNNING


# --- a crash after each external call -----------------------------------------------------------


def test_a_crash_after_terminatejob_in_cancel_is_safe_to_retry(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    real = dep.launcher.terminate

    def terminate_then_crash(batch_job_id: str, reason: str) -> None:
        real(batch_job_id, reason)
        raise ConnectionError("connection reset after TerminateJob")

    dep.launcher.terminate = terminate_then_crash  # type: ignore[method-assign]
    cancelled = cancel_job(dep.plane, "vision", running.id)
    dep.launcher.terminate = real  # type: ignore[method-assign]
    # A retry of the request returns the cancelled job; the reconciler confirms the stop.
    assert cancel_job(dep.plane, "vision", running.id).version == cancelled.version
    assert reconcile(dep.plane).terminations_confirmed == [running.batch_job_id]
    assert dep.launcher.live() == []


def test_a_crash_after_startexecution_in_a_pass_starts_one_launch(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    assert dep.starter is not None
    real = dep.starter.start

    def start_then_crash(arn: str, name: str, payload: Any) -> str:
        real(arn, name, payload)
        raise ConnectionError("connection reset after StartExecution")

    dep.starter.start = start_then_crash  # type: ignore[method-assign]
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    dep.starter.start = real  # type: ignore[method-assign]

    # The admission stands, its launch started once, and names the run it launches.
    assert admitted.state is JobState.ADMITTED
    [(_, name, payload)] = dep.starter.started
    assert payload["run"] == 1 and name == f"launch-{record.id}-v{admitted.version}"


def test_a_crash_after_putevents_leaves_the_transition_and_the_caller_unharmed(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    record = submit(dep)

    real = dep.plane.publisher.sink.put
    put: list[str] = []

    def put_then_fail(source: str, detail_type: str, details: Any) -> None:
        real(source, detail_type, details)
        put.append(detail_type)
        raise PublishFailed("connection reset after PutEvents")

    monkeypatch.setattr(dep.plane.publisher.sink, "put", put_then_fail)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    assert put and dep.plane.jobs.get(record.id).state is JobState.ADMITTED is admitted.state
    monkeypatch.undo()
    # The agent's PutEvents retried after a lost answer: its events arrive twice; once counts.
    running = start(dep, submit(dep))
    assert heartbeat(running, 7)
    again = heartbeat(running, 7)
    assert again and dep.plane.jobs.get(running.id).step == 7


def test_redelivery_after_a_mid_way_failure_still_stops_the_run(deployment: Deployment) -> None:
    """The Batch handler fails after its write (TerminateJob throttled): EventBridge delivers
    again; the redelivery finds the termination pending and asks again."""
    dep = deployment
    running = start(dep, submit(dep))
    dep.launcher.terminate_ends = False
    dep.launcher.terminate_failures.append(BatchThrottled("Rate exceeded"))

    first = batch(running, "batch-duplicate", "RUNNING")
    assert first.startswith("orphan stopped") and dep.launcher.terminated == []
    assert "batch-duplicate" in dep.plane.jobs.get(running.id).terminating_batch_job_ids

    second = batch(running, "batch-duplicate", "RUNNING")
    assert second.startswith("orphan stopped")
    assert [b for b, _ in dep.launcher.terminated] == ["batch-duplicate"]


# --- the preempt workflow's faults --------------------------------------------------------------


def test_an_expired_task_token_still_records_the_checkpoint(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    marked = dep.plane.jobs.transition(
        running,
        JobState.CHECKPOINTING,
        "preempted",
        now=dep.clock(),
        changes={"checkpoint_requested_at": dep.clock() - 5, "checkpoint_task_token": "expired-token"},
    )

    class ExpiredTokens:
        def __init__(self) -> None:
            self.answered: list[str] = []

        def succeed(self, token: str, output: Any) -> bool:
            self.answered.append(token)
            return False  # TaskTimedOut: the workflow stopped waiting

        def fail(self, token: str, error: str, cause: str) -> bool:
            return False

    tokens = ExpiredTokens()
    dep.plane.tokens = tokens

    assert checkpoint(marked, 42)
    stored = dep.plane.jobs.get(running.id)
    assert tokens.answered == ["expired-token"]
    assert stored.job.last_checkpoint_step == 42 and stored.checkpoint_task_token is None


def test_a_failed_preempt_workflow_is_finished_by_the_reconciler_which_stops_the_run(
    deployment: Deployment,
) -> None:
    dep = deployment
    now = dep.clock.freeze()
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None
    # The workflow failed (TerminateFailed): the job is CHECKPOINTING past its deadline.
    dep.plane.jobs.transition(
        running,
        JobState.CHECKPOINTING,
        "preempted",
        now=now,
        changes={"checkpoint_deadline_at": now + 5, "checkpoint_requested_at": now},
    )
    dep.launcher.terminate_ends = False
    dep.clock.advance(5 + CHECKPOINT_OVERRUN_S + 1)

    result = reconcile(dep.plane)

    assert [why for _, why in result.requeued] == ["checkpoint overran"]
    stored = dep.plane.jobs.get(running.id)
    assert stored.state is JobState.PENDING and stored.terminating_batch_job_ids == (running.batch_job_id,)
    assert used(dep)["a100-spot"] == 0  # the ledger frees at the requeue; the run stays visible
    dep.launcher.end(running.batch_job_id)
    assert reconcile(dep.plane).terminations_confirmed == [running.batch_job_id]


def test_a_run_that_exits_0_once_the_plane_asked_it_to_stop_is_requeued_not_succeeded(
    deployment: Deployment,
) -> None:
    """The workflow asked Batch to stop the run (a pending termination), and the run then exited
    0 (Lightning does after SIGTERM, without the agent's wrapper): not a success. The workflow
    requeues it from its checkpoint; a run that had in fact finished resumes from its final
    checkpoint and ends at once."""
    from spotline.control.workflow_tasks import finish_preemption, terminate_batch_job

    dep = deployment
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None
    dep.plane.jobs.transition(running, JobState.CHECKPOINTING, "preempted", now=dep.clock())
    terminate_batch_job(dep.plane, running.id, batch_job_id=running.batch_job_id)
    assert dep.plane.jobs.get(running.id).terminating_batch_job_ids == (running.batch_job_id,)

    outcome = batch(running, running.batch_job_id, "SUCCEEDED")

    assert outcome == "termination confirmed; stopped by the plane: left to the preempt workflow"
    assert dep.plane.jobs.get(running.id).state is JobState.CHECKPOINTING
    assert finish_preemption(dep.plane, running.id)["finished"] is True
    stored = dep.plane.jobs.get(running.id)
    assert stored.state is JobState.PENDING and stored.job.preemptions == 1
    # (the requeue keeps the run as a pending termination; the reconciler finds it ended)
    reconcile(dep.plane)
    assert dep.plane.jobs.get(running.id).terminating_batch_job_ids == ()


# --- a stopped run is never done; the step a run restored ---------------------------------------


@pytest.mark.parametrize(("exit_code", "state"), [(143, JobState.PENDING), (1, JobState.FAILED)])
def test_a_run_stopped_by_sigterm_from_outside_is_requeued_but_a_crash_fails(
    deployment: Deployment, exit_code: int, state: JobState
) -> None:
    dep = deployment
    dep.clock.freeze()
    running = start(dep, submit(dep))
    assert running.batch_job_id is not None and checkpoint(running, 40)

    # The container exited 143 (the agent's wrapper: SIGTERM reached the run), or 1 (a crash)
    outcome = batch(running, running.batch_job_id, "FAILED", exit_code=exit_code)

    stored = dep.plane.jobs.get(running.id)
    assert stored.state is state, outcome
    if state is JobState.PENDING:
        assert stored.job.interruptions == 1 and stored.job.last_checkpoint_step == 40
        assert "stopped by SIGTERM from outside the job" in stored.state_reason or outcome.startswith(
            "interr"
        )


def test_the_checkpoint_a_run_restored_is_its_status_and_a_timeline_entry_once(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.clock.freeze()
    first = start(dep, submit(dep))
    assert checkpoint(first, 40)
    second = start(dep, lose_host(dep, first))
    uri = f"s3://ckpt/{second.id}/step-55/"  # newer than the one recorded: written on SIGTERM, say

    assert heartbeat(second, 55, restored_step=55, restored_checkpoint_uri=uri)
    assert heartbeat(second, 56, restored_step=55, restored_checkpoint_uri=uri)

    stored = dep.plane.jobs.get(second.id)
    assert (stored.restored_run, stored.restored_step, stored.restored_checkpoint_uri) == (2, 55, uri)
    from spotline.control.jobs import job_view

    view = job_view(dep.plane, stored, dep.clock()).model_dump()
    assert view["restored"] == {"run": 2, "step": 55, "uri": uri}
    entries, _ = dep.plane.timeline.list(second.id)
    notes = [e.reason for e in entries if "resumed from checkpoint" in e.reason]
    assert notes == [f"run 2 resumed from checkpoint step 55 (the newest recorded was step 40): {uri}"]
