"""A new job's writes on the Jobs table: its item's conditional Put and its first timeline entry.

The item layout itself (the record's attributes and the index attributes its state calls for)
is `spotline.control.items`, which every JobStore keeps; it is re-exported here for the
DynamoDB adapters.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from spotline.aws.dynamo import TransactItem, serialize_item
from spotline.aws.timeline import TimelineRepository
from spotline.control.items import (
    _JOB_FIELDS,
    _RECORD_FIELDS,
    ACTIVE_PK,
    ACTIVE_SHARDS,
    ARRAY_KIND,
    DEADLINE_PK,
    FINISHED_PK_PREFIX,
    HELD_QUEUE_PK,
    ITEM_HEADROOM_BYTES,
    QUEUE_PK_PREFIX,
    Item,
    active_partitions,
    active_pk_for,
    array_to_item,
    check_new_item_size,
    item_to_array,
    item_to_record,
    item_to_record_lenient,
    new_job_record,
    order_key,
    record_to_item,
)
from spotline.control.records import JobRecord, TimelineEntry
from spotline.domain import Job

__all__ = [
    "ACTIVE_PK",
    "ACTIVE_SHARDS",
    "ARRAY_KIND",
    "DEADLINE_PK",
    "FINISHED_PK_PREFIX",
    "HELD_QUEUE_PK",
    "ITEM_HEADROOM_BYTES",
    "QUEUE_PK_PREFIX",
    "_JOB_FIELDS",
    "_RECORD_FIELDS",
    "Item",
    "NewJobWrite",
    "active_partitions",
    "active_pk_for",
    "array_to_item",
    "item_to_array",
    "item_to_record",
    "item_to_record_lenient",
    "new_item_put",
    "new_job_write",
    "order_key",
    "record_to_item",
]


def new_item_put(table_name: str, item: Item) -> dict[str, Any]:
    """The transaction's Put of a new item (a job's, or an array's): conditional on its key being
    free; ItemTooLarge if it would leave less than ITEM_HEADROOM_BYTES of the item limit."""
    check_new_item_size(item)
    return {
        "Put": {
            "TableName": table_name,
            "Item": serialize_item(item),
            "ConditionExpression": "attribute_not_exists(job_id)",
        }
    }


class NewJobWrite(NamedTuple):
    """What storing a new job writes: its item's Put and its first timeline entry's Put (`items`,
    with their `roles` for the transaction's error messages), and the record and entry stored."""

    record: JobRecord
    entry: TimelineEntry
    items: list[TransactItem]
    roles: list[tuple[str, str]]


def new_job_write(
    table_name: str,
    timeline: TimelineRepository,
    job: Job,
    reason: str,
    *,
    now: float,
    request_digest: str | None,
    staged_for_array: str | None = None,
) -> NewJobWrite:
    """The transaction items that store `job`, new and PENDING (InvalidTransition otherwise): its
    item, conditional on its id being free (`new_item_put`: ItemTooLarge if it would not leave
    room to grow), and its first timeline entry, NO_STATE -> PENDING with `reason`. An array's
    element passes `staged_for_array`: stored PENDING but in no queue until it is released.

    `JobRepository.create_many` and the array's `add_elements` both store new jobs this way."""
    record, entry = new_job_record(
        job, reason, now=now, request_digest=request_digest, staged_for_array=staged_for_array
    )
    return NewJobWrite(
        record,
        entry,
        [new_item_put(table_name, record_to_item(record)), timeline.append_item(entry)],
        [("new-job", job.id), ("timeline", job.id)],
    )
