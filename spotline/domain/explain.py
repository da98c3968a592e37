"""Why a job is not running (or where it runs), in words and numbers, from the same rules the
planner applies: effective priority's terms (`priority.py`), placement (`placement.py`),
capacity and quota (`quota.py`), and victim eligibility (`preemption.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotline.domain.config import HISTORY_CAP, SIZE_NORM_GPUS, PriorityWeights, SchedulerConfig
from spotline.domain.decisions import (
    ArrayCap,
    BehindClassHead,
    BudgetSpent,
    Draining,
    HeldByVariant,
    HeldForDeadlines,
    HeldForGang,
    NoGpuType,
    NoPool,
    NoVictim,
    PreemptionDelay,
    ReleaseSoon,
    SpareClaimed,
    WaitReason,
)
from spotline.domain.models import ClusterSnapshot, Job, Pool
from spotline.domain.placement import spot_refusal
from spotline.domain.preemption import (
    INSIDE_PROTECTION,
    MAX_PREEMPTIONS_PER_JOB,
    NOT_LOWER,
    PREEMPTION_CAP,
    Candidate,
    eligibility,
    estimated_remaining_s,
    protected_until,
)
from spotline.domain.priority import PriorityScorer, deadline_urgency, fairshare_factors, shortness, wait_s
from spotline.domain.quota import Ledger


def priority_terms(
    job: Job, now: float, weights: PriorityWeights, *, remaining_s: float, fairshare: float
) -> dict[str, float]:
    """The terms of `effective_priority` (they add up to it; tested)."""
    disruptions = job.preemptions + job.interruptions
    return {
        "class": weights.class_term(job.priority),
        "age": weights.age * min(1.0, wait_s(job, now) / weights.max_age_s),
        "urgency": weights.deadline * deadline_urgency(job, now, weights, remaining_s),
        "size": weights.size * min(1.0, job.gpus / SIZE_NORM_GPUS),
        "fairshare": weights.fairshare * fairshare,
        "disruptions": weights.history * (min(disruptions, HISTORY_CAP) / HISTORY_CAP),
        "shortest": weights.shortest * shortness(job, now, weights),
    }


def wait_text(why: WaitReason) -> str:
    """Why a job waits, in the words the API and the CLI show (`planner.plan`'s `Wait.reason`).
    A reason names no time that passes (how long the job has waited is the job's own, computed
    when read), so a job waiting for the same reason keeps the same words pass after pass."""
    match why:
        case ArrayCap(array_id, max_running):
            return f"waiting: array {array_id} has max_running={max_running} elements running"
        case Draining(count):
            return f"waiting for {count} preempted job(s) to checkpoint and leave"
        case NoGpuType(gpu_type):
            return f"waiting: no pool has GPU type {gpu_type}"
        case NoPool(gpus, nodes, spot, priority):
            return (
                f"waiting: no pool can host {gpus} GPUs on {nodes} node(s) with spot={spot.value}"
                f" for a {priority.value} job"
            )
        case SpareClaimed(gpus, pool):
            return f"waiting for {gpus} GPUs in {pool} that preempted jobs free as they leave"
        case BudgetSpent(shortfall):
            return f"waiting: {shortfall}; preemption budget of this pass spent"
        case PreemptionDelay(shortfall, delay_s):
            return f"waiting: {shortfall}; it may preempt after waiting {delay_s:.0f} s in the queue"
        case NoVictim(shortfall, pools):
            return f"waiting: {shortfall}, and nothing lower-priority to preempt in pool {', '.join(pools)}"
        case BehindClassHead(shortfall, head):
            return (
                f"waiting: {shortfall}; {head} is the head of its class in this pass,"
                " and only the head preempts"
            )
        case ReleaseSoon(shortfall, pool, gpus, within_s):
            return (
                f"waiting: {shortfall}; running jobs free the {gpus} GPUs it lacks in {pool} within"
                f" {within_s / 60:g} min by their run times, so it waits for them instead of preempting"
            )
        case HeldByVariant(shortfall, variant, held):
            return f"waiting: {shortfall}; {held} (simulator variant {variant})"
        case HeldForDeadlines(pools, held):
            return (
                f"waiting: the free On-Demand GPUs of {', '.join(pools)} are held for deadline jobs"
                f" ({held} GPUs at most while it would run)"
            )
        case HeldForGang(shortfall, gang, pool, backfill):
            return (
                f"waiting: {shortfall}; the free GPUs of {pool} are held for the blocked"
                f" multi-node job {gang}" + (f" ({backfill})" if backfill else "")
            )


@dataclass
class PoolExplanation:
    pool: str
    blockers: list[str] = field(default_factory=list)
    unblock: str | None = None
    fits_now: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "fits_now": self.fits_now,
            "blockers": self.blockers,
            "unblock": self.unblock,
        }


def scores(snapshot: ClusterSnapshot, now: float, config: SchedulerConfig) -> PriorityScorer:
    teams = {*snapshot.usage_gpu_hours, *snapshot.quotas}
    fairshare = fairshare_factors(teams, snapshot.quotas, snapshot.usage_gpu_hours)
    return PriorityScorer(now, config.weights, fairshare, lambda j: estimated_remaining_s(j, now, config))


def explain_pools(
    job: Job, snapshot: ClusterSnapshot, now: float, config: SchedulerConfig
) -> list[PoolExplanation]:
    """Per pool, what keeps the pending `job` out of it now, and what would let it start."""
    score = scores(snapshot, now, config)
    ledger = Ledger.of(snapshot)
    usage = snapshot.team_usage()
    remaining = estimated_remaining_s(job, now, config)
    out: list[PoolExplanation] = []
    for pool in snapshot.pools.values():
        item = PoolExplanation(pool.name)
        out.append(item)
        if not pool.can_host(job):
            item.blockers.append(_shape(job, pool))
            continue
        if pool.is_spot:
            refusal = spot_refusal(job, pool, now, remaining, config, snapshot.spot.get(pool.name))
            if refusal is not None:
                item.blockers.append(f"placement: {refusal}")
                continue
        elif job.spec.spot.value == "required":
            item.blockers.append("placement: the job requires Spot")
            continue
        shortfall = ledger.shortfall(job, pool)
        if shortfall is None:
            item.fits_now = True
            item.unblock = (
                "fits now: the next scheduling pass admits it if nothing ranked higher takes the GPUs"
            )
            continue
        item.blockers.append(("capacity: " if shortfall.startswith("pool ") else "quota: ") + shortfall)
        _victims(item, job, pool, snapshot, ledger, usage, score, now, config)
    return out


def _shape(job: Job, pool: Pool) -> str:
    if job.spec.gpu_type is not None and job.spec.gpu_type != pool.gpu_type:
        return f"shape: the job asks for {job.spec.gpu_type}, the pool has {pool.gpu_type}"
    if job.nodes > 1 and pool.is_spot:
        return "shape: a multi-node job runs only On-Demand"
    demand = pool.demand_gpus(job)
    return f"shape: {demand} GPUs do not fit {pool.capacity_gpus} GPUs of {pool.gpus_per_node}/node"


def _victims(
    item: PoolExplanation,
    job: Job,
    pool: Pool,
    snapshot: ClusterSnapshot,
    ledger: Ledger,
    usage: Mapping[str, int],
    score: PriorityScorer,
    now: float,
    config: SchedulerConfig,
) -> None:
    demand = pool.demand_gpus(job)
    running = [a for a in snapshot.allocations if a.pool == pool.name]
    eligible_gpus = 0
    protected: list[tuple[float, str]] = []
    capped = 0
    higher = 0
    for allocation in running:
        candidate = Candidate(allocation, score(allocation.job), at=(now, config))
        why = eligibility(candidate, job, now, config, usage, ledger)
        until = protected_until(allocation.job, config)
        if why is None:
            eligible_gpus += allocation.gpus
        elif why == INSIDE_PROTECTION and until is not None:
            protected.append((until - now, allocation.job.id))
        elif why == PREEMPTION_CAP:
            capped += 1
        elif why == NOT_LOWER:
            higher += 1
    free = ledger.free(pool.name)
    if protected:
        left, first = min(protected)
        item.blockers.append(
            f"protection: {len(protected)} would-be victim(s) inside their protection period"
            f" ({config.protection_period_s:.0f} s after a start; {first} leaves it in {left:.0f} s)"
        )
    if capped:
        item.blockers.append(f"cap: {capped} job(s) reached the cap of {MAX_PREEMPTIONS_PER_JOB} preemptions")
    if higher:
        item.blockers.append(
            f"priority: {higher} running job(s) are not of a class below {job.priority.value}"
            " (nor on borrowed quota it may reclaim)"
        )
    waited = wait_s(job, now)
    delay_left = config.preemption_delay_s - waited
    if eligible_gpus and delay_left > 0 and not config.waives_preemption_delay(job.priority):
        item.blockers.append(
            f"preemption delay: it may preempt after waiting {config.preemption_delay_s:.0f} s"
            f" ({delay_left:.0f} s to go)"
        )
    ends = sorted(
        (estimated_remaining_s(a.job, now, config), a.gpus) for a in running if a.draining_for is None
    )
    freed, soonest = free, None
    for remaining, gpus in ends:
        freed += gpus
        if freed >= demand:
            soonest = remaining
            break
    hints = []
    if free + eligible_gpus >= demand:
        hints.append(f"preempting {eligible_gpus} eligible GPU(s) of lower-priority jobs")
    if soonest is not None:
        hints.append(
            f"running jobs ending (enough GPUs free in about {soonest / 60:.0f} min by their estimates)"
        )
    if protected:
        hints.append("protection periods ending")
    item.unblock = " or ".join(hints) or "more capacity or quota in this pool"


def position(job: Job, pending: Sequence[Job], score: PriorityScorer) -> dict[str, Any]:
    """1-based rank of `job` in its class and overall among `pending` (the planner's order)."""
    values = score.scores(pending)
    ordered = sorted(zip(pending, values, strict=True), key=lambda p: (-p[1], p[0].submitted_at, p[0].id))
    overall = next((i + 1 for i, (j, _) in enumerate(ordered) if j.id == job.id), None)
    same = [j for j, _ in ordered if j.priority is job.priority]
    in_class = next((i + 1 for i, j in enumerate(same) if j.id == job.id), None)
    return {
        "class": job.priority.value,
        "in_class": in_class,
        "class_size": len(same),
        "overall": overall,
        "queued": len(ordered),
    }
