"""A job as a stored item: the record's fields as flat attributes, and the sparse index
attributes its state calls for. Every `JobStore` keeps this layout (`spotline.aws.jobs` on
DynamoDB, `spotline.control.memory` in memory), so the two agree on what a read returns.

The index attributes (resources.JOBS) are derived from the state by `record_to_item`, so they
cannot drift from it: `queue_*` and `deadline_*` exist only while PENDING, `active_pk` only
while the job holds GPUs. An item that holds no valid record (an older version wrote it, or a
hand did) is read leniently (`item_to_record_lenient`) so it can be quarantined.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from spotline import resources
from spotline.control.errors import InvalidTransition, ItemTooLarge, UnreadableRecord
from spotline.control.records import (
    ACTIVE_STATES,
    MOVE_PREFIX,
    NO_STATE,
    NODE_HEARTBEAT_PREFIX,
    ArrayRecord,
    EntryKind,
    JobRecord,
    TimelineEntry,
    charge_run,
    entry_time,
    node_heartbeat_field,
    transition_kind,
)
from spotline.domain import Job, JobSpec, JobState, Priority, can_transition

# An item: attribute name -> plain value (str, int, float, bool, set, list, dict); absent, never None.
Item = dict[str, Any]

QUEUE_PK_PREFIX = "Q#"
DEADLINE_PK = "D"
# The `active` index (jobs holding GPUs) is written on every heartbeat of a running job: its
# partition key is spread over ACTIVE_SHARDS values `A#<n>`, n from the job id (one hot key
# would throttle), and a reader queries every shard and merges. Items an older version wrote keep
# the unsharded `A` until they leave the index, so readers query it too.
ACTIVE_PK = "A"
# The `queue` index's partition of the jobs held for their dependencies (not a priority class:
# the pass reads it apart, `JobRepository.held_head`).
HELD_QUEUE_PK = QUEUE_PK_PREFIX + "held"
# The `finished` index: a team's finished jobs by the time they ended (the history view).
FINISHED_PK_PREFIX = "F#"
FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_SHARDS = 8


def active_pk_for(job_id: str) -> str:
    """The `active` index partition of a job: one of ACTIVE_SHARDS, fixed by its id."""
    return f"{ACTIVE_PK}#{zlib.crc32(job_id.encode()) % ACTIVE_SHARDS}"


def active_partitions() -> list[str]:
    """Every partition key of the `active` index a reader queries: each shard, and the
    unsharded key of items written before the shards."""
    return [*(f"{ACTIVE_PK}#{shard}" for shard in range(ACTIVE_SHARDS)), ACTIVE_PK]


# --- the item layout ----------------------------------------------------------------------

_JOB_FIELDS = (
    "submitted_at",
    "enqueued_at",
    "started_at",
    "runtime_s",
    "last_checkpoint_at",
    "last_checkpoint_step",
    "last_checkpoint_uri",
    "checkpoint_bytes",
    "checkpoint_write_s",
    "checkpoint_restore_s",
    "progress",
    "utilization",
    "preemptions",
    "interruptions",
    "lost_work_s",
    "pool",
    "array_id",
    "array_index",
    "array_params",
    "max_running",
    "deadline_answer",
    "resized_at",
    "base_gpus",
)
_RECORD_FIELDS = (
    "updated_at",
    "state_reason",
    "gpus_held",
    "run",
    "batch_job_id",
    "retired_batch_job_ids",
    "terminating_batch_job_ids",
    "instance_ids",
    "admitted_at",
    "wait_reason",
    "wait_reason_at",
    "checkpoint_requested_at",
    "checkpoint_deadline_at",
    "checkpoint_task_token",
    "draining_for",
    "resize_to",
    "disruption",
    "launch_failures",
    "last_heartbeat_at",
    "step",
    "progress_step",
    "last_checkpoint_run",
    "restored_run",
    "restored_step",
    "restored_checkpoint_uri",
    "lost_work",
    "finished_at",
    "request_digest",
    "deps_met_at",
    "gpu_s_by_pool",
    "lost_gpu_s",
    "staged_for_array",
)


def order_key(at: float, job_id: str) -> str:
    """Sort key that orders by time, then id: fixed-width, so string order is time order."""
    return f"{at:017.3f}#{job_id}"


def record_to_item(record: JobRecord) -> Item:
    """The item for `record`, with the index attributes its state calls for."""
    job = record.job
    item: Item = {
        "job_id": job.id,
        "team": job.team,
        "team_sk": order_key(job.submitted_at, job.id),
        "state": job.state.value,
        "version": job.version,
        "spec": job.spec.model_dump_json(exclude_none=True),
        "name": job.spec.name,
        "priority": job.priority.value,
        "gpus": job.gpus,
    }
    for name in _JOB_FIELDS:
        value = getattr(job, name)
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", exclude_none=True)
        item[name] = value
    for name in _RECORD_FIELDS:
        value = getattr(record, name)
        if isinstance(value, tuple):
            # String sets: a heartbeat can ADD an instance id without reading the item first.
            value = set(value) or None
        elif isinstance(value, StrEnum):
            value = value.value
        elif isinstance(value, BaseModel):
            value = value.model_dump(exclude_none=True)
        item[name] = value
    for node, heard in record.node_heartbeats.items():
        item[node_heartbeat_field(node)] = heard
    if record.staged_for_array is not None:
        pass  # an element of an array still being written: in no queue until it is released
    elif record.held_for_dependencies:
        item["queue_pk"] = HELD_QUEUE_PK
        item["queue_sk"] = order_key(job.submitted_at, job.id)
    elif job.state is JobState.PENDING:
        item["queue_pk"] = QUEUE_PK_PREFIX + job.priority.value
        item["queue_sk"] = order_key(job.submitted_at, job.id)
        deadline = job.spec.deadline_at
        if deadline is not None:
            item["deadline_pk"] = DEADLINE_PK
            item["deadline_sk"] = order_key(deadline, job.id)
    if job.state in ACTIVE_STATES or record.terminating_batch_job_ids:
        item["active_pk"] = active_pk_for(job.id)
    if job.state in FINAL_STATES:
        ended = record.finished_at if record.finished_at is not None else record.updated_at
        item["finished_pk"] = FINISHED_PK_PREFIX + job.team
        item["finished_sk"] = order_key(ended, job.id)
    return {k: v for k, v in item.items() if v is not None}


# A store refuses an item over 400 KB (DynamoDB's limit, names and values in UTF-8 together).
MAX_ITEM_BYTES = 400 * 1024
# Room a new job's item keeps for what its life adds (reasons, run and instance ids, checkpoint
# URIs, task tokens): a submission larger than MAX_ITEM_BYTES minus this is refused before any write.
ITEM_HEADROOM_BYTES = 32 * 1024


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        text = str(Decimal(repr(value))) if isinstance(value, float) else str(value)
        return len(text) // 2 + 2  # an upper bound of DynamoDB's (digits / 2 + 1)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (set, frozenset)):
        return sum(_value_size(v) for v in value)
    if isinstance(value, (list, tuple)):
        return 3 + sum(1 + _value_size(v) for v in value)
    if isinstance(value, Mapping):
        return 3 + sum(len(str(k).encode()) + 1 + _value_size(v) for k, v in value.items() if v is not None)
    raise TypeError(f"cannot size a stored value of type {type(value).__name__}")


def item_size_bytes(item: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for an item: each attribute's name plus its value, by the
    documented rules (rounded up where they estimate)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items() if value is not None)


def check_new_item_size(item: Mapping[str, Any]) -> None:
    """ItemTooLarge if a new item would leave less than ITEM_HEADROOM_BYTES of the item limit."""
    size = item_size_bytes(item)
    if size > MAX_ITEM_BYTES - ITEM_HEADROOM_BYTES:
        raise ItemTooLarge(
            f"the job takes {size} bytes stored; at most {MAX_ITEM_BYTES - ITEM_HEADROOM_BYTES} fit"
            " (shorten the command: its arguments make most of it)"
        )


# An array's own item in the Jobs table (`kind` = ARRAY_KIND): no state and none of the index
# attributes, so no index and no read of jobs ever meets it.
ARRAY_KIND = "array"


def array_to_item(array: ArrayRecord) -> Item:
    item: Item = {"kind": ARRAY_KIND, **array.model_dump(exclude_none=True)}
    item["job_id"] = item.pop("id")
    item["element_ids"] = list(array.element_ids)
    item["indexes"] = list(array.indexes)
    return item


def item_to_array(item: Mapping[str, Any]) -> ArrayRecord:
    data = {k: v for k, v in item.items() if k not in ("kind", "job_id")}
    return ArrayRecord.model_validate({**data, "id": item["job_id"]})


def item_to_record(item: Mapping[str, Any]) -> JobRecord:
    """The record an item holds; UnreadableRecord if it does not hold a valid one (an item an
    older version wrote, or one written by hand)."""
    try:
        return _item_to_record(item)
    except (ValidationError, KeyError, ValueError, TypeError) as error:
        raise UnreadableRecord(str(item.get("job_id", "?")), _why(error)) from error


def _item_to_record(item: Mapping[str, Any]) -> JobRecord:
    job = Job(
        id=item["job_id"],
        team=item["team"],
        spec=JobSpec.model_validate_json(item["spec"]),
        state=JobState(item["state"]),
        version=int(item["version"]),
        **{name: item[name] for name in _JOB_FIELDS if name in item},
    )
    fields = {name: item[name] for name in _RECORD_FIELDS if name in item}
    for name in ("retired_batch_job_ids", "terminating_batch_job_ids", "instance_ids"):
        if name in fields:
            fields[name] = tuple(sorted(fields[name]))
    return JobRecord(job=job, node_heartbeats=_node_heartbeats(item), **fields)


def _node_heartbeats(item: Mapping[str, Any]) -> dict[int, float]:
    """{node index: last heartbeat} from the item's per-node attributes."""
    heard: dict[int, float] = {}
    for name, value in item.items():
        if name.startswith(NODE_HEARTBEAT_PREFIX) and name[len(NODE_HEARTBEAT_PREFIX) :].isdigit():
            heard[int(name[len(NODE_HEARTBEAT_PREFIX) :])] = value
    return heard


def _why(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors(include_url=False)
        )
    return f"{type(error).__name__}: {error}"


def item_to_record_lenient(item: Mapping[str, Any]) -> tuple[JobRecord, str | None]:
    """The record an item holds, and None; or, for an item that does not hold a valid record,
    the closest valid record (each unreadable field left at its default, the spec's name, GPUs
    and priority from the item's own attributes) and why the item is unreadable.

    The API reads jobs this way, so a job an older version stored badly can still be read,
    listed and cancelled; the scheduling pass never admits one (it reads strictly and
    quarantines the item, see `JobRepository.quarantine`).
    """
    try:
        return _item_to_record(item), None
    except (ValidationError, KeyError, ValueError, TypeError) as error:
        why = _why(error)
    job_id, team, state = item.get("job_id"), item.get("team"), item.get("state")
    if not isinstance(job_id, str) or not isinstance(team, str) or state not in JobState.__members__:
        raise UnreadableRecord(str(job_id), why)
    try:
        raw_spec = json.loads(item.get("spec") or "{}")
    except (TypeError, ValueError):
        raw_spec = {}
    fallback = {
        "name": str(item.get("name") or job_id),
        "gpus": item.get("gpus") if isinstance(item.get("gpus"), int) else 1,
        "priority": item.get("priority", Priority.NORMAL.value),
        "image": "unreadable",
        "command": ["unreadable"],
    }
    spec_data = {k: v for k, v in (raw_spec if isinstance(raw_spec, dict) else {}).items() if v is not None}
    spec = _closest(JobSpec, spec_data, fallback)
    job_data = {name: item[name] for name in _JOB_FIELDS if name in item}
    job_data.update(id=job_id, team=team, spec=spec, state=state, version=item.get("version", 0))
    job = _closest(Job, job_data, {"version": 0, "submitted_at": 0.0, "enqueued_at": 0.0})
    fields = {name: item[name] for name in _RECORD_FIELDS if name in item}
    for name in ("retired_batch_job_ids", "instance_ids"):
        if isinstance(fields.get(name), (set, list, tuple)):
            fields[name] = tuple(sorted(fields[name]))
    fields.update(job=job, updated_at=item.get("updated_at", 0.0))
    with contextlib.suppress(TypeError, ValueError):
        fields["node_heartbeats"] = _node_heartbeats(item)
    return _closest(JobRecord, fields, {"updated_at": 0.0}), why


_M = TypeVar("_M", bound=BaseModel)


def _closest(model: type[_M], data: dict[str, Any], fallback: Mapping[str, Any]) -> _M:
    """`model` from `data`, each field that fails replaced by `fallback`'s value or dropped
    (its default then applies)."""
    data = dict(data)
    for _ in range(2 * len(model.model_fields) + 2):
        try:
            return model.model_validate(data)
        except ValidationError as error:
            for e in error.errors():
                name = str(e["loc"][0]) if e["loc"] else None
                if name is None or (name in fallback and data.get(name) == fallback[name]):
                    raise
                if name in fallback:
                    data[name] = fallback[name]
                else:
                    data.pop(name, None)
    return model.model_validate(data)


# --- what a write changes -------------------------------------------------------------------

# String sets written as ADD / DELETE deltas by transitions (others add to them concurrently).
DELTA_SETS = ("terminating_batch_job_ids",)


@dataclass(frozen=True)
class ItemChanges:
    """What a write does to a stored item: attributes set, removed, and string-set deltas."""

    sets: dict[str, Any]
    removes: list[str]
    adds: dict[str, set[str]]
    deletes: dict[str, set[str]]


def item_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> ItemChanges:
    """The changes that turn the item `before` (as the writer read it) into `after`, applied to
    the stored item: only the attributes that differ, so a field another writer changed meanwhile
    (a heartbeat's step) is kept unless this write changes it too. Sets that others ADD to without
    a version bump (DELTA_SETS) are written as deltas, so a write never drops an element added
    after it read the item."""
    sets = {k: v for k, v in after.items() if k != "job_id" and k not in DELTA_SETS and before.get(k) != v}
    removes = [k for k in before if k not in after and k not in DELTA_SETS]
    adds: dict[str, set[str]] = {}
    deletes: dict[str, set[str]] = {}
    for name in DELTA_SETS:
        was, now = set(before.get(name) or ()), set(after.get(name) or ())
        if now - was:
            adds[name] = now - was
        if was - now:
            deletes[name] = was - now
    return ItemChanges(sets, removes, adds, deletes)


def signal_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The agent-facing fields (resources.SIGNAL_FIELDS) a write changes, None for removed ones:
    what the job's signal item must take in the same transaction."""
    return {name: after.get(name) for name in resources.SIGNAL_FIELDS if before.get(name) != after.get(name)}


def transitioned(
    record: JobRecord,
    target: JobState,
    reason: str,
    *,
    now: float,
    via: JobState | None = None,
    via_reason: str | None = None,
    job: Mapping[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
) -> tuple[JobRecord, tuple[TimelineEntry, ...], bool]:
    """What a transition of `record` to `target` (through `via` first) stores: the new record, a
    version bump and a timeline entry per step, and whether the job stops holding GPUs (its pool
    and team are then released on the ledger, and its run charged to it). InvalidTransition if
    the lifecycle does not allow a step."""
    steps = [(via, via_reason or reason), (target, reason)] if via is not None else [(target, reason)]
    source = record.state
    for step_target, _ in steps:
        if not can_transition(source, step_target):
            raise InvalidTransition(f"job {record.id}: {source} -> {step_target} is not allowed")
        source = step_target

    now = entry_time(record, now)
    record_changes = dict(changes or {})
    releasing = record.state in ACTIVE_STATES and target not in ACTIVE_STATES and record.gpus_held > 0
    if releasing:
        record_changes.setdefault("gpus_held", 0)
    if releasing and record.job.pool is not None:
        lost_after = float((job or {}).get("lost_work_s", record.job.lost_work_s))
        record_changes.update(charge_run(record, now, lost_after - record.job.lost_work_s))
    new = record.with_changes(
        job={**(job or {}), "state": target, "version": record.version + len(steps)},
        updated_at=now,
        state_reason=reason,
        **record_changes,
    )
    entries = []
    source_state = record.state
    disruption = record_changes.get("disruption")
    draining = record_changes.get("draining_for")
    moving = isinstance(draining, str) and draining.startswith(MOVE_PREFIX)
    for offset, (step_target, step_reason) in enumerate(steps, start=1):
        kind = transition_kind(record, source_state, step_target, disruption, moving)
        entries.append(
            TimelineEntry(
                record.id,
                record.version + offset,
                now,
                source_state.value,
                step_target.value,
                step_reason,
                kind.value,
            )
        )
        source_state = step_target
    return new, tuple(entries), releasing


def new_job_record(
    job: Job, reason: str, *, now: float, request_digest: str | None, staged_for_array: str | None = None
) -> tuple[JobRecord, TimelineEntry]:
    """A new job's record, PENDING (InvalidTransition otherwise), and its first timeline entry,
    NO_STATE -> PENDING with `reason`. An array's element passes `staged_for_array`: stored
    PENDING but in no queue until it is released."""
    if job.state is not JobState.PENDING:
        raise InvalidTransition(f"a new job starts PENDING, not {job.state}")
    record = JobRecord(
        job=job,
        updated_at=now,
        state_reason=reason,
        request_digest=request_digest,
        staged_for_array=staged_for_array,
    )
    return record, TimelineEntry(
        job.id, job.version, now, NO_STATE, JobState.PENDING.value, reason, EntryKind.SUBMITTED.value
    )
