"""What the policy bench runs: the samples (tuning, evaluation, ablation, churn), the traces they
read, and the metrics and goals its tables compare."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import goals
from spotline.sim.peers import KUEUE_SETUPS
from spotline.trace import Trace, parse_when, read_philly
from spotline.trace.synth import synth_trace

REPO = Path(__file__).resolve().parents[2]
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
PEERS = ("fifo", "priority-random", "kueue", *KUEUE_SETUPS, "slurm")
EVAL_POLICIES = (*PEERS, "spotline")
T95 = goals.T95
interval = goals.interval
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
# What the tuning scripts search on by default on this 2-core machine: the tuning set reduced to
# the first four days of its Philly window (`bench/tune.py`, Spotline's settings) and 2,000-job
# synthetic traces on 128 GPUs (with the window: `bench/tune_slurm.py`, the Slurm peer's knobs).
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
# The evaluation set's Philly windows, whatever the mode (`bench.spot_pools` replays their start).
EVALUATION_PHILLY: tuple[Sample, ...] = tuple(s for s in EVALUATION if s.kind == "philly")
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
    (
        "preemption churn (lost GPU-h / 1k useful)",
        lambda m: m["preemption_churn_per_1k_useful_gpu_h"],
        True,
        1.0,
    ),
    ("Spot waste (lost GPU-h / 1k Spot GPU-h)", lambda m: m["spot_waste_per_1k_spot_gpu_h"], True, 1.0),
    ("move loss (GPU-h)", lambda m: m["move_loss_gpu_hours"], True, 1.0),
    ("priced loss (On-Demand GPU-h)", lambda m: m["priced_loss_on_demand_gpu_h"], True, 1.0),
    ("cost / useful GPU-h", lambda m: m["cost_per_useful_gpu_hour"], True, 1.0),
    ("Jain's fairness", lambda m: m["jain_fairness"], False, 1.0),
    ("finish-time fairness, worst team", lambda m: m["ftf_max"], True, 1.0),
    ("finish-time fairness, Jain", lambda m: m["ftf_jain"], False, 1.0),
    ("deadline miss rate", lambda m: m["deadline_miss_rate"], True, 1.0),
)
METRIC = {label: (value, lower) for label, value, lower, _ in METRICS}


# The goals: one table for every policy bench (`bench.goals`), judged against this bench's peers.
GOALS = goals.GOALS


def best_peer(metric: str, runs: dict[str, dict[str, Any]]) -> tuple[str, float]:
    value, lower = METRIC[metric]
    values = {p: value(runs[p]) for p in PEERS if p in runs}
    name = (min if lower else max)(values, key=lambda p: values[p])
    return name, values[name]


def goal_row(goal: goals.Goal, per_sample: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A goal over the samples: the mean ratio and its CI, and in how many samples it is met."""
    return goals.goal_row(goal, per_sample, PEERS)


def goal_rows_for(per_sample: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return goals.goal_rows(per_sample, PEERS)


COLUMNS: tuple[str, ...] = (
    "avg JCT (h)",
    "avg JCT low (h)",
    "p99 wait high (min, with requeues)",
    "lost GPU-hours",
    "cost / useful GPU-h",
    "finish-time fairness, worst team",
    "Jain's fairness",
)
