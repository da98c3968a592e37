"""Where a job may run: the pools it is compatible with, cheapest acceptable first."""

from __future__ import annotations

from collections.abc import Iterable

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Job, Pool, SpotPreference


def expected_interruption_delay_s(job: Job, pool: Pool, remaining_s: float, config: SchedulerConfig) -> float:
    """Expected extra time Spot costs this job: interruptions expected over its remaining run
    (rate x remaining hours x nodes) times what each costs (half a checkpoint interval of lost
    work on average, plus a restart)."""
    interruptions = pool.interruption_rate_per_hour * (remaining_s / 3600.0) * job.nodes
    per_interruption = job.spec.checkpoint_interval_s / 2.0 + config.restart_cost_s
    return interruptions * per_interruption


def spot_refusal(job: Job, pool: Pool, now: float, remaining_s: float, config: SchedulerConfig) -> str | None:
    """None when `job` may run on Spot `pool`; otherwise why not.

    1. `spot: never` runs only On-Demand; `spot: required` only Spot.
    2. With `spot: auto`: classes in `on_demand_classes` run On-Demand;
    3. a job interrupted `max_interruptions_on_spot` times runs On-Demand;
    4. a job with a deadline runs on Spot only if its slack (deadline - now - remaining) covers
       `spot_slack_factor` times the expected delay from interruptions.
    """
    spec = job.spec
    if spec.spot is SpotPreference.NEVER:
        return "job asks for On-Demand only"
    if spec.spot is SpotPreference.REQUIRED:
        return None
    if job.priority in config.on_demand_classes:
        return f"{job.priority.value} jobs run On-Demand"
    if job.interruptions >= config.max_interruptions_on_spot:
        return f"interrupted {job.interruptions} times on Spot"
    deadline = spec.deadline_at
    if deadline is not None:
        slack = deadline - now - remaining_s
        needed = config.spot_slack_factor * expected_interruption_delay_s(job, pool, remaining_s, config)
        if slack < needed:
            return f"deadline slack {slack:.0f}s below the {needed:.0f}s that Spot interruptions may cost"
    return None


def candidate_pools(
    job: Job, pools: Iterable[Pool], now: float, remaining_s: float, config: SchedulerConfig
) -> list[Pool]:
    """The pools `job` may run in, in order of preference.

    1. Compatible GPU type and node shape, and large enough.
    2. Spot pools the job may use (`spot_refusal`), then On-Demand ones unless it requires Spot.
    3. Within each, lower price first, then lower interruption rate, then name.
    """
    spot: list[Pool] = []
    on_demand: list[Pool] = []
    for pool in pools:
        if not pool.can_host(job):
            continue
        if pool.is_spot:
            if spot_refusal(job, pool, now, remaining_s, config) is None:
                spot.append(pool)
        elif job.spec.spot is not SpotPreference.REQUIRED:
            on_demand.append(pool)

    def key(p: Pool) -> tuple[float, float, str]:
        return (p.price, p.interruption_rate_per_hour, p.name)

    return sorted(spot, key=key) + sorted(on_demand, key=key)
