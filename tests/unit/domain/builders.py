"""Builders for the domain's models, in the style of Kueue's test utilities.

    job("j1").priority("high").gpus(8).team("a").submitted(0).running_since(100).build()
    job("v1").low().gpus(8).running_since(0).on("od")        # an Allocation

Every test reads time from `NOW` (fixed), never from a clock.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Self

from spotline.domain import (
    Allocation,
    Candidate,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    Ledger,
    Pool,
    Priority,
    Purchase,
    SchedulerConfig,
    SortedQueue,
    TeamQuota,
)
from spotline.domain.models import DrainTarget
from spotline.domain.planner import Admit, Decision, Move, PlanStats, Preempt, Resize, plan, plan_with_stats
from spotline.domain.preemption import DEFAULT_RUNTIME_S, lost_work_gpu_s
from spotline.domain.priority import effective_priority

# A fixed "now": 2024-01-01T00:00:00Z, far enough from 0 that every relative time is positive.
NOW = 1_704_067_200.0
HOUR = 3600.0
DAY = 24 * HOUR


def at(seconds: float) -> datetime:
    """An aware datetime for epoch seconds (deadlines are datetimes in a JobSpec)."""
    return datetime.fromtimestamp(seconds, tz=UTC)


class JobBuilder:
    """A fluent builder of `Job` (pending by default; `running_since` makes it RUNNING).

    Every step returns a new builder, so a shared base (`BASE = job("j").gpus(8)`) can be
    extended in several table rows without one row leaking into the next.
    """

    def __init__(self, job_id: str) -> None:
        self._id = job_id
        self._team = "a"
        self._spec: dict[str, Any] = {
            "name": job_id,
            "priority": Priority.NORMAL,
            "gpus": 1,
            "image": "spotline/train:latest",
            "command": ["python", "train.py"],
        }
        self._fields: dict[str, Any] = {}
        self._submitted = NOW
        self._enqueued: float | None = None

    def _with_spec(self, **values: Any) -> Self:
        clone = copy.copy(self)
        clone._spec = {**self._spec, **values}
        clone._fields = dict(self._fields)
        return clone

    def _with(self, **values: Any) -> Self:
        clone = copy.copy(self)
        clone._spec = dict(self._spec)
        clone._fields = {**self._fields, **values}
        return clone

    # --- the spec ------------------------------------------------------------------------
    def priority(self, priority: str | Priority) -> Self:
        return self._with_spec(priority=Priority(priority))

    def critical(self) -> Self:
        return self.priority(Priority.CRITICAL)

    def high(self) -> Self:
        return self.priority(Priority.HIGH)

    def normal(self) -> Self:
        return self.priority(Priority.NORMAL)

    def low(self) -> Self:
        return self.priority(Priority.LOW)

    def gpus(self, gpus: int) -> Self:
        return self._with_spec(gpus=gpus)

    def nodes(self, nodes: int) -> Self:
        return self._with_spec(nodes=nodes)

    def gpu_type(self, gpu_type: str) -> Self:
        return self._with_spec(gpu_type=gpu_type)

    def spot(self, spot: str) -> Self:
        return self._with_spec(spot=spot)

    def deadline(self, seconds: float) -> Self:
        """Deadline at epoch `seconds` (typically NOW + something)."""
        return self._with_spec(deadline=at(seconds))

    def expected_runtime(self, seconds: float) -> Self:
        return self._with_spec(expected_runtime_s=seconds)

    def checkpoint_interval(self, seconds: float) -> Self:
        return self._with_spec(checkpoint_interval_s=seconds)

    # --- what the control plane knows ------------------------------------------------------
    def team(self, team: str) -> Self:
        clone = self._with()
        clone._team = team
        return clone

    def submitted(self, seconds: float) -> Self:
        """Submitted (and, unless `enqueued` says otherwise, enqueued) at epoch `seconds`."""
        clone = self._with()
        clone._submitted = seconds
        return clone

    def enqueued(self, seconds: float) -> Self:
        clone = self._with()
        clone._enqueued = seconds
        return clone

    def running_since(self, seconds: float) -> Self:
        return self._with(state=JobState.RUNNING, started_at=seconds)

    def state(self, state: JobState) -> Self:
        return self._with(state=state)

    def runtime(self, seconds: float) -> Self:
        return self._with(runtime_s=seconds)

    def checkpointed(self, seconds: float) -> Self:
        return self._with(last_checkpoint_at=seconds)

    def progress(self, progress: float) -> Self:
        return self._with(progress=progress)

    def utilization(self, utilization: float) -> Self:
        return self._with(utilization=utilization)

    def preemptions(self, count: int) -> Self:
        return self._with(preemptions=count)

    def checkpoint_write(self, seconds: float) -> Self:
        """The checkpoint write its agent measured (s)."""
        return self._with(checkpoint_write_s=seconds)

    def interruptions(self, count: int) -> Self:
        return self._with(interruptions=count)

    def elastic(self, min_gpus: int, max_gpus: int, **more: Any) -> Self:
        """An elastic job (`elastic: {min_gpus, max_gpus, ...}`)."""
        return self._with_spec(elastic={"min_gpus": min_gpus, "max_gpus": max_gpus, **more})

    def resized(self, at: float, base_gpus: int | None = None) -> Self:
        """Its last resize started at `at`; `base_gpus`: the size it grew from."""
        return self._with(resized_at=at, base_gpus=base_gpus)

    # --- results ---------------------------------------------------------------------------
    def build(self) -> Job:
        return Job(
            id=self._id,
            team=self._team,
            spec=JobSpec(**self._spec),
            submitted_at=self._submitted,
            enqueued_at=self._submitted if self._enqueued is None else self._enqueued,
            **self._fields,
        )

    def on(self, pool: str, gpus: int | None = None, draining_for: DrainTarget | None = None) -> Allocation:
        """The job running in `pool` (RUNNING since `NOW - DAY` unless `running_since` was set)."""
        running = self if "started_at" in self._fields else self.running_since(NOW - DAY)
        built = running.build()
        held = built.gpus if gpus is None else gpus
        return Allocation(job=built.with_changes(pool=pool), pool=pool, gpus=held, draining_for=draining_for)


def job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


def pool(
    name: str,
    *,
    capacity: int = 16,
    purchase: str = "on-demand",
    gpu_type: str = "a100",
    per_node: int = 8,
    price: float | None = None,
    rate: float = 0.0,
) -> Pool:
    """A pool; Spot pools default to price 0.35 and On-Demand ones to 1.0."""
    kind = Purchase(purchase)
    default_price = 0.35 if kind is Purchase.SPOT else 1.0
    return Pool(
        name=name,
        gpu_type=gpu_type,
        purchase=kind,
        capacity_gpus=capacity,
        gpus_per_node=per_node,
        price=default_price if price is None else price,
        interruption_rate_per_hour=rate,
    )


def quota(
    team: str, nominal: int, *, borrow: int | None = None, lend: int | None = None, weight: float = 1.0
) -> TeamQuota:
    return TeamQuota(
        team=team, nominal_gpus=nominal, borrowing_limit_gpus=borrow, lending_limit_gpus=lend, weight=weight
    )


def cluster(
    pools: Iterable[Pool],
    allocations: Iterable[Allocation] = (),
    quotas: Iterable[TeamQuota] = (),
    usage: Mapping[str, float] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot.build(pools, allocations, quotas, usage)


def config(**overrides: Any) -> SchedulerConfig:
    """The default policy with some fields overridden; unless a test sets them, the protection
    period and the preemption delay are 0, every class preempts for every job (no class head
    rule), no job waits for a release, and no job moves to Spot: the mechanisms' tests turn on
    what they test."""
    overrides.setdefault("protection_period_s", 0.0)
    overrides.setdefault("preemption_delay_s", 0.0)
    overrides.setdefault("release_wait_s", 0.0)
    overrides.setdefault("preempt_for_class_head_only", frozenset())
    overrides.setdefault("move_to_spot_min_remaining_s", 0.0)
    return SchedulerConfig(**overrides)


def candidate(
    allocation: Allocation,
    *,
    priority: float | None = None,
    remaining: float | None = None,
    now: float = NOW,
    policy: SchedulerConfig | None = None,
) -> Candidate:
    """A preemption candidate; effective priority and remaining time default to the real ones."""
    policy = policy or config()
    left = allocation.job.remaining_s(now)
    left = DEFAULT_RUNTIME_S if left is None else left
    if priority is None:
        priority = effective_priority(allocation.job, now, policy.weights, remaining_s=left)
    return Candidate(
        allocation=allocation,
        effective_priority=priority,
        remaining_s=left if remaining is None else remaining,
        lost_work_gpu_s=lost_work_gpu_s(allocation.job, allocation.gpus, now, policy),
    )


def ledger(snapshot: ClusterSnapshot) -> Ledger:
    return Ledger.of(snapshot)


def run_plan(
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    policy: SchedulerConfig | None = None,
    *,
    now: float = NOW,
    seed: int = 0,
) -> list[Decision]:
    return plan(snapshot, SortedQueue.of(pending), now, policy or config(), random.Random(seed))


def run_plan_with_stats(
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    policy: SchedulerConfig | None = None,
    *,
    now: float = NOW,
    seed: int = 0,
) -> tuple[list[Decision], PlanStats]:
    return plan_with_stats(snapshot, SortedQueue.of(pending), now, policy or config(), random.Random(seed))


def summary(decisions: Sequence[Decision]) -> list[tuple[str, ...]]:
    """Decisions as comparable tuples: (action, job, pool, victims...), (move, job, from, to) or
    (wait, job)."""
    rows: list[tuple[str, ...]] = []
    for d in decisions:
        if isinstance(d, Admit):
            rows.append(("admit", d.job.id, d.pool))
        elif isinstance(d, Preempt):
            rows.append(("preempt", d.job.id, d.pool, *d.victims))
        elif isinstance(d, Move):
            rows.append(("move", d.job.id, d.source, d.pool))
        elif isinstance(d, Resize):
            rows.append(("resize", d.job.id, d.pool, str(d.from_gpus), str(d.to_gpus)))
        else:
            rows.append(("wait", d.job.id))
    return rows
