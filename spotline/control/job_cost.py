"""What one job has cost so far: `GET /jobs/{id}` (`cost`), `spotline status` and
`GET /usage?by=job`.

The job's record keeps, per pool, the GPU-seconds its ended runs held and the GPU-seconds of
work they lost to preemptions and interruptions (`records.charge_run`, written in the release's
own transaction, the one that also adds the run to its team's month). The run going now is
added up to the time of the read. The record is the job's across requeues, so the cost follows
the job from run to run. Dollars are GPU-hours times each pool's configured price per GPU-hour,
as the team's usage is priced (`spotline.control.usage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotline.control.plane import ControlPlane
from spotline.control.records import ACTIVE_STATES, JobRecord


def held_gpu_s(record: JobRecord, now: float) -> dict[str, float]:
    """GPU-seconds per pool: the ended runs, and the run going now up to `now`."""
    held = dict(record.gpu_s_by_pool or {})
    pool = record.job.pool
    if record.state in ACTIVE_STATES and pool and record.gpus_held > 0 and record.admitted_at is not None:
        held[pool] = held.get(pool, 0.0) + record.gpus_held * max(0.0, now - record.admitted_at)
    return held


def job_cost(cp: ControlPlane, record: JobRecord, now: float) -> dict[str, Any]:
    """GPU-hours on Spot and On-Demand, dollars at each pool's price, GPU-hours lost."""
    pools = cp.config.pools_by_name
    spot_s = on_demand_s = dollars = 0.0
    by_pool: dict[str, float] = {}
    for name, gpu_s in held_gpu_s(record, now).items():
        pool = pools.get(name)
        if pool is not None and pool.is_spot:
            spot_s += gpu_s
        else:
            on_demand_s += gpu_s
        dollars += gpu_s / 3600.0 * (pool.price if pool is not None else 0.0)
        by_pool[name] = round(gpu_s / 3600.0, 4)
    return {
        "spot_gpu_hours": round(spot_s / 3600.0, 4),
        "on_demand_gpu_hours": round(on_demand_s / 3600.0, 4),
        "dollars": round(dollars, 4),
        "lost_gpu_hours": round(record.lost_gpu_s / 3600.0, 4),
        "gpu_hours_by_pool": by_pool,
    }


def jobs_usage(cp: ControlPlane, records: Sequence[JobRecord], now: float) -> list[dict[str, Any]]:
    """One row per job: what `spotline usage --by job` lists."""
    return [
        {
            "id": r.id,
            "name": r.job.spec.name,
            "state": r.state.value,
            "array_id": r.job.array_id,
            "preemptions": r.job.preemptions,
            "interruptions": r.job.interruptions,
            **job_cost(cp, r, now),
        }
        for r in records
    ]
