"""Run a trace through several policies with the same cluster, jobs and Spot reclaims."""

from __future__ import annotations

import gc
import math
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Pool
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.blocks import Reservation, block_pools
from spotline.sim.engine import DecisionSink, Policy, PoolState, Sample, Simulation
from spotline.sim.metrics import isolated_jct, policy_metrics
from spotline.sim.model import SimJob, SimSettings, TeamShares, VictimStop, build_jobs, team_shares
from spotline.sim.peers import (
    KUEUE_DEFAULT,
    KUEUE_SETUPS,
    AllOnDemandPolicy,
    BatchFairSharePolicy,
    BatchSpotFirstPolicy,
    EarliestDeadlinePolicy,
    FifoPolicy,
    KueuePolicy,
    PriorityRandomPolicy,
    SkyPilotPolicy,
    SlurmPolicy,
    UniformProgressPolicy,
    estimate_model,
)
from spotline.sim.pools import DEFAULT_GPU_TYPE, GPUS_PER_NODE, SpotAdvice, build_pools, spot_advice
from spotline.sim.spot_zones import SpotModel, ZoneCapacity, default_zone_traces, zone_capacities, zone_pools
from spotline.sim.spotline_policy import DecisionObserver, SpotlinePolicy
from spotline.sim.variants import extension_of
from spotline.trace.canonical import Trace

POLICIES: tuple[str, ...] = ("fifo", "priority-random", "kueue", "slurm", "spotline")
# Policies `--policy` also accepts: Kueue's other configurations (`kueue` is `KUEUE_DEFAULT`).
KUEUE_NAMES: tuple[str, ...] = tuple(KUEUE_SETUPS)
# The Spot-and-deadline peers (`peers/spot_peers.py`), by name only.
SPOT_PEERS: tuple[str, ...] = ("on-demand", "batch-spot-first", "skypilot", "uniform-progress", "edf")
# The peers' setups of the contended benches (`PeerKnobs` sets each one's main parameter).
CONTENTION_PEERS: tuple[str, ...] = ("slurm-exempt", "batch-fair-share", "skypilot-recovery")
KNOWN_POLICIES: tuple[str, ...] = POLICIES + KUEUE_NAMES + SPOT_PEERS + CONTENTION_PEERS
PREEMPTING_PEERS: tuple[str, ...] = ("priority-random", "kueue")
# Share of the GPUs in Spot pools unless told otherwise: with p4d Spot at 0.33 of On-Demand, 75%
# Spot prices a busy cluster at about 0.5 On-Demand, and the On-Demand quarter (128 of 512 GPUs)
# still holds the critical class and the largest gang jobs.
DEFAULT_SPOT_FRACTION = 0.75
DEFAULT_GPUS = 512


@dataclass
class PolicyRun:
    name: str
    metrics: dict[str, Any]
    jobs: list[SimJob]
    series: list[Sample]
    events: int
    passes: int
    wall_s: float
    # CPU seconds of the run in its process (on a shared machine, what the run itself cost).
    cpu_s: float = 0.0


@dataclass
class SimulationReport:
    trace: str
    gpus: int
    seed: int
    spot_fraction: float
    runs: dict[str, PolicyRun] = field(default_factory=dict)
    # The simulator variants Spotline ran with (`spotline.sim.variants`), in order.
    variants: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The simulator's JSON output (architecture.md: a contract), with the variants Spotline
        ran with when there were any."""
        out: dict[str, Any] = {"trace": self.trace, "gpus": self.gpus, "seed": self.seed}
        if self.variants:
            out["variants"] = list(self.variants)
        out["policies"] = {name: run.metrics for name, run in self.runs.items()}
        return out

    @property
    def events(self) -> int:
        return sum(r.events for r in self.runs.values())

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.runs.values())


def make_policy(
    name: str,
    shares: TeamShares,
    settings: SimSettings,
    seed: int,
    config: SchedulerConfig | None = None,
    observer: DecisionObserver | None = None,
    variants: Sequence[str] = (),
) -> Policy:
    competent = settings.victim_stop is VictimStop.CHECKPOINT
    if name == "fifo":
        return FifoPolicy(competent)
    if name == "priority-random":
        return PriorityRandomPolicy(seed, competent)
    knobs = settings.peers
    if name == "kueue" or name in KUEUE_SETUPS:
        setup = KUEUE_SETUPS[KUEUE_DEFAULT if name == "kueue" else name]
        if setup.borrow_max_priority is not None:
            setup = replace(setup, borrow_max_priority=knobs.kueue_borrow_max_priority)
        policy = KueuePolicy(shares, setup, competent)
        policy.name = name
        return policy
    if name in ("slurm", "slurm-exempt"):
        estimates = estimate_model(settings.slurm_estimates)
        exempt = knobs.slurm_preempt_exempt_s if name == "slurm-exempt" else 0.0
        slurm = SlurmPolicy(
            shares, settings.usage_half_life_s, estimates, seed, competent, settings.slurm, exempt
        )
        slurm.name = name
        return slurm
    if name == "batch-fair-share":
        return BatchFairSharePolicy(shares, knobs.batch_share_decay_s, competent)
    if name in ("skypilot", "skypilot-recovery"):
        wait = knobs.skypilot_fallback_s if name == "skypilot" else math.inf
        sky = SkyPilotPolicy(competent, wait)
        sky.name = name
        return sky
    spot_peer = {
        "on-demand": AllOnDemandPolicy,
        "batch-spot-first": BatchSpotFirstPolicy,
        "skypilot": SkyPilotPolicy,
        "uniform-progress": UniformProgressPolicy,
        "edf": EarliestDeadlinePolicy,
    }.get(name)
    if spot_peer is not None:
        return spot_peer(competent)
    if name == "spotline":
        extension = extension_of(variants)
        return SpotlinePolicy(config or SchedulerConfig(), shares, settings, seed, observer, extension)
    raise ValueError(f"unknown policy {name!r} (one of {', '.join(KNOWN_POLICIES)})")


def check_hostable(trace: Trace, pools: Sequence[Pool], settings: SimSettings) -> None:
    """Raise ValueError naming the jobs that no pool can ever host (they would wait forever in
    every policy): too many GPUs, an unknown GPU type, or a gang job (On-Demand only) larger than
    the On-Demand pools."""
    states = [PoolState(i, p, p.capacity_gpus) for i, p in enumerate(pools)]
    bad = [
        job
        for job in build_jobs(trace.jobs, settings, 0, GPUS_PER_NODE)
        if not any(ps.accepts(job) for ps in states)
    ]
    if not bad:
        return
    shapes = ", ".join(f"{p.name}: {p.capacity_gpus} GPUs" for p in pools)
    first = ", ".join(
        f"{j.id} ({j.gpus} GPUs on {j.nodes} node(s){'' if j.gpu_type is None else ', ' + j.gpu_type}"
        f"{'' if j.spot_ok else ', On-Demand only'})"
        for j in bad[:3]
    )
    raise ValueError(
        f"{len(bad)} job(s) fit no pool ({shapes}; a multi-node job runs only On-Demand), e.g. {first}:"
        " give the cluster more GPUs or a smaller Spot fraction"
    )


def run_policy(
    trace: Trace,
    name: str,
    pools: Sequence[Pool],
    shares: TeamShares,
    settings: SimSettings,
    seed: int,
    config: SchedulerConfig | None = None,
    sink: DecisionSink | None = None,
    record_series: bool = False,
    keep_jobs: bool = True,
    zones: dict[str, ZoneCapacity] | None = None,
    observer: DecisionObserver | None = None,
    variants: Sequence[str] = (),
) -> PolicyRun:
    """One policy over the trace (`keep_jobs`: keep each job's record in the result; `zones`:
    the trace-driven Spot pools' capacity, `spot_zones.zone_capacities`; `observer`: Spotline's
    decisions, pass by pass; `variants`: the simulator variants Spotline runs with)."""
    jobs = build_jobs(trace.jobs, settings, seed, GPUS_PER_NODE)
    policy = make_policy(name, shares, settings, seed, config, observer, variants)
    isolated = isolated_jct(jobs, shares.nominal)
    began, cpu = time.perf_counter(), time.process_time()
    with _few_collections():
        sim = Simulation(
            jobs,
            list(pools),
            policy,
            settings,
            seed,
            sink=sink,
            record_series=record_series,
            nominal=dict(shares.nominal),
            zones=zones,
        )
        sim.run()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return PolicyRun(
        name=name,
        metrics=policy_metrics(sim, isolated),
        jobs=jobs if keep_jobs else [],
        series=sim.series,
        events=sim.events,
        passes=sim.passes,
        wall_s=wall,
        cpu_s=cpu,
    )


# The cyclic garbage collector's first threshold during a run (Python's default is 700). A run
# allocates millions of short-lived objects (decisions, snapshots, candidates) that reference
# counting frees; at the default the collector ran so often that it walked the trace's
# long-lived jobs again and again: about a tenth of a run's CPU (`gc.freeze` and this
# threshold, measured on a week of Philly). Decisions do not depend on it.
GC_THRESHOLD_DURING_RUN = 100_000


@contextmanager
def _few_collections() -> Iterator[None]:
    """Move what exists now (the trace, the jobs, the policy) out of the collector's sight and
    collect the young generation less often, for the duration of a run. Where the process had
    frozen objects already (a caller's own `gc.freeze`), they stay frozen: `gc.unfreeze` cannot
    tell its objects from the run's, so nothing is unfrozen then."""
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_DURING_RUN, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not frozen_before:
            gc.unfreeze()


# A run's inputs: trace, pools, shares, settings, seed, config, record_series, keep_jobs, zones,
# variants.
_Inputs = tuple[
    Trace,
    list[Pool],
    TeamShares,
    SimSettings,
    int,
    SchedulerConfig | None,
    bool,
    bool,
    dict[str, ZoneCapacity] | None,
    tuple[str, ...],
]
# The inputs of the runs in forked worker processes (`simulate`).
_FORKED_INPUTS: _Inputs | None = None


def _run(
    name: str, inputs: _Inputs, sink: DecisionSink | None = None, observer: DecisionObserver | None = None
) -> PolicyRun:
    trace, pools, shares, settings, seed, config, record_series, keep_jobs, zones, variants = inputs
    return run_policy(
        trace,
        name,
        pools,
        shares,
        settings,
        seed,
        config,
        sink,
        record_series,
        keep_jobs,
        zones,
        observer,
        variants,
    )


def _run_forked(name: str) -> PolicyRun:
    assert _FORKED_INPUTS is not None, "a forked worker starts with the inputs its parent set"
    return _run(name, _FORKED_INPUTS)


def simulate(
    trace: Trace,
    policies: Sequence[str] = POLICIES,
    gpus: int = DEFAULT_GPUS,
    spot_fraction: float = DEFAULT_SPOT_FRACTION,
    seed: int = 1,
    settings: SimSettings | None = None,
    advice: SpotAdvice | None = None,
    config: SchedulerConfig | None = None,
    sink: DecisionSink | None = None,
    record_series: bool = False,
    trace_name: str | None = None,
    pools: Sequence[Pool] | None = None,
    workers: int = 1,
    keep_jobs: bool = True,
    spot_model: SpotModel = SpotModel.TRACE,
    availability: Sequence[AvailabilityTrace] | dict[str, AvailabilityTrace] | None = None,
    observer: DecisionObserver | None = None,
    variants: Sequence[str] = (),
    reservations: Sequence[Reservation] = (),
) -> SimulationReport:
    """Replay `trace` through each policy; every policy sees the same jobs, restart costs and
    Spot capacity and reclaims for a given `seed`.

    Without `pools`, the cluster is built from `gpus`, `spot_fraction` and `advice` with the
    `spot_model`: `trace` (the default) makes one Spot pool per zone whose capacity follows
    that zone's availability trace (`availability`: one trace per zone, default the three shipped
    16-node traces; `spot_zones.py`), `advisor` one Spot pool with the advisor band's Poisson
    reclaims. With `pools`, `availability` (when given) maps Spot pool names to their traces.

    With `workers` > 1 the policies run in that many processes at once (the runs are
    independent; a decision `sink`, or an `observer` of Spotline's decisions, keeps them in this
    one).
    `keep_jobs=False` leaves each job's record out of the runs (the metrics are computed
    from them all the same): a caller that reads only metrics spares processes shipping
    every job's record back. `variants`: simulator variants Spotline runs with
    (`spotline.sim.variants`; an unknown one raises `VariantError` before anything runs).
    `reservations`: reserved blocks added to the cluster (`blocks.py`; `--reservation`)."""
    extension_of(variants)  # (refused here, before any run)
    settings = settings or SimSettings()
    traces: dict[str, AvailabilityTrace] = {}
    if pools is None:
        if isinstance(availability, dict):
            raise ValueError("availability by pool name needs the pools; give one trace per zone instead")
        if spot_model is SpotModel.TRACE:
            zone_traces = list(availability) if availability is not None else default_zone_traces()
            pools, traces = zone_pools(gpus, spot_fraction, advice or spot_advice(), zone_traces)
        elif availability is not None:
            raise ValueError("availability traces are for the trace Spot model, not the advisor one")
        else:
            pools = build_pools(gpus, spot_fraction, advice or spot_advice())
    else:
        if availability is not None and not isinstance(availability, dict):
            raise ValueError("with explicit pools, give the availability traces by Spot pool name")
        traces = dict(availability or {})
        gpus = sum(p.capacity_gpus for p in pools)
        spot_fraction = sum(p.capacity_gpus for p in pools if p.is_spot) / gpus if gpus else 0.0
    if reservations:
        instance = (advice or spot_advice()).instance_type
        pools = [*pools, *block_pools(list(reservations), DEFAULT_GPU_TYPE, instance)]
    check_hostable(trace, pools, settings)
    shares = team_shares(trace.jobs, {p.name: p.capacity_gpus for p in pools})
    report = SimulationReport(
        trace=trace_name or trace.source,
        gpus=gpus,
        seed=seed,
        spot_fraction=spot_fraction,
        variants=tuple(variants),
    )
    pool_list = list(pools)

    zones = zone_capacities(pool_list, traces, seed) if traces else None
    inputs = (
        trace,
        pool_list,
        shares,
        settings,
        seed,
        config,
        record_series,
        keep_jobs,
        zones,
        tuple(variants),
    )

    def one(name: str, run_sink: DecisionSink | None = None) -> PolicyRun:
        return _run(name, inputs, run_sink, observer)

    if workers > 1 and len(policies) > 1 and sink is None and observer is None:
        global _FORKED_INPUTS
        methods = multiprocessing.get_all_start_methods()
        forked = "fork" in methods
        context = multiprocessing.get_context("fork" if forked else None)
        # Spotline's run is the longest: it goes first, so the others share the other workers.
        order = sorted(policies, key=lambda n: n != "spotline")
        # Forked workers find the inputs in this module, as the parent left them, instead of
        # being sent a pickled copy of the trace each.
        _FORKED_INPUTS = inputs if forked else None
        try:
            with ProcessPoolExecutor(max_workers=min(workers, len(policies)), mp_context=context) as executor:
                futures = {
                    name: (
                        executor.submit(_run_forked, name) if forked else executor.submit(_run, name, inputs)
                    )
                    for name in order
                }
                for name in policies:
                    report.runs[name] = futures[name].result()
        finally:
            _FORKED_INPUTS = None
        return report
    for name in policies:
        report.runs[name] = one(name, sink)
    return report
