"""The ports: what the control plane needs from the world, as Protocols and the values they pass.

The services (`spotline.control.*`) see only these; `spotline.aws` implements them on DynamoDB,
EventBridge, Step Functions, SQS, Batch and CloudWatch Logs (`spotline.aws.plane` wires them into a
`ControlPlane`), the local runtime replaces some (its launcher runs local processes), and
`spotline.control.memory` implements every one in memory, with DynamoDB's semantics, for tests. Errors
are `spotline.control.errors`' (a write that lost a race is `StaleJobError`, a full pool
`CapacityExhausted`, ...).

A store's writes can be committed together (`JobStore.commit_together`): the ledger's reservation
items and the job's transition are one transaction. Those items are opaque here (`StoreWrite`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from spotline.control.months import MonthUsage
from spotline.control.records import (
    ArrayRecord,
    Counter,
    JobRecord,
    TimelineEntry,
    batch_job_name,
    run_id_for,
)
from spotline.domain import Job, JobSpec, JobState, Priority, TeamQuota
from spotline.domain.models import SpotPoolSignal

# One write of a store transaction, as the store builds it (opaque to the services).
StoreWrite = dict[str, Any]
# Each write's role, (kind, name), so a refused transaction names its culprit ("job", id), ("pool", name)...
WriteRoles = list[tuple[str, str]]

# --- launching runs ---------------------------------------------------------------------------

# Batch's statuses after which a job holds nothing any more.
TERMINAL_BATCH_STATUSES = frozenset({"SUCCEEDED", "FAILED"})


@dataclass(frozen=True)
class BatchJobRequest:
    """One run of a job: where, what, and the agent's environment."""

    job_id: str
    # The admission this request launches (JobRecord.run, at least 1).
    run: int
    team: str
    job_queue: str
    image: str
    command: tuple[str, ...]
    gpus_per_node: int
    nodes: int
    environment: Mapping[str, str]
    # Batch stops the attempt after this long (the job's max_runtime_s), if set.
    timeout_s: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    # The container's size on its node (spotline.control.sizing); None keeps the job definition's.
    vcpus: int | None = None
    memory_mib: int | None = None
    shared_memory_mib: int | None = None
    # The pool's instances have an EFA: the team's EFA job definition maps its device.
    efa: bool = False

    @property
    def job_name(self) -> str:
        return batch_job_name(self.job_id, self.run)

    @property
    def run_id(self) -> str:
        return run_id_for(self.job_id, self.run)


class BatchLauncher(Protocol):
    def submit(self, request: BatchJobRequest) -> str:
        """Submit one run; returns the Batch job id. Raises BatchThrottled (retry later) or
        LaunchFailed (a retry will not help)."""
        ...

    def find_live(self, job_queue: str, job_name: str) -> list[str]:
        """The Batch job ids named `job_name` in `job_queue` that have not ended (oldest first).
        Raises BatchThrottled."""
        ...

    def terminate(self, batch_job_id: str, reason: str) -> None:
        """Stop a run (no error if it already ended). Raises BatchThrottled."""
        ...

    def stopped(self, batch_job_ids: Sequence[str]) -> set[str]:
        """Those of `batch_job_ids` that have ended (or that Batch no longer knows).
        Raises BatchThrottled."""
        ...


class InstanceResolver(Protocol):
    def resolve(self, container_instances: Sequence[str]) -> list[str]:
        """EC2 instance ids behind Batch's container instance ARNs (ids pass through)."""
        ...


class ImageResolver(Protocol):
    def pin(self, image: str) -> str:
        """`image` by digest (`<repository>@sha256:<hex>`) where its registry says which image
        its tag names now; an image already given by digest, or one this resolver cannot look
        up (another registry), unchanged. Raises `ImageNotFound` for a tag the registry does not
        have, `ImageLookupUnavailable` when the registry could not answer (retry later)."""
        ...


# --- workflows and the scheduler's trigger -----------------------------------------------------

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def execution_name(kind: str, job_id: str, version: int) -> str:
    """A Step Functions execution name (at most 80 characters of [A-Za-z0-9_-])."""
    return _NAME_UNSAFE.sub("_", f"{kind}-{job_id}-v{version}")[:80]


class WorkflowStarter(Protocol):
    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> str:
        """Start (or find, if one of that name exists) an execution; return its ARN."""
        ...


class TaskTokens(Protocol):
    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        """Complete a waiting task; False if the token is no longer waiting (timed out,
        already answered)."""
        ...

    def fail(self, token: str, error: str, cause: str) -> bool: ...


class PassTrigger(Protocol):
    def request(self, reason: str, dedup_key: str) -> None:
        """Ask for a scheduling pass soon."""
        ...


# --- events and logs -------------------------------------------------------------------------


class EventSink(Protocol):
    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        """Put one event per detail (raises PublishFailed if any was refused)."""
        ...


@dataclass(frozen=True)
class LogLine:
    message: str
    # Epoch seconds (CloudWatch's ingestion of the line); None where the source has none (locally).
    timestamp: float | None = None


@dataclass(frozen=True)
class LogPage:
    lines: list[LogLine] = field(default_factory=list)
    # Continue forward from the end of this page (None: the run has no log yet).
    next_token: str | None = None


class RunLogs(Protocol):
    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        """One page of a run's log: from `next_token` (or the start), or with `tail` its last
        `limit` lines."""
        ...

    def numbers(self, batch_job_ids: Sequence[str]) -> dict[str, int]:
        """Each run's number (its admission: 1 the first) by its Batch job id, where the reader
        can tell (from the Batch job's name)."""
        ...


# (job id, why) of each unreadable item a read quarantined.
Quarantined = list[tuple[str, str]]

# Called after each committed write that changed state, with the new record and its timeline
# entries (the event publisher subscribes: Job State Changed on every transition).
CommitListener = Callable[[JobRecord, Sequence[TimelineEntry]], None]


@dataclass(frozen=True)
class PreparedTransition:
    """A job's transition as transaction items, not yet written: `old` as read, `new` as it
    will be stored, its timeline `entries`, and each item's role (`transaction_errors`)."""

    old: JobRecord
    new: JobRecord
    entries: tuple[TimelineEntry, ...]
    items: list[StoreWrite]
    roles: list[tuple[str, str]]


# --- stores -----------------------------------------------------------------------------------


class ArrayStore(Protocol):
    """An array's writes, each conditional (spotline.aws.array_items): the record CREATING,
    the elements staged in chunks, the flip to READY, the elements' release into the queue."""

    def find(self, array_id: str) -> ArrayRecord | None: ...

    def begin(self, array: ArrayRecord, jobs: Sequence[Job]) -> None:
        """Store the array CREATING (JobAlreadyExists if its id is taken; ItemTooLarge, before
        any write, if an element of `jobs` would not fit an item)."""
        ...

    def add_elements(
        self, array: ArrayRecord, jobs: Sequence[Job], reasons: Sequence[str], *, now: float
    ) -> list[JobRecord]:
        """Store, staged, the elements not stored yet; every element's record."""
        ...

    def finish(self, array: ArrayRecord, *, now: float) -> ArrayRecord:
        """Flip CREATING -> READY (READY already: unchanged)."""
        ...

    def release(self, records: Sequence[JobRecord], reason: str, *, now: float) -> list[JobRecord]:
        """Move staged elements into their queue; every record as it is after."""
        ...


class JobStore(Protocol):
    """Jobs and their transitions: every state change a conditional write, with its timeline
    entries (and ledger items, when GPUs are taken or given back) in the same transaction."""

    def create(
        self, job: Job, *, now: float, reason: str, request_digest: str | None = None
    ) -> JobRecord: ...

    def create_many(
        self,
        jobs: Sequence[Job],
        *,
        now: float,
        reasons: Sequence[str],
        request_digest: str | None = None,
    ) -> list[JobRecord]:
        """New PENDING jobs in one transaction: all or none."""
        ...

    @property
    def arrays(self) -> ArrayStore: ...

    def find_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]:
        """The jobs of `job_ids` that exist, by id (one batched read)."""
        ...

    def held_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The `limit` oldest jobs held for their dependencies."""
        ...

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
    ) -> JobRecord: ...

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
    ) -> PreparedTransition: ...

    def commit_together(
        self,
        prepared: Sequence[PreparedTransition],
        extra: Sequence[StoreWrite] = (),
        extra_roles: Sequence[tuple[str, str]] = (),
    ) -> None: ...

    def update_spec(
        self,
        record: JobRecord,
        spec: JobSpec,
        reason: str,
        *,
        now: float,
        changes: Mapping[str, Any] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> JobRecord: ...

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
        """A timeline entry without a change of state, with field changes and a version bump."""
        ...

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
    ) -> JobRecord: ...

    def mark_terminating(self, job_id: str, batch_job_ids: Iterable[str]) -> JobRecord | None: ...

    def confirm_stopped(self, job_id: str, batch_job_id: str) -> JobRecord | None: ...

    def find(self, job_id: str) -> JobRecord | None: ...

    def get(self, job_id: str) -> JobRecord: ...

    def queue_head(
        self, priority: Priority, limit: int, *, skipped: Quarantined | None = None
    ) -> list[JobRecord]:
        """The first `limit` pending jobs of `priority` in queue order (one indexed read)."""
        ...

    def deadline_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The first `limit` pending jobs with a deadline, earliest first."""
        ...

    def active(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The jobs holding GPUs."""
        ...

    def terminating(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        """The jobs with Batch jobs not yet confirmed stopped."""
        ...

    def list_team(
        self,
        team: str,
        *,
        state: JobState | None = None,
        limit: int = 50,
        next_token: str | None = None,
        max_pages: int = 5,
    ) -> tuple[list[JobRecord], str | None]: ...

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
        """A team's finished jobs, the latest to end first, that ended at `since` or later (the
        `finished` index: a Query, never a scan), optionally of one state."""
        ...


class TimelineStore(Protocol):
    def list(
        self, job_id: str, *, limit: int = 100, next_token: str | None = None
    ) -> tuple[Sequence[TimelineEntry], str | None]: ...


class LedgerStore(Protocol):
    """GPUs in use per pool and per team, each admission reserved under `used + gpus <= capacity`,
    and the teams' decayed past usage for fair-share."""

    def reserve_items(
        self,
        *,
        pool: str,
        capacity_gpus: int,
        team: str,
        gpus: int,
        quotas: Mapping[str, TeamQuota] | None = None,
        team_usage_hint: int | None = None,
    ) -> tuple[list[StoreWrite], WriteRoles]: ...

    def reserve_together_items(
        self,
        *,
        pools: Mapping[str, tuple[int, int, int]],
        teams: Mapping[str, tuple[int, int | None, int]],
    ) -> tuple[list[StoreWrite], WriteRoles]: ...

    def usage_buckets(
        self, teams: Iterable[str], *, shown: dict[str, float] | None = None
    ) -> dict[str, dict[int, float]]: ...

    def counters(self, pools: Iterable[str], teams: Iterable[str]) -> dict[str, Counter]: ...

    def mark_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool: ...

    def repair_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool: ...

    def clear_drift_mark(self, key: str) -> None: ...

    def put_fairshare_usage(self, usage_gpu_hours: Mapping[str, float], now: float) -> None: ...

    def fairshare_usage(self) -> dict[str, float]: ...


class InstanceStore(Protocol):
    """Which jobs run on which EC2 instance (a Spot warning names the instance)."""

    def add_job(self, instance_ids: Iterable[str], job_id: str, now: float) -> None: ...

    def remove_job(self, instance_ids: Iterable[str], job_id: str) -> None: ...

    def jobs_on(self, instance_id: str) -> list[str]: ...


class PageTokenStore(Protocol):
    """Seals and opens the API's pagination tokens (raises `InvalidPageToken`)."""

    def seal(self, position: str | None, binding: Mapping[str, Any], *, now: float) -> str | None: ...

    def open(self, token: str | None, binding: Mapping[str, Any], *, now: float) -> str | None: ...


class CostStore(Protocol):
    """What each team's ended runs cost per month (runs going are costed from `active`)."""

    def months(
        self, teams: Iterable[str], month: str, active: Sequence[JobRecord], now: float
    ) -> dict[str, MonthUsage]: ...

    def mark_notified(self, team: str, month: str, level: str, previous: str | None) -> bool: ...


class SpotPoolStore(Protocol):
    """What the control plane has seen of each Spot pool's capacity (`spotline.domain.spot_watch`):
    one record per pool, each observation a conditional write."""

    def observe(self, pool: str, available: bool, at: float) -> bool:
        """Record that Spot capacity was there (a Spot launch started) or missing (a warning, a
        launch sitting RUNNABLE) at `at`; False when it changes nothing (a repeat, or older than
        the last change)."""
        ...

    def observe_risk(self, pool: str, at: float) -> bool:
        """Record a rebalance recommendation for one of the pool's instances at `at` (the pool
        at risk); False when it changes nothing (a repeat, or older than the latest one)."""
        ...

    def signals(self, pools: Sequence[str], now: float) -> dict[str, SpotPoolSignal]:
        """What a pass plans from, for the pools seen at least once (one BatchGetItem)."""
        ...


# --- nodes ------------------------------------------------------------------------------------

# What a node is doing, as `spotline pools` shows it.
NODE_STATES = ("running", "idle", "draining", "reclaimed", "joining")


@dataclass(frozen=True)
class NodeView:
    """One instance of a pool as its fleet reports it: `state` one of NODE_STATES (`running`:
    some GPUs in use; `draining`: warned, takes no new job; `reclaimed`: gone; `joining`: a
    replacement on its way, no instance id yet)."""

    pool: str
    state: str
    gpus: int
    used_gpus: int = 0
    instance_id: str | None = None
    # When it entered `state` (epoch seconds), and for a draining or joining node when that ends.
    since: float | None = None
    until: float | None = None


class NodeSource(Protocol):
    def nodes(self, now: float) -> list[NodeView]:
        """Every pool's nodes now, with those reclaimed recently and the replacements joining."""
        ...
