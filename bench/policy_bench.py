"""`make bench`, policy part: Spotline against competent peers, on data it was not tuned on.

Sets (disjoint; `TUNING` is what defaults may be chosen on, `EVALUATION` what is reported):
- tuning: Philly 2017-10-02..15 (seed 1) and synthetic traces of seeds 101-102
  (`spotline trace synth`), loads 0.85 and 1.1;
- evaluation: Philly 2017-10-16..29, 2017-10-30..11-12 and 2017-11-13..26 (seed 1), and synthetic
  traces of seeds 1-2 at loads 0.85 and 1.1 (512 GPUs, 75% Spot).

Every policy runs competently (`VictimStop.CHECKPOINT`): victims checkpoint in a grace period
and the preemptor waits, every job checkpoints on a Spot notice, critical work runs On-Demand.
Kueue runs in each of its setups (`KUEUE_SETUPS`), and every peer counts as a peer: for each
metric the goal compares Spotline with the best peer on that metric in the same sample, and
reports the mean and 95% confidence interval (Student's t) over the samples. A ratio whose
denominator is 0 is replaced by the absolute value.

Then: the ablations (Spotline without each mechanism, each victim strategy, the peers with hard
kills), Slurm's sensitivity to its time-limit model, the Spot churn sweep (advisor bands and a
high-churn scenario: cost and deadline misses, Spotline's Spot decisions against Spotline
without them and against the peers), and `speed()`: the whole 82,247-job Philly trace through
the five policies.

Run: `.venv/bin/python -m bench` (all benches) or `.venv/bin/python -m bench.policy_bench`;
`SPOTLINE_BENCH_QUICK=1` runs every table on small traces (a smoke test, not a result).
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spotline.domain import SchedulerConfig
from spotline.domain.config import VictimStrategy
from spotline.domain.models import Pool, Priority
from spotline.sim import POLICIES, SimSettings, simulate
from spotline.sim.model import VictimStop
from spotline.sim.peers import ESTIMATE_MODELS, KUEUE_SETUPS
from spotline.sim.pools import BANDS, build_pools, spot_advice
from spotline.trace import Trace, parse_when, read_philly
from spotline.trace.synth import synth_trace

REPO = Path(__file__).resolve().parents[1]
# The Philly table: the repository's compressed copy (bench/data, with its provenance), or the
# shared one next to the repository.
PACKED_TRACE = REPO / "bench" / "data" / "philly.csv.gz"
SHARED_TRACE = REPO.parent / "shared" / "traces" / "philly.csv"
WHOLE_START, WHOLE_END = "2017-09-04", "2017-12-22"
GPUS = 512
QUICK = os.environ.get("SPOTLINE_BENCH_QUICK") == "1"
# The reduced run this session could afford (synthetic traces of 2,000 jobs on 128 GPUs, no speed
# run): `SPOTLINE_BENCH_REDUCED=1`. A smaller evaluation than `make bench`'s, reported as such.
REDUCED = os.environ.get("SPOTLINE_BENCH_REDUCED") == "1"
WORKERS = os.cpu_count() or 1
PEERS = ("fifo", "priority-random", "kueue", *KUEUE_SETUPS, "slurm")
EVAL_POLICIES = (*PEERS, "spotline")
# Student's t, two-sided 95%, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
# `kueue` is one of the setups under its default name: the others are enough as peers.
EVAL_POLICIES = tuple(p for p in EVAL_POLICIES if p != "kueue")
PEERS = tuple(p for p in PEERS if p != "kueue")


@dataclass(frozen=True)
class Sample:
    """One trace of a set: a Philly window, or a synthetic trace."""

    kind: str  # "philly" | "synth"
    seed: int
    start: str = ""
    end: str = ""
    jobs: int = 0
    load: float = 0.0
    gpus: int = GPUS

    @property
    def label(self) -> str:
        if self.kind == "philly":
            return f"philly {self.start}..{self.end} s{self.seed}"
        return f"synth {self.jobs} jobs load {self.load:g} s{self.seed}"


def _synth(seed: int, load: float, jobs: int = 8000, gpus: int = GPUS) -> Sample:
    return Sample("synth", seed, jobs=jobs, load=load, gpus=gpus)


TUNING: tuple[Sample, ...] = (
    Sample("philly", 1, "2017-10-02", "2017-10-15"),
    _synth(101, 0.85),
    _synth(102, 1.1),
)
# What `bench/tune.py` searched on (its default on this 2-core machine): the tuning set reduced to
# the first four days of its Philly window and 2,000-job synthetic traces on 128 GPUs.
TUNING_REDUCED: tuple[Sample, ...] = (
    Sample("philly", 1, "2017-10-02", "2017-10-05"),
    _synth(101, 0.85, 2000, 128),
    _synth(102, 1.1, 2000, 128),
)
EVALUATION: tuple[Sample, ...] = (
    Sample("philly", 1, "2017-10-16", "2017-10-29"),
    Sample("philly", 1, "2017-10-30", "2017-11-12"),
    Sample("philly", 1, "2017-11-13", "2017-11-26"),
    _synth(1, 0.85),
    _synth(2, 0.85),
    _synth(1, 1.1),
    _synth(2, 1.1),
)
if QUICK:
    EVALUATION = (_synth(1, 0.85, 600, 64), _synth(1, 1.1, 600, 64))
elif REDUCED:
    EVALUATION = tuple(_synth(s, load, 2000, 128) for load in (0.85, 1.1) for s in (1, 2))
# The ablations, Slurm's sensitivity and the churn sweep run on one mid-size synthetic trace each.
# Sized so that `make bench` stays within about 10 minutes on 2 cores (the evaluation set is whole).
# At 4,000 jobs on 256 GPUs, and at 2,000 on 128, the ablations did not finish: kueue-bwc with hard
# kills (the ablation's peers) preempts in a cycle there: three teams reclaiming quota from each
# other a fraction of a second apart, each step allowed by Kueue's rules (reclaimWithinCohort Any
# with borrowWithinCohort; README, "Simulator"), 2.2 million events by day 4 of the trace; with the
# grace period's checkpoint, the evaluation's setup, the same run takes about a second. At 1,500
# jobs it does not arise.
ABLATION_SAMPLE = _synth(3, 1.0, 500, 64) if QUICK else _synth(3, 1.0, 1500, 128)
# The ablations run on three seeds of that trace (none of them a tuning or evaluation seed), and
# report the mean and 95% CI over them: one sample alone let noise read as an effect.
ABLATION_SAMPLES: tuple[Sample, ...] = (
    (ABLATION_SAMPLE,) if QUICK else tuple(_synth(seed, 1.0, 1500, 128) for seed in (3, 5, 6))
)
CHURN_SAMPLE = (
    _synth(4, 0.85, 400, 64)
    if QUICK
    else _synth(4, 0.85, 1200, 128)
    if REDUCED
    else _synth(4, 0.85, 1500, 128)
)

_TRACE_CACHE: dict[Path, Path] = {}


def philly_path() -> Path | None:
    """The Philly table: the shared copy when present, else the repository's (decompressed once)."""
    if SHARED_TRACE.exists():
        return SHARED_TRACE
    if not PACKED_TRACE.exists():
        return None
    cached = _TRACE_CACHE.get(PACKED_TRACE)
    if cached is None or not cached.exists():
        target = Path(tempfile.gettempdir()) / f"spotline-philly-{os.getuid()}.csv"
        # Written beside it under this process's name, then renamed over it: another process
        # (a bench worker, a second bench) reading the table meanwhile sees a whole file.
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            with gzip.open(PACKED_TRACE, "rb") as source, partial.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        _TRACE_CACHE[PACKED_TRACE] = cached = target
    return cached


def load(sample: Sample) -> Trace:
    if sample.kind == "philly":
        path = philly_path()
        if path is None:
            raise FileNotFoundError("the Philly trace (bench/data/philly.csv.gz or ../shared/traces)")
        return read_philly(path, parse_when(sample.start), parse_when(sample.end, end=True), sample.seed)
    return Trace(jobs=synth_trace(sample.jobs, sample.load, sample.gpus, sample.seed), source=sample.label)


def available(samples: Sequence[Sample]) -> list[Sample]:
    return [s for s in samples if s.kind != "philly" or philly_path() is not None]


# --- the metrics and goals ------------------------------------------------------------------


def _cls(key: str, c: str) -> Callable[[dict[str, Any]], float]:
    return lambda m: float(m[key][c])


# (label, how to read it, True when lower is better, unit scale for display)
METRICS: tuple[tuple[str, Callable[[dict[str, Any]], float], bool, float], ...] = (
    ("avg JCT (h)", lambda m: m["avg_jct_s"], True, 3600.0),
    ("p99 JCT (h)", lambda m: m["p99_jct_s"], True, 3600.0),
    *(
        (f"avg JCT {c} (h)", _cls("avg_jct_s_by_priority", c), True, 3600.0)
        for c in ("critical", "high", "normal", "low")
    ),
    *(
        (f"p99 wait {c} (min, with requeues)", _cls("wait_p99_s_by_priority", c), True, 60.0)
        for c in ("critical", "high", "normal", "low")
    ),
    ("slowdown p50", lambda m: m["slowdown_p50"], True, 1.0),
    ("slowdown p99", lambda m: m["slowdown_p99"], True, 1.0),
    ("GPU utilization", lambda m: m["gpu_utilization"], False, 1.0),
    ("goodput", lambda m: m["goodput"], False, 1.0),
    ("lost GPU-hours", lambda m: m["lost_gpu_hours"], True, 1.0),
    ("cost / useful GPU-h", lambda m: m["cost_per_useful_gpu_hour"], True, 1.0),
    ("Jain's fairness", lambda m: m["jain_fairness"], False, 1.0),
    ("finish-time fairness, worst team", lambda m: m["ftf_max"], True, 1.0),
    ("finish-time fairness, Jain", lambda m: m["ftf_jain"], False, 1.0),
    ("deadline miss rate", lambda m: m["deadline_miss_rate"], True, 1.0),
)
_METRIC = {label: (value, lower) for label, value, lower, _ in METRICS}


@dataclass(frozen=True)
class Goal:
    label: str
    metric: str
    target: float  # on ours / best peer (for higher-is-better metrics: ours / best peer >= target)
    absolute_s: float | None = None  # also met when ours is at most this (waits: 5 minutes)


GOALS: tuple[Goal, ...] = (
    Goal("average JCT <= 0.9x", "avg JCT (h)", 0.9),
    Goal("critical p99 wait <= 1.1x or <= 5 min", "p99 wait critical (min, with requeues)", 1.1, 300.0),
    Goal("high p99 wait <= 1.1x or <= 5 min", "p99 wait high (min, with requeues)", 1.1, 300.0),
    Goal("lost GPU-hours <= 0.7x", "lost GPU-hours", 0.7),
    Goal("cost per useful GPU-hour <= 0.97x", "cost / useful GPU-h", 0.97),
    Goal("low-class average JCT <= 1.2x", "avg JCT low (h)", 1.2),
    Goal("finish-time fairness (worst team) >= 1.0x", "finish-time fairness, worst team", 1.0),
    Goal("Jain's fairness >= 1.0x", "Jain's fairness", 1.0),
)


def best_peer(metric: str, runs: dict[str, dict[str, Any]]) -> tuple[str, float]:
    value, lower = _METRIC[metric]
    values = {p: value(runs[p]) for p in PEERS if p in runs}
    name = (min if lower else max)(values, key=lambda p: values[p])
    return name, values[name]


def goal_value(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[float, bool, str]:
    """(the value compared, met, how): the ratio to the best peer on the metric, oriented so
    that the goal reads `<= target` for lower-is-better metrics and `>= target` otherwise; the
    absolute value when the best peer's is 0."""
    value, lower = _METRIC[goal.metric]
    ours = value(runs["spotline"])
    peer, theirs = best_peer(goal.metric, runs)
    if goal.absolute_s is not None and ours <= goal.absolute_s:
        return ours, True, f"{ours / 60:.1f} min absolute"
    if theirs == 0 or ours == 0:
        if lower:
            return ours, ours <= theirs, f"absolute {ours:.3g} vs {theirs:.3g} ({peer})"
        return ours, ours >= theirs, f"absolute {ours:.3g} vs {theirs:.3g} ({peer})"
    if lower:
        r = ours / theirs
        return r, r <= goal.target, f"x{r:.3f} vs {peer}"
    # Higher is better (Jain), or a lower-is-better fairness read as its inverse (FTF: best / ours).
    r = ours / theirs
    return r, r >= goal.target, f"x{r:.3f} vs {peer}"


def _goal_row(goal: Goal, per_sample: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A goal over the samples: the mean ratio and its CI, and in how many samples it is met."""
    outcomes = [goal_value(goal, r) for r in per_sample]
    mean, half = interval([_goal_ratio(goal, r) for r in per_sample])
    return {
        "mean_ratio": mean,
        "ci95": half,
        "met_in_samples": sum(met for _, met, _ in outcomes),
        "samples": len(outcomes),
        "met": all(met for _, met, _ in outcomes),
        "per_sample": [how for _, _, how in outcomes],
    }


def _goal_ratio(goal: Goal, runs: dict[str, dict[str, Any]]) -> float:
    """The per-sample ratio the goal's mean is taken over (inverted for lower-is-better fairness
    so that >= 1.0 means at least as fair)."""
    value, _ = _METRIC[goal.metric]
    ours = value(runs["spotline"])
    _, theirs = best_peer(goal.metric, runs)
    if goal.metric == "finish-time fairness, worst team":
        return theirs / ours if ours > 0 else math.inf
    if theirs == 0:
        return 1.0 if ours == 0 else math.inf
    return ours / theirs


def interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (t over the samples)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.inf, math.nan
    mean = statistics.fmean(finite)
    if len(finite) < 2:
        return mean, math.nan
    return mean, T95.get(len(finite) - 1, 1.96) * statistics.stdev(finite) / math.sqrt(len(finite))


# --- running ---------------------------------------------------------------------------------


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
        goals[goal.label] = {**_goal_row(goal, per_sample), "moving to Spot": _goal_row(goal, with_moves)}
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
        "jct_floor_above_goal_in_samples": sum(f > 0.9 for f in floors),
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


COLUMNS: tuple[str, ...] = (
    "avg JCT (h)",
    "avg JCT low (h)",
    "p99 wait high (min, with requeues)",
    "lost GPU-hours",
    "cost / useful GPU-h",
    "finish-time fairness, worst team",
    "Jain's fairness",
)


def ablations(sample: Sample) -> dict[str, dict[str, Any]]:
    """Spotline without each mechanism, each victim strategy, and the best peer both ways."""
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
    for stop in VictimStop:
        runs = run_sample(sample, PEERS, settings=SimSettings(victim_stop=stop))
        for metric in COLUMNS:
            peer, _ = best_peer(metric, runs)
            out.setdefault(f"best peer per metric, {stop.value}", {})[metric] = runs[peer]
    return out


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


# --- printing --------------------------------------------------------------------------------


def _fmt(mean: float, half: float = math.nan, scale: float = 1.0, digits: int = 2) -> str:
    if math.isinf(mean):
        return "inf"
    text = f"{mean / scale:.{digits}f}"
    if not math.isnan(half) and half > 0:
        text += f" ± {half / scale:.{digits}f}"
    return text


def _pair(value: Any) -> tuple[float, float]:
    mean, half = value
    return float(mean), float(half)


def _scale(metric: str) -> float:
    return next(s for label, _, _, s in METRICS if label == metric)


def print_evaluation(results: dict[str, Any], console: Console) -> None:
    console.print("Evaluation set: " + "; ".join(results["samples"]))
    console.print(
        "Tuning set (defaults chosen there only): "
        + "; ".join(s.label for s in TUNING)
        + "; searched by bench/tune.py on: "
        + "; ".join(f"{s.label} ({s.gpus} GPUs)" for s in TUNING_REDUCED)
    )
    n = results["n_by_class"]
    console.print("jobs per class over the set: " + ", ".join(f"{c} n={n[c]:,}" for c in n))
    table = Table(title="Competent peers vs Spotline: mean ± 95% CI over the evaluation samples")
    table.add_column("metric")
    for name in EVAL_POLICIES:
        table.add_column(name, justify="right")
    table.add_column("spotline / best peer", justify="right")
    for label, _, _, scale in METRICS:
        cells = [_fmt(*_pair(results["policies"][n][label]), scale=scale) for n in EVAL_POLICIES]
        table.add_row(label, *cells, _fmt(*_pair(results["ratios"][label]), digits=3))
    console.print(table)
    goals = Table(title="Goals against the best competent peer per metric (met = met in every sample)")
    for column in ("goal", "mean ratio ± CI", "met in samples", "met", "opt-in: moving to Spot (1 h)"):
        goals.add_column(column)
    for label, row in results["goals"].items():
        moved = row["moving to Spot"]
        goals.add_row(
            label,
            _fmt(row["mean_ratio"], row["ci95"], digits=3),
            f"{row['met_in_samples']}/{row['samples']}",
            "yes" if row["met"] else "NO",
            f"{_fmt(moved['mean_ratio'], moved['ci95'], digits=3)},"
            f" met in {moved['met_in_samples']}/{row['samples']}",
        )
    console.print(goals)
    reach = results["reach"]
    floor = _fmt(*_pair(reach["jct_floor_over_best_peer"]), digits=3)
    console.print(
        f"average JCT floor (every job started at submission, never stopped) over the best peer's: {floor};"
        f" above the 0.9x goal in {reach['jct_floor_above_goal_in_samples']}/{len(results['samples'])}"
        " samples, where no policy that runs jobs at their trace speed can meet it"
    )
    lost = _fmt(*_pair(reach["lost_gpu_hours_over_best_preempting_peer"]), digits=3)
    console.print(
        f"lost GPU-hours over the best peer that preempts (FIFO never preempts; it loses only to Spot"
        f" interruptions): {lost}"
    )


def _cell(metrics: dict[str, Any], metric: str) -> float:
    """`metric` of a row: read from the row's own metrics, or from the run it names for that
    metric (the best peer per metric)."""
    source = metrics[metric] if metric in metrics and isinstance(metrics[metric], dict) else metrics
    value, _ = _METRIC[metric]
    return float(value(source))


def over_samples(
    per_sample: Sequence[dict[str, dict[str, Any]]], reference: Callable[[str], str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Rows of several samples (the same labels in each) as, per cell, the mean over the samples
    and the mean and 95% CI of its ratio to the cell of row `reference(label)` in the same sample
    (a paired comparison: the samples differ more from each other than the variants do; none for
    the reference row itself)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for label in per_sample[0]:
        base_label = reference(label)
        out[label] = {}
        for metric in COLUMNS:
            values = [_cell(rows[label], metric) for rows in per_sample]
            mean, _ = interval(values)
            cell = {"mean": mean, "ratio": math.nan, "ratio_ci": math.nan}
            if base_label != label:
                bases = [_cell(rows[base_label], metric) for rows in per_sample]
                ratios = [v / b for v, b in zip(values, bases, strict=True) if b != 0]
                if ratios:
                    cell["ratio"], cell["ratio_ci"] = interval(ratios)
            out[label][metric] = cell
    return out


def print_rows(title: str, rows: dict[str, dict[str, Any]], console: Console) -> None:
    """A table of variants: each cell a value, or a mean over samples with its ratio to the
    reference row (`over_samples`)."""
    table = Table(title=title)
    table.add_column("variant")
    for metric in COLUMNS:
        table.add_column(metric, justify="right")
    for label, metrics in rows.items():
        cells = []
        for metric in COLUMNS:
            cell = metrics.get(metric)
            if isinstance(cell, dict) and "ratio" in cell:
                text = _fmt(cell["mean"], scale=_scale(metric))
                if math.isfinite(cell["ratio"]):
                    text += f" x{_fmt(cell['ratio'], cell['ratio_ci'])}"
                cells.append(text)
            else:
                cells.append(_fmt(_cell(metrics, metric), scale=_scale(metric)))
        table.add_row(label, *cells)
    console.print(table)


def print_churn(results: dict[str, dict[str, dict[str, Any]]], console: Console) -> dict[str, bool]:
    table = Table(
        title=f"Spot churn: cost per useful GPU-h / deadline miss rate ({CHURN_SAMPLE.label},"
        f" {CHURN_SAMPLE.gpus} GPUs, 75% Spot)"
    )
    table.add_column("level")
    table.add_column("interruptions (spotline)", justify="right")
    names = list(next(iter(results.values())))
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("goal met", justify="right")
    verdicts = {}
    for level, runs in results.items():
        cost_ok = runs["spotline"]["cost_per_useful_gpu_hour"] <= min(
            runs[p]["cost_per_useful_gpu_hour"] for p in PEERS
        )
        miss_ok = runs["spotline"]["deadline_miss_rate"] <= min(runs[p]["deadline_miss_rate"] for p in PEERS)
        verdicts[level] = cost_ok and miss_ok
        cells = [
            f"{runs[n]['cost_per_useful_gpu_hour']:.3f} / {runs[n]['deadline_miss_rate']:.3f}" for n in names
        ]
        table.add_row(
            level,
            str(runs["spotline"]["interruptions"]),
            *cells,
            (
                "yes"
                if verdicts[level]
                else f"NO (cost {'ok' if cost_ok else 'worse'}, misses {'ok' if miss_ok else 'worse'})"
            ),
        )
    console.print(table)
    return verdicts


def _cpu_s() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    console = Console(width=max(Console().width, 200))
    began = time.perf_counter()
    samples = available(EVALUATION)
    if len(samples) < len(EVALUATION):
        console.print("(the Philly trace is missing: the evaluation runs on the synthetic traces only)")
    results = evaluate(samples)
    print_evaluation(results, console)
    ablated = ", ".join(f"s{s.seed}" for s in ABLATION_SAMPLES)
    where = f"synth {ABLATION_SAMPLE.jobs} jobs load {ABLATION_SAMPLE.load:g}, {ABLATION_SAMPLE.gpus} GPUs"
    print_rows(
        f"Ablations ({where}, seeds {ablated}): mean over the seeds, x its ratio to the defaults'"
        " (mean ± 95% CI of the ratios, seed by seed)",
        over_samples([ablations(s) for s in ABLATION_SAMPLES], lambda _: "spotline (defaults)"),
        console,
    )
    print_rows(
        f"Slurm's time-limit model ({where}, seeds {ablated}): sensitivity; mean, x its ratio to"
        " the same policy's with the uniform model",
        over_samples(
            [slurm_sensitivity(s) for s in ABLATION_SAMPLES],
            lambda label: "spotline, uniform" if label.startswith("spotline") else "uniform",
        ),
        console,
    )
    verdicts = print_churn(churn(CHURN_SAMPLE), console)
    console.print(
        "Spot churn goal (cost and deadline misses no worse than the best peer at every level): "
        + (
            "met"
            if all(verdicts.values())
            else "NOT met at " + ", ".join(k for k, v in verdicts.items() if not v)
        )
    )
    if not QUICK and not REDUCED:
        result = speed()
        if result is not None:
            idle = max(result["cpu_s"] / 2, *(r["cpu_s"] for r in result["per_policy"].values()))
            console.print(
                f"speed: whole Philly trace, {result['jobs']:,} jobs"
                f" x {len(POLICIES)} policies,"
                f" {result['workers']} workers: {result['wall_s']:.1f} s wall,"
                f" {result['cpu_s']:.1f} CPU-s in all (on 2 idle cores about {idle:.1f} s: half the"
                f" CPU-s or the longest policy's), {result['events']:,} events, load average"
                f" {os.getloadavg()[0]:.1f}"
            )
            for name, r in result["per_policy"].items():
                console.print(
                    f"  {name:16s} {r['wall_s']:6.1f} s wall {r['cpu_s']:6.1f} CPU-s"
                    f"  {r['events']:>8,} events  {r['passes']:>8,} passes"
                )
    console.print(
        f"policy bench: {time.perf_counter() - began:.0f} s wall, {_cpu_s():.0f} CPU-s (this process and"
        f" its finished workers), load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
