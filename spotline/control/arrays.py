"""Job arrays (sweeps) and dependencies (pipelines): the use cases and the pass's held step.

An array is submitted in one request (at most `spotline.domain.arrays.MAX_ARRAY_ELEMENTS`
elements) and stored in steps (`submit_array`, `ArrayStore`): its record CREATING, its elements
staged in chunks, the flip to READY, then their release into the queue, so no pass admits an
element of an array not yet written whole, and a retry completes what a failed request began.
Each element is a job of its own, `<array id>-<index>`: scheduled, preempted, requeued and
charged alone; its array's `max_running` is a rule of the planner (`ArrayCap`).

A job with `after` is stored held: PENDING, in the `queue` index's held partition, which the
pass's priority reads never meet. Each pass first reads the oldest held jobs (bounded,
`HELD_PER_PASS`), reads their dependencies (one BatchGetItem), and lets each in whose
dependencies ended as its `dependency` mode asks (`dependency_verdict`), or cancels it, with
the reason, when one ended otherwise under afterok; the jobs that waited on it follow in the
same pass or the next. Dependencies are fixed at submission and must exist by then (an
array's id stands for all of its elements), so no cycle can form.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotline.control.errors import (
    ConditionFailed,
    Conflict,
    InvalidRequest,
    JobAlreadyExists,
    JobNotFound,
    PublishFailed,
    StaleJobError,
)
from spotline.control.plane import ControlPlane
from spotline.control.records import ARRAY_CREATING, ArrayRecord, JobRecord
from spotline.domain import TERMINAL_STATES, Job, JobSpec, JobState
from spotline.domain.arrays import (
    MAX_DEPENDENCIES,
    Dependency,
    dependency_verdict,
    element_id,
    parse_array_range,
)

logger = logging.getLogger(__name__)

ARRAY_ID_PREFIX = "arr-"
# Held jobs a pass reads (oldest first), and how many rounds it makes so a chain cancelled by a
# failure ends in one pass when it is short.
HELD_PER_PASS = 100
HELD_ROUNDS = 3


def is_array_id(some_id: str) -> bool:
    return some_id.startswith(ARRAY_ID_PREFIX)


# --- dependencies at submission ---------------------------------------------------------------


def resolve_dependencies(cp: ControlPlane, team: str, after: Sequence[str], new_ids: set[str]) -> list[str]:
    """The job ids a new job waits for: `after`, each array id replaced by its elements. A job
    or array that does not exist, or is another team's, is refused (422 naming `after`, the same
    answer for both, so ids cannot be probed), and so is a job that names itself."""
    resolved: list[str] = []
    for dep in after:
        if dep in new_ids:
            raise InvalidRequest.field("after", f"{dep} is this submission itself: a dependency cycle")
        if is_array_id(dep):
            array = cp.jobs.arrays.find(dep)
            if array is None or array.team != team:
                raise InvalidRequest.field("after", f"no array {dep} of team {team}")
            resolved += array.element_ids
        else:
            resolved.append(dep)
    resolved = list(dict.fromkeys(resolved))
    if len(resolved) > MAX_DEPENDENCIES:
        raise InvalidRequest.field(
            "after", f"{len(resolved)} jobs, over the {MAX_DEPENDENCIES} one job may wait for"
        )
    found = cp.jobs.find_many(j for j in resolved if j not in new_ids)
    for dep in resolved:
        record = found.get(dep)
        if record is None or record.team != team:
            raise InvalidRequest.field("after", f"no job {dep} of team {team}")
    return resolved


def with_dependencies(cp: ControlPlane, team: str, spec: JobSpec, new_ids: set[str]) -> JobSpec:
    """`spec` with its `after` resolved to job ids (unchanged without one)."""
    if not spec.after:
        return spec
    return spec.model_copy(update={"after": resolve_dependencies(cp, team, spec.after, new_ids)})


# --- arrays ---------------------------------------------------------------------------------


def submit_array(
    cp: ControlPlane, team: str, spec: JobSpec, digest: str, *, idempotency_key: str | None = None
) -> tuple[ArrayRecord, list[JobRecord], bool]:
    """Store an array and its elements; returns them and whether the array was created now.

    The steps (`ArrayStore`): the array's record CREATING, its elements staged (in no queue) in
    chunks, the flip to READY, the elements' release into the queue. The same request again (the
    same Idempotency-Key) runs them from where an earlier attempt stopped: one whole array, no
    element written twice. Without a key, a request that fails midway leaves a CREATING array
    whose staged elements never run (`GET /arrays/{id}` says so; `DELETE` cancels them).
    """
    now = cp.clock()
    created = True
    if idempotency_key:
        key_digest = hashlib.sha256(f"{team}\0{idempotency_key}".encode()).hexdigest()[:16]
        array_id = f"{ARRAY_ID_PREFIX}{key_digest}"
    else:
        array_id = ARRAY_ID_PREFIX + cp.new_job_id().removeprefix("job-")
    elements = spec.elements()
    new = ArrayRecord(
        id=array_id,
        team=team,
        name=spec.name,
        element_ids=tuple(element_id(array_id, index) for index, _ in elements),
        indexes=tuple(index for index, _ in elements),
        max_running=spec.max_running,
        submitted_at=now,
        spec=spec.model_dump_json(exclude_none=True),
        request_digest=digest,
        state=ARRAY_CREATING,
    )
    array = cp.jobs.arrays.find(array_id) if idempotency_key else None
    jobs: list[Job] = []
    reasons: list[str] = []
    if array is None:
        # Checked before the first write: the dependencies, and that each element fits an item.
        base = with_dependencies(cp, team, spec.element_spec(), {array_id, *new.element_ids})
        jobs, reasons = _element_jobs(new, spec, base)
        try:
            cp.jobs.arrays.begin(new, jobs)
            array = new
        except JobAlreadyExists:
            array = cp.jobs.arrays.find(array_id) if idempotency_key else None
            if array is None:
                raise
            created = False
    else:
        created = False
    if array.team != team or array.request_digest != digest:
        _key_reused(array)
    if not created:  # an earlier attempt's array: its elements as it numbered them
        base = with_dependencies(cp, team, spec.element_spec(), {array_id, *array.element_ids})
        jobs, reasons = _element_jobs(array, spec, base)
    return (*_complete(cp, array, jobs, reasons), created)


def _element_jobs(array: ArrayRecord, spec: JobSpec, base: JobSpec) -> tuple[list[Job], list[str]]:
    """The array's elements as jobs (submitted when the array was), and their first reasons."""
    at = array.submitted_at
    elements = spec.elements()
    jobs = [
        Job(
            id=job_id,
            team=array.team,
            spec=base,
            submitted_at=at,
            enqueued_at=at,
            array_id=array.id,
            array_index=index,
            array_params=params or None,
            max_running=spec.max_running,
        )
        for job_id, (index, params) in zip(array.element_ids, elements, strict=True)
    ]
    cap = f", max_running {spec.max_running}" if spec.max_running else ""
    reasons = [
        f"submitted as element {index} of array {array.id} ({len(jobs)} elements{cap}; "
        f"{spec.priority.value}, {spec.gpus} GPUs); staged until the array is written whole"
        for index, _ in elements
    ]
    return jobs, reasons


def _complete(
    cp: ControlPlane, array: ArrayRecord, jobs: Sequence[Job], reasons: Sequence[str]
) -> tuple[ArrayRecord, list[JobRecord]]:
    """Write the elements an earlier attempt did not, flip the array READY, release its staged
    elements into the queue, and announce the released ones."""
    now = cp.clock()
    if array.state == ARRAY_CREATING:
        try:
            records = cp.jobs.arrays.add_elements(array, jobs, reasons, now=now)
        except ConditionFailed:  # a concurrent retry finished it meanwhile
            records = elements_of(cp, array)
        if len(records) != len(jobs):
            raise Conflict(f"array {array.id} lost elements while being written; send the request again")
        array = cp.jobs.arrays.finish(array, now=now)
    else:
        records = elements_of(cp, array)
    staged = {r.id for r in records if r.staged_for_array is not None}
    records = cp.jobs.arrays.release(
        records, f"array {array.id} written whole ({len(jobs)} elements); queued", now=now
    )
    released = [r for r in records if r.id in staged and r.staged_for_array is None]
    try:
        cp.publisher.jobs_submitted(released)
    except PublishFailed:
        # The elements are stored and queued; the scheduler's periodic tick finds them.
        logger.exception("Job Submitted not published", extra={"array_id": array.id})
    return array, records


def _key_reused(array: ArrayRecord) -> None:
    raise InvalidRequest(
        [
            {
                "loc": ["header", "Idempotency-Key"],
                "msg": f"already used for another request (array {array.id}); use a new key",
                "type": "idempotency_key_reused",
            }
        ]
    )


def elements_of(cp: ControlPlane, array: ArrayRecord) -> list[JobRecord]:
    found = cp.jobs.find_many(array.element_ids)
    return [found[j] for j in array.element_ids if j in found]


def get_array(cp: ControlPlane, team: str, array_id: str) -> tuple[ArrayRecord, list[JobRecord]]:
    array = cp.jobs.arrays.find(array_id)
    if array is None or array.team != team:
        raise JobNotFound(array_id)
    return array, elements_of(cp, array)


def state_counts(records: Sequence[JobRecord]) -> dict[str, int]:
    """How many elements are in each state (states with none left out)."""
    return dict(sorted(Counter(r.state.value for r in records).items()))


def select_elements(array: ArrayRecord, elements: str | None) -> list[str]:
    """The element ids `elements` names ("3,5-7", array indexes), all of them for None."""
    if elements is None:
        return list(array.element_ids)
    try:
        wanted = parse_array_range(elements)
    except ValueError as error:
        raise InvalidRequest(
            [{"loc": ["query", "elements"], "msg": str(error), "type": "value_error"}]
        ) from error
    by_index = dict(zip(array.indexes, array.element_ids, strict=True))
    missing = [i for i in wanted if i not in by_index]
    if missing:
        raise InvalidRequest(
            [
                {
                    "loc": ["query", "elements"],
                    "msg": f"array {array.id} has no element {', '.join(map(str, missing))}",
                    "type": "value_error",
                }
            ]
        )
    return [by_index[i] for i in wanted]


# --- the pass's held step ---------------------------------------------------------------------


@dataclass
class HeldResult:
    released: list[str] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    waiting: int = 0


def release_held(cp: ControlPlane, now: float) -> HeldResult:
    """Let into the queue the held jobs whose dependencies ended as they ask, and cancel those a
    dependency failed (afterok), with the reason; note why the others wait."""
    result = HeldResult()
    for _ in range(HELD_ROUNDS):
        held = cp.jobs.held_head(HELD_PER_PASS)
        if not held:
            break
        found = cp.jobs.find_many({dep for r in held for dep in r.job.spec.after or ()})
        states = {dep: r.state.value for dep, r in found.items()}
        changed = False
        result.waiting = 0
        for record in held:
            after = record.job.spec.after or ()
            # Stamped no earlier than its dependencies' last writes: the pass read its clock
            # before their states, and a step never joins the queue before the one it waits for ended.
            stamp = max([now] + [found[dep].updated_at for dep in after if dep in found])
            changed |= _decide_held(cp, record, {dep: states.get(dep) for dep in after}, stamp, result)
        if not changed:
            break
    return result


def dependency_states(cp: ControlPlane, held: Sequence[JobRecord]) -> dict[str, str | None]:
    wanted = {dep for r in held for dep in r.job.spec.after or ()}
    found = cp.jobs.find_many(wanted)
    return {dep: found[dep].state.value if dep in found else None for dep in wanted}


def _decide_held(
    cp: ControlPlane, record: JobRecord, states: Mapping[str, str | None], now: float, result: HeldResult
) -> bool:
    spec = record.job.spec
    mode = spec.dependency or Dependency.AFTEROK
    verdict = dependency_verdict(spec.after or (), mode, states)
    try:
        if verdict.outcome == "ready":
            cp.jobs.update_spec(
                record,
                spec,
                f"dependencies met ({mode.value}: {', '.join(spec.after or ())}); queued",
                now=now,
                changes={"deps_met_at": now, "wait_reason": None, "wait_reason_at": None},
            )
            result.released.append(record.id)
            return True
        if verdict.outcome == "broken":
            reason = f"cancelled: {verdict.text()}"
            cp.jobs.transition(record, JobState.CANCELLED, reason, now=now, changes={"finished_at": now})
            result.cancelled.append((record.id, reason))
            return True
    except StaleJobError:
        return False
    result.waiting += 1
    if record.wait_reason != verdict.text():
        with contextlib.suppress(StaleJobError):
            cp.jobs.update_fields(
                record.id,
                states=[JobState.PENDING],
                version=record.version,
                set_fields={"wait_reason": verdict.text(), "wait_reason_at": now},
            )
    return False


def dependency_explanation(cp: ControlPlane, record: JobRecord) -> dict[str, Any]:
    """What `explain` says of a held job: the job it waits for, and that job's state."""
    spec = record.job.spec
    states = dependency_states(cp, [record])
    verdict = dependency_verdict(spec.after or (), spec.dependency or Dependency.AFTEROK, states)
    return {
        "summary": verdict.text(),
        "waiting_for": {"job_id": verdict.job_id, "state": verdict.state},
        "dependencies": {"mode": (spec.dependency or Dependency.AFTEROK).value, "jobs": states},
        "estimated_start": {"at": None, "reason": "after its dependencies end"},
    }


def array_summary(array: ArrayRecord, records: Sequence[JobRecord]) -> dict[str, Any]:
    """An array as the API shows it (`GET /arrays/{id}`), its elements' views aside."""
    counts = state_counts(records)
    running = sum(1 for r in records if r.state.value in {"ADMITTED", "RUNNING", "CHECKPOINTING"})
    done = sum(1 for r in records if r.state in TERMINAL_STATES)
    return {
        "id": array.id,
        "name": array.name,
        "team": array.team,
        "size": len(array.element_ids),
        # CREATING: an earlier request stopped midway (its elements are staged: none runs);
        # the same request again completes it.
        "state": array.state,
        "written": len(records),
        "max_running": array.max_running,
        "holding_gpus": running,
        "finished": done,
        "counts": counts,
        "submitted_at": array.submitted_at,
    }
