"""The Jobs table's reads (the base of `JobRepository`): a job by id, many by id, and the bounded
index reads of the scheduling pass (`queue`, its held partition, `deadline`, `active`) and of
the API (`team`). An unreadable item met by a read of the pass is quarantined and left out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from spotline.aws.dynamo import DynamoTable, Expression, Item, serialize_item
from spotline.aws.job_items import (
    ARRAY_KIND,
    DEADLINE_PK,
    FINISHED_PK_PREFIX,
    HELD_QUEUE_PK,
    QUEUE_PK_PREFIX,
    active_partitions,
    item_to_record,
    item_to_record_lenient,
    order_key,
)
from spotline.aws.timeline import decode_token, encode_token
from spotline.control.errors import ConditionFailed, JobNotFound, UnreadableRecord
from spotline.control.ports import Quarantined
from spotline.control.records import ACTIVE_STATES, JobRecord
from spotline.domain import JobState, Priority

logger = logging.getLogger(__name__)


class JobReads:
    """Reads of the Jobs table; `JobRepository` adds the writes."""

    table: DynamoTable

    def find(self, job_id: str) -> JobRecord | None:
        """The job (an unreadable item read as its closest valid record: see
        `item_to_record_lenient`; the scheduling pass never admits such a job)."""
        item = self.table.get({"job_id": job_id}, consistent=True, job_id=job_id)
        if item is None or item.get("kind") == ARRAY_KIND:  # an array's id names no job
            return None
        return item_to_record_lenient(item)[0]

    def get(self, job_id: str) -> JobRecord:
        record = self.find(job_id)
        if record is None:
            raise JobNotFound(job_id)
        return record

    def queue_head(
        self, priority: Priority, limit: int, *, skipped: Quarantined | None = None
    ) -> list[JobRecord]:
        """The first `limit` pending jobs of a class, oldest submission first: one Query of the
        `queue` index with Limit, so the read is bounded whatever the queue's length.
        Unreadable items are quarantined and left out (appended to `skipped`)."""
        return self._index_head("queue", "queue_pk", QUEUE_PK_PREFIX + priority.value, limit, skipped)

    def held_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The `limit` oldest jobs held for their dependencies (the `queue` index's held part)."""
        return self._index_head("queue", "queue_pk", HELD_QUEUE_PK, limit, skipped)

    def find_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]:
        """The jobs of `job_ids` that exist (BatchGetItem, 100 keys a call, consistent)."""
        found: dict[str, JobRecord] = {}
        for item in self.table.batch_get([{"job_id": j} for j in dict.fromkeys(job_ids)]):
            if item.get("kind") != ARRAY_KIND:
                record = item_to_record_lenient(item)[0]
                found[record.id] = record
        return found

    def deadline_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The `limit` pending jobs with the nearest deadlines (the `deadline` index)."""
        return self._index_head("deadline", "deadline_pk", DEADLINE_PK, limit, skipped)

    def _readable(self, items: Iterable[Item], skipped: Quarantined | None) -> list[JobRecord]:
        """The records of `items`; each unreadable one is quarantined and left out, so one bad
        item never stops a read that every team's scheduling depends on."""
        records = []
        for item in items:
            try:
                records.append(item_to_record(item))
            except UnreadableRecord as error:
                logger.error(
                    "unreadable job record quarantined",
                    extra={"job_id": error.job_id, "why": error.why},
                )
                if "quarantine_reason" not in item:  # noted once; reported on every read
                    self.quarantine(item, error.why)
                if skipped is not None:
                    skipped.append((error.job_id, error.why))
        return records

    def quarantine(self, item: Mapping[str, Any], why: str) -> bool:
        """Take an unreadable item out of the queue and deadline indexes (the pass stops reading
        it) and note why on it. Its other attributes stay: the API still reads it (leniently),
        and the team can cancel it. Conditional on the item being as read; False if it changed."""
        expr = Expression()
        reason = f"quarantined: the stored record is unreadable ({why})"[:1000]
        removes = ", ".join(expr.name(n) for n in ("queue_pk", "queue_sk", "deadline_pk", "deadline_sk"))
        version = item.get("version")
        condition = f"attribute_exists({expr.name('job_id')})"
        if isinstance(version, (int, float, str)):
            condition += f" AND {expr.name('version')} = {expr.value(version)}"
        else:
            condition += f" AND attribute_not_exists({expr.name('version')})"
        request = expr.attach(
            {
                "Key": serialize_item({"job_id": item.get("job_id")}),
                "UpdateExpression": f"SET {expr.name('quarantine_reason')} = {expr.value(reason)}, "
                f"{expr.name('wait_reason')} = {expr.value(reason)} REMOVE {removes}",
                "ConditionExpression": condition,
                "ReturnValues": "NONE",
            }
        )
        try:
            self.table.update(request)
        except ConditionFailed:
            return False
        return True

    def _index_head(
        self, index: str, key: str, value: str, limit: int, skipped: Quarantined | None = None
    ) -> list[JobRecord]:
        # A page ends at `Limit` items or at 1 MB of them, whichever comes first: a large window
        # reads on from where the page ended until it has `limit` items or the index ends.
        items: list[Item] = []
        start: dict[str, Any] | None = None
        while True:
            expr = Expression()
            request = expr.attach(
                {
                    "IndexName": index,
                    "KeyConditionExpression": f"{expr.name(key)} = {expr.value(value)}",
                    "Limit": limit - len(items),
                    "ScanIndexForward": True,
                }
            )
            if start is not None:
                request["ExclusiveStartKey"] = start
            page, start = self.table.query(request)
            items += page
            if start is None or len(items) >= limit:
                break
        # Index reads are eventually consistent: a job admitted a moment ago may still be listed.
        # Its admission would fail its condition anyway; dropping it here saves the attempt.
        return [r for r in self._readable(items, skipped) if r.state is JobState.PENDING]

    def active(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """Every job holding GPUs (the `active` index): as many as the cluster runs, never the
        queue. An unreadable item is noted (`quarantine`) and left out: its GPUs stay charged in
        the ledger, which the admission transaction checks, so leaving it out never over-commits."""
        return [r for r in self._active_index(skipped) if r.state in ACTIVE_STATES]

    def terminating(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """Every job with a Batch job it must still see stopped (also in the `active` index,
        whatever the job's state)."""
        return [r for r in self._active_index(skipped) if r.terminating_batch_job_ids]

    def _active_index(self, skipped: Quarantined | None) -> list[JobRecord]:
        """Every item of the `active` index: each shard's, merged in job id order (one shard's
        order before the shards)."""
        records: list[JobRecord] = []
        for partition in active_partitions():
            start: dict[str, Any] | None = None
            while True:
                expr = Expression()
                request = expr.attach(
                    {
                        "IndexName": "active",
                        "KeyConditionExpression": f"{expr.name('active_pk')} = {expr.value(partition)}",
                    }
                )
                if start is not None:
                    request["ExclusiveStartKey"] = start
                items, start = self.table.query(request)
                records += self._readable(items, skipped)
                if start is None:
                    break
        # An item that moved from the unsharded key to its shard between two queries is read
        # twice: keep one.
        return sorted({record.id: record for record in records}.values(), key=lambda record: record.id)

    def list_finished(
        self,
        team: str,
        *,
        since: float | None = None,
        state: JobState | None = None,
        limit: int = 50,
        next_token: str | None = None,
        max_pages: int = 5,
    ) -> tuple[list[JobRecord], str | None]:
        """A team's finished jobs, the latest to end first (the `finished` index), that ended at
        `since` or later; optionally of one state (a filter: up to `max_pages` reads fill a page)."""
        start = decode_token(next_token)
        found: list[JobRecord] = []
        for _ in range(max_pages):
            expr = Expression()
            condition = f"{expr.name('finished_pk')} = {expr.value(FINISHED_PK_PREFIX + team)}"
            if since is not None:
                condition += f" AND {expr.name('finished_sk')} >= {expr.value(order_key(since, ''))}"
            request: dict[str, Any] = {
                "IndexName": "finished",
                "KeyConditionExpression": condition,
                "ScanIndexForward": False,
                "Limit": limit - len(found),
            }
            if state is not None:
                request["FilterExpression"] = f"{expr.name('state')} = {expr.value(state.value)}"
            expr.attach(request)
            if start is not None:
                request["ExclusiveStartKey"] = start
            items, start = self.table.query(request)
            for item in items:
                try:
                    found.append(item_to_record_lenient(item)[0])
                except UnreadableRecord as error:
                    logger.error("unreadable job record not listed", extra={"job_id": error.job_id})
            if start is None or len(found) >= limit:
                break
        return found, encode_token(start)

    def list_team(
        self,
        team: str,
        *,
        state: JobState | None = None,
        limit: int = 50,
        next_token: str | None = None,
        max_pages: int = 5,
    ) -> tuple[list[JobRecord], str | None]:
        """A team's jobs, newest first, optionally of one state: one page and the next token.

        With a state filter DynamoDB applies Limit before the filter, so a page may come back
        short; up to `max_pages` reads are made to fill it, which bounds the work per request.
        """
        start = decode_token(next_token)
        found: list[JobRecord] = []
        for _ in range(max_pages):
            expr = Expression()
            request: dict[str, Any] = {
                "IndexName": "team",
                "KeyConditionExpression": f"{expr.name('team')} = {expr.value(team)}",
                "ScanIndexForward": False,
                "Limit": limit - len(found),
            }
            if state is not None:
                request["FilterExpression"] = f"{expr.name('state')} = {expr.value(state.value)}"
            expr.attach(request)
            if start is not None:
                request["ExclusiveStartKey"] = start
            items, start = self.table.query(request)
            for item in items:
                try:
                    found.append(item_to_record_lenient(item)[0])
                except UnreadableRecord as error:  # no id, team or state: nothing to show
                    logger.error("unreadable job record not listed", extra={"job_id": error.job_id})
            if start is None or len(found) >= limit:
                break
        return found, encode_token(start)
