"""Trace-driven Spot pools: each zone's Spot capacity follows a real availability trace.

The default Spot model of the many-job simulator (`SpotModel.TRACE`). The Spot GPUs of the
cluster are split into one Spot pool per zone (`<instance>-spot-<zone>`, e.g.
`p4d.24xlarge-spot-us-west-2a`), each following its own availability trace
(`availability.py`); the On-Demand pool is as in the advisor model. Switching zones is a
requeue and a restart in another pool, which the engine already charges.

- Mapping: a trace counts instances from 0 to its size N (the largest count in the trace: 16 for
  the shipped 16-node traces); a zone of I instances has floor(n x I / N) instances while the
  trace shows n (by share, rounded down: never more than the trace's share). With the default
  cluster (512 GPUs, 75% Spot: 48 p4d instances, 16 per zone) the mapping is one to one.
- Time: the simulation's second t reads the trace at tick (k + floor(t / G)) mod L, where G is the
  trace's `gap_seconds`, L its length in ticks and k the start tick, drawn from the seed alone
  (`start_tick`), the same k for every zone (the shipped traces were collected together) and every
  policy. A trace shorter than the simulation wraps around.
- Reclaims are what the trace says: when a zone's capacity falls below what runs there, the jobs on
  the instances beyond it (the last in packing order) get the 2-minute notice (the engine's
  shortage path); a launch finds no capacity beyond it, and none at all while it is 0. Zone pools
  have no Poisson reclaims of their own. Policies read only the pool's current capacity
  (`PoolState.capacity`), never the trace.
- Prices still come from the Spot Advisor's savings (`pools.spot_advice`).

`SpotModel.ADVISOR` keeps the older model (`pools.build_pools`): one Spot pool that keeps its
size, with Poisson reclaims at the advisor band's rate; a documented scenario, not the default.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from spotline.domain.models import Pool, Purchase
from spotline.sim.availability import AvailabilityError, AvailabilityTrace, load_shipped
from spotline.sim.pools import DEFAULT_GPU_TYPE, GPUS_PER_NODE, SpotAdvice, check_cluster, on_demand_pool


class SpotModel(StrEnum):
    """How the simulator's Spot capacity behaves (module docstring)."""

    TRACE = "trace"
    ADVISOR = "advisor"


# The default zones: the three shipped 16-node traces (spotline/sim/data/availability/README.md).
DEFAULT_ZONE_TRACES: tuple[str, ...] = (
    "16-node__aws-08-27-2023__us-east-2b_v100_1",
    "16-node__aws-08-27-2023__us-west-2a_v100_1",
    "16-node__aws-08-27-2023__us-west-2c_v100_1",
)

_ZONE = re.compile(r"([a-z]{2}-[a-z]+-\d[a-z])")


def default_zone_traces() -> list[AvailabilityTrace]:
    return [load_shipped(name) for name in DEFAULT_ZONE_TRACES]


def zone_name(trace: AvailabilityTrace, index: int) -> str:
    """The zone a trace names (`us-west-2a` in its file name), else `zone<index + 1>`."""
    found = _ZONE.findall(trace.name.rsplit("/", 1)[-1])
    return found[-1] if found else f"zone{index + 1}"


def trace_size(trace: AvailabilityTrace) -> int:
    """The instances a trace counts up to (its largest count)."""
    return max(trace.counts)


def zone_pools(
    total_gpus: int,
    spot_fraction: float,
    advice: SpotAdvice,
    traces: Sequence[AvailabilityTrace],
    gpus_per_node: int = GPUS_PER_NODE,
    gpu_type: str = DEFAULT_GPU_TYPE,
) -> tuple[list[Pool], dict[str, AvailabilityTrace]]:
    """One Spot pool per trace (zone), with `spot_fraction` of the GPUs in whole instances split
    as evenly as possible (the first zones get one more when it does not divide), and an
    On-Demand pool with the rest; the pools and each Spot pool's trace, by pool name."""
    check_cluster(total_gpus, spot_fraction)
    if not traces:
        raise ValueError("the trace Spot model needs at least one availability trace")
    for trace in traces:
        if trace_size(trace) == 0:
            raise AvailabilityError(f"{trace.name}: never has an instance (every count is 0)")
    spot_instances = min(total_gpus // gpus_per_node, round(total_gpus * spot_fraction / gpus_per_node))
    pools: list[Pool] = []
    availability: dict[str, AvailabilityTrace] = {}
    names: set[str] = set()
    per_zone, extra = divmod(spot_instances, len(traces))
    for index, trace in enumerate(traces):
        instances = per_zone + (1 if index < extra else 0)
        if instances == 0:
            continue
        name = f"{advice.instance_type}-spot-{zone_name(trace, index)}"
        if name in names:  # (the same zone given twice)
            name = f"{name}-{index + 1}"
        names.add(name)
        pools.append(
            Pool(
                name=name,
                gpu_type=gpu_type,
                purchase=Purchase.SPOT,
                capacity_gpus=instances * gpus_per_node,
                gpus_per_node=gpus_per_node,
                price=advice.spot_price,
                interruption_rate_per_hour=0.0,
            )
        )
        availability[name] = trace
    on_demand = total_gpus - spot_instances * gpus_per_node
    if on_demand > 0:
        pools.append(on_demand_pool(advice, on_demand, gpus_per_node, gpu_type))
    return pools, availability


def start_tick(seed: int, traces: Sequence[AvailabilityTrace]) -> int:
    """The tick every zone's trace starts at for `seed` (one draw, below the shortest trace's
    length; the same for every policy)."""
    if not traces:
        return 0
    shortest = min(len(t.counts) for t in traces)
    return random.Random(f"spotline-sim:{seed}:availability").randrange(shortest)


@dataclass(eq=False)
class ZoneCapacity:
    """One Spot pool's capacity over simulated time, from its trace (module docstring)."""

    trace: AvailabilityTrace
    instances: int
    gpus_per_node: int
    first_tick: int
    # The trace's largest count (`trace_size`), found once: every capacity reads it.
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = trace_size(self.trace)

    def gpus_at_tick(self, tick: int) -> int:
        """GPUs obtainable during the simulation's tick `tick` (0: the one holding t = 0)."""
        counts = self.trace.counts
        n = counts[(self.first_tick + tick) % len(counts)]
        return (n * self.instances // self.size) * self.gpus_per_node

    @property
    def gap_s(self) -> float:
        return float(self.trace.gap_seconds)

    def next_change(self, tick: int) -> int | None:
        """The first tick after `tick` whose capacity differs from `tick`'s (None: the capacity
        never changes again; a trace wraps around, so one full cycle decides)."""
        now = self.gpus_at_tick(tick)
        for later in range(tick + 1, tick + len(self.trace.counts) + 1):
            if self.gpus_at_tick(later) != now:
                return later
        return None

    @property
    def cycle_s(self) -> float:
        return len(self.trace.counts) * self.gap_s


def zone_capacities(
    pools: Sequence[Pool], availability: Mapping[str, AvailabilityTrace], seed: int
) -> dict[str, ZoneCapacity]:
    """Each trace-driven pool's capacity schedule for `seed`, by pool name (names in
    `availability` that are no Spot pool here are refused)."""
    by_name = {p.name: p for p in pools}
    for name in availability:
        pool = by_name.get(name)
        if pool is None or not pool.is_spot:
            raise ValueError(f"availability trace for {name!r}, which is no Spot pool of the cluster")
    first = start_tick(seed, list(availability.values()))
    out: dict[str, ZoneCapacity] = {}
    for name, trace in availability.items():
        pool = by_name[name]
        if trace_size(trace) == 0:
            raise AvailabilityError(f"{trace.name}: never has an instance (every count is 0)")
        out[name] = ZoneCapacity(trace, pool.capacity_gpus // pool.gpus_per_node, pool.gpus_per_node, first)
    return out
