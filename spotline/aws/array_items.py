"""An array's writes in the Jobs table: the array's record first, then its elements in chunks,
then the flip to READY, then the elements' release into the queue.

An array of up to MAX_ARRAY_ELEMENTS elements does not fit one TransactWriteItems (100 items:
each element is its job and its first timeline entry), so it is written in steps, each a
conditional write, and none lets the scheduler see half an array:

1. `begin`: the array's record, state CREATING (Put, conditional on the id being free).
2. `add_elements`: the elements not yet stored, 49 a transaction (98 items) with a
   ConditionCheck that the array is still CREATING. Each is stored *staged*
   (`staged_for_array`): PENDING but in no partition of the `queue` index, so no pass reads it.
3. `finish`: the array flipped CREATING -> READY (conditional Update): every element exists.
4. `release`: each staged element moved into its queue (or the held partition, if it has
   dependencies), with a timeline entry, 49 a transaction.

A request that fails between steps leaves the array CREATING (or READY with staged elements);
the same request again (same Idempotency-Key: the same array id) runs the steps from where
they stopped, writing only what is missing, so the retry completes the array rather than
duplicating it (`spotline.control.arrays.submit_array`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from spotline.aws.dynamo import DynamoTable, Expression, TransactItem, serialize_item
from spotline.aws.job_items import (
    ARRAY_KIND,
    array_to_item,
    item_to_array,
    new_item_put,
    new_job_write,
    record_to_item,
)
from spotline.aws.timeline import TimelineRepository
from spotline.control.errors import ConditionFailed, InvalidTransition, JobAlreadyExists, StaleJobError
from spotline.control.ports import PreparedTransition
from spotline.control.records import (
    ARRAY_CREATING,
    ARRAY_READY,
    ArrayRecord,
    EntryKind,
    JobRecord,
    TimelineEntry,
    entry_time,
)
from spotline.domain import Job, JobState


class JobRepository(Protocol):
    """What these writes use of `spotline.aws.jobs.JobRepository` (which holds them)."""

    table: DynamoTable
    timeline: TimelineRepository

    def find(self, job_id: str) -> JobRecord | None: ...
    def find_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]: ...
    def notify(self, record: JobRecord, entries: Sequence[TimelineEntry]) -> None: ...
    def commit_together(self, prepared: Sequence[PreparedTransition]) -> None: ...
    def transition_items(
        self,
        old: JobRecord,
        new: JobRecord,
        entries: Sequence[TimelineEntry],
        extra: Sequence[TransactItem],
        extra_roles: Sequence[tuple[str, str]],
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]: ...


# Elements a transaction writes or releases: two items each (the job, its timeline entry), and
# the array's ConditionCheck: 99 of TransactWriteItems' 100.
ELEMENTS_PER_TRANSACTION = 49


def find(repo: JobRepository, array_id: str) -> ArrayRecord | None:
    """The array `array_id` (None if there is none: a job's id is not an array's)."""
    item = repo.table.get({"job_id": array_id}, consistent=True, job_id=array_id)
    return None if item is None or item.get("kind") != ARRAY_KIND else item_to_array(item)


def begin(repo: JobRepository, array: ArrayRecord, jobs: Sequence[Job]) -> None:
    """Store the array's record, CREATING (JobAlreadyExists if its id is taken), once every
    element of `jobs` is known to fit an item (ItemTooLarge before any write otherwise)."""
    if array.state != ARRAY_CREATING:
        raise InvalidTransition(f"array {array.id} starts {ARRAY_CREATING}, not {array.state}")
    for job in jobs:
        new_item_put(
            repo.table.name, record_to_item(JobRecord(job=job, updated_at=0.0, staged_for_array=array.id))
        )
    repo.table.transact([new_item_put(repo.table.name, array_to_item(array))], [("new-job", array.id)])


def add_elements(
    repo: JobRepository, array: ArrayRecord, jobs: Sequence[Job], reasons: Sequence[str], *, now: float
) -> list[JobRecord]:
    """Store, staged, the elements of `jobs` not stored yet (chunks of ELEMENTS_PER_TRANSACTION,
    each conditional on the array being CREATING and on each id being free); returns every
    element's record, in the order of `jobs`. ConditionFailed if the array is no longer
    CREATING (another request finished it: read it again)."""
    found = repo.find_many(job.id for job in jobs)
    missing = [(job, reason) for job, reason in zip(jobs, reasons, strict=True) if job.id not in found]
    for start in range(0, len(missing), ELEMENTS_PER_TRANSACTION):
        chunk = missing[start : start + ELEMENTS_PER_TRANSACTION]
        try:
            for record in _put_chunk(repo, array, chunk, now):
                found[record.id] = record
        except JobAlreadyExists:
            # A concurrent retry wrote some of them: write the rest, one at a time.
            for job, reason in chunk:
                with contextlib.suppress(JobAlreadyExists):
                    _put_chunk(repo, array, [(job, reason)], now)
            found.update(repo.find_many(job.id for job, _ in chunk))
    return [found[job.id] for job in jobs if job.id in found]


def _put_chunk(
    repo: JobRepository, array: ArrayRecord, chunk: Sequence[tuple[Job, str]], now: float
) -> list[JobRecord]:
    items: list[TransactItem] = [_still_creating(repo, array.id)]
    roles: list[tuple[str, str]] = [("array", array.id)]
    created: list[tuple[JobRecord, TimelineEntry]] = []
    for job, reason in chunk:
        write = new_job_write(
            repo.table.name,
            repo.timeline,
            job,
            reason,
            now=now,
            request_digest=array.request_digest,
            staged_for_array=array.id,
        )
        items += write.items
        roles += write.roles
        created.append((write.record, write.entry))
    repo.table.transact(items, roles)
    for record, entry in created:
        repo.notify(record, [entry])
    return [record for record, _ in created]


def _still_creating(repo: JobRepository, array_id: str) -> TransactItem:
    expr = Expression()
    check = expr.attach(
        {
            "TableName": repo.table.name,
            "Key": serialize_item({"job_id": array_id}),
            "ConditionExpression": f"{expr.name('state')} = {expr.value(ARRAY_CREATING)}",
        }
    )
    return {"ConditionCheck": check}


def finish(repo: JobRepository, array: ArrayRecord, *, now: float) -> ArrayRecord:
    """Flip the array CREATING -> READY (once every element is stored). Flipping an array that
    is already READY returns it; ConditionFailed if it is in another state."""
    expr = Expression()
    update = expr.attach(
        {
            "TableName": repo.table.name,
            "Key": serialize_item({"job_id": array.id}),
            "UpdateExpression": f"SET {expr.name('state')} = {expr.value(ARRAY_READY)}, "
            f"{expr.name('ready_at')} = {expr.value(now)}",
            "ConditionExpression": f"{expr.name('state')} = {expr.value(ARRAY_CREATING)}",
        }
    )
    try:
        repo.table.transact([{"Update": update}], [("array", array.id)])
    except ConditionFailed:
        stored = find(repo, array.id)
        if stored is None or stored.state != ARRAY_READY:
            raise
        return stored
    return array.model_copy(update={"state": ARRAY_READY})


def release(repo: JobRepository, records: Sequence[JobRecord], reason: str, *, now: float) -> list[JobRecord]:
    """Move the staged elements of `records` into their queue (a version bump and a timeline
    entry each, 49 a transaction); returns every record as it is after. An element that changed
    meanwhile (cancelled, or released by a concurrent retry) is read again and left as it is."""
    out = {r.id: r for r in records}
    staged = [r for r in records if r.staged_for_array is not None and r.state is JobState.PENDING]
    for start in range(0, len(staged), ELEMENTS_PER_TRANSACTION):
        chunk = [_release_one(repo, r, reason, now) for r in staged[start : start + ELEMENTS_PER_TRANSACTION]]
        try:
            repo.commit_together(chunk)
            out.update((p.new.id, p.new) for p in chunk)
        except StaleJobError:
            for prepared in chunk:
                try:
                    repo.commit_together([prepared])
                    out[prepared.new.id] = prepared.new
                except StaleJobError:
                    fresh = repo.find(prepared.old.id)
                    if fresh is not None and fresh.staged_for_array is not None:
                        raise  # still staged but changed: the caller's retry releases it
                    if fresh is not None:
                        out[fresh.id] = fresh
    return [out[r.id] for r in records]


def _release_one(repo: JobRepository, record: JobRecord, reason: str, now: float) -> PreparedTransition:
    at = entry_time(record, now)
    new = record.with_changes(job={"version": record.version + 1}, updated_at=at, staged_for_array=None)
    entry = TimelineEntry(
        record.id, new.version, at, record.state.value, record.state.value, reason, EntryKind.CHANGE.value
    )
    items, roles = repo.transition_items(record, new, [entry], [], [])
    return PreparedTransition(record, new, (entry,), items, roles)


class ArrayRepository:
    """The `ArrayStore` port on the Jobs table (`JobRepository.arrays`): the steps above."""

    def __init__(self, jobs: JobRepository) -> None:
        self.jobs = jobs

    def find(self, array_id: str) -> ArrayRecord | None:
        return find(self.jobs, array_id)

    def begin(self, array: ArrayRecord, jobs: Sequence[Job]) -> None:
        begin(self.jobs, array, jobs)

    def add_elements(
        self, array: ArrayRecord, jobs: Sequence[Job], reasons: Sequence[str], *, now: float
    ) -> list[JobRecord]:
        return add_elements(self.jobs, array, jobs, reasons, now=now)

    def finish(self, array: ArrayRecord, *, now: float) -> ArrayRecord:
        return finish(self.jobs, array, now=now)

    def release(self, records: Sequence[JobRecord], reason: str, *, now: float) -> list[JobRecord]:
        return release(self.jobs, records, reason, now=now)
