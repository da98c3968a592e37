"""What the control plane stores about a job, and the names it gives to runs and counters.

`JobRecord` is the domain `Job` plus what the control plane tracks about its run; the ports
(`spotline.control.ports`) read and write it, and `spotline.aws.job_items` maps it onto DynamoDB items.
A run's id is also its Batch job name (docs RUN_IDENTITY).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spotline.domain import Job, JobState
from spotline.domain.models import DrainTarget, MovingTo

# --- what a leaving job leaves for ---------------------------------------------------------

# A move's `draining_for`, before the pool it moves to: how records have always stored one.
MOVE_PREFIX = "a move to "


def drain_target(stored: str | None) -> DrainTarget | None:
    """A record's `draining_for` as the domain reads it (a move as a `MovingTo`)."""
    if stored is not None and stored.startswith(MOVE_PREFIX):
        return MovingTo(pool=stored[len(MOVE_PREFIX) :])
    return stored


def stored_drain_target(target: DrainTarget) -> str:
    """What a record stores in `draining_for` for `target` (`drain_target` reads it back)."""
    return MOVE_PREFIX + target.pool if isinstance(target, MovingTo) else target


# --- runs ---------------------------------------------------------------------------------

JOB_NAME_PREFIX = "spotline-"


_RUN_SUFFIX = re.compile(r"^(?P<job>.+)-r(?P<run>[1-9][0-9]{0,9})$")


def run_id_for(job_id: str, run: int) -> str:
    """The run id of a job's `run`-th admission: also the Batch job name of that run (the
    BatchJobStateChange rule matches its `spotline-` prefix)."""
    if run < 1:
        raise ValueError(f"run must be at least 1, not {run}")
    return f"{JOB_NAME_PREFIX}{job_id}-r{run}"


def batch_job_name(job_id: str, run: int) -> str:
    """The Batch job name of a job's `run`-th admission (its run id)."""
    return run_id_for(job_id, run)


def parse_run_id(name: str) -> tuple[str, int] | None:
    """(job id, run) of a run id / Batch job name, or None if it is not a Spotline run's."""
    if not name.startswith(JOB_NAME_PREFIX):
        return None
    matched = _RUN_SUFFIX.match(name[len(JOB_NAME_PREFIX) :])
    if matched is None:
        return None
    return matched.group("job"), int(matched.group("run"))


def split_node_id(batch_job_id: str) -> tuple[str, int | None]:
    """(parent job id, node index) of a multi-node job's node id `<parent>#<n>`; (the id, None)
    for any other Batch job id. A gang's nodes have events and DescribeJobs entries of their
    own; Spotline records and stops only the parent."""
    parent, separator, index = batch_job_id.rpartition("#")
    if separator and parent and index.isdigit():
        return parent, int(index)
    return batch_job_id, None


# --- job records --------------------------------------------------------------------------

# States in which a job holds GPUs in a pool (and is in the `active` index).
ACTIVE_STATES = frozenset({JobState.ADMITTED, JobState.RUNNING, JobState.CHECKPOINTING})


class Disruption(StrEnum):
    """Why a job is checkpointing, which decides where it ends: PREEMPTED or INTERRUPTED."""

    PREEMPT = "preempt"
    INTERRUPT = "interrupt"

    @property
    def outcome(self) -> JobState:
        return JobState.PREEMPTED if self is Disruption.PREEMPT else JobState.INTERRUPTED


class LostWork(BaseModel):
    """The work the last ended run was charged as lost: from `since` (its last durable checkpoint,
    or its start) to `until` (when it was stopped), on `gpus` GPUs of `pool`. A checkpoint of
    that run that becomes durable after it was stopped (its upload finished just after the
    plane gave up) gives back the part before its capture (`spotline.control.events`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run: int
    since: float
    until: float
    gpus: int = 0
    pool: str | None = None


class JobRecord(BaseModel):
    """A job as stored: the domain `Job` plus what the control plane tracks about its run."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    job: Job
    updated_at: float
    # The reason of the last transition (the timeline has all of them).
    state_reason: str = ""
    # GPUs charged to the pool and team ledger while ACTIVE (a gang takes whole nodes).
    gpus_held: int = 0
    # Admissions so far (RUN_IDENTITY): 0 before the first; the admission's write increments it.
    # The current run's id is `run_id_for(job id, run)`, also its Batch job name.
    run: int = 0
    batch_job_id: str | None = None
    # Batch jobs of earlier runs: their late events are ignored.
    retired_batch_job_ids: tuple[str, ...] = ()
    # Batch jobs this record stopped owning (requeued, cancelled, orphans) that Batch has not yet
    # confirmed stopped: the reconciler retries TerminateJob until it does (the job stays in
    # the `active` index meanwhile, so the retry needs no scan).
    terminating_batch_job_ids: tuple[str, ...] = ()
    instance_ids: tuple[str, ...] = ()
    admitted_at: float | None = None
    # Why the job waits (set by the scheduling pass, only when it changes), and the time of the
    # pass that decided it in these words: every screen shows the two together.
    wait_reason: str | None = None
    wait_reason_at: float | None = None
    # The agent polls this: a checkpoint is wanted when it is later than its last checkpoint.
    checkpoint_requested_at: float | None = None
    checkpoint_deadline_at: float | None = None
    # Step Functions task token of the preempt workflow waiting for the next checkpoint.
    checkpoint_task_token: str | None = None
    # What the job leaves for while it checkpoints, as stored: the preemptor it makes room for
    # (or "interruption:<instance>"), or a move (`drain_target` reads it, `stored_drain_target`
    # writes it).
    draining_for: str | None = None
    # An elastic job's resize under way: the size it is requeued at once it has checkpointed.
    resize_to: int | None = None
    disruption: Disruption | None = None
    # Launches that failed since the job was last admitted successfully (gives up after a few).
    launch_failures: int = 0
    # Progress of the current run (reset by each admission): heartbeats only move it forward.
    last_heartbeat_at: float | None = None
    step: int | None = None
    # The step at which the job's `progress` was reported (heartbeat or checkpoint): what a
    # screen shows is `spotline.control.progress.job_progress`, which reads both.
    progress_step: int | None = None
    # A gang's nodes, each heard from by its own heartbeats ({node index: when}).
    # Entries of earlier runs stay: a node counts as heard only after the current
    # run started (`silent_gang_node`). Stored as one attribute per node (`node_heartbeat_field`),
    # so a heartbeat writes its node's entry without reading the others.
    node_heartbeats: dict[int, float] = Field(default_factory=dict)
    # The run that wrote the last recorded checkpoint (its step is compared only within a run).
    last_checkpoint_run: int | None = None
    # The checkpoint a run actually restored, as its agent reported it (heartbeat): which run,
    # the step and the checkpoint's URI. A fresh start reports none.
    restored_run: int | None = None
    restored_step: int | None = None
    restored_checkpoint_uri: str | None = None
    # What the last ended run was charged as lost (a late checkpoint may give some back).
    lost_work: LostWork | None = None
    finished_at: float | None = None
    # A digest of the submission that created the job (Idempotency-Key reuse is checked on it).
    request_digest: str | None = None
    # When a job with dependencies (`spec.after`) was let into the queue (None: still held).
    deps_met_at: float | None = None
    # What its ended runs held, GPU-seconds per pool, and the GPU-seconds of work they lost
    # (`charge_run`, written with each release): a job's cost follows it across requeues.
    gpu_s_by_pool: dict[str, float] | None = None
    lost_gpu_s: float = 0.0
    # The array whose element this is, while that array is still being written (CREATING): the
    # element is in no partition the pass reads until the array is complete and it is released.
    staged_for_array: str | None = None

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def state(self) -> JobState:
        return self.job.state

    @property
    def version(self) -> int:
        return self.job.version

    @property
    def team(self) -> str:
        return self.job.team

    @property
    def held_for_dependencies(self) -> bool:
        """PENDING with dependencies not yet met: kept out of the queue the pass reads."""
        return (
            self.job.state is JobState.PENDING
            and bool(self.job.spec.after)
            and self.deps_met_at is None
            and self.staged_for_array is None
        )

    @property
    def run_id(self) -> str | None:
        """The current run's id (None before the first admission)."""
        return run_id_for(self.id, self.run) if self.run > 0 else None

    def with_changes(self, job: Mapping[str, Any] | None = None, **changes: Any) -> JobRecord:
        """A copy with record fields in `changes` and job fields in `job` changed."""
        if job:
            changes["job"] = self.job.with_changes(**job)
        return self.model_copy(update=changes)


def charge_run(record: JobRecord, now: float, lost_s: float) -> dict[str, Any]:
    """The record changes that add the run ending now (it held `gpus_held` in its pool since
    its admission, and lost `lost_s` of work) to the job's own cost."""
    pool, since = record.job.pool, record.admitted_at
    if pool is None or since is None or record.gpus_held <= 0:
        return {}
    held = dict(record.gpu_s_by_pool or {})
    held[pool] = round(held.get(pool, 0.0) + record.gpus_held * max(0.0, now - since), 3)
    return {
        "gpu_s_by_pool": held,
        "lost_gpu_s": round(record.lost_gpu_s + max(0.0, lost_s) * record.gpus_held, 3),
    }


# An array's states: its record is written first CREATING, then its elements (staged, in
# chunks), then it is flipped READY and its elements are released into the queue.
ARRAY_CREATING = "CREATING"
ARRAY_READY = "READY"


class ArrayRecord(BaseModel):
    """An array as stored (beside its elements): what `GET /arrays/{id}`, `after: [array id]`
    and cancelling some elements need to find them."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    team: str
    name: str
    element_ids: tuple[str, ...]
    indexes: tuple[int, ...]
    max_running: int | None = None
    submitted_at: float
    # The spec as submitted (its array or sweep included), JSON.
    spec: str
    request_digest: str | None = None
    # CREATING until every element is written; READY after (arrays stored whole before there
    # were states have none: READY).
    state: str = ARRAY_READY


# The node of a multi-node job that Spotline's gang job definitions name as the main node: its
# heartbeats carry the gang's step and progress; every other node's only say it is alive.
GANG_MAIN_NODE = 0
NODE_HEARTBEAT_PREFIX = "node_heartbeat_"


def node_heartbeat_field(node_index: int) -> str:
    """The job item's attribute that holds when node `node_index` of its gang last heartbeat."""
    return f"{NODE_HEARTBEAT_PREFIX}{node_index}"


def silent_gang_node(record: JobRecord, now: float, timeout_s: float) -> tuple[int, float] | None:
    """The first node of a running gang not heard from for over `timeout_s` (its index, and the
    seconds since it was last heard, or since the run started for a node never heard), or None.
    A node is heard by its own heartbeats; a time before the run started (an earlier run's)
    does not count. A run none of whose heartbeats named a node (an agent older than per-node
    heartbeats, still running after a deploy) is judged by the job's heartbeat alone."""
    if record.job.nodes <= 1:
        return None
    started = record.job.started_at if record.job.started_at is not None else record.updated_at
    if not any(heard >= started for heard in record.node_heartbeats.values()):
        return None
    for node in range(record.job.nodes):
        heard = max(record.node_heartbeats.get(node, started), started)
        if now - heard > timeout_s:
            return node, now - heard
    return None


# --- timeline entries ---------------------------------------------------------------------

# "from" of the first entry: the job did not exist before its submission.
NO_STATE = "-"


def entry_time(record: JobRecord, now: float) -> float:
    """When a write to `record` is stamped: `now`, or the record's last stamp when that is later.
    A caller's `now` may be read before the record was last written (a pass reads the clock,
    then the queue; another host's clock may run ahead), and a job's timeline never runs back."""
    return max(now, record.updated_at)


class EntryKind(StrEnum):
    """What a timeline entry records, decided where the transition is written (from what the
    record knows: a Spot warning's checkpoint is `Disruption.INTERRUPT`), never from its words."""

    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    STARTED = "started"
    PREEMPTION = "preemption"
    MOVE = "move"
    SPOT_WARNING = "spot-warning"
    HOST_LOSS = "host-loss"
    REQUEUE = "requeue"
    CHECKPOINT = "checkpoint"  # what is known of its checkpoints changed (restored, landed late)
    CHANGE = "change"  # its spec changed (priority, deadline), or it was let into the queue
    FINISHED = "finished"


def transition_kind(
    record: JobRecord, source: JobState, target: JobState, disruption: Disruption | None, moving: bool
) -> EntryKind:
    """The kind of one step of a transition of `record` from `source` to `target`. `disruption`
    and `moving`: why a job goes CHECKPOINTING (as the transition sets it)."""
    if target is JobState.CHECKPOINTING:
        if disruption is Disruption.INTERRUPT:
            return EntryKind.SPOT_WARNING
        return EntryKind.MOVE if moving else EntryKind.PREEMPTION
    if target is JobState.INTERRUPTED:
        # Requeued after a Spot warning's checkpoint, or its host was lost with no warning.
        checkpointing = source is JobState.CHECKPOINTING and record.disruption is Disruption.INTERRUPT
        return EntryKind.SPOT_WARNING if checkpointing else EntryKind.HOST_LOSS
    if target is JobState.PREEMPTED:
        moving = record.draining_for is not None and record.draining_for.startswith(MOVE_PREFIX)
        return EntryKind.MOVE if moving else EntryKind.PREEMPTION
    if target is JobState.PENDING:
        return EntryKind.REQUEUE
    if target is JobState.ADMITTED:
        return EntryKind.ADMITTED
    if target is JobState.RUNNING:
        return EntryKind.STARTED
    return EntryKind.FINISHED


@dataclass(frozen=True)
class TimelineEntry:
    job_id: str
    seq: int
    at: float
    source: str  # the state before ("-" for the submission)
    target: str  # the state after (equal to source for a change of spec, e.g. priority)
    reason: str
    # What it records (`EntryKind`); "" for an entry stored before entries had kinds.
    kind: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "t": self.at,
            "from": self.source,
            "to": self.target,
            "reason": self.reason,
            "kind": self.kind or stored_kind(self).value,
        }


def stored_kind(entry: TimelineEntry) -> EntryKind:
    """The kind of an entry stored without one, from its states (and, for the one case they
    cannot tell, a checkpoint a preemption asked for, its words)."""
    target = entry.target
    if entry.source == NO_STATE:
        return EntryKind.SUBMITTED
    if entry.source == target:
        return EntryKind.CHECKPOINT if "checkpoint" in entry.reason else EntryKind.CHANGE
    if target == JobState.CHECKPOINTING.value:
        if entry.reason.startswith("Spot interruption warning"):
            return EntryKind.SPOT_WARNING
        return EntryKind.MOVE if entry.reason.startswith("moving to ") else EntryKind.PREEMPTION
    if target == JobState.INTERRUPTED.value:
        warned = entry.source == JobState.CHECKPOINTING.value and "no heartbeat" not in entry.reason
        return EntryKind.SPOT_WARNING if warned else EntryKind.HOST_LOSS
    if target == JobState.PREEMPTED.value:
        return EntryKind.MOVE if entry.reason.startswith("moving to ") else EntryKind.PREEMPTION
    if target == JobState.PENDING.value:
        return EntryKind.REQUEUE
    if target == JobState.ADMITTED.value:
        return EntryKind.ADMITTED
    if target == JobState.RUNNING.value:
        return EntryKind.STARTED
    return EntryKind.FINISHED


# --- ledger counters ----------------------------------------------------------------------


def pool_key(pool: str) -> str:
    return f"POOL#{pool}"


def team_key(team: str) -> str:
    return f"TEAM#{team}"


@dataclass(frozen=True)
class Counter:
    """A ledger counter as read: GPUs in use, how many writes have changed it, and the drift
    the reconciler marked on it ((ledger, expected, moves) or None)."""

    used: int
    moves: int = 0
    drift_mark: tuple[int, int, int] | None = None
