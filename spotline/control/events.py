"""Reactions to events: EC2 Spot warnings and rebalance recommendations, the agent's checkpoints
and heartbeats, and AWS Batch job state changes.

EventBridge delivers at least once and out of order, so each reaction is a conditional write
that a duplicate or a late event cannot apply twice or backwards. Every event names its run
(RUN_IDENTITY): checkpoints and heartbeats count only for the job's current run and move
forward by step within it; a Batch event of a run the record does not own stops that run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from spotline.control.batch_failures import classify_failure
from spotline.control.errors import ConditionFailed, InvalidTransition, StaleJobError
from spotline.control.lifecycle import (
    answer_checkpoint_wait,
    iso,
    requeue_interrupted,
    start_disruption,
    stop_runs,
)
from spotline.control.plane import ControlPlane
from spotline.control.ports import TERMINAL_BATCH_STATUSES
from spotline.control.records import (
    ACTIVE_STATES,
    GANG_MAIN_NODE,
    Disruption,
    JobRecord,
    node_heartbeat_field,
    parse_run_id,
)
from spotline.control.spot_signals import observe as observe_spot
from spotline.control.spot_signals import observe_risk as observe_spot_risk
from spotline.domain import TERMINAL_STATES, JobState
from spotline.domain.checkpoint_cost import spot_wait_deadline

logger = logging.getLogger(__name__)

# --- EC2 -----------------------------------------------------------------------------------


def handle_spot_warning(
    cp: ControlPlane, instance_id: str, event_time: float, action: str = "terminate"
) -> list[str]:
    """Every job running on `instance_id` checkpoints now and is requeued as INTERRUPTED,
    through the same workflow as a preemption, with the notice's deadline (event time + 2
    minutes, less a margin to stop the job before EC2 does; the whole notice for a job whose
    measured checkpoint write needs it). Returns the jobs affected."""
    now = cp.clock()
    notice_end = event_time + cp.config.spot_notice_s
    affected: list[str] = []
    records = _jobs_on(cp, instance_id)
    observe_spot(cp, [r.job.pool for r in records if r.job.pool], False, event_time, "interruption warning")
    for record in records:
        if record.state not in (JobState.RUNNING, JobState.CHECKPOINTING):
            continue
        # Sized from the job's measured write: a large checkpoint is waited for to the end.
        deadline = spot_wait_deadline(
            record.job, requested_at=now, notice_end=notice_end, margin_s=cp.config.spot_notice_margin_s
        )
        try:
            start_disruption(
                cp,
                record,
                Disruption.INTERRUPT,
                now=now,
                deadline_at=max(now + 1, deadline),
                draining_for=f"interruption:{instance_id}",
                reason=(
                    f"Spot interruption warning for {instance_id} ({action}):"
                    f" checkpoint before {iso(deadline)}"
                ),
            )
        except (StaleJobError, InvalidTransition) as error:
            logger.info(
                "job changed before the warning applied", extra={"job_id": record.id, "why": str(error)}
            )
            continue
        affected.append(record.id)
    return affected


def handle_rebalance(cp: ControlPlane, instance_id: str, event_time: float | None = None) -> list[str]:
    """Early warning: ask every job on the instance for a checkpoint now; they keep running. The
    Spot pools of the jobs on it are recorded at risk from the event's time (`event_time`, else
    now): the deadline guard's rule 7."""
    now = cp.clock()
    asked: list[str] = []
    records = _jobs_on(cp, instance_id)
    at = now if event_time is None else event_time
    observe_spot_risk(
        cp, [r.job.pool for r in records if r.job.pool], at, f"rebalance recommendation for {instance_id}"
    )
    for record in records:
        if record.state is not JobState.RUNNING:
            continue
        try:
            cp.jobs.update_fields(
                record.id, states=[JobState.RUNNING], set_fields={"checkpoint_requested_at": now}
            )
        except StaleJobError:
            continue
        asked.append(record.id)
    return asked


def _jobs_on(cp: ControlPlane, instance_id: str) -> list[JobRecord]:
    records = []
    for job_id in cp.instances.jobs_on(instance_id):
        record = cp.jobs.find(job_id)
        # The instance table may still list a job's earlier run: trust the job's own record.
        if record is not None and instance_id in record.instance_ids:
            records.append(record)
    return records


# --- the agent -----------------------------------------------------------------------------


def _current_run(cp: ControlPlane, job_id: str, run_id: str | None, kind: str) -> int | None:
    """The run an agent event names, if it names this job's (RUN_IDENTITY); None otherwise.
    Whether it is still the record's current run is the write's condition."""
    if run_id is None:
        # Never silent: an agent started without SPOTLINE_RUN_ID (a container not launched by
        # Spotline's launcher, or an image that drops the environment) has every event dropped,
        # and its job is then stopped as lost; the warning and AgentEventsWithoutRun say why.
        logger.warning(
            "%s dropped: the event names no run (SPOTLINE_RUN_ID is not set in the agent's "
            "environment); this job's heartbeats and checkpoints are not recorded",
            kind,
            extra={"job_id": job_id, "why": "no run id"},
        )
        return None
    parsed = parse_run_id(run_id)
    if parsed is None or parsed[0] != job_id:
        logger.info(f"{kind} dropped: no run id of this job", extra={"job_id": job_id, "run_id": run_id})
        return None
    return parsed[1]


def record_checkpoint(
    cp: ControlPlane,
    job_id: str,
    *,
    run_id: str | None,
    checkpoint_uri: str,
    step: int,
    progress: float | None = None,
    captured_at: float | None = None,
    requested_at: float | None = None,
    size_bytes: int | None = None,
    write_s: float | None = None,
    restore_s: float | None = None,
    team: str | None = None,
) -> JobRecord | None:
    """A durable checkpoint: remember where to resume from, and release the preempt workflow
    waiting for it. Dropped (None, with a log line) unless `run_id` is the job's current run,
    the job still holds its GPUs, and `team` (the team named by the event's source) owns the
    job; and within that run unless its step is at least the recorded one (a delayed checkpoint
    of an earlier run is never credited; a run that resumed from an older checkpoint may record
    a lower step than an earlier run did). The write is conditional on all of it, so a forged
    checkpoint changes nothing and answers nothing.

    `captured_at` is when the agent captured the state (its clock; never later than now): work
    after it is lost if the job stops. `requested_at` is the request the agent says it
    answered. A checkpoint satisfies the pending request if it answers it or was captured
    after it. `size_bytes`, `write_s` and `restore_s` are what the agent measured; the last
    ones reported are kept (spotline.domain.checkpoint_cost sizes the job's grace period).
    """
    run = _current_run(cp, job_id, run_id, "checkpoint")
    if run is None:
        return None
    now = cp.clock()
    at = now if captured_at is None else min(now, captured_at)
    fields: dict[str, object] = {
        "last_checkpoint_at": at,
        "last_checkpoint_step": step,
        "last_checkpoint_uri": checkpoint_uri,
        "last_checkpoint_run": run,
    }
    if progress is not None:
        fields["progress"] = progress
        fields["progress_step"] = step
    for name, value in (
        ("checkpoint_bytes", size_bytes),
        ("checkpoint_write_s", write_s),
        ("checkpoint_restore_s", restore_s),
    ):
        if value is not None:
            fields[name] = value
    try:
        record = cp.jobs.update_fields(
            job_id,
            states=ACTIVE_STATES,
            set_fields=fields,
            conditions=[("run", "=", run), *_owned_by(team)],
            # Step order holds within a run only.
            any_of=[[("last_checkpoint_run", "<>?", run), ("last_checkpoint_step", "<=?", step)]],
        )
    except StaleJobError:
        late = _credit_late_checkpoint(
            cp, job_id, run=run, team=team, at=at, step=step, checkpoint_uri=checkpoint_uri, fields=fields
        )
        if late is None:
            _log_dropped(cp, "checkpoint", job_id, team, "last_checkpoint_step", step, run=run)
        return late
    wanted = record.checkpoint_requested_at
    answers = wanted is None or at >= wanted or (requested_at is not None and requested_at >= wanted - 1e-3)
    if record.state is JobState.CHECKPOINTING and answers:
        answer_checkpoint_wait(cp, record, {"checkpoint_uri": checkpoint_uri, "step": step})
    return record


def _credit_late_checkpoint(
    cp: ControlPlane,
    job_id: str,
    *,
    run: int,
    team: str | None,
    at: float,
    step: int,
    checkpoint_uri: str,
    fields: dict[str, object],
) -> JobRecord | None:
    """A checkpoint of a run that was already stopped and requeued (its upload finished just
    after the plane gave up waiting, e.g. a large one at the end of a Spot notice), while the job
    waits for its next run: it is what that run restores, so it is recorded as the job's last
    checkpoint, and the work before its capture, which the requeue counted as lost, is given
    back. None when it is not such a checkpoint (an older one, a duplicate, or a later run has
    started: that run reports what it restored)."""
    for _ in range(3):
        record = cp.jobs.find(job_id)
        if record is None or (team is not None and record.team != team):
            return None
        loss = record.lost_work
        # Only while no later run has started: that run restored what it found, and says so.
        if loss is None or loss.run != run or record.run != run or record.state in ACTIVE_STATES:
            return None
        recorded = record.job.last_checkpoint_step if record.last_checkpoint_run == run else None
        if recorded is not None and step <= recorded and at <= loss.since:
            return None  # nothing new: a duplicate, or an older checkpoint
        captured = min(at, loss.until)
        credit = max(0.0, captured - loss.since)
        job_changes: dict[str, object] = {}
        if credit > 0:
            job_changes = {
                "lost_work_s": max(0.0, record.job.lost_work_s - credit),
                "runtime_s": record.job.runtime_s + credit,
            }
        changes: dict[str, object] = {
            "lost_work": loss.model_copy(update={"since": max(loss.since, captured)}),
            "lost_gpu_s": max(0.0, round(record.lost_gpu_s - credit * loss.gpus, 3)),
        }
        job_changes.update({k: v for k, v in fields.items() if k != "last_checkpoint_run"})
        changes["last_checkpoint_run"] = run
        try:
            return cp.jobs.annotate(
                record,
                f"checkpoint step {step} of run {run} became durable after the run was stopped:"
                f" {credit:.1f}s of work counted as lost were saved by it ({checkpoint_uri})",
                now=cp.clock(),
                job=job_changes,
                changes=changes,
                lost_gpu_s_returned=credit * loss.gpus,
            )
        except (StaleJobError, ConditionFailed):
            continue
    return None


def record_heartbeat(
    cp: ControlPlane,
    job_id: str,
    *,
    run_id: str | None,
    step: int,
    instance_id: str | None = None,
    progress: float | None = None,
    utilization: float | None = None,
    team: str | None = None,
    node_index: int | None = None,
    restored_step: int | None = None,
    restored_checkpoint_uri: str | None = None,
) -> JobRecord | None:
    """Progress, utilization and the instance the job runs on (the agent reads it from instance
    metadata, which is where a Spot warning's instance id comes from). Dropped (None, with a log
    line) unless `run_id` is the job's current run, the job is active, and `team` (the team named
    by the event's source) owns the job; the step only moves forward within a run (each
    admission resets it).

    In a gang every node heartbeats (`node_index`): each records when its node was last heard
    (the reconciler stops a gang with a silent node). The main node's also carries the gang's
    step and progress; another node's records only that it is alive (its step is the gang's,
    and may trail the main node's by a heartbeat)."""
    run = _current_run(cp, job_id, run_id, "heartbeat")
    if run is None:
        return None
    now = cp.clock()
    fields: dict[str, object] = {"last_heartbeat_at": now, "step": step}
    conditions: list[tuple[str, str, object]] = [("run", "=", run), ("step", "<=?", step), *_owned_by(team)]
    if progress is not None:
        fields["progress"] = progress
        fields["progress_step"] = step
    if utilization is not None:
        fields["utilization"] = utilization
    if node_index is not None:
        fields[node_heartbeat_field(node_index)] = now
        if node_index != GANG_MAIN_NODE:
            fields = {node_heartbeat_field(node_index): now}
            conditions = [("run", "=", run), *_owned_by(team)]
    try:
        record = cp.jobs.update_fields(
            job_id,
            states=ACTIVE_STATES,
            set_fields=fields,
            conditions=conditions,
            add_to_set={"instance_ids": [instance_id]} if instance_id else None,
        )
    except StaleJobError:
        _log_dropped(cp, "heartbeat", job_id, team, "step", step, run=run)
        return None
    if instance_id:
        cp.instances.add_job([instance_id], job_id, now)
    if restored_checkpoint_uri is not None and restored_step is not None and record.restored_run != run:
        record = _note_restore(cp, record, run, restored_step, restored_checkpoint_uri) or record
    return record


def _note_restore(cp: ControlPlane, record: JobRecord, run: int, step: int, uri: str) -> JobRecord | None:
    """The run's agent reports the checkpoint it restored: the job's status and timeline name it
    (it may be newer than the last one recorded: one written on SIGTERM, or one that landed after
    the plane gave up waiting). Once per run; a lost race is retried by the next heartbeat."""
    for _ in range(3):
        if record.run != run or record.restored_run == run or record.state not in ACTIVE_STATES:
            return None
        recorded = record.job.last_checkpoint_step
        differs = "" if recorded in (None, step) else f" (the newest recorded was step {recorded})"
        try:
            return cp.jobs.annotate(
                record,
                f"run {run} resumed from checkpoint step {step}{differs}: {uri}",
                now=cp.clock(),
                changes={"restored_run": run, "restored_step": step, "restored_checkpoint_uri": uri},
            )
        except (StaleJobError, ConditionFailed):
            found = cp.jobs.find(record.id)
            if found is None:
                return None
            record = found
    return None


def _owned_by(team: str | None) -> list[tuple[str, str, object]]:
    """The condition that the job belongs to `team` (None: a caller inside the control plane)."""
    return [] if team is None else [("team", "=", team)]


def _log_dropped(
    cp: ControlPlane, kind: str, job_id: str, team: str | None, field: str, step: int, *, run: int
) -> None:
    """Why an agent event changed nothing (read only after its conditional write failed)."""
    record = cp.jobs.find(job_id)
    if record is None:
        why = "no such job"
    elif team is not None and record.team != team:
        why = f"the source's team {team!r} does not own the job"
    elif record.run != run:
        why = f"run {run} is not the job's current run {record.run}"
    elif record.state not in ACTIVE_STATES:
        why = f"job is {record.state.value}"
    else:
        why = f"a later {field} is recorded than {step}"
    level = (
        logging.WARNING if record is not None and team is not None and record.team != team else logging.INFO
    )
    logger.log(level, "%s dropped: %s", kind, why, extra={"job_id": job_id, "source_team": team, "why": why})


# --- AWS Batch ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchJobChange:
    """The fields of a Batch Job State Change that Spotline uses."""

    batch_job_id: str
    job_name: str
    status: str
    status_reason: str = ""
    started_at: float | None = None  # seconds (Batch reports milliseconds)
    stopped_at: float | None = None
    container_instances: Sequence[str] = field(default_factory=tuple)
    exit_code: int | None = None
    job_queue: str | None = None
    # A node of a gang (multi-node job): `batch_job_id` is then the parent's id, and this the
    # node's index (its own id is `<parent>#<node_index>`).
    node_index: int | None = None


def handle_batch_job_change(cp: ControlPlane, change: BatchJobChange) -> str:
    """Follow a run: RUNNING starts the job's clock, SUCCEEDED finishes it, FAILED fails it,
    unless the host was lost, in which case it is requeued from its checkpoint as INTERRUPTED.

    The job name is the run id (RUN_IDENTITY). An ended run that was a pending termination is
    confirmed stopped. A live run the record does not own (an earlier or unknown run, a second
    Batch job of this run, a job that left its GPUs, another pool's queue) is an orphan: it is
    stopped (recorded first, so the reconciler retries a refused call) and nothing else
    changes; it is never adopted. Returns what was done, in words (for the log)."""
    parsed = parse_run_id(change.job_name)
    if parsed is None:
        return "not a Spotline run"
    job_id, run = parsed
    record = cp.jobs.find(job_id)
    if record is None:
        # Not ours to stop: the name alone does not prove it is this deployment's.
        return "unknown job: ignored"
    if change.node_index is not None:
        return _on_node_event(cp, record, run, change)
    ended = change.status in TERMINAL_BATCH_STATUSES
    confirmed = ""
    # The plane asked this run to stop (TerminateJob sent): its end is never a success.
    stop_asked = change.batch_job_id in record.terminating_batch_job_ids
    if ended and stop_asked:
        record = cp.jobs.confirm_stopped(job_id, change.batch_job_id) or record
        confirmed = "termination confirmed; "
    foreign = _not_owned(cp, record, run, change)
    if foreign is not None:
        late = ended or (
            change.batch_job_id not in record.terminating_batch_job_ids
            and (
                change.batch_job_id in record.retired_batch_job_ids
                or (record.state in TERMINAL_STATES and change.batch_job_id == record.batch_job_id)
            )
        )
        if late:
            return f"{confirmed}event of a run that ended ({foreign}): ignored"
        cp.jobs.mark_terminating(job_id, [change.batch_job_id])
        stop_runs(cp, job_id, [change.batch_job_id], f"Spotline: orphan run ({foreign})")
        logger.warning(
            "orphan Batch job stopped",
            extra={"job_id": job_id, "batch_job_id": change.batch_job_id, "why": foreign},
        )
        return f"orphan stopped: {foreign}"
    if record.batch_job_id is None and record.state is not JobState.ADMITTED:
        return f"{confirmed}no Batch job recorded: ignored"
    now = cp.clock()
    try:
        if change.status == "RUNNING":
            return confirmed + _on_running(cp, record, change, now)
        if change.status == "SUCCEEDED":
            return confirmed + _on_succeeded(cp, record, change, now, stop_asked=stop_asked)
        if change.status == "FAILED":
            return confirmed + _on_failed(cp, record, change, now)
    except (StaleJobError, InvalidTransition) as error:
        return f"job changed concurrently: {error}"
    return f"{confirmed}{change.status}: nothing to do"


def _on_node_event(cp: ControlPlane, record: JobRecord, run: int, change: BatchJobChange) -> str:
    """A gang node's own event. It never becomes the run, is never stopped as an orphan (a
    node cannot be stopped alone; the parent's own event decides, and stopping the parent stops
    its nodes), and never moves the job: the parent's events do. A running node of the run the
    record owns adds its instance to the job, so a warning or a lost host on any node finds it."""
    node = f"node {change.node_index} of Batch job {change.batch_job_id}"
    if record.batch_job_id is None:
        # Its parent may be a second Batch job of this run: only the launch workflow, or the
        # parent's own event, records which one is the run.
        return f"{node}: its run is not recorded yet: ignored"
    foreign = _not_owned(cp, record, run, change)
    if foreign is not None:
        return f"{node}: not the job's run ({foreign}): ignored"
    if change.status != "RUNNING":
        return f"{node} is {change.status}: the parent's events decide"
    instance_ids = cp.instance_resolver.resolve(list(change.container_instances))
    if instance_ids and not set(instance_ids) <= set(record.instance_ids):
        try:
            cp.jobs.update_fields(
                record.id,
                states=ACTIVE_STATES,
                conditions=[("run", "=", run), ("batch_job_id", "=", change.batch_job_id)],
                add_to_set={"instance_ids": instance_ids},
            )
        except StaleJobError:
            return f"{node} running: the job is no longer active"
        cp.instances.add_job(instance_ids, record.id, cp.clock())
    return f"{node} running" + (f" on {', '.join(instance_ids)}" if instance_ids else "")


def _not_owned(cp: ControlPlane, record: JobRecord, run: int, change: BatchJobChange) -> str | None:
    """Why the record does not own this Batch job as its current run (None if it does)."""
    if run != record.run:
        return f"run {run} of {record.id}, whose current run is {record.run}"
    if record.state not in ACTIVE_STATES:
        return f"{record.id} is {record.state.value}"
    # (The current run's own Batch job may be a pending termination while the preempt workflow
    # stops it: its events still count, e.g. a SUCCEEDED that came first.)
    if change.batch_job_id != record.batch_job_id and (
        change.batch_job_id in record.retired_batch_job_ids
        or change.batch_job_id in record.terminating_batch_job_ids
    ):
        return f"Batch job {change.batch_job_id} was given up"
    if record.batch_job_id not in (None, change.batch_job_id):
        return f"run {run} of {record.id} is Batch job {record.batch_job_id}"
    pool = cp.config.pools_by_name.get(record.job.pool or "")
    if (
        change.job_queue
        and pool is not None
        and _queue_name(change.job_queue) not in {_queue_name(pool.queue_for(record.team))}
    ):
        return f"queue {change.job_queue} is not the queue of pool {pool.name} for team {record.team}"
    return None


def _queue_name(queue: str) -> str:
    """A job queue's name, from its name or its ARN."""
    return queue.rsplit("/", 1)[-1]


def _on_running(cp: ControlPlane, record: JobRecord, change: BatchJobChange, now: float) -> str:
    instance_ids = cp.instance_resolver.resolve(list(change.container_instances))
    if record.state is not JobState.ADMITTED:
        if instance_ids and not set(instance_ids) <= set(record.instance_ids):
            cp.jobs.update_fields(record.id, states=ACTIVE_STATES, add_to_set={"instance_ids": instance_ids})
            cp.instances.add_job(instance_ids, record.id, now)
        return "already running"
    started = change.started_at if change.started_at is not None and change.started_at <= now else now
    where = f" on {', '.join(instance_ids)}" if instance_ids else ""
    cp.jobs.transition(
        record,
        JobState.RUNNING,
        f"running in {record.job.pool}{where} (Batch job {change.batch_job_id})",
        now=now,
        job={"started_at": started},
        changes={
            "batch_job_id": change.batch_job_id,
            "instance_ids": tuple(sorted(set(instance_ids) | set(record.instance_ids))),
            "last_heartbeat_at": now,
        },
    )
    if instance_ids:
        cp.instances.add_job(instance_ids, record.id, now)
    if record.job.pool:
        observe_spot(cp, [record.job.pool], True, started, "a launch started")
    return "running"


def _finish_run(record: JobRecord, now: float) -> dict[str, object]:
    job = record.job
    return {"runtime_s": job.elapsed_s(now), "started_at": None}


def _on_succeeded(
    cp: ControlPlane, record: JobRecord, change: BatchJobChange, now: float, *, stop_asked: bool = False
) -> str:
    if record.state is JobState.CHECKPOINTING and stop_asked:
        # The plane stopped this run (a preemption, a Spot notice): whatever the script exited
        # with, the job is not done. The preempt workflow (or the reconciler after the deadline)
        # requeues it from its checkpoint.
        return "stopped by the plane: left to the preempt workflow"
    cp.jobs.transition(
        record,
        JobState.SUCCEEDED,
        f"Batch job {change.batch_job_id} succeeded",
        now=now,
        via=JobState.RUNNING if record.state is JobState.ADMITTED else None,
        via_reason="ran (its RUNNING event was not seen)",
        job={**_finish_run(record, now), "progress": 1.0},
        changes={
            "finished_at": now,
            "batch_job_id": change.batch_job_id,
            "draining_for": None,
            "checkpoint_task_token": None,
        },
    )
    # A preempt workflow waiting on this job's checkpoint times out and finds nothing left to
    # stop or requeue (only checkpoint_completed may answer task tokens).
    if record.instance_ids:
        cp.instances.remove_job(record.instance_ids, record.id)
    return "succeeded"


def _on_failed(cp: ControlPlane, record: JobRecord, change: BatchJobChange, now: float) -> str:
    if record.state is JobState.CHECKPOINTING:
        # Being stopped by the preempt workflow (or lost while checkpointing): the workflow,
        # or the reconciler after the deadline, requeues it with the right outcome.
        return "checkpointing: left to the preempt workflow"
    cause = classify_failure(change.status_reason, change.exit_code)
    exit_code = f" (exit code {change.exit_code})" if change.exit_code is not None else ""
    if cause.requeue:
        moved = requeue_interrupted(
            cp,
            record,
            now=now,
            reason=cause.describe(),
            run_stopped=True,
            failed_reason=f"Batch job {change.batch_job_id} failed{exit_code}: {cause.describe()}",
        )
        return "interrupted: requeued" if moved.state is JobState.PENDING else "failed"
    change = replace(change, status_reason=cause.describe())
    cp.jobs.transition(
        record,
        JobState.FAILED,
        f"Batch job {change.batch_job_id} failed: {change.status_reason or 'no reason given'}{exit_code}",
        now=now,
        job=_finish_run(record, now) if record.job.started_at is not None else None,
        changes={"finished_at": now, "batch_job_id": change.batch_job_id},
    )
    if record.instance_ids:
        cp.instances.remove_job(record.instance_ids, record.id)
    return "failed"
