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
    active_pk_for,
    item_to_record_lenient,
    new_job_write,
    record_to_item,
)
from spotline.aws.job_reads import JobReads
from spotline.aws.ledger import LedgerRepository
from spotline.aws.timeline import TimelineRepository
from spotline.control.errors import (
    StaleJobError,
)
from spotline.control.items import item_changes, signal_changes, transitioned
from spotline.control.ports import CommitListener, PreparedTransition
from spotline.control.records import (
    ACTIVE_STATES,
    EntryKind,
    JobRecord,
    TimelineEntry,
    entry_time,
)
from spotline.domain import Job, JobSpec, JobState

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)


class JobRepository(JobReads):
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
            write = new_job_write(
                self.table.name, self.timeline, job, reason, now=now, request_digest=request_digest
            )
            puts += write.items
            roles += write.roles
            created.append((write.record, write.entry))
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
        now = entry_time(record, now)  # the stamp its timeline entries get, for the ledger too
        new, entries, releasing = transitioned(
            record, target, reason, now=now, via=via, via_reason=via_reason, job=job, changes=changes
        )
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
        return PreparedTransition(record, new, entries, items, item_roles)

    def update_spec(
        self,
        record: JobRecord,
        spec: JobSpec,
        reason: str,
        *,
        now: float,
        changes: Mapping[str, Any] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Change a job's spec (priority, deadline), with job fields in `job` (its deadline's
        answer) and record fields in `changes` (a held job let into the queue), with a version
        bump and a timeline entry whose from and to are the same state."""
        at = entry_time(record, now)
        new = record.with_changes(
            job={"spec": spec, "version": record.version + 1, **dict(job or {})},
            updated_at=at,
            **dict(changes or {}),
        )
        entry = TimelineEntry(
            record.id, new.version, at, record.state.value, record.state.value, reason, EntryKind.CHANGE.value
        )
        items, roles = self.transition_items(record, new, [entry], [], [])
        self.commit_together([PreparedTransition(record, new, (entry,), items, roles)])
        return new

    def annotate(
        self,
        record: JobRecord,
        reason: str,
        *,
        now: float,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
        lost_gpu_s_returned: float = 0.0,
    ) -> JobRecord:
        """What is known about the job changes, not its state (the checkpoint a run restored, a
        late checkpoint giving back lost work): a version bump and a timeline entry whose from
        and to are the job's state, in one write conditional on the state and version read.
        `lost_gpu_s_returned` is taken back from the month `record.lost_work` was charged to."""
        at = entry_time(record, now)
        new = record.with_changes(
            job={**(job or {}), "version": record.version + 1}, updated_at=at, **dict(changes or {})
        )
        entry = TimelineEntry(
            record.id,
            new.version,
            at,
            record.state.value,
            record.state.value,
            reason,
            EntryKind.CHECKPOINT.value,
        )
        extra: list[TransactItem] = []
        loss = record.lost_work
        if lost_gpu_s_returned > 0 and loss is not None and loss.pool is not None:
            extra = costs.lost_credit_items(
                self.ledger.table.name,
                team=record.team,
                pool=loss.pool,
                at=loss.until,
                gpu_s=lost_gpu_s_returned,
            )
        roles = [("other", f"cost {record.team}")] * len(extra)
        items, item_roles = self.transition_items(record, new, [entry], extra, roles)
        self.commit_together([PreparedTransition(record, new, (entry,), items, item_roles)])
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
        diff = item_changes(before, after)
        expr = Expression()
        sets = [f"{expr.name(k)} = {expr.value(v)}" for k, v in diff.sets.items()]
        removes = [expr.name(k) for k in diff.removes]
        adds = [f"{expr.name(k)} {expr.value(v)}" for k, v in diff.adds.items()]
        deletes = [f"{expr.name(k)} {expr.value(v)}" for k, v in diff.deletes.items()]
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
        changed = signal_changes(before, after)
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
                set_fields={"active_pk": active_pk_for(job_id)},
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
