"""Event handlers called with AWS's documented sample events (and the agent's events):
Spot warnings, rebalance recommendations, checkpoints, heartbeats, Batch job state changes,
and idempotency under redelivery."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

import functions.batch_state_change
import functions.checkpoint_completed
import functions.heartbeat
import functions.rebalance
import functions.spot_interruption
from spotline.control.records import Disruption
from spotline.domain import JobState

from .helpers import (
    Deployment,
    batch_event,
    context,
    eventbridge,
    heartbeat_recorded,
    heartbeats,
    sqs_records,
    start,
    submit,
)

SAMPLE_INSTANCE = "i-1234567890abcdef0"  # the instance in AWS's sample EC2 events


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def transitions(dep: Deployment, job_id: str) -> list[tuple[str, str]]:
    entries, _ = dep.plane.timeline.list(job_id)
    return [(e.source, e.target) for e in entries]


def test_a_spot_warning_asks_every_job_on_the_instance_to_checkpoint_by_the_notice(
    deployment: Deployment,
) -> None:
    # Given a job running on the sample's instance, and one elsewhere
    now = deployment.clock.freeze(float(int(deployment.clock())))
    on_it = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)
    elsewhere = start(deployment, submit(deployment), instance_id="i-0bbbbbbbbbbbbbbb2")

    # When AWS's warning for that instance arrives, issued 10 s ago
    event = eventbridge("spot_interruption_warning", time=iso(now - 10))
    result = functions.spot_interruption.handler(event, context("spot_interruption"))

    # Then only that job checkpoints, with the notice's deadline less the stop margin, and its
    # workflow (the preempt workflow, ending INTERRUPTED) starts with the time left
    assert result == {"instance_id": SAMPLE_INSTANCE, "jobs": [on_it.id]}
    stored = deployment.plane.jobs.get(on_it.id)
    assert stored.state is JobState.CHECKPOINTING and stored.disruption is Disruption.INTERRUPT
    config = deployment.plane.config
    assert stored.checkpoint_deadline_at == now - 10 + config.spot_notice_s - config.spot_notice_margin_s
    assert stored.checkpoint_requested_at == now
    assert deployment.starter is not None
    [(arn, name, payload)] = deployment.starter.started[-1:]
    assert arn == deployment.state_machines["preempt"] and name == f"interrupt-{on_it.id}-v{stored.version}"
    assert payload["disruption"] == "interrupt" and payload["timeout_s"] == 100
    assert deployment.plane.jobs.get(elsewhere.id).state is JobState.RUNNING


def test_a_redelivered_spot_warning_has_one_effect(deployment: Deployment) -> None:
    # Given a job on the sample instance
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)
    event = eventbridge("spot_interruption_warning", time=iso(deployment.clock()))

    # When EventBridge delivers the same event twice
    first = functions.spot_interruption.handler(event, context("spot_interruption"))
    second = functions.spot_interruption.handler(event, context("spot_interruption"))

    # Then the second delivery returns the first result and changes nothing
    assert first == second
    assert deployment.starter is not None
    assert [n for n in deployment.starter.names() if n.startswith("interrupt-")] == [
        f"interrupt-{running.id}-v{running.version + 1}"
    ]
    assert transitions(deployment, running.id).count(("RUNNING", "CHECKPOINTING")) == 1


def test_a_warning_for_an_instance_without_jobs_does_nothing(deployment: Deployment) -> None:
    event = eventbridge("spot_interruption_warning", detail={"instance-id": "i-0ffffffffffffffff"})
    assert functions.spot_interruption.handler(event, context())["jobs"] == []


def test_a_spot_warning_without_an_instance_id_is_rejected(deployment: Deployment) -> None:
    event = eventbridge("spot_interruption_warning")
    del event["detail"]["instance-id"]
    with pytest.raises(Exception, match="instance-id"):
        functions.spot_interruption.handler(event, context())


def test_a_rebalance_recommendation_requests_a_checkpoint_and_keeps_running(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)

    result = functions.rebalance.handler(eventbridge("rebalance_recommendation"), context("rebalance"))

    assert result["jobs"] == [running.id]
    stored = deployment.plane.jobs.get(running.id)
    assert stored.state is JobState.RUNNING and stored.checkpoint_requested_at == now
    assert stored.version == running.version  # not a transition


def test_a_checkpoint_is_recorded_and_an_older_one_arriving_late_is_ignored(deployment: Deployment) -> None:
    # Given a running job
    running = start(deployment, submit(deployment))

    # When the agent reports step 120, then (late, out of order) step 60
    newer = eventbridge("checkpoint_completed", detail={"job_id": running.id, "step": 120, "progress": 0.4})
    older = eventbridge(
        "checkpoint_completed",
        detail={"job_id": running.id, "step": 60, "progress": 0.2, "checkpoint_uri": "s3://old/"},
    )
    assert functions.checkpoint_completed.handler(newer, context())["recorded"] is True
    assert functions.checkpoint_completed.handler(older, context())["recorded"] is False

    # Then the job resumes from step 120
    stored = deployment.plane.jobs.get(running.id)
    assert stored.job.last_checkpoint_step == 120 and stored.job.progress == pytest.approx(0.4)
    assert stored.job.last_checkpoint_uri == newer["detail"]["checkpoint_uri"]


def test_a_checkpoint_with_progress_out_of_range_is_rejected(deployment: Deployment) -> None:
    running = start(deployment, submit(deployment))
    bad = eventbridge("checkpoint_completed", detail={"job_id": running.id, "progress": 1.5})
    with pytest.raises(Exception, match="progress"):
        functions.checkpoint_completed.handler(bad, context())


def test_a_heartbeat_records_progress_and_the_instance_for_spot_warnings(deployment: Deployment) -> None:
    # Given a running job whose RUNNING event named no EC2 instance
    running = start(deployment, submit(deployment), instance_id="not-resolved")
    assert running.instance_ids == ()

    # When its agent sends a heartbeat (instance id from instance metadata)
    beat = eventbridge("job_heartbeat", detail={"job_id": running.id, "step": 100})
    assert heartbeat_recorded(beat) is True
    stale = eventbridge("job_heartbeat", detail={"job_id": running.id, "step": 90, "progress": 0.1})
    assert heartbeat_recorded(stale) is False

    # Then progress and utilization are kept, and a warning for that instance finds the job
    stored = deployment.plane.jobs.get(running.id)
    assert stored.step == 100 and stored.job.progress == pytest.approx(0.33)
    assert stored.job.utilization == pytest.approx(0.92)
    assert stored.instance_ids == (SAMPLE_INSTANCE,)
    assert deployment.plane.instances.jobs_on(SAMPLE_INSTANCE) == [running.id]


def test_one_invocation_records_a_batch_of_heartbeats_and_fails_only_the_bad_record(
    deployment: Deployment,
) -> None:
    # Given three running jobs, and 30 heartbeats from their agents (10 steps each, shuffled as a
    # standard queue may deliver them), plus one message that is not a heartbeat
    pools = ("a100-spot", "a100-spot", "a100-on-demand")
    jobs = [
        start(deployment, submit(deployment), pool=pool, instance_id=f"i-0{n:015d}")
        for n, pool in enumerate(pools)
    ]
    beats = [
        eventbridge("job_heartbeat", detail={"job_id": job.id, "step": step, "instance_id": f"i-0{n:015d}"})
        for step in range(10, 110, 10)
        for n, job in enumerate(jobs)
    ]
    beats.reverse()  # the newest first: the older ones arrive late
    broken = eventbridge("job_heartbeat", detail={"job_id": jobs[0].id, "step": "many"})
    batch = sqs_records(*beats, broken)

    # When the heartbeat function is invoked once with the batch (the queue's event source mapping
    # hands it up to resources.HEARTBEAT_QUEUE.batch_size at a time)
    answer = functions.heartbeat.handler(batch, context("heartbeat"))

    # Then 31 messages took one invocation: every job is at its newest step (the late ones changed
    # nothing), and only the broken record is reported failed, to come back alone
    assert answer["heartbeats"] == 31
    assert answer["recorded"] == 3 and answer["dropped"] == 27
    broken_id = batch["Records"][-1]["messageId"]
    assert answer["batchItemFailures"] == [{"itemIdentifier": broken_id}]
    for n, job in enumerate(jobs):
        stored = deployment.plane.jobs.get(job.id)
        assert stored.step == 100 and stored.instance_ids == (f"i-0{n:015d}",)

    # And the same batch delivered again (SQS delivers at least once) moves no job: the newest
    # heartbeats only say again that their jobs are alive
    before = {job.id: deployment.plane.jobs.get(job.id) for job in jobs}
    again = functions.heartbeat.handler(batch, context("heartbeat"))
    assert again["recorded"] == 3 and again["batchItemFailures"] == [{"itemIdentifier": broken_id}]
    for job in jobs:
        stored = deployment.plane.jobs.get(job.id)
        assert (stored.version, stored.state, stored.step, stored.instance_ids) == (
            before[job.id].version,
            before[job.id].state,
            100,
            before[job.id].instance_ids,
        )


def emitted_metrics(out: str) -> dict[str, float]:
    """The metrics of the EMF documents Powertools printed (a sum per name)."""
    totals: dict[str, float] = {}
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                totals[metric["Name"]] = totals.get(metric["Name"], 0.0) + (
                    sum(value) if isinstance(value, list) else value
                )
    return totals


def test_agent_events_are_counted_recorded_or_dropped(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a running job, a fresh heartbeat, a stale one, and a checkpoint from no team's source
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)
    capsys.readouterr()
    heartbeats(
        eventbridge("job_heartbeat", detail={"job_id": running.id, "step": 100}),
        eventbridge("job_heartbeat", detail={"job_id": running.id, "step": 90}),
    )
    foreign = eventbridge("checkpoint_completed", detail={"job_id": running.id})
    foreign["source"] = "spotline.agent"
    functions.checkpoint_completed.handler(foreign, context("checkpoint_completed"))

    # Then one heartbeat is recorded, and the stale one and the checkpoint are counted as dropped
    totals = emitted_metrics(capsys.readouterr().out)
    assert totals["HeartbeatsRecorded"] == 1
    assert totals["CheckpointsRecorded"] == 0
    assert totals["AgentEventsDropped"] == 2
    assert totals["EventsReceived"] == 1  # the checkpoint's delivery (heartbeats are not idempotent)


def test_batch_running_starts_the_job_on_its_instances(deployment: Deployment) -> None:
    # Given / When: an admitted job gets Batch's RUNNING event (see helpers.start)
    t0 = deployment.clock.freeze(1_800_000_000.0)
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)

    # Then it is RUNNING since Batch's startedAt, on the instance ECS reported
    assert running.state is JobState.RUNNING
    assert running.job.started_at == pytest.approx(t0)
    assert running.instance_ids == (SAMPLE_INSTANCE,)
    assert deployment.plane.instances.jobs_on(SAMPLE_INSTANCE) == [running.id]
    assert transitions(deployment, running.id) == [
        ("-", "PENDING"),
        ("PENDING", "ADMITTED"),
        ("ADMITTED", "RUNNING"),
    ]


def test_batch_succeeded_finishes_the_job_and_frees_its_gpus(deployment: Deployment) -> None:
    t0 = deployment.clock.freeze(1_800_000_000.0)
    running = start(deployment, submit(deployment))
    deployment.clock.advance(600)
    assert running.batch_job_id is not None

    functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "SUCCEEDED", started_at_ms=int(t0 * 1000)), context()
    )

    done = deployment.plane.jobs.get(running.id)
    assert done.state is JobState.SUCCEEDED and done.job.runtime_s == pytest.approx(600)
    assert done.job.progress == 1.0 and done.finished_at == t0 + 600
    assert deployment.plane.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})


def test_batch_failed_by_the_application_fails_the_job(deployment: Deployment) -> None:
    running = start(deployment, submit(deployment))
    assert running.batch_job_id is not None

    functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "FAILED", exit_code=3), context()
    )

    failed = deployment.plane.jobs.get(running.id)
    assert failed.state is JobState.FAILED
    assert (
        "Essential container in task exited" in failed.state_reason and "exit code 3" in failed.state_reason
    )


def test_batch_failed_by_host_loss_requeues_the_job_from_its_checkpoint(deployment: Deployment) -> None:
    # Given a running job whose host was reclaimed
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)
    assert running.batch_job_id is not None
    reason = f"Host EC2 (instance {SAMPLE_INSTANCE}) terminated."

    # When Batch reports the job FAILED for that reason
    result = functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "FAILED", reason=reason), context()
    )

    # Then it is INTERRUPTED and requeued, not FAILED
    assert result["outcome"] == "interrupted: requeued"
    requeued = deployment.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.interruptions == 1
    assert transitions(deployment, running.id)[-2:] == [
        ("RUNNING", "INTERRUPTED"),
        ("INTERRUPTED", "PENDING"),
    ]

    # And a late event of that earlier run changes nothing
    late = functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "SUCCEEDED"), context()
    )
    assert late["outcome"].startswith("event of a run that ended")
    assert deployment.plane.jobs.get(running.id).state is JobState.PENDING


def test_a_failed_event_while_checkpointing_is_left_to_the_workflow(deployment: Deployment) -> None:
    running = start(deployment, submit(deployment))
    assert running.batch_job_id is not None
    deployment.plane.jobs.transition(
        running,
        JobState.CHECKPOINTING,
        "preempted",
        now=deployment.clock(),
        changes={"disruption": Disruption.PREEMPT},
    )

    result = functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "FAILED", reason="Terminated by Spotline"), context()
    )

    assert result["outcome"] == "checkpointing: left to the preempt workflow"
    assert deployment.plane.jobs.get(running.id).state is JobState.CHECKPOINTING


def test_the_documented_sample_batch_event_is_parsed_and_ignored_for_a_foreign_job(
    deployment: Deployment,
) -> None:
    # AWS's sample (jobName "event-test", RUNNABLE) is not a Spotline job.
    result = functions.batch_state_change.handler(eventbridge("batch_job_state_change"), context())
    assert result == {
        "batch_job_id": "4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        "status": "RUNNABLE",
        "outcome": "not a Spotline run",
    }


def test_a_warning_retried_after_the_workflow_failed_to_start_starts_it(deployment: Deployment) -> None:
    # Given a job marked CHECKPOINTING by a warning whose workflow start failed
    running = start(deployment, submit(deployment), instance_id=SAMPLE_INSTANCE)
    assert deployment.starter is not None
    original = deployment.starter.start

    def unavailable(*args: object) -> str:
        raise RuntimeError("Step Functions unavailable")

    deployment.starter.start = unavailable  # type: ignore[method-assign]
    functions.spot_interruption.handler(eventbridge("spot_interruption_warning"), context())
    assert deployment.plane.jobs.get(running.id).state is JobState.CHECKPOINTING
    assert [n for n in deployment.starter.names() if n.startswith("interrupt-")] == []

    # When a later warning for the instance is handled
    deployment.starter.start = original  # type: ignore[method-assign]
    functions.spot_interruption.handler(eventbridge("spot_interruption_warning"), context())

    # Then the workflow of that CHECKPOINTING run starts, under the run's execution name
    marked = deployment.plane.jobs.get(running.id)
    assert [n for n in deployment.starter.names() if n.startswith("interrupt-")] == [
        f"interrupt-{running.id}-v{marked.version}"
    ]
