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

    __slots__ = ("_at", "_cost_gpu_s", "_lost_work_gpu_s", "_remaining_s", "allocation", "effective_priority")

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
        self._cost_gpu_s: float | None = None
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

    @property
    def preemption_cost_gpu_s(self) -> float:
        """`preemption_cost_gpu_s` of the job (computed when first read)."""
        if self._cost_gpu_s is None:
            if self._at is None:
                # A candidate given its lost work (no `at`): counted as stopped at once.
                self._cost_gpu_s = self.lost_work_gpu_s
            else:
                now, config = self._at
                job = self.allocation.job
                self._cost_gpu_s = preemption_cost_gpu_s(job, self.allocation.gpus, now, config)
        return self._cost_gpu_s


def estimated_remaining_s(job: Job, now: float, config: SchedulerConfig) -> float:
    """The job's estimated remaining run time, or `default_runtime_s` when nothing tells."""
    remaining = job.remaining_s(now)
    return config.default_runtime_s if remaining is None else remaining


def lost_work_gpu_s(job: Job, gpus: int, now: float, config: SchedulerConfig) -> float:
    """GPU-seconds a preemption of `job` now would waste: work since its last durable
    checkpoint, plus the restart cost and its measured restore, on all of its GPUs."""
    return gpus * (job.unsaved_work_s(now) + config.restart_cost_s + restore_s(job))


def preemption_cost_gpu_s(job: Job, gpus: int, now: float, config: SchedulerConfig) -> float:
    """GPU-seconds a checkpoint-then-preempt of `job` now wastes: the checkpoint write (or its
    unsaved work, when less: it is then stopped at once, `stops_at_once`), the restart
    and its measured restore, on all of its GPUs. Unlike `lost_work_gpu_s`, the work since the
    last checkpoint is saved by the write, so what tells victims apart is mostly their size."""
    unsaved = min(job.unsaved_work_s(now), write_s(job, config))
    return gpus * (unsaved + config.restart_cost_s + restore_s(job))


def eligibility(
    candidate: Candidate,
    preemptor: Job,
    preemptor_priority: float,
    now: float,
    config: SchedulerConfig,
    usage: Mapping[str, int],
    ledger: Ledger,
) -> str | None:
    """None when `candidate` may be preempted for `preemptor`; otherwise why not.

    1. Never a job that is already checkpointing for another preemptor, or the preemptor itself.
    2. Never inside its protection period (since its last start).
    3. Never once it reached the per-job preemption cap.
    4. Then: its effective priority is below the preemptor's by at least the margin (and, with
       `preempt_lower_class_only`, its class is below the preemptor's), or it
       runs on borrowed capacity that the preemptor's team may reclaim (the candidate's team
       is over its nominal quota and the preemptor's team stays within its own nominal), as
       far as `reclaim_within_cohort` allows: Kueue's `LowerPriority` (the default) reclaims
       only from a lower priority class, `Any` from every class, `Never` not at all.
    """
    job = candidate.job
    if job.id == preemptor.id:
        return "already leaving"
    shield = shielded(candidate.allocation, now, config)
    if shield is not None and not (shield == INSIDE_PROTECTION and backfilled_past(job, preemptor, config)):
        return shield
    if _is_lower(candidate, preemptor, preemptor_priority, config):
        return None
    if (
        job.team != preemptor.team
        and _reclaim_allowed(job, preemptor, config)
        and _may_reclaim(preemptor, usage, ledger, candidate.allocation.pool)
        and borrowed_gpus(job.team, usage, ledger.quotas) > 0
    ):
        return None
    return "not lower priority"


INSIDE_PROTECTION = "inside its protection period"


def backfilled_past(job: Job, preemptor: Job, config: SchedulerConfig) -> bool:
    """Whether `job`'s protection period does not shield it from `preemptor` (without
    `protect_backfill`): `preemptor` is a gang (more than one node) or a critical job, and `job`
    is a single-node job that started while `preemptor` was queued (it went ahead of it)."""
    if config.protect_backfill or job.nodes > 1 or job.started_at is None:
        return False
    if preemptor.nodes <= 1 and preemptor.priority is not Priority.CRITICAL:
        return False
    return job.started_at >= preemptor.enqueued_at


def shielded(allocation: Allocation, now: float, config: SchedulerConfig) -> str | None:
    """Why no preemptor may stop this running job now (rules 1-3 of `eligibility`, the ones
    that do not depend on the preemptor), or None."""
    job = allocation.job
    if allocation.draining_for is not None:
        return "already leaving"
    # The cap before the protection period: `backfilled_past` lifts the protection period alone,
    # never the cap (Hypothesis found a capped backfilled job preempted when the order was reversed).
    if job.preemptions >= config.max_preemptions_per_job:
        return "reached the preemption cap"
    if job.started_at is not None and now - job.started_at < config.protection_period_s:
        return INSIDE_PROTECTION
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


def _is_lower(
    candidate: Candidate, preemptor: Job, preemptor_priority: float, config: SchedulerConfig
) -> bool:
    """Lower than the preemptor by the margin (and, with `preempt_lower_class_only`, of a lower
    class)."""
    if config.preempt_lower_class_only and candidate.job.priority.rank >= preemptor.priority.rank:
        return False
    return candidate.effective_priority < preemptor_priority - config.preemption_margin


def _may_reclaim(preemptor: Job, usage: Mapping[str, int], ledger: Ledger, pool_name: str) -> bool:
    quota = ledger.quotas.get(preemptor.team)
    if quota is None:
        return False
    # What the preemptor takes in the candidate's pool: a gang job takes whole nodes.
    pool = ledger.pools.get(pool_name)
    demand = preemptor.gpus if pool is None else pool.demand_gpus(preemptor)
    return usage.get(preemptor.team, 0) + demand <= quota.nominal_gpus


# --- ordering: one function per strategy; the first candidate is the first victim ----------


def order_least_lost_work(candidates: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """Spotline's default.

    1. Least lost work: GPU-seconds since the last durable checkpoint, plus restart cost.
    2. Lower effective priority.
    3. Job id (deterministic tie-break).
    """
    return sorted(candidates, key=lambda c: (c.lost_work_gpu_s, c.effective_priority, c.job_id))


def order_lowest_class_least_lost_work(
    candidates: Sequence[Candidate], rng: random.Random
) -> list[Candidate]:
    """1. Lowest priority class (what Slurm and Kueue stop first).
    2. Least lost work, as `order_least_lost_work`.
    3. Lower effective priority.
    4. Job id (deterministic tie-break).
    """
    return sorted(
        candidates, key=lambda c: (c.job.priority.rank, c.lost_work_gpu_s, c.effective_priority, c.job_id)
    )


def order_lowest_class_least_cost(candidates: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """1. Lowest priority class (what Slurm and Kueue stop first).
    2. Least work a checkpointed preemption wastes (`preemption_cost_gpu_s`): fewest GPUs, mostly.
    3. Least lost work if stopped at once (`lost_work_gpu_s`).
    4. Lower effective priority.
    5. Job id (deterministic tie-break).
    """
    return sorted(
        candidates,
        key=lambda c: (
            c.job.priority.rank,
            c.preemption_cost_gpu_s,
            c.lost_work_gpu_s,
            c.effective_priority,
            c.job_id,
        ),
    )


def order_least_remaining_time(candidates: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """1. Least estimated remaining run time.
    2. Lower effective priority.
    3. Job id (deterministic tie-break).
    """
    return sorted(candidates, key=lambda c: (c.remaining_s, c.effective_priority, c.job_id))


def order_lowest_utilization(candidates: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """1. Lowest agent-reported GPU utilization (a job that reported none counts as fully used).
    2. Lower effective priority.
    3. Job id (deterministic tie-break).
    """

    def utilization(c: Candidate) -> float:
        return 1.0 if c.job.utilization is None else c.job.utilization

    return sorted(candidates, key=lambda c: (utilization(c), c.effective_priority, c.job_id))


def order_random(candidates: Sequence[Candidate], rng: random.Random) -> list[Candidate]:
    """1. A random order drawn from the seeded `rng` passed in.
    The input is first sorted by job id, so the same seed gives the same order.
    """
    ordered = sorted(candidates, key=lambda c: c.job_id)
    rng.shuffle(ordered)
    return ordered


ORDERINGS: Mapping[VictimStrategy, Callable[[Sequence[Candidate], random.Random], list[Candidate]]] = {
    VictimStrategy.LEAST_LOST_WORK: order_least_lost_work,
    VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK: order_lowest_class_least_lost_work,
    VictimStrategy.LOWEST_CLASS_LEAST_COST: order_lowest_class_least_cost,
    VictimStrategy.LEAST_REMAINING_TIME: order_least_remaining_time,
    VictimStrategy.LOWEST_UTILIZATION: order_lowest_utilization,
    VictimStrategy.RANDOM: order_random,
}


def select_victims(
    preemptor: Job,
    preemptor_priority: float,
    pool: Pool,
    candidates: Sequence[Candidate],
    ledger: Ledger,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
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
        if c.allocation.pool == pool.name
        and eligibility(c, preemptor, preemptor_priority, now, config, usage, ledger) is None
    ]
    if not eligible:
        return None
    # The preemptor fits only once the pool has its demand free (`Ledger.fits_without`'s first
    # test): when all the eligible victims together do not free enough, no set of them does.
    short = pool.demand_gpus(preemptor) - ledger.free(pool.name)
    if sum(c.allocation.gpus for c in eligible) < short:
        return None
    order = ORDERINGS[strategy or config.strategy]
    victims: list[Candidate] = []
    usage_left = dict(usage)
    freed = 0
    for candidate in order(eligible, rng):
        team = candidate.job.team
        reclaim_only = not _is_lower(candidate, preemptor, preemptor_priority, config)
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
    """Why `preemptor` stops `victims` at once instead of letting them checkpoint, or None.

    1. Its class is in `stop_at_once_for`, and, with `stop_at_once_within_write`, each victim's
       unsaved work is no more than its checkpoint write (a write would cost what it saves).
    2. Each victim checkpointed in the last `fresh_checkpoint_s` (when that is on).
    """
    if preemptor.priority in config.stop_at_once_for:
        if not config.stop_at_once_within_write:
            return f"stopped at once for a {preemptor.priority.value} job"
        if all(v.unsaved_work_s(now) <= write_s(v, config) for v in victims):
            return (
                f"stopped at once for a {preemptor.priority.value} job: each has no more unsaved work"
                " than its checkpoint write"
            )
    fresh = config.fresh_checkpoint_s
    if fresh > 0 and all(v.unsaved_work_s(now) <= fresh for v in victims):
        return f"stopped at once: each checkpointed in the last {fresh:.0f} s"
    return None
