"""Elastic jobs in a pass: which sizes a deployment can host, which running elastic jobs to shrink
so that a job fits without a whole preemption, and which to grow into GPUs nobody queued can use.

Every rule reads the pass's working ledger and the running allocations; nothing here changes
them (the planner charges what a `Resize` takes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spotline.domain.checkpoint_cost import restore_s, write_s
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, Job, JobSpec, Pool
from spotline.domain.preemption import Candidate, eligibility, estimated_remaining_s
from spotline.domain.quota import Ledger, quota_shortfall


def size_refusal(spec: JobSpec, pools: Iterable[Pool]) -> tuple[str, str] | None:
    """(field, why) when an elastic job's sizes do not all fit some pool of the deployment (the
    API refuses it, naming the field); None when every size has a pool, or it is not elastic."""
    elastic = spec.elastic
    if elastic is None:
        return None
    pools = list(pools)
    unfit: list[tuple[int, int]] = []
    for size in spec.elastic_sizes():
        resized = spec.at_size(size)
        probe = Job(id="probe", team="probe", spec=resized, submitted_at=0.0, enqueued_at=0.0)
        if not any(pool.can_host(probe) for pool in pools):
            unfit.append((size, resized.nodes))
    if not unfit:
        return None
    size, nodes = unfit[0]
    if size == elastic.min_gpus:
        field = "elastic.min_gpus"
    else:
        field = "elastic.sizes" if elastic.sizes is not None else "elastic.max_gpus"
    where = ", ".join(f"{p.name}: {p.capacity_gpus} GPUs, {p.gpus_per_node}/node" for p in pools)
    return field, f"no pool can host its size {size} GPUs on {nodes} node(s) ({where})"
    return None


def resize_cost_s(job: Job, config: SchedulerConfig) -> float:
    """What a resize costs the job in time: its checkpoint write, a restart and its restore."""
    return write_s(job, config) + config.restart_cost_s + restore_s(job)


def cooled(job: Job, now: float) -> bool:
    """Its last resize is at least its `elastic.cooldown_s` ago (or it was never resized)."""
    elastic = job.spec.elastic
    if elastic is None:
        return False
    return job.resized_at is None or now - job.resized_at >= elastic.cooldown_s


def _resizable(allocation: Allocation, taken: set[str]) -> bool:
    """An elastic job holding its GPUs, not leaving, resizing or chosen in this pass."""
    job = allocation.job
    return (
        job.spec.elastic is not None
        and job.started_at is not None
        and allocation.draining_for is None
        and allocation.resize_to is None
        and job.id not in taken
    )


def grown_gpus(job: Job) -> int:
    """GPUs an elastic job holds above the size it ran at before it grew into idle GPUs."""
    return 0 if job.base_gpus is None else max(0, job.spec.gpus - job.base_gpus)


def _size_down(job: Job, need: int, floor: int) -> int | None:
    """The size to shrink `job` to so that it frees `need` GPUs, freeing as few more as its sizes
    allow, never below `floor`; the smallest size down to `floor` when none frees enough; None
    when it has no smaller size at or above `floor`."""
    current = job.spec.gpus
    smaller = [s for s in job.spec.elastic_sizes() if floor <= s < current]
    if not smaller:
        return None
    enough = [s for s in smaller if current - s >= need]
    return max(enough) if enough else min(smaller)


@dataclass(frozen=True, slots=True)
class Shrink:
    """One running elastic job to shrink for a preemptor: its allocation, the size it restarts
    at, and whether it only gives back GPUs it grew into."""

    allocation: Allocation
    to_gpus: int
    # GPUs it holds in the pool at the new size (a multi-node job holds whole nodes).
    keeps: int
    give_back: bool

    @property
    def freed(self) -> int:
        return self.allocation.gpus - self.keeps


def shrinks_for(
    job: Job,
    pool: Pool,
    running: Iterable[Allocation],
    ledger: Ledger,
    taken: set[str],
    now: float,
    config: SchedulerConfig,
) -> list[Shrink] | None:
    """The running elastic jobs of `pool` to shrink so that `job` fits there without stopping a
    whole job, each with the size it restarts at; None when shrinking alone cannot make room.

    1. Candidates: elastic jobs running in `pool`, not leaving or resizing, and not chosen in
       this pass, whose `cooldown_s` since their last resize is over (the cooldown holds for
       every resize). GPUs one grew into (above its `base_gpus`) are given back to any job that
       waits; below that, a job shrinks only when it could be preempted for `job`
       (`preemption.eligibility`: a lower class, or reclaimed borrowed quota), and never below
       `min_gpus`.
    2. Order: give-backs first (the most grown GPUs first), then shrinks of the lowest class, then
       of the most GPUs above the minimum, then job id.
    3. Greedy: each shrinks to the largest of its sizes that frees what is still needed (the
       smallest it may reach when none does), until `job` fits (pool and team quota).
    """
    demand = pool.demand_gpus(job)
    if not pool.can_host(job):
        return None
    usage = ledger.team_used
    offers: list[tuple[tuple[object, ...], Allocation, int, bool]] = []
    for allocation in running:
        if allocation.pool != pool.name or allocation.job.id == job.id or not _resizable(allocation, taken):
            continue
        other = allocation.job
        grown = grown_gpus(other)
        elastic = other.spec.elastic
        assert elastic is not None
        if not cooled(other, now):
            continue
        candidate = Candidate(allocation, 0.0, at=(now, config))
        may_shrink = eligibility(candidate, job, now, config, usage, ledger) is None
        if grown > 0:
            offers.append(((0, -grown, other.id), allocation, other.spec.gpus - grown, True))
        elif may_shrink:
            above = other.spec.gpus - elastic.min_gpus
            offers.append(((1, other.priority.rank, -above, other.id), allocation, elastic.min_gpus, False))
    if not offers:
        return None
    short = demand - ledger.free(pool.name)
    chosen: list[Shrink] = []
    freed_by_team: dict[str, int] = {}
    for _, allocation, floor, give_back in sorted(offers, key=lambda o: o[0]):
        freed = sum(s.freed for s in chosen)
        size = _size_down(allocation.job, max(1, short - freed), floor)
        if size is None:
            continue
        keeps = pool.demand_gpus(allocation.job.with_changes(spec=allocation.job.spec.at_size(size)))
        shrink = Shrink(allocation, size, keeps, give_back)
        chosen.append(shrink)
        team = allocation.job.team
        freed_by_team[team] = freed_by_team.get(team, 0) + shrink.freed
        if freed + shrink.freed >= short and _quota_fits(job, demand, ledger, freed_by_team):
            return chosen
    return None


def _quota_fits(job: Job, demand: int, ledger: Ledger, freed_by_team: dict[str, int]) -> bool:
    usage = dict(ledger.team_used)
    for team, freed in freed_by_team.items():
        usage[team] = usage.get(team, 0) - freed
    return quota_shortfall(job.team, demand, usage, ledger.quotas) is None


def growth_sizes(
    pools: Mapping[str, Pool],
    running: Iterable[Allocation],
    ledger: Ledger,
    open_pools: set[str],
    taken: set[str],
    now: float,
    config: SchedulerConfig,
    budget: int,
) -> list[tuple[Allocation, int, int]]:
    """Elastic jobs to grow into the free GPUs of `open_pools` (pools no queued job could use in
    this pass), as (allocation, new size, free GPUs it found), at most `budget` of them.

    1. Candidates: elastic jobs running there, not leaving or resizing, not chosen in this pass,
       whose `cooldown_s` since their last resize is over, below their `max_gpus`.
    2. Order: the highest class first, then the fewest GPUs, then job id.
    3. Each grows to the largest of its sizes that the pool's free GPUs and its team's quota
       allow, if the time that saves on its estimated remaining run (linear scaling) is more than
       twice what the resize costs it (`resize_cost_s`).
    The ledger is charged for each growth.
    """
    found: list[tuple[Allocation, int, int]] = []
    ordered = sorted(
        (a for a in running if a.pool in open_pools and _resizable(a, taken) and cooled(a.job, now)),
        key=lambda a: (-a.job.priority.rank, a.gpus, a.job.id),
    )
    for allocation in ordered:
        if len(found) >= budget:
            break
        job, pool = allocation.job, pools[allocation.pool]
        free = ledger.free(pool.name)
        if free <= 0:
            continue
        current = allocation.gpus
        for size in sorted((s for s in job.spec.elastic_sizes() if s > current), reverse=True):
            resized = job.with_changes(spec=job.spec.at_size(size))
            extra = pool.demand_gpus(resized) - current
            if extra > free or not pool.can_host(resized):
                continue
            if quota_shortfall(job.team, extra, ledger.team_used, ledger.quotas) is not None:
                continue
            remaining = estimated_remaining_s(job, now, config)
            if remaining * (1.0 - current / size) <= 2.0 * resize_cost_s(job, config):
                break
            ledger.take(job.team, pool.name, extra)
            found.append((allocation, size, free))
            break
    return found
