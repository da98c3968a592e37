"""Capacity and team quotas with borrowing, in Kueue's cohort sense.

All teams with a quota form one cohort. A team uses its nominal quota first; beyond it, it may
borrow the idle quota that other teams lend (each lends at most its lending limit), up to its
own borrowing limit. Capacity a team uses beyond its nominal quota is *borrowed*, and the
owners may reclaim it by preemption. Teams without a quota entry are not quota-limited (only
pool capacity limits them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spotline.domain.models import Allocation, ClusterSnapshot, Job, Pool, TeamQuota


def borrowed_gpus(team: str, usage: Mapping[str, int], quotas: Mapping[str, TeamQuota]) -> int:
    """GPUs `team` uses beyond its nominal quota (0 when it has no quota)."""
    quota = quotas.get(team)
    if quota is None:
        return 0
    return max(0, usage.get(team, 0) - quota.nominal_gpus)


def lendable_gpus(team: str, usage: Mapping[str, int], quotas: Mapping[str, TeamQuota]) -> int:
    """Idle quota of the other teams still free to lend to `team`: what they lend, minus
    what other borrowers already took."""
    lent = 0
    taken = 0
    # (A pass asks this for most jobs it cannot admit: one branch per team, without max/min calls.
    # A team below its nominal lends its idle GPUs, up to its lending limit; one at or above it
    # has none idle and has taken what it uses beyond it.)
    for other, quota in quotas.items():
        if other == team:
            continue
        used = usage.get(other, 0)
        nominal = quota.nominal_gpus
        if used < nominal:
            idle = nominal - used
            limit = quota.lending_limit_gpus
            lent += idle if limit is None or idle < limit else limit
        else:
            taken += used - nominal
    return max(0, lent - taken)


def quota_fits(team: str, extra_gpus: int, usage: Mapping[str, int], quotas: Mapping[str, TeamQuota]) -> bool:
    """Whether `team` may take `extra_gpus` more (`quota_shortfall` is None)."""
    quota = quotas.get(team)
    if quota is None:
        return True
    need = usage.get(team, 0) + extra_gpus - quota.nominal_gpus
    if need <= 0:
        return True
    if quota.borrowing_limit_gpus is not None and need > quota.borrowing_limit_gpus:
        return False
    # `need` is all the team would borrow, including what it borrows already: `lendable_gpus`
    # does not subtract the team's own borrowing, so compare the total, not the increment.
    return need <= lendable_gpus(team, usage, quotas)


def quota_shortfall(
    team: str, extra_gpus: int, usage: Mapping[str, int], quotas: Mapping[str, TeamQuota]
) -> str | None:
    """None when `team` may take `extra_gpus` more; otherwise why not, in a user's words."""
    if quota_fits(team, extra_gpus, usage, quotas):
        return None
    quota = quotas[team]
    after = usage.get(team, 0) + extra_gpus
    if quota.borrowing_limit_gpus is not None and after - quota.nominal_gpus > quota.borrowing_limit_gpus:
        return (
            f"team quota exhausted: {team} would use {after} GPUs, nominal {quota.nominal_gpus}"
            f" + borrowing limit {quota.borrowing_limit_gpus}"
        )
    return (
        f"team quota exhausted: {team} is at its nominal {quota.nominal_gpus} GPUs"
        " and no idle quota to borrow"
    )


@dataclass
class Ledger:
    """A working copy of pool usage and team usage that a pass updates as it decides, so one
    plan never over-commits a pool or a quota."""

    pools: Mapping[str, Pool]
    quotas: Mapping[str, TeamQuota]
    pool_used: dict[str, int] = field(default_factory=dict)
    team_used: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Ledger:
        ledger = cls(pools=snapshot.pools, quotas=snapshot.quotas)
        pool_used, team_used = ledger.pool_used, ledger.team_used
        for alloc in snapshot.allocations:  # `take` for each, inlined: a pass starts here
            pool_used[alloc.pool] = pool_used.get(alloc.pool, 0) + alloc.gpus
            team = alloc.job.team
            team_used[team] = team_used.get(team, 0) + alloc.gpus
        return ledger

    def free(self, pool: str) -> int:
        return self.pools[pool].capacity_gpus - self.pool_used.get(pool, 0)

    def take(self, team: str, pool: str, gpus: int) -> None:
        self.pool_used[pool] = self.pool_used.get(pool, 0) + gpus
        self.team_used[team] = self.team_used.get(team, 0) + gpus

    def give_back(self, team: str, pool: str, gpus: int) -> None:
        self.pool_used[pool] = self.pool_used.get(pool, 0) - gpus
        self.team_used[team] = self.team_used.get(team, 0) - gpus

    def fits(self, job: Job, pool: Pool) -> bool:
        """Whether `job` fits in `pool` now (`shortfall` is None), without saying why not."""
        demand = pool.demand_gpus(job)
        return demand <= self.free(pool.name) and quota_fits(job.team, demand, self.team_used, self.quotas)

    def shortfall(self, job: Job, pool: Pool) -> str | None:
        """None when `job` fits in `pool` now; otherwise the reason it does not."""
        demand = pool.demand_gpus(job)
        free = self.free(pool.name)
        if demand > free:
            return f"pool {pool.name} has {free} free GPUs of the {demand} needed"
        return quota_shortfall(job.team, demand, self.team_used, self.quotas)

    def fits_without(self, job: Job, pool: Pool, victims: list[Allocation]) -> bool:
        """Would `job` fit in `pool` if `victims` left? (Leaves the ledger unchanged.)"""
        freed_in_pool = sum(v.gpus for v in victims if v.pool == pool.name)
        demand = pool.demand_gpus(job)
        if demand > self.free(pool.name) + freed_in_pool:
            return False
        if job.team not in self.quotas:
            return True
        usage = dict(self.team_used)
        for v in victims:
            usage[v.job.team] = usage.get(v.job.team, 0) - v.gpus
        return quota_shortfall(job.team, demand, usage, self.quotas) is None
