"""Reserved pools: capacity paid for a window (an EC2 Capacity Block, an On-Demand Capacity
Reservation), used before Spot and On-Demand, and left, checkpointed, before the window ends.

The planner asks three things of this module:

1. `open_blocks` and `block_refusal`: the reserved pools a job may start in now. A block is
   prepaid (it costs nothing at the margin), so it comes first, before Spot and On-Demand; a job
   is admitted only while the block is open and if its predicted run, or its next checkpoint,
   lands before the block's end minus `TERMINATION_LEAD_S` (AWS begins terminating a Capacity
   Block's instances then). Jobs that fit fill (backfill) the block's free GPUs up to its end.
2. `block_drains`: the jobs in a block that must checkpoint and leave now, planned from the
   known end (each job's drain begins its checkpoint grace before the termination starts), so
   nothing is lost when the instances go. A deadline job whose placement would be On-Demand
   (its slack leaves no room for Spot) resumes in On-Demand room held for it; the others are
   requeued and placed as any job. The expiration warning (`WARNING_LEAD_S` before the end) is
   the safety net: the control plane drains whatever is still there when it arrives.
3. `block_text`: why a job is, or is not, in a block (for `explain` and the decisions' reasons).

Only pools configured as reserved (`Pool.reservation`) behave so; a cluster without them plans as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from spotline.domain.checkpoint_cost import grace_period_s, restore_s, write_s
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, ClusterSnapshot, Job, MovingTo, Pool

# AWS begins terminating a Capacity Block's instances this long before the block's end.
TERMINATION_LEAD_S = 30 * 60.0
# EventBridge's `Capacity Block Expiration Warning` comes this long before the block's end.
WARNING_LEAD_S = 40 * 60.0
# A checkpoint's grace when nothing else says (the control plane's default grace period).
DEFAULT_GRACE_S = 120.0

# Where a job goes after its block: the first pool of the planner's order without reserved pools.
PlaceAfter = Callable[[Job], Pool | None]


def usable_until(pool: Pool) -> float:
    """When a reserved pool's jobs must be gone: its end minus the termination lead."""
    assert pool.reservation is not None, f"{pool.name} is not reserved"
    return pool.reservation.end - TERMINATION_LEAD_S


def drain_at(job: Job, pool: Pool, config: SchedulerConfig) -> float:
    """When `job`, in reserved `pool`, begins the checkpoint it leaves with: its checkpoint grace
    (the measured write with a margin, else the default grace) before the termination starts."""
    return usable_until(pool) - max(grace_period_s(job, DEFAULT_GRACE_S), write_s(job, config))


def first_checkpoint_s(job: Job, config: SchedulerConfig) -> float:
    """Seconds from a start until the job's first periodic checkpoint is durable: its restart
    (restore included), one checkpoint interval and the write."""
    return config.restart_cost_s + restore_s(job) + job.spec.checkpoint_interval_s + write_s(job, config)


def block_refusal(
    job: Job, pool: Pool, now: float, remaining_s: float, config: SchedulerConfig
) -> str | None:
    """None when `job` (with `remaining_s` predicted) may start in reserved `pool` now; else why
    not: the block is not open yet, it is draining, or neither its predicted run nor its next
    checkpoint lands before the block's end minus `TERMINATION_LEAD_S`."""
    window = pool.reservation
    assert window is not None, f"{pool.name} is not reserved"
    if now < window.start:
        return f"block {pool.name} opens in {_hours(window.start - now)}"
    until = usable_until(pool)
    if now >= drain_at(job, pool, config):
        return f"block {pool.name} is draining: its instances are terminated from {_hours(until - now)} on"
    run_end = now + config.restart_cost_s + restore_s(job) + remaining_s
    if run_end <= until:
        return None
    if now + first_checkpoint_s(job, config) <= until:
        return None
    return (
        f"neither its predicted run ({_hours(run_end - now)}) nor its next checkpoint"
        f" ({_hours(first_checkpoint_s(job, config))}) lands before block {pool.name} ends"
        f" ({_hours(until - now)} left, less the {TERMINATION_LEAD_S / 60:.0f} min termination)"
    )


def admitted_text(job: Job, pool: Pool, now: float, remaining_s: float, config: SchedulerConfig) -> str:
    """Why `job` fits block `pool` now (the admission's reason, for `explain`)."""
    until = usable_until(pool)
    run_end = now + config.restart_cost_s + restore_s(job) + remaining_s
    if run_end <= until:
        return f"reserved, prepaid: its predicted run ends {_hours(until - run_end)} before the block's end"
    return (
        f"reserved, prepaid: it checkpoints every {_hours(job.spec.checkpoint_interval_s)} and is"
        f" checkpointed and requeued {_hours(until - drain_at(job, pool, config))} before the"
        f" termination, {_hours(drain_at(job, pool, config) - now)} from now"
    )


def reserved_pools(pools: Iterable[Pool]) -> list[Pool]:
    """The reserved pools, by name."""
    return sorted((p for p in pools if p.is_reserved), key=lambda p: p.name)


def open_blocks(
    job: Job, blocks: Sequence[Pool], now: float, remaining_s: float, config: SchedulerConfig
) -> list[Pool]:
    """The reserved pools of `blocks` that may host `job` and that it may start in now
    (`block_refusal`), by name: each costs nothing at the margin."""
    return [
        pool
        for pool in blocks
        if pool.can_host(job) and block_refusal(job, pool, now, remaining_s, config) is None
    ]


def block_text(
    job: Job, blocks: Sequence[Pool], now: float, remaining_s: float, config: SchedulerConfig
) -> str:
    """Why `job` is not in any of `blocks` that could host its shape ("" when none could)."""
    said = []
    for pool in blocks:
        if not pool.can_host(job):
            continue
        why = block_refusal(job, pool, now, remaining_s, config)
        if why is not None:
            said.append(why)
    return "; ".join(said)


@dataclass(frozen=True, slots=True)
class BlockDrain:
    """Checkpoint `job`, running in reserved `pool`, and requeue it before the block ends; with
    `resume_in`, it resumes there (On-Demand room held for it, as a move's)."""

    job: Job
    pool: str
    reason: str
    resume_in: str | None = None

    @property
    def draining_for(self) -> str | MovingTo:
        """What the job's allocation leaves for: the room held for it, or the block's end."""
        return MovingTo(pool=self.resume_in) if self.resume_in is not None else f"block-end:{self.pool}"


def block_drains(
    snapshot: ClusterSnapshot,
    now: float,
    config: SchedulerConfig,
    placement: PlaceAfter | None = None,
    *,
    warned: frozenset[str] = frozenset(),
) -> list[BlockDrain]:
    """The jobs in reserved pools that checkpoint and leave now: each whose drain time
    (`drain_at`) has come, or every job of a pool in `warned` (its expiration warning arrived:
    the safety net); none already leaving. `placement(job)`: the pool the job would be placed in
    after the block (the planner's order without reserved pools); a deadline job whose placement
    is On-Demand resumes in On-Demand room, when there is some, held for it. By pool, then job id."""
    drains: list[BlockDrain] = []
    used: dict[str, int] = {}
    for allocation in sorted(snapshot.allocations, key=lambda a: (a.pool, a.job.id)):
        pool = snapshot.pools.get(allocation.pool)
        if pool is None or not pool.is_reserved or allocation.draining_for is not None:
            continue
        job = allocation.job
        if pool.name in warned:
            why = "the block's expiration warning came"
        elif now >= drain_at(job, pool, config):
            left = usable_until(pool) - now
            why = f"block {pool.name} is terminated in {_hours(left)}: checkpoint planned from its end"
        else:
            continue
        resume_in = _on_demand_room(job, snapshot, placement, used)
        reason = f"{why}; checkpointed and requeued"
        if resume_in is not None:
            reason += f", resumes On-Demand in {resume_in} (deadline slack)"
        drains.append(BlockDrain(job, pool.name, reason, resume_in))
    return drains


def _on_demand_room(
    job: Job, snapshot: ClusterSnapshot, placement: PlaceAfter | None, used: dict[str, int]
) -> str | None:
    """For a deadline job whose placement after the block is On-Demand: that pool, when it has
    room left for it (counted in `used` across the drains of one pass); else None."""
    if job.spec.deadline_at is None or placement is None:
        return None
    pool = placement(job)
    if pool is None or pool.is_spot or pool.is_reserved:
        return None
    demand = pool.demand_gpus(job)
    if snapshot.free_gpus(pool.name) - used.get(pool.name, 0) < demand:
        return None
    used[pool.name] = used.get(pool.name, 0) + demand
    return pool.name


def in_blocks(allocations: Iterable[Allocation], pools: dict[str, Pool]) -> list[Allocation]:
    """The allocations held in reserved pools."""
    return [a for a in allocations if a.pool in pools and pools[a.pool].is_reserved]


def _hours(seconds: float) -> str:
    if abs(seconds) < 3600.0:
        return f"{seconds / 60.0:.0f} min"
    return f"{seconds / 3600.0:.1f} h"
