"""The moves several services share: start a checkpoint-then-stop, finish it with a requeue,
put back a job that never started, and answer a waiting workflow.

Each is a conditional write on the state and version the caller read; a caller that lost a
race gets `StaleJobError` and re-reads.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from spotline import resources
from spotline.control.errors import ConditionFailed, StaleJobError
from spotline.control.plane import ControlPlane
from spotline.control.ports import BatchJobRequest, execution_name
from spotline.control.records import Disruption, JobRecord, LostWork
from spotline.domain import JobState
from spotline.domain.arrays import element_environment
from spotline.domain.elastic_spec import WORLD_SIZE_ENV

logger = logging.getLogger(__name__)


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def start_disruption(
    cp: ControlPlane,
    record: JobRecord,
    disruption: Disruption,
    *,
    now: float,
    deadline_at: float,
    draining_for: str,
    reason: str,
    resize_to: int | None = None,
) -> JobRecord:
    """Mark a RUNNING job CHECKPOINTING (the agent sees `checkpoint_requested_at`), then start
    the preempt workflow that waits for its checkpoint until `deadline_at`, stops it and
    requeues it. A job already CHECKPOINTING for a preemption that now gets a Spot warning is
    escalated: it will end INTERRUPTED, by the earlier of the two deadlines. The preemption's
    workflow waits with the timeout it was started with, so the escalation starts the
    interruption's own workflow (another execution name), which waits only until the earlier
    deadline; whichever finishes first stops the run and requeues the job, and the other
    finds it no longer CHECKPOINTING.
    """
    if record.state is JobState.CHECKPOINTING:
        if disruption is Disruption.INTERRUPT and record.disruption is not Disruption.INTERRUPT:
            deadline = min(deadline_at, record.checkpoint_deadline_at or deadline_at)
            escalated = cp.jobs.update_fields(
                record.id,
                states=[JobState.CHECKPOINTING],
                version=record.version,
                set_fields={"disruption": disruption.value, "checkpoint_deadline_at": deadline},
            )
            start_preempt_workflow(cp, escalated, now=now)
            return escalated
        # Already marked (a redelivered event, or a retry after the workflow failed to start):
        # start its workflow again, which is a no-op if it runs (same execution name).
        start_preempt_workflow(cp, record, now=now)
        return record
    marked = cp.jobs.transition(
        record,
        JobState.CHECKPOINTING,
        reason,
        now=now,
        changes={
            "disruption": disruption,
            "draining_for": draining_for,
            "checkpoint_requested_at": now,
            "checkpoint_deadline_at": deadline_at,
            "checkpoint_task_token": None,
            "resize_to": resize_to,
        },
    )
    start_preempt_workflow(cp, marked, now=now)
    return marked


def start_preempt_workflow(cp: ControlPlane, record: JobRecord, *, now: float) -> str | None:
    """Start the preempt workflow for a CHECKPOINTING record. If the start fails the job stays
    CHECKPOINTING and the reconciler finishes it after its deadline."""
    deadline = record.checkpoint_deadline_at or now + cp.config.grace_period_s
    disruption = record.disruption or Disruption.PREEMPT
    payload = {
        "job_id": record.id,
        "version": record.version,
        "disruption": disruption.value,
        # Task timeouts are whole seconds, at least 1 (TimeoutSecondsPath).
        "timeout_s": max(1, math.floor(deadline - now)),
    }
    try:
        return cp.workflows.start(
            cp.settings.state_machine_arn("preempt"),
            execution_name(disruption.value, record.id, record.version),
            payload,
        )
    except Exception:
        logger.exception("preempt workflow not started", extra={"job_id": record.id})
        return None


def saved_run_s(record: JobRecord) -> float:
    """Seconds of the current run kept by its last durable checkpoint."""
    job = record.job
    if job.started_at is None or job.last_checkpoint_at is None or job.last_checkpoint_at <= job.started_at:
        return 0.0
    return job.last_checkpoint_at - job.started_at


def requeue_after_disruption(
    cp: ControlPlane,
    record: JobRecord,
    outcome: JobState,
    *,
    now: float,
    reason: str,
    run_stopped: bool = False,
) -> JobRecord:
    """Stop accounting for the current run and requeue: `record` (RUNNING, ADMITTED or
    CHECKPOINTING) goes to `outcome` (PREEMPTED or INTERRUPTED) and on to PENDING in one
    conditional write, which also releases its GPUs. Unless `run_stopped` (Batch said the run
    ended), the run's Batch job is recorded as a pending termination in the same write: the
    caller stops it (`stop_runs`), and the reconciler retries until Batch confirms.

    Lost work is the time since the last durable checkpoint of this run; the work up to that
    checkpoint is kept (`runtime_s`), and the job keeps its place in its class's queue
    (ordered by submission) with a fresh `enqueued_at`.
    """
    job = record.job
    lost = job.unsaved_work_s(now)
    # Kept so that a checkpoint of this run that lands after the stop can give the work back.
    since = max(job.started_at or now, job.last_checkpoint_at or 0.0)
    lost_work = LostWork(
        run=record.run, since=min(since, now), until=now, gpus=record.gpus_held, pool=job.pool
    )
    counters: dict[str, Any] = (
        {"preemptions": job.preemptions + 1}
        if outcome is JobState.PREEMPTED
        else {"interruptions": job.interruptions + 1}
    )
    resized = record.resize_to is not None and outcome is JobState.PREEMPTED
    if resized:
        # An elastic job's resize: requeued at its new size, keeping its place; not a preemption.
        counters = _resized_job(record, now)
        reason = _resize_words(record)
    # What is durable now: a checkpoint written as the run stops (on SIGTERM) may land later, so
    # the checkpoint the next run restores is named by that run (`events._note_restore`).
    checkpoint = (
        f"latest durable checkpoint when stopped: step {job.last_checkpoint_step}"
        if job.last_checkpoint_step is not None
        else "no durable checkpoint when stopped"
    )
    via_reason = f"{reason}; lost {lost:.0f}s of work since the last checkpoint"
    retired = set(record.retired_batch_job_ids)
    if record.batch_job_id:
        retired.add(record.batch_job_id)
    moved = cp.jobs.transition(
        record,
        JobState.PENDING,
        f"requeued: {checkpoint}",
        via=outcome,
        via_reason=via_reason,
        now=now,
        job={
            **counters,
            "enqueued_at": now,
            "started_at": None,
            "runtime_s": job.runtime_s + saved_run_s(record),
            "lost_work_s": job.lost_work_s + lost,
            "pool": None,
        },
        changes={
            **_run_cleared(record, retired, run_stopped=run_stopped),
            "lost_work": lost_work,
            "resize_to": None,
        },
    )
    if record.instance_ids:
        cp.instances.remove_job(record.instance_ids, record.id)
    return moved


def _resized_job(record: JobRecord, now: float) -> dict[str, Any]:
    """The job's fields after a resize to `record.resize_to`: its spec at the new size, when the
    resize was, and the size it grew from (kept while it holds more, dropped at or below it)."""
    job = record.job
    assert record.resize_to is not None
    size, to = job.spec.gpus, record.resize_to
    base = job.base_gpus
    if to > size:
        base = size if base is None else base
    elif base is not None and to <= base:
        base = None
    return {"spec": job.spec.at_size(to), "resized_at": now, "base_gpus": base}


def _resize_words(record: JobRecord) -> str:
    """What the timeline says of a resize: "shrunk from 16 to 8 GPUs for job X", "grown to 16"."""
    size, to = record.job.spec.gpus, record.resize_to
    target = record.draining_for or ""
    if to is not None and to > size:
        return f"grown to {to} GPUs (from {size})"
    return f"shrunk from {size} to {to} GPUs" + (
        f" for job {target}" if not target.startswith("resize:") else ""
    )


def requeue_interrupted(
    cp: ControlPlane,
    record: JobRecord,
    *,
    now: float,
    reason: str,
    run_stopped: bool = False,
    failed_reason: str | None = None,
) -> JobRecord:
    """The current run's host was lost (Batch's host-loss reason, or a heartbeat the reconciler
    found missing): requeue the job as INTERRUPTED from its checkpoint, which counts one more
    `interruptions`. A job already interrupted `max_interruptions` times (whoever found each
    one) ends FAILED with the reason instead, so a job that loses its host every run is not
    requeued forever. The record is the one whose current run was lost (RUN_IDENTITY); unless
    `run_stopped`, that run is a pending termination in the same write, for the caller's
    `stop_runs`. `failed_reason` (default `reason`) opens the FAILED state's reason."""
    cap = cp.config.max_interruptions
    if record.job.interruptions < cap:
        return requeue_after_disruption(
            cp, record, JobState.INTERRUPTED, now=now, reason=reason, run_stopped=run_stopped
        )
    stopping = set(record.terminating_batch_job_ids)
    if record.batch_job_id and not run_stopped:
        stopping.add(record.batch_job_id)
    failed = cp.jobs.transition(
        record,
        JobState.FAILED,
        f"{failed_reason or reason}, interrupted {record.job.interruptions} times before "
        f"(max_interruptions {cap}): not requeued again",
        now=now,
        job={"runtime_s": record.job.elapsed_s(now), "started_at": None}
        if record.job.started_at is not None
        else None,
        changes={
            "finished_at": now,
            "terminating_batch_job_ids": tuple(sorted(stopping)),
            "draining_for": None,
            "checkpoint_task_token": None,
        },
    )
    if record.instance_ids:
        cp.instances.remove_job(record.instance_ids, record.id)
    return failed


def requeue_unstarted(
    cp: ControlPlane,
    record: JobRecord,
    *,
    now: float,
    reason: str,
    preempted: bool = False,
    launch_failed: bool = False,
    also_stopping: tuple[str, ...] = (),
) -> JobRecord:
    """Put an ADMITTED job that never ran back in the queue (ADMITTED -> PENDING), releasing its
    GPUs. It keeps its `enqueued_at`: waiting for a launch that failed is still waiting.
    Its Batch job, if any, and `also_stopping` (runs submitted but not recorded) become pending
    terminations in the same write: the caller stops them (`stop_runs`)."""
    retired = set(record.retired_batch_job_ids) | set(also_stopping)
    if record.batch_job_id:
        retired.add(record.batch_job_id)
    job_changes: dict[str, Any] = {"pool": None, "started_at": None}
    if preempted:
        job_changes["preemptions"] = record.job.preemptions + 1
    changes = _run_cleared(record, retired, also_stopping=also_stopping)
    if launch_failed:
        changes["launch_failures"] = record.launch_failures + 1
    return cp.jobs.transition(record, JobState.PENDING, reason, now=now, job=job_changes, changes=changes)


def _run_cleared(
    record: JobRecord, retired: set[str], *, run_stopped: bool = False, also_stopping: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The record fields of a run that ends: its per-run progress is cleared, and its Batch job
    (unless Batch said it stopped) is a pending termination."""
    stopping = set(record.terminating_batch_job_ids) | set(also_stopping)
    if record.batch_job_id and not run_stopped:
        stopping.add(record.batch_job_id)
    return {
        "batch_job_id": None,
        "retired_batch_job_ids": tuple(sorted(retired)),
        "terminating_batch_job_ids": tuple(sorted(stopping)),
        "step": None,
        "instance_ids": (),
        "admitted_at": None,
        "draining_for": None,
        "disruption": None,
        "checkpoint_requested_at": None,
        "checkpoint_deadline_at": None,
        "checkpoint_task_token": None,
        "last_heartbeat_at": None,
        "wait_reason": None,
        "wait_reason_at": None,
    }


def stop_runs(cp: ControlPlane, job_id: str, batch_job_ids: Iterable[str], reason: str) -> list[str]:
    """TerminateJob for each of a job's runs that the record no longer owns (each already a
    pending termination on the record). A refusal or a throttle is logged and left to the
    reconciler, which retries until Batch confirms the run stopped. Returns those asked."""
    asked: list[str] = []
    for batch_job_id in dict.fromkeys(batch_job_ids):
        try:
            cp.launcher.terminate(batch_job_id, reason)
        except Exception:
            logger.warning(
                "TerminateJob failed; the reconciler retries it",
                extra={"job_id": job_id, "batch_job_id": batch_job_id},
                exc_info=True,
            )
            continue
        asked.append(batch_job_id)
    return asked


def answer_checkpoint_wait(cp: ControlPlane, record: JobRecord, output: dict[str, Any]) -> bool:
    """Answer the preempt workflow waiting on this job's checkpoint, if one is. Sending first
    and clearing after makes a crash in between harmless: a second answer to a token that was
    already answered is refused and ignored."""
    token = record.checkpoint_task_token
    if not token:
        return False
    answered = cp.tokens.succeed(token, {"job_id": record.id, **output})
    with contextlib.suppress(StaleJobError, ConditionFailed):
        cp.jobs.update_fields(
            record.id,
            states=[record.state],
            remove_fields=["checkpoint_task_token"],
            conditions=[("checkpoint_task_token", "=", token)],
        )
    return answered


def launch_request(cp: ControlPlane, record: JobRecord) -> BatchJobRequest:
    """What the launcher runs for `record` in its pool: the job's image and command, and the
    agent's environment."""
    job = record.job
    if job.pool is None:
        raise ValueError(f"job {job.id} has no pool")
    pool = cp.config.pools_by_name[job.pool]
    if record.run_id is None:
        raise ValueError(f"job {job.id} was never admitted")
    environment = {
        # The job's own variables first: none may name one of the agent's (JobSpec refuses them).
        **(job.spec.env or {}),
        resources.AGENT_ENV_JOB_ID: job.id,
        # The team's job definition sets it too; the agent's event source and signal item carry it.
        resources.AGENT_ENV_TEAM: job.team,
        resources.AGENT_ENV_RUN_ID: record.run_id,
        resources.AGENT_ENV_JOBS_TABLE: cp.settings.jobs_table,
        resources.AGENT_ENV_EVENT_BUS: cp.settings.event_bus,
        resources.AGENT_ENV_CHECKPOINT_INTERVAL_S: f"{job.spec.checkpoint_interval_s:g}",
        resources.AGENT_ENV_POLL_S: f"{cp.config.agent_poll_s:g}",
    }
    if job.spec.elastic is not None:
        # The size this run has (it changes with each resize): the job sets its world size from it.
        environment[WORLD_SIZE_ENV] = str(job.spec.gpus)
    if job.array_id is not None and job.array_index is not None:
        environment.update(element_environment(job.array_id, job.array_index, job.array_params or {}))
    uri = cp.settings.checkpoint_uri(job.team, job.id)
    if uri is not None:
        environment[resources.AGENT_ENV_CHECKPOINT_URI] = uri
    max_runtime = job.spec.max_runtime_s
    gpus_per_node = min(job.spec.gpus_per_node, pool.gpus_per_node) if job.nodes == 1 else pool.gpus_per_node
    from spotline.control.sizing import sized_container  # its instance table: only where jobs launch

    size = sized_container(pool.instance_types, gpus_per_node, whole_node=job.nodes > 1)
    return BatchJobRequest(
        job_id=job.id,
        run=record.run,
        team=job.team,
        job_queue=pool.queue_for(job.team),
        image=job.spec.image,
        command=tuple(job.spec.command),
        gpus_per_node=gpus_per_node,
        nodes=job.nodes,
        environment=environment,
        timeout_s=None if max_runtime is None else max(1, math.ceil(max_runtime - job.runtime_s)),
        vcpus=None if size is None else size.vcpus,
        memory_mib=None if size is None else size.memory_mib,
        shared_memory_mib=None if size is None else size.shared_memory_mib,
        efa=pool.efa,
    )
