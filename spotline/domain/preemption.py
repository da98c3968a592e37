"""Which running jobs to stop so that a higher-priority job fits: `select_victims`.

Modelled on Kueue's preemption package: deciding (this module) is separate from acting (the
checkpoint-then-preempt workflow), candidates are filtered by one small predicate
(`eligibility`), ordered by one function per strategy, taken greedily until the preemptor fits,
and then a reverse pass puts back every victim that turned out not to be needed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from spotline.domain.checkpoint_cost import restore_s, write_s
from spotline.domain.config import ReclaimPolicy, SchedulerConfig, VictimStrategy
from spotline.domain.models import Allocation, Job, Pool, Priority
from spotline.domain.quota import Ledger, borrowed_gpus


class Candidate:
    """A running job that preemption may stop, with what the ordering functions need.

    `remaining_s` (estimated remaining run time) and `lost_work_gpu_s` (what stopping it now
    wastes) are given, or, with `at=(now, config)`, computed when first read: a pass scores every
    stoppable running job of a group it searches, and orders only those it may stop.
    """

    __slots__ = ("_at", "_lost_work_gpu_s", "_remaining_s", "allocation", "effective_priority")

    def __init__(
        self,
        allocation: Allocation,
        effective_priority: float,
        remaining_s: float | None = None,
        lost_work_gpu_s: float | None = None,
        *,
        at: tuple[float, SchedulerConfig] | None = None,
    ) -> None:
        if at is None and (remaining_s is None or lost_work_gpu_s is None):
            raise ValueError("a candidate needs remaining_s and lost_work_gpu_s, or at=(now, config)")
        self.allocation = allocation
        self.effective_priority = effective_priority
        self._remaining_s = remaining_s
        self._lost_work_gpu_s = lost_work_gpu_s
        self._at = at

    def __repr__(self) -> str:
        return f"Candidate({self.job_id!r}, effective_priority={self.effective_priority!r})"

    @property
    def job(self) -> Job:
        return self.allocation.job

    @property
    def job_id(self) -> str:
        return self.allocation.job.id

    @property
    def remaining_s(self) -> float:
        if self._remaining_s is None:
            assert self._at is not None
            now, config = self._at
            self._remaining_s = estimated_remaining_s(self.allocation.job, now, config)
        return self._remaining_s

    @property
    def lost_work_gpu_s(self) -> float:
        if self._lost_work_gpu_s is None:
            assert self._at is not None
            now, config = self._at
            self._lost_work_gpu_s = lost_work_gpu_s(self.allocation.job, self.allocation.gpus, now, config)
        return self._lost_work_gpu_s


# The run time assumed for a job that declares none and reports no progress (s).
DEFAULT_RUNTIME_S = 3600.0
# A job preempted this many times is not preempted again: a last guard against thrash, far above
# what the protection period and the preemption delay let happen.
MAX_PREEMPTIONS_PER_JOB = 100


def estimated_remaining_s(job: Job, now: float, config: SchedulerConfig) -> float:
    """The job's estimated remaining run time, or `DEFAULT_RUNTIME_S` when nothing tells."""
    remaining = job.remaining_s(now)
    return DEFAULT_RUNTIME_S if remaining is None else remaining


def protected_until(job: Job, config: SchedulerConfig) -> float | None:
    """When the protection period since the job's last start ends: no preemption for priority
    before then (None: it has not started)."""
    return None if job.started_at is None else job.started_at + config.protection_period_s


def lost_work_gpu_s(job: Job, gpus: int, now: float, config: SchedulerConfig) -> float:
    """GPU-seconds a preemption of `job` now would waste: work since its last durable
    checkpoint, plus the restart cost and its measured restore, on all of its GPUs."""
    return gpus * (job.unsaved_work_s(now) + config.restart_cost_s + restore_s(job))


def eligibility(
    candidate: Candidate,
    preemptor: Job,
    now: float,
    config: SchedulerConfig,
    usage: Mapping[str, int],
    ledger: Ledger,
) -> str | None:
    """None when `candidate` may be preempted for `preemptor`; otherwise why not.

    1. Never a job that is already checkpointing for another preemptor, or the preemptor itself.
    2. Never inside its protection period (since its last start).
    3. Never once it reached the per-job preemption cap, nor while it runs in the On-Demand GPUs
       its deadline's answer holds for it (`admission`).
    4. Then: its class is below the preemptor's (Slurm's QOS preempt lists, Kueue's
       LowerPriority), or it runs on borrowed capacity that the preemptor's team may reclaim
       (the candidate's team is over its nominal quota and the preemptor's team stays within
       its own nominal), as far as `reclaim_within_cohort` allows: `lower-priority` (the
       default) reclaims only from a lower class, `any` from every class, `never` not at all.
    """
    job = candidate.job
    if job.id == preemptor.id:
        return "already leaving"
    shield = shielded(candidate.allocation, now, config)
    if shield is not None:
        return shield
    if is_lower_class(job, preemptor):
        return None
    if (
        job.team != preemptor.team
        and _reclaim_allowed(job, preemptor, config)
        and _may_reclaim(preemptor, usage, ledger, candidate.allocation.pool)
        and borrowed_gpus(job.team, usage, ledger.quotas) > 0
    ):
        return None
    return NOT_LOWER


INSIDE_PROTECTION = "inside its protection period"
NOT_LOWER = "not of a lower class"
PREEMPTION_CAP = "reached the preemption cap"
RESIZING = "restarting at a new size"
HELD_FOR_DEADLINE = "running in the On-Demand GPUs held for its deadline"


def shielded(allocation: Allocation, now: float, config: SchedulerConfig) -> str | None:
    """Why no preemptor may stop this running job now (rules 1-3 of `eligibility`, the ones
    that do not depend on the preemptor), or None."""
    job = allocation.job
    if allocation.draining_for is not None:
        return "already leaving"
    if allocation.resize_to is not None:
        return RESIZING
    if job.preemptions >= MAX_PREEMPTIONS_PER_JOB:
        return PREEMPTION_CAP
    until = protected_until(job, config)
    if until is not None and now < until:
        return INSIDE_PROTECTION
    hold = job.deadline_answer.hold if job.deadline_answer is not None else None
    if hold is not None and allocation.pool == hold.pool and now < hold.end:
        # The On-Demand GPUs its deadline's answer holds for it (`admission`): its promise.
        return HELD_FOR_DEADLINE
    return None


def _reclaim_allowed(job: Job, preemptor: Job, config: SchedulerConfig) -> bool:
    return reclaim_allowed_between(job.priority, preemptor.priority, config)


def reclaim_allowed_between(victim: Priority, preemptor: Priority, config: SchedulerConfig) -> bool:
    """Whether the cohort's reclaim policy lets a job of class `preemptor` reclaim from one of
    class `victim` (a matter of classes only)."""
    policy = config.reclaim_within_cohort
    if policy is ReclaimPolicy.NEVER:
        return False
    if policy is ReclaimPolicy.ANY:
        return True
    if policy is ReclaimPolicy.LOWER_PRIORITY:
        return victim.rank < preemptor.rank
    return victim.rank <= preemptor.rank


def is_lower_class(job: Job, preemptor: Job) -> bool:
    """Whether `job` is of a class below the preemptor's: the only jobs it may preempt for
    priority (the quota reclaim aside)."""
    return job.priority.rank < preemptor.priority.rank


def _may_reclaim(preemptor: Job, usage: Mapping[str, int], ledger: Ledger, pool_name: str) -> bool:
    quota = ledger.quotas.get(preemptor.team)
    if quota is None:
        return False
    # What the preemptor takes in the candidate's pool: a gang job takes whole nodes.
    pool = ledger.pools.get(pool_name)
    demand = preemptor.gpus if pool is None else pool.demand_gpus(preemptor)
    return usage.get(preemptor.team, 0) + demand <= quota.nominal_gpus


# --- ordering: the lowest class first, then one key per strategy -----------------------------


def _least_lost_work(c: Candidate) -> float:
    """GPU-seconds since the last durable checkpoint, plus the restart and restore."""
    return c.lost_work_gpu_s


def _least_remaining_time(c: Candidate) -> float:
    """Estimated remaining run time."""
    return c.remaining_s


def _lowest_utilization(c: Candidate) -> float:
    """Agent-reported GPU utilization (a job that reported none counts as fully used)."""
    return 1.0 if c.job.utilization is None else c.job.utilization


STRATEGY_KEYS: Mapping[VictimStrategy, Callable[[Candidate], float]] = {
    VictimStrategy.LEAST_LOST_WORK: _least_lost_work,
    VictimStrategy.LEAST_REMAINING_TIME: _least_remaining_time,
    VictimStrategy.LOWEST_UTILIZATION: _lowest_utilization,
}


def order_victims(
    candidates: Sequence[Candidate], strategy: VictimStrategy, rng: random.Random
) -> list[Candidate]:
    """The order in which `select_victims` takes candidates (the first is the first victim):

    1. Lowest priority class (what Slurm and Kueue stop first).
    2. The strategy's key: least lost work, least remaining time or lowest utilization; or, for
       `random`, a random order drawn from the seeded `rng` passed in (from the candidates
       sorted by job id, so the same seed gives the same order).
    3. Lower effective priority.
    4. Job id (a deterministic tie-break).
    """
    if strategy is VictimStrategy.RANDOM:
        shuffled = sorted(candidates, key=lambda c: c.job_id)
        rng.shuffle(shuffled)
        return sorted(shuffled, key=lambda c: c.job.priority.rank)
    key = STRATEGY_KEYS[strategy]
    return sorted(candidates, key=lambda c: (c.job.priority.rank, key(c), c.effective_priority, c.job_id))


def select_victims(
    preemptor: Job,
    pool: Pool,
    candidates: Sequence[Candidate],
    ledger: Ledger,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    reorder: Callable[[Job, list[Candidate]], list[Candidate]] | None = None,
    strategy: VictimStrategy | None = None,
) -> list[Candidate] | None:
    """The victims in `pool` whose departure lets `preemptor` fit, or None.

    Greedy: take eligible candidates in the strategy's order until the preemptor fits (pool
    capacity and its team's quota), skipping a candidate that is eligible only as borrowed
    capacity once its team is back within its nominal quota; then a reverse pass puts back each
    victim without which it still fits, so no victim is unnecessary. The ledger is not changed.
    """
    if not pool.can_host(preemptor):
        return None
    if ledger.fits_without(preemptor, pool, []):
        return []
    usage = ledger.team_used
    eligible = [
        c
        for c in candidates
        if c.allocation.pool == pool.name and eligibility(c, preemptor, now, config, usage, ledger) is None
    ]
    if not eligible:
        return None
    # The preemptor fits only once the pool has its demand free (`Ledger.fits_without`'s first
    # test): when all the eligible victims together do not free enough, no set of them does.
    short = pool.demand_gpus(preemptor) - ledger.free(pool.name)
    if sum(c.allocation.gpus for c in eligible) < short:
        return None
    victims: list[Candidate] = []
    usage_left = dict(usage)
    freed = 0
    order = order_victims(eligible, strategy or config.strategy, rng)
    if reorder is not None:
        order = reorder(preemptor, order)
    for candidate in order:
        team = candidate.job.team
        reclaim_only = not is_lower_class(candidate.job, preemptor)
        if reclaim_only and borrowed_gpus(team, usage_left, ledger.quotas) <= 0:
            # Eligible only to reclaim borrowed capacity, and its team borrows nothing more once
            # the victims before it leave: reclaim stops at the team's nominal quota (Kueue
            # re-checks this for every candidate too).
            continue
        usage_left[team] = usage_left.get(team, 0) - candidate.allocation.gpus
        victims.append(candidate)
        freed += candidate.allocation.gpus
        # (`fits_without` is asked only once the victims free the pool's shortfall, its first test.)
        if freed >= short and ledger.fits_without(preemptor, pool, [v.allocation for v in victims]):
            break
    else:
        return None
    for candidate in reversed(victims[:-1]):
        trial = [v for v in victims if v is not candidate]
        if ledger.fits_without(preemptor, pool, [v.allocation for v in trial]):
            victims = trial
    return victims


def stops_at_once(preemptor: Job, victims: Sequence[Job], now: float, config: SchedulerConfig) -> str | None:
    """Why `preemptor` stops `victims` at once instead of letting them checkpoint, or None: its
    class is in `stop_at_once_for`, and each victim's unsaved work is no more than its checkpoint
    write (measured, else `checkpoint_write_s`): a write would cost what it saves."""
    if preemptor.priority in config.stop_at_once_for and all(
        v.unsaved_work_s(now) <= write_s(v, config) for v in victims
    ):
        return (
            f"stopped at once for a {preemptor.priority.value} job: each has no more unsaved work"
            " than its checkpoint write"
        )
    return None
