"""The policy bench's runs: the evaluation, the ablations, Slurm's time-limit models, the Spot
churn sweep and the whole-trace speed run."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.policy_bench.setup import (
    COLUMNS,
    EVAL_POLICIES,
    GOALS,
    GPUS,
    METRICS,
    PEERS,
    WHOLE_END,
    WHOLE_START,
    Sample,
    best_peer,
    goal_row,
    interval,
    load,
    philly_path,
)
from spotline.domain import SchedulerConfig
from spotline.domain.config import VictimStrategy
from spotline.domain.models import Pool, Priority
from spotline.sim import POLICIES, PreemptionCycle, SimSettings, simulate
from spotline.sim.model import VictimStop
from spotline.sim.peers import ESTIMATE_MODELS
from spotline.sim.pools import BANDS, build_pools, spot_advice
from spotline.trace import parse_when, read_philly

# How many simulations run at once (one process each).
WORKERS = os.cpu_count() or 1


def run_sample(
    sample: Sample,
    policies: Sequence[str],
    settings: SimSettings | None = None,
    config: SchedulerConfig | None = None,
    pools: list[Pool] | None = None,
    workers: int | None = None,
) -> dict[str, dict[str, Any]]:
    trace = load(sample)
    report = simulate(
        trace,
        list(policies),
        gpus=sample.gpus,
        seed=sample.seed,
        settings=settings,
        config=config,
        pools=pools,
        trace_name=sample.label,
        workers=WORKERS if workers is None else workers,
        keep_jobs=False,
    )
    runs: dict[str, dict[str, Any]] = report.to_json()["policies"]
    return runs


# One simulation of one policy: (sample, policy, settings, config, pools).
_Run = tuple[Sample, str, SimSettings | None, SchedulerConfig | None, list[Pool] | None]


def _run_one(run: _Run) -> dict[str, Any]:
    sample, policy, settings, config, pools = run
    return run_sample(sample, [policy], settings=settings, config=config, pools=pools, workers=1)[policy]


def _run_one_or_cycle(run: _Run) -> dict[str, Any] | str:
    """`_run_one`, or the message of the preemption cycle that stopped it."""
    try:
        return _run_one(run)
    except PreemptionCycle as cycle:
        return str(cycle)


def run_many(runs: Sequence[_Run]) -> list[dict[str, Any]]:
    """Single-policy runs (the ablations' variants, Slurm's models, the churn levels' Spot-blind
    Spotline), `WORKERS` at a time: each is one process's work, and results come back in order
    (a run is deterministic wherever it runs)."""
    if WORKERS <= 1 or len(runs) <= 1:
        return [_run_one(r) for r in runs]
    with ProcessPoolExecutor(max_workers=min(WORKERS, len(runs))) as pool:
        return list(pool.map(_run_one, runs))


def evaluate(samples: Sequence[Sample]) -> dict[str, Any]:
    per_sample: list[dict[str, dict[str, Any]]] = []
    jobs: list[int] = []
    began = time.perf_counter()
    for sample in samples:
        per_sample.append(run_sample(sample, EVAL_POLICIES))
        jobs.append(per_sample[-1]["spotline"]["jobs"])
    # The opt-in mode beside the defaults: Spotline moving jobs with an hour or more left from
    # On-Demand to Spot (not the tuning set's choice; shown for an operator who would turn it on).
    opt_in = run_many([(sample, "spotline", None, MOVES, None) for sample in samples])
    values = {
        name: {label: interval([value(r[name]) for r in per_sample]) for label, value, _, _ in METRICS}
        for name in EVAL_POLICIES
    }
    ratios = {}
    for label, value, _, _ in METRICS:
        per = []
        for r in per_sample:
            _, theirs = best_peer(label, r)
            ours = value(r["spotline"])
            per.append((1.0 if ours == 0 else math.inf) if theirs == 0 else ours / theirs)
        ratios[label] = interval(per)
    with_moves = [{**r, "spotline": m} for r, m in zip(per_sample, opt_in, strict=True)]
    goals = {}
    for goal in GOALS:
        goals[goal.label] = {**goal_row(goal, per_sample), "moving to Spot": goal_row(goal, with_moves)}
    # What the goals can reach: the average JCT floor (every job started at its submission and
    # never stopped, `avg_run_s`) over the best peer's average JCT, per sample; and the lost
    # GPU-hours against the best peer that preempts (FIFO never does: its lost GPU-hours are
    # those of Spot interruptions alone).
    floors = [
        r["spotline"]["avg_run_s"] / best_peer("avg JCT (h)", r)[1]
        for r in per_sample
        if r["spotline"]["completed"]
    ]
    preempting = [p for p in PEERS if p != "fifo"]
    lost_vs_preempting = [
        r["spotline"]["lost_gpu_hours"] / max(1e-9, min(r[p]["lost_gpu_hours"] for p in preempting))
        for r in per_sample
    ]
    reach = {
        "jct_floor_over_best_peer": interval(floors),
        "jct_floor_above_goal_in_samples": sum(f > 1.0 for f in floors),
        "lost_gpu_hours_over_best_preempting_peer": interval(lost_vs_preempting),
    }
    n_by_class = {
        c.value: sum(r["spotline"]["jobs_by_priority"][c.value] for r in per_sample) for c in Priority
    }
    return {
        "samples": [s.label for s in samples],
        "jobs": jobs,
        "n_by_class": n_by_class,
        "policies": values,
        "ratios": ratios,
        "goals": goals,
        "reach": reach,
        "per_sample": per_sample,
        "wall_s": time.perf_counter() - began,
    }


def ablations(sample: Sample) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Spotline without each mechanism, each victim strategy, and the best peer both ways; and
    the peers' runs that ended in a preemption cycle (left out of the best peer)."""
    base = SchedulerConfig()
    variants: list[tuple[str, SchedulerConfig, SimSettings]] = [
        ("spotline (defaults)", base, SimSettings()),
        (
            "without checkpoint-then-preempt (every class stops victims at once)",
            base.model_copy(update={"stop_at_once_for": frozenset(Priority)}),
            SimSettings(),
        ),
        ("without the Spot notice", base, SimSettings(spotline_acts_on_notices=False)),
        ("without the preemption delay", base.model_copy(update={"preemption_delay_s": 0.0}), SimSettings()),
        (
            "without fair-share",
            base.model_copy(update={"weights": base.weights.model_copy(update={"fairshare": 0.0})}),
            SimSettings(),
        ),
        (
            "without shortest declared first",
            base.model_copy(update={"weights": base.weights.model_copy(update={"shortest": 0.0})}),
            SimSettings(),
        ),
        (
            "without declared run times (jobs declare none)",
            base,
            SimSettings(spotline_declared_runtimes=False),
        ),
        (
            "with moves to Spot (jobs with 1 h or more left; off by default)",
            base.model_copy(update={"move_to_spot_min_remaining_s": 3600.0}),
            SimSettings(),
        ),
    ]
    for strategy in VictimStrategy:
        if strategy is not base.strategy:
            variants.append(
                (f"victims: {strategy.value}", base.model_copy(update={"strategy": strategy}), SimSettings())
            )
    results = run_many([(sample, "spotline", settings, config, None) for _, config, settings in variants])
    out: dict[str, dict[str, Any]] = {label: r for (label, _, _), r in zip(variants, results, strict=True)}
    peer_runs: list[_Run] = [
        (sample, peer, SimSettings(victim_stop=stop), None, None) for stop in VictimStop for peer in PEERS
    ]
    if WORKERS > 1:
        with ProcessPoolExecutor(max_workers=WORKERS) as pool:
            finished = list(pool.map(_run_one_or_cycle, peer_runs))
    else:
        finished = [_run_one_or_cycle(r) for r in peer_runs]
    cycles: list[str] = []
    by_stop: dict[VictimStop, dict[str, dict[str, Any]]] = {stop: {} for stop in VictimStop}
    for (_, peer, settings, _, _), result in zip(peer_runs, finished, strict=True):
        assert settings is not None
        if isinstance(result, str):
            cycles.append(f"{sample.label}, victims {settings.victim_stop.value}: {result}")
        else:
            by_stop[settings.victim_stop][peer] = result
    for stop, runs in by_stop.items():
        for metric in COLUMNS:
            peer, _ = best_peer(metric, runs)
            out.setdefault(f"best peer per metric, {stop.value}", {})[metric] = runs[peer]
    return out, cycles


def slurm_sensitivity(sample: Sample) -> dict[str, dict[str, Any]]:
    runs: list[_Run] = [
        (sample, "slurm", SimSettings(slurm_estimates=name), None, None) for name in ESTIMATE_MODELS
    ]
    # Spotline's jobs declare run times from the same model (`SimSettings.spotline_declared_runtimes`).
    runs += [(sample, "spotline", SimSettings(slurm_estimates=name), None, None) for name in ESTIMATE_MODELS]
    labels = [*ESTIMATE_MODELS, *(f"spotline, {name}" for name in ESTIMATE_MODELS)]
    return dict(zip(labels, run_many(runs), strict=True))


# Monthly reclaim share of each level (the advisor bands' midpoints, `pools.BANDS`), and the
# high-churn scenario as a rate per instance-hour: a stress level, not a measurement (one reclaim
# per 8 instance-hours is a 99.99% monthly share, far past the advisor's top band, >20%).
HIGH_CHURN_PER_HOUR = 0.125
# Capacity shortages: about one a day per Spot pool, withdrawing half its instances for 4 h on
# average (their jobs get the notice; no launch finds capacity beyond the rest meanwhile).
SHORTAGES = SimSettings(shortage_rate_per_day=1.0, shortage_share=0.5, shortage_mean_h=4.0)
# Spotline without its Spot decisions: every class may use Spot, however often interrupted and
# whatever its deadline slack.
SPOT_BLIND = SchedulerConfig(
    on_demand_classes=frozenset(), max_interruptions_on_spot=10**6, spot_slack_factor=0.0
)
CHURN_POLICIES = (*PEERS, "spotline")
# Spotline's opt-in mode the evaluation shows beside its defaults (`SchedulerConfig`'s comment).
MOVES = SchedulerConfig(move_to_spot_min_remaining_s=3600.0)


def churn_levels() -> list[tuple[str, float, SimSettings]]:
    levels = [(f"advisor {label}", -math.log(1.0 - share) / 720.0, SimSettings()) for label, share in BANDS]
    p4d = spot_advice().interruptions_per_instance_hour
    levels.append(("high churn (1 reclaim per 8 instance-hours)", HIGH_CHURN_PER_HOUR, SimSettings()))
    levels.append((f"shortages 1/day, half the pool, 4 h (+ {spot_advice().band})", p4d, SHORTAGES))
    levels.append(("high churn + shortages", HIGH_CHURN_PER_HOUR, SHORTAGES))
    return levels


def churn(sample: Sample) -> dict[str, dict[str, dict[str, Any]]]:
    advice = spot_advice()
    out: dict[str, dict[str, dict[str, Any]]] = {}
    blind: list[_Run] = []
    for label, rate, settings in churn_levels():
        pools = [
            p.model_copy(update={"interruption_rate_per_hour": rate}) if p.is_spot else p
            for p in build_pools(sample.gpus, 0.75, advice)
        ]
        out[label] = run_sample(sample, CHURN_POLICIES, settings=settings, pools=pools)
        blind.append((sample, "spotline", settings, SPOT_BLIND, pools))
    for label, run in zip(out, run_many(blind), strict=True):
        out[label]["spotline, Spot decisions off"] = run
    return out


def speed(gpus: int = GPUS, workers: int = WORKERS) -> dict[str, Any] | None:
    """The whole Philly trace (82,247 jobs) through the five policies, seed 1, in `workers`
    processes at once (the machine's CPUs)."""
    path = philly_path()
    if path is None:
        return None
    trace = read_philly(path, parse_when(WHOLE_START), parse_when(WHOLE_END, end=True), 1)
    began = time.perf_counter()
    report = simulate(
        trace, POLICIES, gpus=gpus, seed=1, trace_name="philly (whole)", workers=workers, keep_jobs=False
    )
    wall = time.perf_counter() - began
    return {
        "jobs": len(trace.jobs),
        "wall_s": wall,
        "events": report.events,
        "workers": workers,
        "cpu_s": sum(r.cpu_s for r in report.runs.values()),
        "per_policy": {
            n: {"wall_s": r.wall_s, "cpu_s": r.cpu_s, "events": r.events, "passes": r.passes}
            for n, r in report.runs.items()
        },
    }
