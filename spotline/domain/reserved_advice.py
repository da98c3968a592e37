"""Advice on reserved capacity (`spotline reservations advise`): when buying a Capacity Block, or
extending one, would carry work that would otherwise run On-Demand, and the cost either way.

Advice only: nothing here buys anything. Two kinds:

1. An offerings query (instance type, count, duration, date range) when deadline jobs would spill
   to On-Demand: jobs whose placement (`placement.candidate_pools` without the reserved pools) is
   On-Demand first because Spot cannot keep their deadline, and that no open block takes. The
   count covers their GPUs together; the duration their longest remaining run, in whole days
   (Capacity Blocks last 1 to 14 days by the day, then up to 182 by the week).
2. An extension of a block that ends with work that fits it: running jobs whose remaining run
   goes past the block's end (less the 30-minute termination), for the days that work needs, while
   the block ends within EC2's extension window (1 hour to 56 days before its end).

Cost either way: that work's GPU-hours On-Demand at `on_demand_usd_per_gpu_hour`, beside the
block's GPU-hours at `block_usd_per_gpu_hour` (the caller's estimate; an offerings query gives
the real upfront fee).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import ClusterSnapshot, Job, JobState, Pool
from spotline.domain.placement import candidate_pools
from spotline.domain.preemption import estimated_remaining_s
from spotline.domain.reserved import open_blocks, reserved_pools, usable_until

HOUR_S = 3600.0
DAY_H = 24
# EC2 extends a Capacity Block from 1 hour to 56 days before it ends.
EXTENSION_EARLIEST_S = 56 * 24 * HOUR_S
EXTENSION_LATEST_S = HOUR_S
# Capacity Block durations: whole days up to 14, then whole weeks up to 182 days.
MAX_BLOCK_DAYS = 182


@dataclass(frozen=True)
class Prices:
    """Dollars per GPU-hour: On-Demand, and a Capacity Block (an estimate until an offering is read)."""

    on_demand_usd_per_gpu_hour: float
    block_usd_per_gpu_hour: float


@dataclass(frozen=True)
class OfferingQuery:
    """What to ask `DescribeCapacityBlockOfferings` for, and why."""

    gpu_type: str
    instance_count: int
    gpus_per_instance: int
    duration_hours: int
    start_after: float
    end_before: float
    jobs: tuple[str, ...]
    on_demand_usd: float
    block_usd: float
    why: str


@dataclass(frozen=True)
class ExtensionAdvice:
    """Extend block `pool` (`reservation_id`) by `hours`: the work of `jobs` would otherwise leave it."""

    pool: str
    reservation_id: str | None
    ends_at: float
    hours: int
    jobs: tuple[str, ...]
    on_demand_usd: float
    extension_usd: float
    why: str


@dataclass(frozen=True)
class Advice:
    offerings: tuple[OfferingQuery, ...] = ()
    extensions: tuple[ExtensionAdvice, ...] = ()
    # Why nothing is advised where nothing is (e.g. no deadline job spills to On-Demand).
    notes: tuple[str, ...] = field(default_factory=tuple)


def block_days(hours: float) -> int:
    """The shortest Capacity Block duration (days) that covers `hours`: whole days up to 14, whole
    weeks after, at most `MAX_BLOCK_DAYS`."""
    days = max(1, math.ceil(hours / DAY_H))
    if days > 14:
        days = 7 * math.ceil(days / 7)
    return min(days, MAX_BLOCK_DAYS)


def advise(
    jobs: Sequence[Job], snapshot: ClusterSnapshot, now: float, config: SchedulerConfig, prices: Prices
) -> Advice:
    """The offerings queries and extensions that would carry the jobs' work (module docstring)."""
    notes: list[str] = []
    offerings = _offerings(jobs, snapshot, now, config, prices)
    if not offerings:
        notes.append("no deadline job would spill to On-Demand: no Capacity Block to look for")
    extensions = _extensions(jobs, snapshot, now, config, prices)
    if not reserved_pools(snapshot.pools.values()):
        notes.append("no reserved pool: nothing to extend")
    elif not extensions:
        notes.append("no block ends with work that would fit it: nothing to extend")
    return Advice(tuple(offerings), tuple(extensions), tuple(notes))


def _offerings(
    jobs: Sequence[Job], snapshot: ClusterSnapshot, now: float, config: SchedulerConfig, prices: Prices
) -> list[OfferingQuery]:
    others = [p for p in snapshot.pools.values() if not p.is_reserved]
    blocks = reserved_pools(snapshot.pools.values())
    spilling: dict[tuple[str, int], list[tuple[Job, Pool, float]]] = {}
    for job in jobs:
        deadline = job.spec.deadline_at
        in_block = (
            job.pool is not None and job.pool in snapshot.pools and snapshot.pools[job.pool].is_reserved
        )
        if deadline is None or in_block or job.state not in (JobState.PENDING, JobState.RUNNING):
            continue
        remaining = estimated_remaining_s(job, now, config)
        if open_blocks(job, blocks, now, remaining, config):
            continue
        pools = candidate_pools(job, others, now, remaining, config, snapshot.spot)
        if not pools or pools[0].is_spot:
            continue
        first = pools[0]
        spilling.setdefault((first.gpu_type, first.gpus_per_node), []).append((job, first, remaining))
    queries: list[OfferingQuery] = []
    for (gpu_type, per_node), group in sorted(spilling.items()):
        gpus = sum(pool.demand_gpus(job) for job, pool, _ in group)
        instances = math.ceil(gpus / per_node)
        longest = max(remaining for _, _, remaining in group)
        days = block_days(longest / HOUR_S)
        latest_start = min((j.spec.deadline_at or math.inf) - r for j, _, r in group)
        end_before = max((j.spec.deadline_at or now) for j, _, _ in group)
        on_demand = sum(j.gpus * r / HOUR_S for j, _, r in group) * prices.on_demand_usd_per_gpu_hour
        block = instances * per_node * days * DAY_H * prices.block_usd_per_gpu_hour
        ids = tuple(sorted(j.id for j, _, _ in group))
        queries.append(
            OfferingQuery(
                gpu_type=gpu_type,
                instance_count=instances,
                gpus_per_instance=per_node,
                duration_hours=days * DAY_H,
                start_after=now,
                end_before=max(end_before, now + days * DAY_H * HOUR_S),
                jobs=ids,
                on_demand_usd=on_demand,
                block_usd=block,
                why=(
                    f"{len(ids)} deadline job(s) would run On-Demand (Spot cannot keep their deadlines):"
                    f" {gpus} GPUs, the longest for {longest / HOUR_S:.1f} h, the latest start"
                    f" {max(0.0, latest_start - now) / HOUR_S:.1f} h from now"
                ),
            )
        )
    return queries


def _extensions(
    jobs: Sequence[Job], snapshot: ClusterSnapshot, now: float, config: SchedulerConfig, prices: Prices
) -> list[ExtensionAdvice]:
    advice: list[ExtensionAdvice] = []
    for pool in reserved_pools(snapshot.pools.values()):
        window = pool.reservation
        assert window is not None
        left = window.end - now
        if not EXTENSION_LATEST_S <= left <= EXTENSION_EARLIEST_S:
            continue
        until = usable_until(pool)
        over: list[tuple[Job, float]] = []
        for job in jobs:
            if job.pool != pool.name or job.state is not JobState.RUNNING:
                continue
            beyond = now + estimated_remaining_s(job, now, config) - until
            if beyond > 0:
                over.append((job, beyond))
        if not over:
            continue
        longest = max(beyond for _, beyond in over)
        hours = block_days(longest / HOUR_S) * DAY_H
        on_demand = sum(j.gpus * b / HOUR_S for j, b in over) * prices.on_demand_usd_per_gpu_hour
        extension = pool.capacity_gpus * hours * prices.block_usd_per_gpu_hour
        advice.append(
            ExtensionAdvice(
                pool=pool.name,
                reservation_id=window.reservation_id,
                ends_at=window.end,
                hours=hours,
                jobs=tuple(sorted(j.id for j, _ in over)),
                on_demand_usd=on_demand,
                extension_usd=extension,
                why=(
                    f"{len(over)} job(s) in {pool.name} run past its end, the longest by"
                    f" {longest / HOUR_S:.1f} h; they would be checkpointed and resumed elsewhere"
                ),
            )
        )
    return advice
