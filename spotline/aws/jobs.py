"""The Jobs table's repository (the `JobStore` port): every state change as a conditional write.

A transition is one TransactWriteItems: the job's Update (condition: the state and version the
caller read), the Timeline Put of each step, and, when the job starts or stops holding GPUs,
the Ledger updates. Either all of it happens or none, so the queue index, the timeline and
the capacity ledger never disagree with the job's state.

How a record maps onto an item, with the sparse index attributes its state calls for, is
`spotline.aws.job_items`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spotline import resources
from spotline.aws import costs
from spotline.aws.array_items import ArrayRepository
from spotline.aws.dynamo import (
    DynamoTable,
    Expression,
    Item,
    TransactItem,
    serialize_item,
)
from spotline.aws.job_items import (
    ACTIVE_PK,
    ARRAY_KIND,
    DEADLINE_PK,
    HELD_QUEUE_PK,
    QUEUE_PK_PREFIX,
    item_to_record,
    item_to_record_lenient,
    new_item_put,
    record_to_item,
)
from spotline.aws.ledger import LedgerRepository
from spotline.aws.timeline import TimelineRepository, decode_token, encode_token
from spotline.control.errors import (
    ConditionFailed,
    InvalidTransition,
    JobNotFound,
    StaleJobError,
    UnreadableRecord,
)
from spotline.control.ports import CommitListener, PreparedTransition, Quarantined
from spotline.control.records import (
    ACTIVE_STATES,
    NO_STATE,
    JobRecord,
    TimelineEntry,
    charge_run,
)
from spotline.domain import Job, JobSpec, JobState, Priority, can_transition

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

# String sets written as ADD / DELETE deltas by transitions (others add to them concurrently).
_DELTA_SETS = ("terminating_batch_job_ids",)


class JobRepository:
    """Jobs, their transitions (with Timeline and Ledger items in the same transaction), and the
    index reads of the scheduling pass."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        timeline: TimelineRepository,
        ledger: LedgerRepository,
        listeners: Iterable[CommitListener] = (),
    ) -> None:
        self.table = DynamoTable(client, table_name)
        self.timeline = timeline
        self.ledger = ledger
        self.listeners = list(listeners)
        self.arrays = ArrayRepository(self)

    # --- writes --------------------------------------------------------------------------

    def create(self, job: Job, *, now: float, reason: str, request_digest: str | None = None) -> JobRecord:
        """Store a new PENDING job (fails with JobAlreadyExists if the id is taken, ItemTooLarge
        if it would not fit in an item). `request_digest` identifies the request that created it
        (an idempotent retry must carry the same one)."""
        return self.create_many([job], now=now, reasons=[reason], request_digest=request_digest)[0]

    def create_many(
        self, jobs: Sequence[Job], *, now: float, reasons: Sequence[str], request_digest: str | None = None
    ) -> list[JobRecord]:
        """Store new PENDING jobs in one transaction: all of them or none (JobAlreadyExists if
        any id is taken). At most 50 (two items each). An array's elements are written by
        `self.arrays` (spotline.aws.array_items), in chunks."""
        puts: list[TransactItem] = []
        roles: list[tuple[str, str]] = []
        created: list[tuple[JobRecord, TimelineEntry]] = []
        for job, reason in zip(jobs, reasons, strict=True):
            if job.state is not JobState.PENDING:
                raise InvalidTransition(f"a new job starts PENDING, not {job.state}")
            record = JobRecord(job=job, updated_at=now, state_reason=reason, request_digest=request_digest)
            entry = TimelineEntry(job.id, job.version, now, NO_STATE, JobState.PENDING.value, reason)
            puts += [new_item_put(self.table.name, record_to_item(record)), self.timeline.append_item(entry)]
            roles += [("new-job", job.id), ("timeline", job.id)]
            created.append((record, entry))
        self.table.transact(puts, roles)
        for record, entry in created:
            self.notify(record, [entry])
        return [record for record, _ in created]

    def transition(
        self,
        record: JobRecord,
        target: JobState,
        reason: str,
        *,
        now: float,
        via: JobState | None = None,
        via_reason: str | None = None,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Move `record` to `target` (through `via` first, e.g. CHECKPOINTING -> PREEMPTED ->
        PENDING) in one conditional transaction, and return the stored record.

        `job` and `changes` are field changes of the domain Job and of the record. When the job
        stops holding GPUs, the ledger release is added automatically. (An admission, whose
        transaction also reserves on the ledger, is `prepare_transition` and `commit_together`.)
        """
        prepared = self.prepare_transition(
            record, target, reason, now=now, via=via, via_reason=via_reason, job=job, changes=changes
        )
        self.commit_together([prepared])
        return prepared.new

    def commit_together(
        self,
        prepared: Sequence[PreparedTransition],
        extra: Sequence[TransactItem] = (),
        extra_roles: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Commit transitions of several jobs, and `extra` items (an admission's ledger
        reservations), in one transaction: all of them or none (at most 100 items together)."""
        items: list[TransactItem] = [item for p in prepared for item in p.items]
        roles: list[tuple[str, str]] = [role for p in prepared for role in p.roles]
        self.table.transact([*items, *extra], [*roles, *extra_roles])
        for p in prepared:
            self.notify(p.new, p.entries)

    def prepare_transition(
        self,
        record: JobRecord,
        target: JobState,
        reason: str,
        *,
        now: float,
        via: JobState | None = None,
        via_reason: str | None = None,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
    ) -> PreparedTransition:
        """The transaction items of `transition`, not yet written (`commit_together`)."""
        steps = [(via, via_reason or reason), (target, reason)] if via is not None else [(target, reason)]
        source = record.state
        for step_target, _ in steps:
            if not can_transition(source, step_target):
                raise InvalidTransition(f"job {record.id}: {source} -> {step_target} is not allowed")
            source = step_target

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
        for offset, (step_target, step_reason) in enumerate(steps, start=1):
            entries.append(
                TimelineEntry(
                    record.id,
                    record.version + offset,
                    now,
                    source_state.value,
                    step_target.value,
                    step_reason,
                )
            )
            source_state = step_target

        extra: list[TransactItem] = []
        roles: list[tuple[str, str]] = []
        if releasing and record.job.pool is not None:
            items, item_roles = self.ledger.release_items(
                pool=record.job.pool,
                team=record.team,
                gpus=record.gpus_held,
                held_since=record.admitted_at,
                now=now,
            )
            extra += items
            roles += item_roles
            lost_s = max(0.0, new.job.lost_work_s - record.job.lost_work_s)
            extra += costs.run_items(
                self.ledger.table.name,
                team=record.team,
                pool=record.job.pool,
                gpus=record.gpus_held,
                held_since=record.admitted_at if record.admitted_at is not None else now,
                now=now,
                lost_gpu_s=lost_s * record.gpus_held,
            )
            roles += [("other", f"cost {record.team}")] * (len(extra) - len(roles))
        items, item_roles = self.transition_items(record, new, entries, extra, roles)
        return PreparedTransition(record, new, tuple(entries), items, item_roles)

    def update_spec(
        self,
        record: JobRecord,
        spec: JobSpec,
        reason: str,
        *,
        now: float,
        changes: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Change a job's spec (priority, deadline), and record fields in `changes` (a held job let
        into the queue), with a version bump and a timeline entry whose from and to are the same
        state."""
        new = record.with_changes(
            job={"spec": spec, "version": record.version + 1}, updated_at=now, **dict(changes or {})
        )
        entry = TimelineEntry(record.id, new.version, now, record.state.value, record.state.value, reason)
        items, roles = self.transition_items(record, new, [entry], [], [])
        self.commit_together([PreparedTransition(record, new, (entry,), items, roles)])
        return new

    def transition_items(
        self,
        old: JobRecord,
        new: JobRecord,
        entries: Sequence[TimelineEntry],
        extra: Sequence[TransactItem],
        extra_roles: Sequence[tuple[str, str]],
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        before, after = record_to_item(old), record_to_item(new)
        expr = Expression()
        sets = [
            f"{expr.name(k)} = {expr.value(v)}"
            for k, v in after.items()
            if k != "job_id" and k not in _DELTA_SETS and before.get(k) != v
        ]
        removes = [expr.name(k) for k in before if k not in after and k not in _DELTA_SETS]
        # Sets that other writers ADD to without a version bump are written as deltas, so a
        # transition never drops an element added after it read the record.
        adds, deletes = [], []
        for name in _DELTA_SETS:
            was, now = set(before.get(name) or ()), set(after.get(name) or ())
            if now - was:
                adds.append(f"{expr.name(name)} {expr.value(now - was)}")
            if was - now:
                deletes.append(f"{expr.name(name)} {expr.value(was - now)}")
        update_expression = " ".join(
            part
            for part in (
                "SET " + ", ".join(sets) if sets else "",
                "REMOVE " + ", ".join(removes) if removes else "",
                "ADD " + ", ".join(adds) if adds else "",
                "DELETE " + ", ".join(deletes) if deletes else "",
            )
            if part
        )
        condition = (
            f"{expr.name('state')} = {expr.value(old.state.value)}"
            f" AND {expr.name('version')} = {expr.value(old.version)}"
        )
        update = expr.attach(
            {
                "TableName": self.table.name,
                "Key": serialize_item({"job_id": old.id}),
                "UpdateExpression": update_expression,
                "ConditionExpression": condition,
            }
        )
        items: list[TransactItem] = [
            {"Update": update},
            *(self.timeline.append_item(e) for e in entries),
            *extra,
        ]
        roles = [("job", old.id), *(("timeline", old.id) for _ in entries), *extra_roles]
        changed = {
            name: after.get(name) for name in resources.SIGNAL_FIELDS if before.get(name) != after.get(name)
        }
        if changed:
            items.append(self._signal_update(new.team, new.id, changed))
            roles.append(("signal", new.id))
        return items, roles

    def _signal_update(self, team: str, job_id: str, values: Mapping[str, Any]) -> TransactItem:
        """The Update of a job's signal item (resources.SIGNAL_FIELDS under `signal#<team>#<job>`,
        the only item of the table a team's job role may read): `values` set, None removed. It
        rides in the transaction of the job's own write, so the two never disagree."""
        expr = Expression()
        sets = [f"{expr.name(k)} = {expr.value(v)}" for k, v in values.items() if v is not None]
        removes = [expr.name(k) for k, v in values.items() if v is None]
        sets.append(f"{expr.name('job')} = {expr.value(job_id)}")
        update_expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": expr.attach(
                {
                    "TableName": self.table.name,
                    "Key": serialize_item({"job_id": resources.signal_key(team, job_id)}),
                    "UpdateExpression": update_expression,
                }
            )
        }

    def read_signals(self, team: str, job_id: str) -> Item | None:
        """A job's signal item (what its agent reads), or None."""
        return self.table.get({"job_id": resources.signal_key(team, job_id)}, consistent=True)

    def notify(self, record: JobRecord, entries: Sequence[TimelineEntry]) -> None:
        for listener in self.listeners:
            listener(record, entries)

    def update_fields(
        self,
        job_id: str,
        *,
        states: Iterable[JobState],
        set_fields: Mapping[str, Any] | None = None,
        remove_fields: Iterable[str] = (),
        version: int | None = None,
        conditions: Sequence[tuple[str, str, Any]] = (),
        add_to_set: Mapping[str, Iterable[str]] | None = None,
        team: str | None = None,
        delete_from_set: Mapping[str, Iterable[str]] | None = None,
        any_of: Sequence[Sequence[tuple[str, str, Any]]] = (),
    ) -> JobRecord:
        """A write that is not a transition (progress, checkpoint, wait reason, task token):
        conditional on the job being in one of `states` (and at `version`, if given), plus
        `conditions` given as (attribute, operator, value); an operator ending in "?" also
        accepts a missing attribute, e.g. ("step", "<=?", 12); "contains" tests a set member,
        "attribute_not_exists" ignores its value. Each group in `any_of` holds if one of its
        conditions does. No version bump, no timeline.
        A change of a signal field (resources.SIGNAL_FIELDS) also updates the job's signal item,
        in the same transaction (`team`: the job's, read when not given).
        """
        expr = Expression()
        parts = []
        for name, value in (set_fields or {}).items():
            parts.append(f"{expr.name(name)} = {expr.value(value)}")
        update_expression = "SET " + ", ".join(parts) if parts else ""
        adds = [f"{expr.name(n)} {expr.value(set(v))}" for n, v in (add_to_set or {}).items() if v]
        if adds:
            update_expression += (" " if update_expression else "") + "ADD " + ", ".join(adds)
        deletes = [f"{expr.name(n)} {expr.value(set(v))}" for n, v in (delete_from_set or {}).items() if v]
        if deletes:
            update_expression += (" " if update_expression else "") + "DELETE " + ", ".join(deletes)
        removes = [expr.name(n) for n in remove_fields]
        if removes:
            update_expression += (" " if update_expression else "") + "REMOVE " + ", ".join(removes)
        state_values = ", ".join(expr.value(s.value) for s in states)
        condition = [f"{expr.name('state')} IN ({state_values})"]
        if version is not None:
            condition.append(f"{expr.name('version')} = {expr.value(version)}")
        condition += [_clause(expr, *c) for c in conditions]
        condition += ["(" + " OR ".join(_clause(expr, *c) for c in group) + ")" for group in any_of if group]
        request = expr.attach(
            {
                "Key": serialize_item({"job_id": job_id}),
                "UpdateExpression": update_expression,
                "ConditionExpression": " AND ".join(condition),
            }
        )
        signals = {
            **{n: v for n, v in (set_fields or {}).items() if n in resources.SIGNAL_FIELDS},
            **{n: None for n in remove_fields if n in resources.SIGNAL_FIELDS},
        }
        if not signals:
            return item_to_record_lenient(self.table.update(request, job_id=job_id))[0]
        # The signal item changes with the job's item, in one transaction. (A job's team never
        # changes, so reading it first is safe.)
        if team is None:
            team = self.get(job_id).team
        self.table.transact(
            [
                {"Update": {"TableName": self.table.name, **request}},
                self._signal_update(team, job_id, signals),
            ],
            [("job", job_id), ("signal", job_id)],
        )
        return self.get(job_id)

    def mark_terminating(self, job_id: str, batch_job_ids: Iterable[str]) -> JobRecord | None:
        """Remember that these Batch jobs must be stopped (whatever the job's state), and keep
        the job in the `active` index until they are. None if there is no such job."""
        ids = sorted(set(batch_job_ids))
        if not ids:
            return self.find(job_id)
        try:
            return self.update_fields(
                job_id,
                states=list(JobState),
                set_fields={"active_pk": ACTIVE_PK},
                add_to_set={"terminating_batch_job_ids": ids},
            )
        except StaleJobError:
            return None

    def confirm_stopped(self, job_id: str, batch_job_id: str) -> JobRecord | None:
        """Batch confirmed that `batch_job_id` ended: forget its pending termination (once:
        None when it was not pending)."""
        try:
            record = self.update_fields(
                job_id,
                states=list(JobState),
                delete_from_set={"terminating_batch_job_ids": [batch_job_id]},
                conditions=[("terminating_batch_job_ids", "contains", batch_job_id)],
            )
        except StaleJobError:
            return None
        if not record.terminating_batch_job_ids and record.state not in ACTIVE_STATES:
            # Out of the `active` index, unless a transition or a new termination came between.
            with contextlib.suppress(StaleJobError):
                self.update_fields(
                    job_id,
                    states=[s for s in JobState if s not in ACTIVE_STATES],
                    remove_fields=["active_pk"],
                    conditions=[("terminating_batch_job_ids", "attribute_not_exists", None)],
                )
        return record

    # --- reads ---------------------------------------------------------------------------

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
        records: list[JobRecord] = []
        start: dict[str, Any] | None = None
        while True:
            expr = Expression()
            request = expr.attach(
                {
                    "IndexName": "active",
                    "KeyConditionExpression": f"{expr.name('active_pk')} = {expr.value(ACTIVE_PK)}",
                }
            )
            if start is not None:
                request["ExclusiveStartKey"] = start
            items, start = self.table.query(request)
            records += self._readable(items, skipped)
            if start is None:
                return records

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

    def bulk_load(self, records: Sequence[JobRecord]) -> None:
        """Write many records without transitions (benchmarks and tests), with their signal
        items."""
        items = [record_to_item(r) for r in records]
        signals = [
            {
                "job_id": resources.signal_key(r.team, r.id),
                "job": r.id,
                **{n: item[n] for n in resources.SIGNAL_FIELDS if n in item},
            }
            for r, item in zip(records, items, strict=True)
            if any(n in item for n in resources.SIGNAL_FIELDS)
        ]
        self.table.batch_put(items + signals)


def _clause(expr: Expression, name: str, operator: str, value: Any) -> str:
    """One condition of `update_fields`."""
    optional = operator.endswith("?")
    op = operator.rstrip("?")
    if op == "attribute_not_exists":
        clause = f"attribute_not_exists({expr.name(name)})"
    elif op == "contains":
        clause = f"contains({expr.name(name)}, {expr.value(value)})"
    else:
        clause = f"{expr.name(name)} {op} {expr.value(value)}"
    if optional:
        clause = f"(attribute_not_exists({expr.name(name)}) OR {clause})"
    return clause
