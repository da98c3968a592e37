"""The HTTP API's use cases: submit, read, list, cancel, change, and the timeline of a job.

The caller's team is always an argument resolved from the authenticated identity
(`team_for_identity`), never read from a request body; a job of another team is reported as
not found, so job ids cannot be probed across teams.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotline.control.admission import answer_at_submission, answer_view
from spotline.control.arrays import elements_of, get_array, select_elements, submit_array, with_dependencies
from spotline.control.errors import (
    Conflict,
    ImageNotFound,
    InvalidPageToken,
    InvalidRequest,
    JobAlreadyExists,
    JobNotFound,
    PublishFailed,
    StaleJobError,
    Unauthorized,
)
from spotline.control.job_cost import job_cost
from spotline.control.job_cost import jobs_usage as jobs_cost_rows
from spotline.control.lifecycle import iso, stop_runs
from spotline.control.plane import ControlPlane
from spotline.control.progress import job_progress
from spotline.control.records import ACTIVE_STATES, ArrayRecord, JobRecord, TimelineEntry
from spotline.control.settings import principal_key
from spotline.control.usage import check_budget
from spotline.domain import TERMINAL_STATES, Job, JobSpec, JobState, Priority, effective_priority
from spotline.domain.elastic import size_refusal
from spotline.domain.models import DateTime
from spotline.domain.preemption import estimated_remaining_s
from spotline.domain.priority import fairshare_factor, wait_s

logger = logging.getLogger(__name__)


# --- identity -----------------------------------------------------------------------------


def identity_candidates(identity: Mapping[str, Any]) -> list[str]:
    """The keys an API Gateway (IAM-authorized) identity may be known by, most specific first:
    the principal ARN, the role ARN behind an assumed-role session, the caller, the access key.
    """
    found: list[str] = []
    user_arn = identity.get("userArn")
    if isinstance(user_arn, str) and user_arn:
        found.append(user_arn)
        # arn:aws:sts::<account>:assumed-role/<role>/<session> -> arn:aws:iam::<account>:role/<role>
        if ":assumed-role/" in user_arn:
            prefix, _, rest = user_arn.partition(":assumed-role/")
            role = rest.split("/", 1)[0]
            found.append(prefix.replace(":sts:", ":iam:", 1) + f":role/{role}")
    for key in ("caller", "accessKey", "user"):
        value = identity.get(key)
        if isinstance(value, str) and value:
            found.append(value)
    return found


def team_for_identity(cp: ControlPlane, identity: Mapping[str, Any] | None) -> str:
    """The team of an authenticated caller (Unauthorized if it has none). Roles match by account
    and name: an assumed-role session names its role without the role's path."""
    identities = {principal_key(arn): team for arn, team in cp.config.identities.items()}
    for candidate in identity_candidates(identity or {}):
        team = identities.get(principal_key(candidate))
        if team is not None:
            return team
    raise Unauthorized("this identity belongs to no Spotline team")


# --- views --------------------------------------------------------------------------------


class CheckpointView(BaseModel):
    model_config = ConfigDict(defer_build=True)

    uri: str | None
    step: int | None
    at: float | None


class RestoredView(BaseModel):
    """The checkpoint a run resumed from."""

    model_config = ConfigDict(defer_build=True)

    run: int
    step: int
    uri: str | None


class JobView(BaseModel):
    """A job as the API shows it (architecture.md: GET /jobs/{id})."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    name: str
    team: str
    state: JobState
    state_reason: str
    priority: Priority
    effective_priority: float | None
    gpus: int
    nodes: int
    gpu_type: str | None
    spot: str
    deadline: str | None
    pool: str | None
    instance_ids: list[str]
    batch_job_id: str | None
    # The current (or last) run: its id is the Batch job name (0 / None before the first).
    run: int = 0
    run_id: str | None = None
    # Batch jobs given up that Batch has not yet confirmed stopped (retried by the reconciler).
    terminating_batch_job_ids: list[str] = Field(default_factory=list)
    wait_reason: str | None
    # The time of the scheduling pass that decided `wait_reason` in these words.
    wait_reason_at: float | None = None
    # Time queued since the job was last enqueued (computed when read, while PENDING).
    waited_s: float | None = None
    submitted_at: float
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    # Where the job stands, defined once (`spotline.control.progress`): the fraction done and
    # the step reached, which is never behind `last_checkpoint`'s step while no run restored less.
    progress: float | None
    step: int | None
    last_checkpoint: CheckpointView | None
    # The checkpoint the current (or last) run actually restored, as its agent reported it
    # (None: a fresh start, or not reported yet).
    restored: RestoredView | None = None
    checkpoint_requested_at: float | None
    preemptions: int
    interruptions: int
    lost_work_s: float
    runtime_s: float
    version: int
    spec: dict[str, Any]
    # The times above as ISO-8601 UTC ("Z"): submitted, enqueued, started, finished, checkpoint.
    times: dict[str, str | None] = {}
    # Its array (an element's id is `<array_id>-<index>`), index and sweep parameters.
    array_id: str | None = None
    array_index: int | None = None
    array_params: dict[str, str] | None = None
    # What it has cost so far, across requeues (spotline.control.job_cost).
    cost: dict[str, Any] | None = None
    # Its deadline's answer at submission (spotline.control.admission): kind, earliest finish,
    # On-Demand cost, the run time planned with, the On-Demand GPUs held for it.
    deadline_answer: dict[str, Any] | None = None


def job_view(
    cp: ControlPlane, record: JobRecord, now: float, usage_gpu_hours: Mapping[str, float] | None = None
) -> JobView:
    """What the API shows of a job. Its effective priority uses the team usage of the latest
    scheduling pass (`usage_gpu_hours`, read from the ledger when not given)."""
    job = record.job
    priority: float | None = None
    if job.state not in TERMINAL_STATES:
        usage = cp.ledger.fairshare_usage() if usage_gpu_hours is None else usage_gpu_hours
        fairshare = fairshare_factor(job.team, {t.team: t for t in cp.config.teams}, usage)
        priority = round(
            effective_priority(
                job,
                now,
                cp.config.scheduler.weights,
                remaining_s=estimated_remaining_s(job, now, cp.config.scheduler),
                fairshare=fairshare,
            ),
            3,
        )
    progress = job_progress(record)
    checkpoint = None
    if job.last_checkpoint_at is not None or job.last_checkpoint_uri is not None:
        checkpoint = CheckpointView(
            uri=job.last_checkpoint_uri, step=job.last_checkpoint_step, at=job.last_checkpoint_at
        )
    return JobView(
        id=job.id,
        name=job.spec.name,
        team=job.team,
        state=job.state,
        state_reason=record.state_reason,
        priority=job.priority,
        effective_priority=priority,
        gpus=job.gpus,
        nodes=job.nodes,
        gpu_type=job.spec.gpu_type,
        spot=job.spec.spot.value,
        deadline=None if job.spec.deadline_at is None else iso(job.spec.deadline_at),
        pool=job.pool,
        instance_ids=list(record.instance_ids),
        batch_job_id=record.batch_job_id,
        run=record.run,
        run_id=record.run_id,
        terminating_batch_job_ids=list(record.terminating_batch_job_ids),
        wait_reason=record.wait_reason if job.state is JobState.PENDING else None,
        wait_reason_at=record.wait_reason_at
        if job.state is JobState.PENDING and record.wait_reason
        else None,
        waited_s=round(wait_s(job, now), 3) if job.state is JobState.PENDING else None,
        submitted_at=job.submitted_at,
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        finished_at=record.finished_at,
        progress=progress.fraction,
        step=progress.step,
        last_checkpoint=checkpoint,
        restored=None
        if record.restored_run is None or record.restored_step is None
        else RestoredView(
            run=record.restored_run, step=record.restored_step, uri=record.restored_checkpoint_uri
        ),
        checkpoint_requested_at=record.checkpoint_requested_at,
        preemptions=job.preemptions,
        interruptions=job.interruptions,
        lost_work_s=round(job.lost_work_s, 3),
        runtime_s=round(job.runtime_s, 3),
        version=job.version,
        spec=job.spec.model_dump(mode="json", exclude_none=True),
        times=_iso_times(
            job.submitted_at, job.enqueued_at, job.started_at, record.finished_at, job.last_checkpoint_at
        ),
        array_id=job.array_id,
        array_index=job.array_index,
        array_params=job.array_params,
        cost=job_cost(cp, record, now),
        deadline_answer=answer_view(job.deadline_answer),
    )


def _iso_times(*at: float | None) -> dict[str, str | None]:
    names = ("submitted", "enqueued", "started", "finished", "last_checkpoint")
    return {name: None if t is None else iso(t) for name, t in zip(names, at, strict=True)}


# --- use cases ----------------------------------------------------------------------------


def _validation_errors(error: ValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": ["body", *[p for p in e["loc"]]] if e["loc"] else ["body"],
            "msg": e["msg"],
            "type": e["type"],
        }
        for e in error.errors(include_url=False, include_context=False, include_input=False)
    ]


def validate_spec(cp: ControlPlane, team: str, body: Mapping[str, Any], now: float) -> JobSpec:
    """A JobSpec checked against the time and the deployment: deadline in the future, known GPU
    type, a priority the team may use, and a shape some pool can host."""
    try:
        spec = JobSpec.model_validate(dict(body), context={"now": now, "gpu_types": cp.config.gpu_types})
    except ValidationError as error:
        raise InvalidRequest(_validation_errors(error)) from error
    check_policy(cp, team, spec)
    check_command_size(spec.command, spec.env)
    probe = Job(id="probe", team=team, spec=spec, submitted_at=now, enqueued_at=now)
    if not any(pool.can_host(probe) for pool in cp.config.pools):
        shapes = ", ".join(
            f"{p.name}: {p.capacity_gpus} GPUs, {p.gpus_per_node}/node" for p in cp.config.pools
        )
        gang = "; a multi-node job runs only On-Demand" if spec.nodes > 1 else ""
        raise InvalidRequest.field(
            "gpus", f"no pool can host {spec.gpus} GPUs on {spec.nodes} node(s) of this type ({shapes}{gang})"
        )
    refused = size_refusal(spec, cp.config.pools)
    if refused is not None:
        field, why = refused
        raise InvalidRequest([{"loc": ["body", *field.split(".")], "msg": why, "type": "value_error"}])
    return spec


# AWS Batch's limits: a SubmitJob request body of 30 KiB, and 8 KiB for a container's overrides,
# which carry the command, the agent's environment and the resource requirements
# (spotline.aws.batch). The environment (run id, job id, checkpoint prefix, ...) and the
# requirements take at most ENVIRONMENT_RESERVE_BYTES; the command gets the rest.
CONTAINER_OVERRIDES_LIMIT_BYTES = 8 * 1024
ENVIRONMENT_RESERVE_BYTES = 2 * 1024
COMMAND_LIMIT_BYTES = CONTAINER_OVERRIDES_LIMIT_BYTES - ENVIRONMENT_RESERVE_BYTES


def check_command_size(command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    """Refuse at submission (422 naming `command`, or `env` when it is the one that does not fit)
    what AWS Batch would refuse at launch: the command and the job's own environment, as JSON,
    must leave room for the agent's environment in the 8 KiB of container overrides."""
    size = len(json.dumps(list(command)).encode())
    entries = [{"name": k, "value": v} for k, v in (env or {}).items()]
    env_size = len(json.dumps(entries).encode()) if entries else 0
    if size + env_size > COMMAND_LIMIT_BYTES:
        field = "env" if env_size and size <= COMMAND_LIMIT_BYTES else "command"
        raise InvalidRequest.field(
            field,
            f"command and env take {size + env_size} bytes as JSON, over the {COMMAND_LIMIT_BYTES} AWS"
            " Batch leaves them (8 KiB of container overrides, less the agent's environment); put long"
            " arguments or settings in a file in the image or in S3, and pass its path",
        )


def check_policy(cp: ControlPlane, team: str, spec: JobSpec) -> None:
    settings = cp.config.teams_by_name.get(team)
    if cp.config.teams and settings is None:
        raise Unauthorized(f"team {team} has no quota in this deployment")
    if settings is not None and spec.priority.rank > settings.max_priority.rank:
        raise InvalidRequest.field(
            "priority", f"team {team} may submit at most {settings.max_priority.value} priority"
        )


def request_digest(spec: JobSpec) -> str:
    """What identifies a submission for an Idempotency-Key: its spec, defaults filled in (so
    leaving a default out or spelling it out is the same request)."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def pin_image(cp: ControlPlane, spec: JobSpec) -> JobSpec:
    """The spec with its image pinned to the digest its tag names now (`cp.images`): every run
    of the job, requeues included, pulls that image, whatever is pushed to the tag meanwhile."""
    if cp.images is None:
        return spec
    try:
        pinned = cp.images.pin(spec.image)
    except ImageNotFound as error:
        raise InvalidRequest.field("image", str(error)) from error
    return spec if pinned == spec.image else spec.model_copy(update={"image": pinned})


def submit_job(
    cp: ControlPlane,
    team: str,
    body: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    require_feasible: bool = False,
) -> tuple[JobRecord, bool]:
    """Validate and store a new PENDING job, then announce it (Job Submitted). Returns the job
    and whether it was created now: with an `idempotency_key`, a retried request returns the
    job the first one created instead of a duplicate, and a different request under a key
    already used is refused (as payment APIs do) rather than answered with the first job.

    A job with a deadline gets its answer (`admission.answer_at_submission`), stored with it
    (with the On-Demand GPUs held for it); `require_feasible` refuses it, storing nothing, when
    the answer is neither "meets" nor "on-demand-only"."""
    now = cp.clock()
    spec = validate_spec(cp, team, body, now)
    if spec.is_array:
        raise InvalidRequest.field("array", "an array is submitted with submit_array (POST /jobs routes it)")
    digest = request_digest(spec)
    if idempotency_key:
        key_digest = hashlib.sha256(f"{team}\0{idempotency_key}".encode()).hexdigest()[:16]
        job_id = f"job-{key_digest}"
        # A retry of an accepted request gets its job back before anything else is judged: the
        # budget may have run out since, and the job is already accepted.
        existing = cp.jobs.find(job_id)
        if existing is not None and existing.team == team:
            return _same_request(existing, job_id, spec, digest), False
    else:
        job_id = cp.new_job_id()
    check_budget(cp, team, spec.priority)
    spec = pin_image(cp, with_dependencies(cp, team, spec, {job_id}))
    job = Job(id=job_id, team=team, spec=spec, submitted_at=now, enqueued_at=now)
    answer = answer_at_submission(cp, job, now)
    if answer is not None:
        if require_feasible and not answer.feasible:
            raise InvalidRequest.field("deadline", f"refused (require_feasible): {answer.summary}")
        job = job.with_changes(deadline_answer=answer)
    try:
        record = cp.jobs.create(
            job,
            now=now,
            reason=f"submitted ({spec.priority.value}, {spec.gpus} GPUs)",
            request_digest=digest,
        )
    except JobAlreadyExists:
        if not idempotency_key:
            raise
        return _same_request(get_job(cp, team, job_id), job_id, spec, digest), False
    try:
        cp.publisher.job_submitted(record)
    except PublishFailed:
        # The job is stored; failing the request would invite a duplicate submission. The
        # scheduler's periodic tick finds it without the event.
        logger.exception("Job Submitted not published", extra={"job_id": record.id})
    return record, True


def submit_array_request(
    cp: ControlPlane, team: str, body: Mapping[str, Any], *, idempotency_key: str | None = None
) -> tuple[ArrayRecord, list[JobRecord], bool]:
    """Validate an array's spec (each element is the spec without its array fields) and store
    the array and its elements (`arrays.submit_array`); the budget applies to the submission."""
    now = cp.clock()
    spec = validate_spec(cp, team, body, now)
    if not spec.is_array:
        raise InvalidRequest.field("array", "give array or sweep")
    check_budget(cp, team, spec.priority)
    digest = request_digest(spec)
    return submit_array(cp, team, pin_image(cp, spec), digest, idempotency_key=idempotency_key)


def _same_request(first: JobRecord, job_id: str, spec: JobSpec, digest: str) -> JobRecord:
    """The job an Idempotency-Key made, if this request is the one that made it; refused if the
    key was used for another request."""
    # A job stored before digests were kept is compared by its spec.
    same = first.request_digest == digest if first.request_digest else first.job.spec == spec
    if not same:
        raise InvalidRequest(
            [
                {
                    "loc": ["header", "Idempotency-Key"],
                    "msg": f"already used for another request (job {job_id}); use a new key"
                    " for a different job",
                    "type": "idempotency_key_reused",
                }
            ]
        )
    return first


def get_job(cp: ControlPlane, team: str, job_id: str) -> JobRecord:
    record = cp.jobs.find(job_id)
    if record is None or record.team != team:
        raise JobNotFound(job_id)
    return record


def list_jobs(
    cp: ControlPlane,
    team: str,
    *,
    state: JobState | None = None,
    limit: int = 50,
    next_token: str | None = None,
) -> tuple[list[JobRecord], str | None]:
    """One page of the team's jobs. The token is signed and bound to the team, the state filter
    and the limit (see `PageTokenStore`; on AWS spotline.aws.page_tokens): any other token is
    refused with 422."""
    binding = {"route": "jobs", "team": team, "state": None if state is None else state.value, "limit": limit}
    now = cp.clock()
    position = _open_token(cp, next_token, binding, now)
    records, following = cp.jobs.list_team(team, state=state, limit=limit, next_token=position)
    return records, cp.pages.seal(following, binding, now=now)


def jobs_usage(
    cp: ControlPlane, caller: str, *, team: str | None, limit: int = 50, next_token: str | None = None
) -> dict[str, Any]:
    """`GET /usage?by=job`: one page of the team's jobs (newest first) with each one's cost."""
    if team is not None and team != caller:
        raise Unauthorized(f"team {caller} may read only its own usage")
    records, token = list_jobs(cp, caller, limit=limit, next_token=next_token)
    rows = jobs_cost_rows(cp, records, cp.clock())
    return {"team": caller, "by": "job", "jobs": rows, "next_token": token}


def _open_token(cp: ControlPlane, token: str | None, binding: Mapping[str, Any], now: float) -> str | None:
    try:
        return cp.pages.open(token, binding, now=now)
    except InvalidPageToken as error:
        raise InvalidRequest(
            [{"loc": ["query", "next_token"], "msg": str(error), "type": "value_error"}]
        ) from error


def cancel_job(cp: ControlPlane, team: str, job_id: str) -> JobRecord:
    """Cancel a job in any state but a final one (cancelling twice returns the cancelled job).
    A running job's GPUs are released with the transition and its Batch job is stopped."""
    for _ in range(3):
        record = get_job(cp, team, job_id)
        if record.state is JobState.CANCELLED:
            return record
        if record.state in TERMINAL_STATES:
            raise Conflict(f"job {job_id} already {record.state.value}")
        now = cp.clock()
        try:
            cancelled = cp.jobs.transition(
                record,
                JobState.CANCELLED,
                "cancelled by the team",
                now=now,
                changes={
                    "finished_at": now,
                    "checkpoint_task_token": None,
                    "draining_for": None,
                    # Stopped below; pending until Batch confirms (the reconciler retries).
                    "terminating_batch_job_ids": tuple(
                        sorted({*record.terminating_batch_job_ids, record.batch_job_id})
                    )
                    if record.state in ACTIVE_STATES and record.batch_job_id
                    else record.terminating_batch_job_ids,
                },
                job={"started_at": None, "runtime_s": record.job.elapsed_s(now)}
                if record.job.started_at is not None
                else None,
            )
        except StaleJobError:
            continue  # changed under us (e.g. admitted): read again and cancel that
        stop_runs(cp, job_id, cancelled.terminating_batch_job_ids, "cancelled by the team (Spotline)")
        # A preempt workflow waiting on this job times out and finds nothing left to do.
        if record.instance_ids:
            cp.instances.remove_job(record.instance_ids, job_id)
        return cancelled
    raise Conflict(f"job {job_id} keeps changing; try again")


def cancel_array(
    cp: ControlPlane, team: str, array_id: str, elements: str | None = None
) -> tuple[ArrayRecord, list[JobRecord]]:
    """Cancel the array's unfinished elements (or those `elements` names, "3,5-7"); the others are
    left as they are. Returns the array and all its elements after."""
    array, _ = get_array(cp, team, array_id)
    for job_id in select_elements(array, elements):
        try:
            cancel_job(cp, team, job_id)
        except (Conflict, JobNotFound):
            continue  # already ended, or never written (an array left CREATING): nothing to cancel
    return array, elements_of(cp, array)


class JobChanges(BaseModel):
    """The body of PATCH /jobs/{id}: a new priority class and/or deadline."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    priority: Priority | None = None
    deadline: DateTime | None = None


def update_job(cp: ControlPlane, team: str, job_id: str, changes: JobChanges) -> JobRecord:
    """Change the priority class or the deadline of an unfinished job, validated like a new
    submission (a deadline in the future, a priority the team may use)."""
    if changes.priority is None and changes.deadline is None:
        raise InvalidRequest([{"loc": ["body"], "msg": "give priority and/or deadline", "type": "missing"}])
    for _ in range(3):
        record = get_job(cp, team, job_id)
        if record.state in TERMINAL_STATES:
            raise Conflict(f"job {job_id} already {record.state.value}")
        now = cp.clock()
        body = record.job.spec.model_dump(mode="json", exclude_none=True)
        described = []
        if changes.priority is not None:
            body["priority"] = changes.priority.value
            described.append(f"priority {record.job.priority.value} -> {changes.priority.value}")
        if changes.deadline is not None:
            body["deadline"] = changes.deadline.isoformat()
            described.append(f"deadline -> {iso(changes.deadline.timestamp())}")
        spec = validate_spec(cp, team, body, now)
        job_changes: dict[str, Any] = {}
        if changes.deadline is not None:
            # A new deadline gets a new answer (and hold), as at submission.
            answer = answer_at_submission(cp, record.job.with_changes(spec=spec, deadline_answer=None), now)
            job_changes["deadline_answer"] = answer
        try:
            return cp.jobs.update_spec(
                record, spec, "changed by the team: " + ", ".join(described), now=now, job=job_changes
            )
        except StaleJobError:
            continue
    raise Conflict(f"job {job_id} keeps changing; try again")


def job_events(
    cp: ControlPlane, team: str, job_id: str, *, limit: int = 100, next_token: str | None = None
) -> tuple[Sequence[TimelineEntry], str | None]:
    """One page of a job's timeline; the token is bound to the team, the job and the limit."""
    get_job(cp, team, job_id)
    binding = {"route": "events", "team": team, "job_id": job_id, "limit": limit}
    now = cp.clock()
    position = _open_token(cp, next_token, binding, now)
    entries, following = cp.timeline.list(job_id, limit=limit, next_token=position)
    return entries, cp.pages.seal(following, binding, now=now)
