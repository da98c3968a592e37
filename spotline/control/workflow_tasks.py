"""The Lambda tasks of the two workflows (statemachines/*.asl.json), dispatched on "task".

preempt: confirm_checkpointing -> request_checkpoint (waits on a task token) ->
         terminate_batch_job -> finish_preemption
launch:  submit_batch_job -> record_batch_job, or mark_launch_failed

Step Functions retries a task after a failure, so each task is safe to run twice: every write
is conditional on the job still being where the workflow left it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from spotline.control.errors import BatchThrottled, StaleJobError
from spotline.control.lifecycle import (
    launch_request,
    requeue_after_disruption,
    requeue_unstarted,
    stop_runs,
)
from spotline.control.plane import ControlPlane
from spotline.control.records import ACTIVE_STATES, Disruption, JobRecord
from spotline.domain import JobState
from spotline.domain.checkpoint_cost import grace_period_s

logger = logging.getLogger(__name__)

# After this many failed launches in a row a job is FAILED instead of requeued.
MAX_LAUNCH_FAILURES = 3
# Errors that say "too many requests" (Batch's SubmitJob rate, Lambda's concurrency, DynamoDB's
# throughput): they back off and retry, and never count toward MAX_LAUNCH_FAILURES.
THROTTLING_ERRORS = frozenset({"BatchThrottled", "Lambda.TooManyRequestsException", "StorageUnavailable"})


# --- preempt ----------------------------------------------------------------------------------


def confirm_checkpointing(
    cp: ControlPlane, job_id: str, *, version: int, disruption: str = "preempt", timeout_s: int | None = None
) -> dict[str, Any]:
    """Make sure the job is CHECKPOINTING (marking it if the workflow was started for a running
    job) and say how long to wait for its checkpoint: until its deadline, at least 1 s."""
    now = cp.clock()
    record = cp.jobs.find(job_id)
    # Every key is always present: the workflow's ResultSelector reads all three.
    if record is None:
        return {"proceed": False, "timeout_s": 1, "batch_job_id": None, "why": "no such job"}
    if record.state is JobState.RUNNING and record.version == version:
        record = start_disruption_without_workflow(
            cp, record, Disruption(disruption), now=now, timeout_s=timeout_s
        )
    if record.state is not JobState.CHECKPOINTING:
        return {"proceed": False, "timeout_s": 1, "batch_job_id": None, "why": f"job is {record.state.value}"}
    deadline = record.checkpoint_deadline_at or now + (
        timeout_s or grace_period_s(record.job, cp.config.grace_period_s)
    )
    return {
        "proceed": True,
        "timeout_s": max(1, math.floor(deadline - now)),
        "batch_job_id": record.batch_job_id,
        "version": record.version,
    }


def start_disruption_without_workflow(
    cp: ControlPlane, record: JobRecord, disruption: Disruption, *, now: float, timeout_s: int | None
) -> JobRecord:
    """RUNNING -> CHECKPOINTING for a workflow that was started directly (the scheduler and the
    Spot handler mark the job before starting the workflow, so they do not come here; `spotline
    local preempt` does). Without `timeout_s`, the job's size-aware grace period."""
    deadline = now + (timeout_s or grace_period_s(record.job, cp.config.grace_period_s))
    return cp.jobs.transition(
        record,
        JobState.CHECKPOINTING,
        f"{disruption.value} requested directly (its workflow started without a scheduling pass)",
        now=now,
        changes={
            "disruption": disruption,
            "draining_for": record.draining_for or f"workflow:{disruption.value}",
            "checkpoint_requested_at": now,
            "checkpoint_deadline_at": deadline,
        },
    )


class JobNotCheckpointing(Exception):
    """The job left CHECKPOINTING (finished, cancelled, requeued): nothing to wait for. The
    preempt workflow catches this error name and moves on."""


class CheckpointAlreadyDurable(Exception):
    """The job wrote its checkpoint before the workflow began to wait: no need to wait. The
    preempt workflow catches this error name and moves on to stopping the job."""


def request_checkpoint(cp: ControlPlane, job_id: str, *, task_token: str) -> dict[str, Any]:
    """Store the workflow's task token on the job; the agent's Checkpoint Completed answers it
    (checkpoint_completed sends SendTaskSuccess).

    When the checkpoint is already durable (a fast agent, before the token was stored) or the
    job no longer checkpoints, this task fails with a named error instead of answering the
    token itself, so only checkpoint_completed needs states:SendTaskSuccess; the workflow's
    Catch treats both names as "proceed".
    """
    try:
        record = cp.jobs.update_fields(
            job_id, states=[JobState.CHECKPOINTING], set_fields={"checkpoint_task_token": task_token}
        )
    except StaleJobError as error:
        raise JobNotCheckpointing(f"job {job_id} is no longer checkpointing") from error
    job = record.job
    requested = record.checkpoint_requested_at
    if job.last_checkpoint_at is not None and requested is not None and job.last_checkpoint_at >= requested:
        raise CheckpointAlreadyDurable(f"job {job_id} checkpointed at step {job.last_checkpoint_step}")
    return {"waiting": True}


def terminate_batch_job(
    cp: ControlPlane, job_id: str, *, batch_job_id: str | None, reason: str = ""
) -> dict[str, Any]:
    """Stop the run the workflow was started for (its Batch job id, captured at confirmation,
    so a later run of the same job is never touched)."""
    if not batch_job_id:
        return {"terminated": False}
    # Pending until Batch confirms: if this task fails for good, the reconciler retries it.
    cp.jobs.mark_terminating(job_id, [batch_job_id])
    cp.launcher.terminate(batch_job_id, reason or f"Spotline: stopping job {job_id} after its checkpoint")
    return {"terminated": True}


def finish_preemption(cp: ControlPlane, job_id: str, *, version: int | None = None) -> dict[str, Any]:
    """Requeue the stopped job (PREEMPTED or INTERRUPTED, then PENDING), release its GPUs, and
    ask for a scheduling pass (the preemptor is waiting for them)."""
    record = cp.jobs.get(job_id)
    if record.state is not JobState.CHECKPOINTING:
        return {"state": record.state.value, "finished": False}
    now = cp.clock()
    disruption = record.disruption or Disruption.PREEMPT
    why = (
        f"preempted for {record.draining_for}"
        if disruption is Disruption.PREEMPT
        else f"interrupted ({record.draining_for or 'host lost'})"
    )
    lost = record.job.unsaved_work_s(now)
    moved = requeue_after_disruption(cp, record, disruption.outcome, now=now, reason=why)
    cp.trigger.request(f"capacity freed by {job_id}", f"freed-{job_id}-v{moved.version}")
    return {"state": moved.state.value, "finished": True, "lost_work_s": round(lost, 3)}


# --- launch -----------------------------------------------------------------------------------


def _launch_run(record: JobRecord, version: int, run: int | None) -> int | None:
    """The run a launch workflow launches: named in its input (RUN_IDENTITY). An input without
    one (started before runs existed) launches the record's run only at the version it saw."""
    if run is not None:
        return run
    return record.run if record.version == version else None


def submit_batch_job(
    cp: ControlPlane, job_id: str, *, version: int, run: int | None = None, pool: str | None = None
) -> dict[str, Any]:
    """Submit the admission's run to its pool's job queue, once per run: a retry finds the
    recorded Batch job id, or, if the crash came between SubmitJob and the record, the live
    Batch job of that name (the run id), which it adopts. A field change (priority, deadline)
    during the launch does not matter: only the run does. Raises BatchThrottled for the
    workflow's backoff, LaunchFailed for its Catch."""
    record = cp.jobs.get(job_id)
    launching = _launch_run(record, version, run)
    if launching is None or record.run != launching or record.state not in ACTIVE_STATES:
        return {
            "submitted": False,
            "batch_job_id": None,
            "why": f"job is {record.state.value} on run {record.run}, not on run {launching}",
        }
    if record.batch_job_id is not None:
        return {"submitted": True, "batch_job_id": record.batch_job_id}
    if record.state is not JobState.ADMITTED:
        return {"submitted": False, "batch_job_id": None, "why": f"job is {record.state.value}"}
    request = launch_request(cp, record)
    live = cp.launcher.find_live(request.job_queue, request.job_name)
    if live:
        adopted, duplicates = live[0], live[1:]
        if duplicates:
            cp.jobs.mark_terminating(job_id, duplicates)
            stop_runs(cp, job_id, duplicates, f"Spotline: duplicate of {adopted} for run {request.run_id}")
        logger.info("adopting the run's live Batch job", extra={"job_id": job_id, "batch_job_id": adopted})
        return {"submitted": True, "batch_job_id": adopted, "adopted": True}
    batch_job_id = cp.launcher.submit(request)
    return {"submitted": True, "batch_job_id": batch_job_id}


def record_batch_job(
    cp: ControlPlane, job_id: str, *, version: int, batch_job_id: str, run: int | None = None
) -> dict[str, Any]:
    """Remember the run's Batch job id. If the job was requeued or cancelled while it was being
    submitted, or the record already names another Batch job for this run, the new Batch job
    is orphaned: it becomes a pending termination and is stopped."""
    try:
        if run is None:
            cp.jobs.update_fields(
                job_id,
                states=[JobState.ADMITTED],
                version=version,
                set_fields={"batch_job_id": batch_job_id, "launch_failures": 0},
                conditions=[("batch_job_id", "=?", batch_job_id)],
            )
        else:
            cp.jobs.update_fields(
                job_id,
                states=[JobState.ADMITTED],
                set_fields={"batch_job_id": batch_job_id, "launch_failures": 0},
                conditions=[("run", "=", run), ("batch_job_id", "=?", batch_job_id)],
            )
        return {"recorded": True}
    except StaleJobError:
        record = cp.jobs.find(job_id)
        if record is not None and record.batch_job_id == batch_job_id and record.state in ACTIVE_STATES:
            return {"recorded": True}  # its RUNNING event got there first
        cp.jobs.mark_terminating(job_id, [batch_job_id])
        stop_runs(cp, job_id, [batch_job_id], f"Spotline: job {job_id} no longer admitted for this run")
        return {"recorded": False, "terminated": True}


def mark_launch_failed(
    cp: ControlPlane,
    job_id: str,
    *,
    version: int,
    run: int | None = None,
    error: str = "",
    cause: str = "",
) -> dict[str, Any]:
    """The launch failed for good: requeue the job (its GPUs go back), or fail it after
    MAX_LAUNCH_FAILURES attempts in a row. Throttling that outlasted the workflow's retries is
    not a failure: the job is requeued without counting it. A Batch job that SubmitJob did
    start for this run (the error came after it) is found by its name, becomes a pending
    termination in the same write, and is stopped. `error` and `cause` are the workflow's
    caught error (for a Lambda task, the cause is the function's error payload as JSON)."""
    record = cp.jobs.get(job_id)
    launching = _launch_run(record, version, run)
    if launching is None or record.run != launching or record.state is not JobState.ADMITTED:
        return {
            "requeued": False,
            "why": f"job is {record.state.value} on run {record.run}, not on run {launching}",
        }
    request = launch_request(cp, record)
    try:
        submitted = tuple(cp.launcher.find_live(request.job_queue, request.job_name))
    except BatchThrottled:
        # Requeue anyway: a Batch job of this run that does start sends a RUNNING event, which
        # names a run the record no longer owns, and the handler stops it then.
        logger.warning("ListJobs throttled; an unrecorded run is stopped by its first event")
        submitted = ()
    now = cp.clock()
    summary = f"{error or 'unknown error'}: {_error_message(cause)}"[:500]
    if error in THROTTLING_ERRORS:
        # Throttled for longer than the workflow's backoff: nothing is wrong with the job. It
        # goes back to the queue without counting as a failure, and the next scheduled pass
        # admits it again (no pass is requested now: more launches would not help the API).
        moved = requeue_unstarted(
            cp, record, now=now, reason=f"launch throttled, retried later: {summary}", also_stopping=submitted
        )
        stop_runs(cp, job_id, moved.terminating_batch_job_ids, f"Spotline: launch of {job_id} throttled")
        return {"requeued": True, "throttled": True}
    if record.launch_failures + 1 >= MAX_LAUNCH_FAILURES:
        stopping = {*record.terminating_batch_job_ids, *submitted}
        if record.batch_job_id:
            stopping.add(record.batch_job_id)
        failed = cp.jobs.transition(
            record,
            JobState.FAILED,
            f"launch failed {record.launch_failures + 1} times; last: {summary}",
            now=now,
            changes={
                "finished_at": now,
                "launch_failures": record.launch_failures + 1,
                "terminating_batch_job_ids": tuple(sorted(stopping)),
            },
        )
        stop_runs(cp, job_id, failed.terminating_batch_job_ids, f"Spotline: launch of {job_id} failed")
        return {"requeued": False, "failed": True}
    moved = requeue_unstarted(
        cp, record, now=now, reason=f"launch failed: {summary}", launch_failed=True, also_stopping=submitted
    )
    stop_runs(cp, job_id, moved.terminating_batch_job_ids, f"Spotline: launch of {job_id} failed; requeued")
    cp.trigger.request(f"launch of {job_id} failed", f"launch-failed-{job_id}-v{version}")
    return {"requeued": True}


def _error_message(cause: str) -> str:
    try:
        payload = json.loads(cause)
    except (TypeError, ValueError):
        return cause
    if isinstance(payload, dict):
        return str(payload.get("errorMessage", cause))
    return cause


# --- dispatch ---------------------------------------------------------------------------------

TASKS: Mapping[str, Callable[..., dict[str, Any]]] = {
    "confirm_checkpointing": confirm_checkpointing,
    "request_checkpoint": request_checkpoint,
    "terminate_batch_job": terminate_batch_job,
    "finish_preemption": finish_preemption,
    "submit_batch_job": submit_batch_job,
    "record_batch_job": record_batch_job,
    "mark_launch_failed": mark_launch_failed,
}


class UnknownTask(ValueError):
    pass


def run_task(cp: ControlPlane, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Run the task named by payload["task"] with the rest of the payload as arguments
    (`taskToken` from the ASL becomes `task_token`)."""
    arguments = dict(payload)
    name = arguments.pop("task", None)
    task = TASKS.get(str(name))
    if task is None:
        raise UnknownTask(f"unknown workflow task {name!r}")
    if "taskToken" in arguments:
        arguments["task_token"] = arguments.pop("taskToken")
    job_id = arguments.pop("job_id")
    return task(cp, job_id, **arguments)
