"""Where a job may run: the pools it is compatible with, cheapest acceptable first."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spotline.domain.checkpoint_cost import interruption_lost_s
from spotline.domain.config import SchedulerConfig
from spotline.domain.deadline import PassPlans, spot_unsafe
from spotline.domain.models import ClusterSnapshot, Job, Pool, SpotPoolSignal, SpotPreference


def interruption_cost_s(job: Job, config: SchedulerConfig) -> float:
    """What one interruption costs the job in time: a restart, plus the checkpoint write inside
    the notice (when a measured write does not fit it, half a checkpoint interval of lost work),
    plus a measured restore (`checkpoint_cost`)."""
    return interruption_lost_s(job, config) + config.restart_cost_s


def expected_interruption_delay_s(job: Job, pool: Pool, remaining_s: float, config: SchedulerConfig) -> float:
    """Expected extra time Spot costs this job: interruptions expected over its remaining run
    (rate x remaining hours x nodes) times what each costs (`interruption_cost_s`)."""
    interruptions = pool.interruption_rate_per_hour * (remaining_s / 3600.0) * job.nodes
    return interruptions * interruption_cost_s(job, config)


def spot_cost_ratio(job: Job, pool: Pool, remaining_s: float, config: SchedulerConfig) -> float:
    """Spot's expected cost for the rest of the job over On-Demand's (Pool.price is relative to
    On-Demand): price x (remaining + expected delay) / remaining. The rate is the pool's, or
    the job's own record when that is worse: its interruptions per hour it has run (at least
    one hour), so a job that keeps being hit counts as riskier."""
    if remaining_s <= 0:
        return pool.price
    hours = remaining_s / 3600.0
    seen = job.interruptions / max(job.runtime_s / 3600.0, 1.0)
    expected = max(pool.interruption_rate_per_hour * job.nodes, seen) * hours
    delay = expected * interruption_cost_s(job, config)
    return pool.price * (remaining_s + delay) / remaining_s


def spot_refusal(
    job: Job,
    pool: Pool,
    now: float,
    remaining_s: float,
    config: SchedulerConfig,
    signal: SpotPoolSignal | None = None,
    plans: PassPlans | None = None,
) -> str | None:
    """None when `job` may run on Spot `pool`; otherwise why not.

    1. `spot: never` runs only On-Demand; `spot: required` only Spot.
    2. With `spot: auto`: classes in `on_demand_classes` run On-Demand;
    3. a job interrupted `max_interruptions_on_spot` times runs On-Demand if Spot is expected to
       cost it at least as much as On-Demand (`spot_cost_ratio` >= 1);
    4. a job with a deadline runs on Spot only if its slack (deadline - now - remaining) covers
       `spot_slack_factor` times the expected delay from interruptions, or its slack is already
       negative (On-Demand cannot save its deadline, and Spot is cheaper);
       and, with a declared runtime, only while the deadline guard allows it
       (`deadline.spot_unsafe`: its safety net, and, when the pool was last seen without capacity
       (`signal`), its rules for an outage, from the pool's history; `plans`: the pass's plan
       budget and plans, `deadline_budget.PassPlans`).
    """
    spec = job.spec
    if spec.spot is SpotPreference.NEVER:
        return "job asks for On-Demand only"
    if spec.spot is SpotPreference.REQUIRED:
        return None
    if job.priority in config.on_demand_classes:
        return f"{job.priority.value} jobs run On-Demand"
    if job.interruptions >= config.max_interruptions_on_spot:
        ratio = spot_cost_ratio(job, pool, remaining_s, config)
        if ratio >= 1.0:
            times = f"interrupted {job.interruptions} times on Spot"
            return f"{times}: expected to cost {ratio:.2f}x On-Demand there"
    deadline = spec.deadline_at
    if deadline is not None:
        slack = deadline - now - remaining_s
        needed = config.spot_slack_factor * expected_interruption_delay_s(job, pool, remaining_s, config)
        if 0 <= slack < needed:
            return f"deadline slack {slack:.0f}s below the {needed:.0f}s that Spot interruptions may cost"
        return spot_unsafe(
            job,
            now,
            on_spot=False,
            spot=signal,
            changeover_h=changeover_h(config),
            step_h=step_h(config),
            plans=plans,
        )
    return None


def changeover_h(config: SchedulerConfig) -> float:
    """The deadline guard's changeover (a move's restart), in hours."""
    return config.deadline_changeover_s / 3600.0


def step_h(config: SchedulerConfig) -> float:
    """The time to the deadline guard's next look at a job (a pass's cadence), in hours."""
    return config.deadline_step_s / 3600.0


def candidate_pools(
    job: Job,
    pools: Iterable[Pool],
    now: float,
    remaining_s: float,
    config: SchedulerConfig,
    spot: Mapping[str, SpotPoolSignal] | None = None,
    plans: PassPlans | None = None,
) -> list[Pool]:
    """The pools `job` may run in, in order of preference.

    1. Compatible GPU type and node shape, and large enough; not reserved (the planner puts the
       reserved pools whose window the job fits first: `reserved.open_blocks`).
    2. Spot pools the job may use (`spot_refusal`, with what was seen of each: `spot`), then
       On-Demand ones unless it requires Spot.
    3. Within each, lower price first, then lower interruption rate, then name.
    """
    spot_ok: list[Pool] = []
    on_demand: list[Pool] = []
    for pool in pools:
        if pool.is_reserved or not pool.can_host(job):
            continue  # (reserved pools come first, when the job fits their window: `reserved`)
        if pool.is_spot:
            if spot_refusal(job, pool, now, remaining_s, config, (spot or {}).get(pool.name), plans) is None:
                spot_ok.append(pool)
        elif job.spec.spot is not SpotPreference.REQUIRED:
            on_demand.append(pool)

    return sorted(spot_ok, key=preference) + sorted(on_demand, key=preference)


class PassPlacement:
    """`candidate_pools` for the jobs without a deadline of one pass, over the same pools: the
    pools that can host a job are found once per shape (GPU type, GPUs, nodes: all `can_host`
    reads), in preference order, and only the Spot refusal is asked per job (without a deadline
    it reads neither the pool's signal nor the pass's plans)."""

    def __init__(self, pools: Iterable[Pool]) -> None:
        # (A stable sort of all of them, then split: each kind in the order sorting it alone gives.)
        ranked = sorted((pool for pool in pools if not pool.is_reserved), key=preference)
        self._spot = [pool for pool in ranked if pool.is_spot]
        self._on_demand = [pool for pool in ranked if not pool.is_spot]
        self._by_shape: dict[tuple[str | None, int, int], tuple[list[Pool], list[Pool]]] = {}

    def candidate_pools(
        self, job: Job, now: float, remaining_s: float, config: SchedulerConfig
    ) -> list[Pool]:
        """`candidate_pools(job, pools, now, remaining_s, config)` for a job without a deadline."""
        spec = job.spec
        if spec.deadline is not None:
            raise ValueError(f"job {job.id} has a deadline: its Spot pools depend on the pass's signals")
        shape = (spec.gpu_type, spec.gpus, spec.nodes)
        hosts = self._by_shape.get(shape)
        if hosts is None:
            hosts = (
                [pool for pool in self._spot if pool.can_host(job)],
                [pool for pool in self._on_demand if pool.can_host(job)],
            )
            self._by_shape[shape] = hosts
        spot, on_demand = hosts
        chosen = [pool for pool in spot if spot_refusal(job, pool, now, remaining_s, config) is None]
        if spec.spot is not SpotPreference.REQUIRED:
            chosen += on_demand
        return chosen


def preference(pool: Pool) -> tuple[float, float, str]:
    """The order of pools of one kind: lower price first, then lower interruption rate, then name."""
    return (pool.price, pool.interruption_rate_per_hour, pool.name)


def guard_refused_spot(
    job: Job,
    snapshot: ClusterSnapshot,
    now: float,
    remaining_s: float,
    config: SchedulerConfig,
    plans: PassPlans,
) -> str | None:
    """Why the deadline guard kept a deadline job (`remaining_s` left) off a Spot pool of
    `snapshot` that could host it (what the timeline says of an On-Demand admission); None when
    it did not."""
    for pool in sorted(snapshot.pools.values(), key=lambda p: p.name):
        if not pool.is_spot or not pool.can_host(job):
            continue
        why = spot_refusal(job, pool, now, remaining_s, config, snapshot.spot.get(pool.name), plans)
        if why is not None and why.startswith("deadline guard"):
            return f"{pool.name}: {why}"
    return None
