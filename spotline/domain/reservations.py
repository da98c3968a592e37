"""What a pass holds in its working ledger for preemptors whose victims are still leaving, and
the GPUs those victims free beyond their preemptors' needs (spare, per pool), which a job that
does not fit may claim instead of preempting more."""

from __future__ import annotations

from collections.abc import Sequence

from spotline.domain.models import Allocation, Job, Pool
from spotline.domain.quota import Ledger, quota_shortfall


def add_spare(surplus: dict[str, int], job: Job, pool: Pool, victims: Sequence[Allocation]) -> None:
    """Count the GPUs that `victims` free in `pool` beyond what `job` takes there."""
    spare = sum(v.leaving_gpus for v in victims if v.pool == pool.name) - pool.demand_gpus(job)
    if spare > 0:
        surplus[pool.name] = surplus.get(pool.name, 0) + spare


def claim_spare(
    job: Job, pools: Sequence[Pool], surplus: dict[str, int], ledger: Ledger
) -> tuple[int, str] | None:
    """Claim, for `job`, GPUs that leaving victims free beyond their preemptors' needs, in the
    first of `pools` with enough of them and room in the job's team quota: the quota is charged
    now (the pool already is, for the victims). The GPUs and the pool claimed; None when none fits."""
    for pool in pools:
        demand = pool.demand_gpus(job)
        if surplus.get(pool.name, 0) < demand:
            continue
        if quota_shortfall(job.team, demand, ledger.team_used, ledger.quotas) is not None:
            continue
        surplus[pool.name] -= demand
        ledger.team_used[job.team] = ledger.team_used.get(job.team, 0) + demand
        return demand, pool.name
    return None


def reserve_for_preemptor(ledger: Ledger, job: Job, pool: Pool, victims: Sequence[Allocation]) -> None:
    """Charge the ledger for `job` running in `pool` once `victims` have left.

    Victims keep their pool GPUs until they have checkpointed and left, so the pool stays
    charged for them (nothing else may start there meanwhile); the part of the job's demand
    that they do not free comes from the pool's free GPUs and is reserved now, or a later job
    could take the same free GPUs and over-commit the pool. Quotas move at once.
    """
    demand = pool.demand_gpus(job)
    freed = sum(v.leaving_gpus for v in victims if v.pool == pool.name)
    ledger.pool_used[pool.name] = ledger.pool_used.get(pool.name, 0) + max(0, demand - freed)
    for victim in victims:
        ledger.team_used[victim.job.team] = ledger.team_used.get(victim.job.team, 0) - victim.leaving_gpus
    ledger.team_used[job.team] = ledger.team_used.get(job.team, 0) + demand
