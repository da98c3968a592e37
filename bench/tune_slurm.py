"""The Slurm peer's knobs (`SlurmKnobs`), tuned on the tuning set: `python -m bench.tune_slurm`.

Spotline's own settings are tuned by `python -m bench.tune`, which runs `spotline tune`'s tuner.
The Slurm peer is not Spotline: its knobs are slurm.conf's (priority weights, the age cap, the
backfill depth), which no `SchedulerConfig` setting expresses, and its objective is relative to
the other peers, so it keeps this search of its own.

On the tuning set only (`policy_bench.TUNING`: Philly 2017-10-02..15 and synthetic seeds 101-102;
never the evaluation set): `--budget` seeded random draws from its knob space, its earlier
defaults as draw 0 (`SLURM_BEFORE`; the draws are then the same in every rerun); then the best
draw refined over the backfill depth, four runs. Kueue's three setups are scored beside it (each
is a peer in the evaluation anyway); FIFO and priority-random have no knob.

The objective: the sum over the samples and the goal metrics of log(value / reference), where the
reference is, per sample and metric, the best value of the peers at their defaults (lower is
better; higher-is-better metrics enter inverted; waits are floored at 5 minutes, lost GPU-hours
at 1, as the goals read them). Lower is better.

`--reduced` (the default on this 2-core machine): the synthetic samples at 2,000 jobs on 128
GPUs and the first four days of the Philly window (2017-10-02..05); `--full`: the tuning set as
`make bench` would evaluate it. The record of the run that chose today's knobs is
`bench/data/tuning.json` (its `slurm` and `slurm_best`; made when this search also drew
Spotline's settings).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import policy_bench as pb
from spotline.sim import SimSettings
from spotline.sim.model import SlurmKnobs

# (label, read it from a policy's metrics, True when lower is better, floor)
OBJECTIVE: tuple[tuple[str, Callable[[dict[str, Any]], float], bool, float], ...] = (
    ("avg JCT", lambda m: m["avg_jct_s"], True, 1.0),
    ("low avg JCT", lambda m: m["avg_jct_s_by_priority"]["low"], True, 1.0),
    ("critical p99 wait", lambda m: m["wait_p99_s_by_priority"]["critical"], True, 300.0),
    ("high p99 wait", lambda m: m["wait_p99_s_by_priority"]["high"], True, 300.0),
    ("lost GPU-h", lambda m: m["lost_gpu_hours"], True, 1.0),
    ("cost / useful GPU-h", lambda m: m["cost_per_useful_gpu_hour"], True, 1e-6),
    ("FTF worst team", lambda m: m["ftf_max"], True, 1e-6),
    ("Jain", lambda m: m["jain_fairness"], False, 1e-6),
)

REDUCED_SAMPLES = pb.TUNING_REDUCED
PEERS_AT_DEFAULTS = ("fifo", "priority-random", "kueue-classic", "kueue-bwc", "kueue-fair", "slurm")


# Draw 0 of the Slurm peer: its defaults before this tuning (so a rerun draws the same 12).
SLURM_BEFORE = SlurmKnobs(
    weight_age=1000.0, weight_fairshare=2000.0, max_age_s=7 * 86400.0, bf_reservations=16
)


# The backfill depths the chosen draw is refined over.
BF_RESERVATIONS = (1, 4, 16, 64)


def draw_slurm(rng: random.Random) -> SlurmKnobs:
    """One draw from the Slurm peer's knob space (slurm.conf)."""
    return SlurmKnobs(
        weight_age=rng.choice([500.0, 1000.0, 2000.0, 4000.0]),
        weight_fairshare=rng.choice([500.0, 1000.0, 2000.0, 4000.0]),
        max_age_s=rng.choice([86400.0, 7 * 86400.0]),
        bf_reservations=rng.choice(BF_RESERVATIONS),
    )


def objective(metrics: Sequence[dict[str, Any]], references: Sequence[dict[str, float]]) -> float:
    total = 0.0
    for m, ref in zip(metrics, references, strict=True):
        for label, read, lower, floor in OBJECTIVE:
            ours, theirs = max(read(m), floor), max(ref[label], floor)
            total += math.log(ours / theirs) if lower else math.log(theirs / ours)
    return total


def _reference(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {}
    for label, read, lower, _ in OBJECTIVE:
        values = [read(runs[p]) for p in PEERS_AT_DEFAULTS]
        out[label] = min(values) if lower else max(values)
    return out


def _one(job: tuple[pb.Sample, str, SimSettings | None]) -> dict[str, Any]:
    sample, policy, settings = job
    pb.WORKERS = 1
    return pb.run_sample(sample, [policy], settings=settings)[policy]


def _run_all(jobs: list[tuple[pb.Sample, str, SimSettings | None]], workers: int) -> list[dict[str, Any]]:
    if workers <= 1:
        return [_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_one, jobs))


# The sizes of the Spotline choices this search once drew from the same stream before Slurm's
# (age, fair share, attained, its norm, strategy, margin, delay, protection, fresh checkpoint,
# Spot cost: the knob space of the record's time).
_SPOTLINE_CHOICES = (3, 4, 4, 3, 2, 3, 4, 3, 3, 2)


def _skip_spotline_draws(rng: random.Random, draws: int) -> None:
    """Advance `rng` past those Spotline draws, so Slurm's draws stay the record's."""
    for _ in range(draws):
        for size in _SPOTLINE_CHOICES:
            rng.choice(range(size))


def tune(samples: Sequence[pb.Sample], budget: int, seed: int, workers: int) -> dict[str, Any]:
    began = time.perf_counter()
    rng = random.Random(f"spotline-tune:{seed}")
    _skip_spotline_draws(rng, budget - 1)
    slurm = [SLURM_BEFORE] + [draw_slurm(rng) for _ in range(budget - 1)]
    base: list[tuple[pb.Sample, str, SimSettings | None]] = [
        (s, p, None) for s in samples for p in PEERS_AT_DEFAULTS
    ]
    flat = _run_all(base, workers)
    references = [
        _reference({p: flat[i * len(PEERS_AT_DEFAULTS) + k] for k, p in enumerate(PEERS_AT_DEFAULTS)})
        for i in range(len(samples))
    ]

    def score_all(settings: Sequence[SimSettings]) -> list[float]:
        jobs = [(s, "slurm", st) for st in settings for s in samples]
        results = _run_all(jobs, workers)
        n = len(samples)
        return [objective(results[i * n : (i + 1) * n], references) for i in range(len(settings))]

    slurm_scores = score_all([SimSettings(slurm=k) for k in slurm])
    # Refinement: the best draw with the backfill depth at each of its values.
    slurm_drawn = min(range(len(slurm)), key=lambda i: slurm_scores[i])
    slurm_refined = [replace(slurm[slurm_drawn], bf_reservations=n) for n in BF_RESERVATIONS]
    slurm += slurm_refined
    slurm_scores += score_all([SimSettings(slurm=k) for k in slurm_refined])
    slurm_best = min(range(len(slurm)), key=lambda i: slurm_scores[i])
    kueue_scores = {
        name: objective(
            [flat[i * len(PEERS_AT_DEFAULTS) + PEERS_AT_DEFAULTS.index(name)] for i in range(len(samples))],
            references,
        )
        for name in ("kueue-classic", "kueue-bwc", "kueue-fair")
    }
    return {
        "samples": [s.label for s in samples],
        "budget": budget,
        "refined": {"slurm": "bf_reservations", "runs": len(BF_RESERVATIONS)},
        "seed": seed,
        "slurm": [{"score": sc, "knobs": asdict(k)} for k, sc in zip(slurm, slurm_scores, strict=True)],
        "slurm_best": slurm_best,
        "kueue": kueue_scores,
        "wall_s": time.perf_counter() - began,
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"tuning set: {'; '.join(result['samples'])}",
        f"budget {result['budget']} draws, seed {result['seed']}; then the best draw with"
        f" {result['refined']['slurm']} at each of its {result['refined']['runs']} values"
        f" (rows after #{result['budget'] - 1})",
        "objective (lower is better; 0 = the best peer at its defaults on every metric):"
        f" wall {result['wall_s']:.0f} s",
    ]
    for i, row in enumerate(result["slurm"]):
        mark = " <- chosen" if i == result["slurm_best"] else ""
        lines.append(f"  slurm    #{i:2d} {row['score']:+8.3f}  {row['knobs']}{mark}")
    for name, score in result["kueue"].items():
        lines.append(f"  {name:13s} {score:+8.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=12, help="draws, the earlier defaults included")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the whole tuning set (slow)")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    samples = pb.available(pb.TUNING if args.full else REDUCED_SAMPLES)
    if args.budget < 1:
        parser.error("--budget must be at least 1")
    result = tune(samples, args.budget, args.seed, args.workers)
    print(report(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
