"""The GPUs a pass holds for its top blocked gang, and EASY backfill into them.

The first multi-node job of a pass that waits for capacity, once it has waited
`GANG_HOLD_AFTER_S`, has the free GPUs of its first candidate pool held for it, up to its demand,
so the jobs ranked after it cannot take them one by one while it waits
(`planner._Pass._hold_for_gang`).

The hold is EASY-backfill aware (Lifka's EASY scheduler, as Slurm's backfill plugin does it):
the gang's *projected start* (the shadow time) is when enough
GPUs of the pool free, by the running jobs' estimated ends (`estimated_remaining_s`, as the start
forecast's replay ends them), to fit it. A job ranked after the gang may take held GPUs when, in
order:

1. it declares a run time (`Job.remaining_s` is not None); a job that does not never backfills;
2. its declared run time ends by the projected start (it is gone before the gang could start), or
3. it fits the GPUs the gang leaves free at its projected start (the extra GPUs, which each such
   job then uses up).

Pure: no clock, no randomness; `now` is the pass's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, Job, Pool
from spotline.domain.preemption import estimated_remaining_s
from spotline.domain.quota import Ledger

# A gang holds GPUs only once it has waited this long (s): most gangs start sooner as jobs end,
# and a hold keeps smaller jobs off GPUs meanwhile.
GANG_HOLD_AFTER_S = 900.0

NO_RUN_TIME = "it declares no run time, so it may not backfill"
ENDS_AFTER = "its declared run time ends after the gang's projected start"


@dataclass(slots=True)
class GangHold:
    """GPUs of `pool` held for the blocked multi-node job `gang`: `gpus` of them now, its
    projected start `shadow_at` (inf when the running jobs' ends never free enough) and the
    GPUs left free then beyond its demand (`extra`)."""

    gang: str
    pool: str
    gpus: int
    shadow_at: float = math.inf
    extra: int = 0

    def may_fit(self, job: Job, pool: Pool, ledger: Ledger, now: float) -> bool:
        """A first sieve: `job` declares a run time and fits the hold's `pool` with its GPUs."""
        return (
            job.remaining_s(now) is not None and pool.demand_gpus(job) <= ledger.free(pool.name) + self.gpus
        )

    def backfill(self, job: Job, demand: int, now: float) -> tuple[str | None, str | None]:
        """Whether `job` (needing `demand` GPUs of the pool) may take held GPUs: (how, None) when
        it may, (None, why not) when it may not. Taking the extra GPUs uses them up."""
        remaining = job.remaining_s(now)
        if remaining is None:
            return None, NO_RUN_TIME
        if now + remaining <= self.shadow_at:
            return f"it ends in {_hours(remaining)}, before the gang's {self._start(now)}", None
        if demand <= self.extra:
            self.extra -= demand
            return f"it fits the GPUs left free at the gang's {self._start(now)}", None
        return None, ENDS_AFTER

    def _start(self, now: float) -> str:
        if math.isinf(self.shadow_at):
            return "projected start (none: the running jobs' ends never free enough for it)"
        return f"projected start in {_hours(self.shadow_at - now)}"


def backfill_into(
    hold: GangHold, job: Job, pool: Pool, ledger: Ledger, now: float
) -> tuple[str | None, str | None]:
    """Admit `job` (which fits `pool`, the hold's, only with held GPUs) into the hold when it may
    backfill (`GangHold.backfill`) and its team's quota allows: (the admission's reason, None),
    the ledger charged and the hold's GPUs it took released; else (None, why not, or None when
    its quota is what stops it), the ledger as it was."""
    demand = pool.demand_gpus(job)
    need = demand - ledger.free(pool.name)
    ledger.pool_used[pool.name] -= need  # the held GPUs it needs, if it may have them
    how, why = hold.backfill(job, demand, now) if ledger.fits(job, pool) else (None, None)
    if how is None:
        ledger.pool_used[pool.name] += need
        return None, why
    hold.gpus -= need
    ledger.take(job.team, pool.name, demand)
    reason = f"admitted to {pool.name}: {demand} GPUs, {need} of them held for the blocked job"
    return f"{reason} {hold.gang}, backfilled: {how}", None


def projected_start(
    demand: int, free: int, running: Iterable[Allocation], now: float, config: SchedulerConfig
) -> tuple[float, int]:
    """When a gang needing `demand` GPUs of a pool with `free` GPUs free now could start there,
    as the pool's `running` jobs end (each after its estimated remaining run time; jobs already
    leaving are skipped: their GPUs go to their preemptors), and how many GPUs are free then
    beyond its demand. (inf, 0) when their ends never free enough."""
    if demand <= free:
        return now, free - demand
    ends = sorted(
        (now + estimated_remaining_s(a.job, now, config), a.gpus) for a in running if a.draining_for is None
    )
    available = free
    for end, gpus in ends:
        available += gpus
        if available >= demand:
            return end, available - demand
    return math.inf, 0


def hold_for(
    gang: Job, pool: Pool, ledger: Ledger, running: Iterable[Allocation], now: float, config: SchedulerConfig
) -> GangHold | None:
    """Hold the free GPUs of `pool` (whose jobs are `running`) for `gang`, up to its demand: the
    hold, charged to `ledger`, with its projected start; or None when none are free."""
    demand, free = pool.demand_gpus(gang), ledger.free(pool.name)
    gpus = min(free, demand)
    if gpus <= 0:
        return None
    ledger.pool_used[pool.name] = ledger.pool_used.get(pool.name, 0) + gpus
    shadow_at, extra = projected_start(demand, free, running, now, config)
    return GangHold(gang.id, pool.name, gpus, shadow_at, extra)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"
