"""Both ASL files executed by moto's Step Functions engine, with Lambda tasks dispatched to
functions.workflow_tasks.handler (spotline.local.moto_lambda_route)."""

from __future__ import annotations

import json
import time
from typing import Any

import functions.checkpoint_completed
import functions.spot_interruption
from spotline.aws.workflows import StepFunctionsStarter
from spotline.control.errors import BatchThrottled, LaunchFailed
from spotline.control.ports import execution_name
from spotline.control.records import Disruption, JobRecord
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState

from .helpers import Deployment, context, eventbridge, preempt, start, submit


def wait_for_token(dep: Deployment, job_id: str, timeout_s: float = 10.0) -> JobRecord:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        record = dep.plane.jobs.get(job_id)
        if record.checkpoint_task_token:
            return record
        time.sleep(0.02)
    raise AssertionError("the workflow never stored its task token")


def agent_checkpoint(job_id: str, step: int) -> dict[str, Any]:
    """What the agent's Checkpoint Completed handler returns for a durable checkpoint."""
    event = eventbridge("checkpoint_completed", detail={"job_id": job_id, "step": step})
    result: dict[str, Any] = functions.checkpoint_completed.handler(event, context("checkpoint_completed"))
    return result


def event_types(dep: Deployment, machine: str, name: str) -> list[str]:
    return [e["type"] for e in dep.history(machine, name)]


def failed_errors(dep: Deployment, machine: str, name: str) -> list[str]:
    return [
        e["taskFailedEventDetails"]["error"] for e in dep.history(machine, name) if e["type"] == "TaskFailed"
    ]


def timeline(dep: Deployment, job_id: str) -> list[tuple[str, str]]:
    entries, _ = dep.plane.timeline.list(job_id)
    return [(e.source, e.target) for e in entries]


def test_preemption_waits_for_the_agents_checkpoint_then_stops_and_requeues(
    sfn_deployment: Deployment,
) -> None:
    dep = sfn_deployment
    # Given a running job asked to checkpoint (its preempt workflow started, 20 s of grace)
    running = start(dep, submit(dep), launch_workflow_runs=True)
    now = dep.clock()
    marked = preempt(dep.plane, running, 20, now=now, by="job-urgent")
    name = execution_name("preempt", running.id, marked.version)
    waiting = wait_for_token(dep, running.id)
    assert waiting.state is JobState.CHECKPOINTING

    # When the agent reports a durable checkpoint (Checkpoint Completed -> SendTaskSuccess)
    assert agent_checkpoint(running.id, step=120)["recorded"] is True

    # Then the workflow goes on at once: the Batch job is stopped and the job requeued
    described = dep.wait_for_execution("preempt", name, timeout_s=10)
    assert described["status"] == "SUCCEEDED"
    assert "TaskTimedOut" not in event_types(dep, "preempt", name)
    output = json.loads(described["output"])
    assert output["checkpoint"]["step"] == 120
    assert dep.launcher.terminated == [
        (running.batch_job_id, f"Spotline: stopping job {running.id} after its checkpoint")
    ]
    requeued = dep.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING
    assert requeued.job.preemptions == 1 and requeued.job.last_checkpoint_step == 120
    assert requeued.checkpoint_task_token is None and requeued.batch_job_id is None
    assert timeline(dep, running.id)[-3:] == [
        ("RUNNING", "CHECKPOINTING"),
        ("CHECKPOINTING", "PREEMPTED"),
        ("PREEMPTED", "PENDING"),
    ]
    assert dep.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}


def test_preemption_without_a_checkpoint_times_out_and_still_stops_the_job(
    sfn_deployment: Deployment,
) -> None:
    dep = sfn_deployment
    # Given a running job whose agent never answers, with a 1 s deadline
    running = start(dep, submit(dep), launch_workflow_runs=True)
    now = dep.clock()
    marked = preempt(dep.plane, running, 1.5, now=now, by="job-urgent")
    name = execution_name("preempt", running.id, marked.version)

    # When the wait times out (States.Timeout, caught)
    described = dep.wait_for_execution("preempt", name, timeout_s=15)

    # Then the job is stopped and requeued anyway, with the work since it started lost
    assert described["status"] == "SUCCEEDED"
    assert "TaskTimedOut" in event_types(dep, "preempt", name)
    assert [batch for batch, _ in dep.launcher.terminated] == [running.batch_job_id]
    requeued = dep.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.preemptions == 1
    assert requeued.job.lost_work_s > 0.5
    entries, _ = dep.plane.timeline.list(running.id)
    assert "no durable checkpoint" in entries[-1].reason


def test_preemption_after_an_early_checkpoint_does_not_wait(sfn_deployment: Deployment) -> None:
    dep = sfn_deployment
    # Given a job marked CHECKPOINTING whose agent checkpointed before the workflow began
    running = start(dep, submit(dep), launch_workflow_runs=True)
    now = dep.clock()
    marked = dep.plane.jobs.transition(
        running,
        JobState.CHECKPOINTING,
        "preempted",
        now=now,
        changes={
            "disruption": Disruption.PREEMPT,
            "draining_for": "job-x",
            "checkpoint_requested_at": now,
            "checkpoint_deadline_at": now + 30,
        },
    )
    assert agent_checkpoint(running.id, step=7)["recorded"] is True

    # When the workflow starts
    name = execution_name("preempt", running.id, marked.version)
    StepFunctionsStarter(dep.clients.stepfunctions).start(
        dep.state_machines["preempt"],
        name,
        {"job_id": running.id, "version": marked.version, "disruption": "preempt", "timeout_s": 30},
    )
    started = time.time()
    described = dep.wait_for_execution("preempt", name, timeout_s=15)

    # Then the token task fails with CheckpointAlreadyDurable, which the Catch turns into "go on"
    assert described["status"] == "SUCCEEDED" and time.time() - started < 10
    assert "CheckpointAlreadyDurable" in failed_errors(dep, "preempt", name)
    assert dep.plane.jobs.get(running.id).state is JobState.PENDING


def test_a_spot_warning_runs_the_same_workflow_and_ends_interrupted(sfn_deployment: Deployment) -> None:
    dep = sfn_deployment
    # Given a job running on the instance named in AWS's sample warning
    running = start(dep, submit(dep), instance_id="i-1234567890abcdef0", launch_workflow_runs=True)

    # When the warning arrives (now) and the agent checkpoints within the notice
    event = eventbridge("spot_interruption_warning", time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    result = functions.spot_interruption.handler(event, context("spot_interruption"))
    assert result["jobs"] == [running.id]
    marked = wait_for_token(dep, running.id)
    agent_checkpoint(running.id, step=99)

    # Then it is requeued as INTERRUPTED (not PREEMPTED), from its checkpoint
    described = dep.wait_for_execution("preempt", execution_name("interrupt", running.id, marked.version))
    assert described["status"] == "SUCCEEDED"
    requeued = dep.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING
    assert requeued.job.interruptions == 1 and requeued.job.preemptions == 0
    assert ("CHECKPOINTING", "INTERRUPTED") in timeline(dep, running.id)


def test_launch_submits_to_the_pools_job_queue_and_records_the_batch_job(sfn_deployment: Deployment) -> None:
    dep = sfn_deployment
    # Given a pending job
    record = submit(dep)

    # When a pass admits it (and starts its launch workflow)
    scheduling_pass(dep.plane)
    described = dep.wait_for_execution("launch", execution_name("launch", record.id, 1))

    # Then Batch got the job on the Spot pool's queue, with the agent's environment, and the
    # job knows its Batch job id
    assert described["status"] == "SUCCEEDED"
    [request] = dep.launcher.submitted
    assert request.job_name == f"spotline-{record.id}-r1"
    assert request.environment["SPOTLINE_RUN_ID"] == f"spotline-{record.id}-r1"
    assert request.job_queue.endswith("job-queue/spotline-a100-spot")
    assert request.environment["SPOTLINE_JOB_ID"] == record.id
    assert request.environment["SPOTLINE_JOBS_TABLE"] == dep.tables["Jobs"]
    assert request.environment["SPOTLINE_EVENT_BUS"] == dep.bus
    assert request.gpus_per_node == 8 and request.command == tuple(record.job.spec.command)
    stored = dep.plane.jobs.get(record.id)
    assert stored.state is JobState.ADMITTED and stored.batch_job_id == f"batch-{record.id}-1"


def test_launch_backs_off_when_batch_throttles(sfn_deployment: Deployment) -> None:
    dep = sfn_deployment
    # Given Batch refuses the first SubmitJob for its rate limit
    dep.launcher.failures.append(BatchThrottled("Too Many Requests"))
    record = submit(dep)

    # When the job is admitted
    scheduling_pass(dep.plane)
    name = execution_name("launch", record.id, 1)
    described = dep.wait_for_execution("launch", name)

    # Then the workflow retried and the launch went through
    assert described["status"] == "SUCCEEDED"
    assert failed_errors(dep, "launch", name) == ["BatchThrottled"]
    assert len(dep.launcher.submitted) == 1
    assert dep.plane.jobs.get(record.id).batch_job_id is not None


def test_a_failed_launch_is_caught_and_the_job_requeued(sfn_deployment: Deployment) -> None:
    dep = sfn_deployment
    # Given Batch refuses the job for good
    dep.launcher.failures.append(LaunchFailed("job definition not found"))
    record = submit(dep)

    # When the job is admitted
    scheduling_pass(dep.plane)
    name = execution_name("launch", record.id, 1)
    described = dep.wait_for_execution("launch", name)

    # Then the Catch requeued it and freed its GPUs; the execution records the failure
    assert described["status"] == "FAILED" and described.get("error") == "LaunchFailed"
    stored = dep.plane.jobs.get(record.id)
    assert stored.state is JobState.PENDING and stored.launch_failures == 1
    assert dep.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}
    entries, _ = dep.plane.timeline.list(record.id)
    assert entries[-1].reason == "launch failed: LaunchFailed: job definition not found"
