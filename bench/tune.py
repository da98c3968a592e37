"""Tuning kept apart from evaluation: `python -m bench.tune`.

Chooses `SchedulerConfig`'s defaults, and the Slurm peer's knobs (`SlurmKnobs`), on the tuning set
only (`policy_bench.TUNING`: Philly 2017-10-02..15 and synthetic seeds 101-102; never the
evaluation set). Every policy gets the same budget on the same samples: `--budget` seeded random
draws from its knob space, its present defaults as draw 0 (`SchedulerConfig()`, `SLURM_BEFORE`;
the draws are then the same in every rerun). Kueue's knob space is its three setups
(all of them, fewer than the budget), and each setup is a peer in the evaluation anyway; FIFO and
priority-random have no knob. Then the best draw of Spotline and of Slurm is refined over one knob,
four runs each: Spotline's shortest-declared-first weight, Slurm's backfill depth.

The objective, the same for every policy: the sum over the samples and the goal metrics of
log(value / reference), where the reference is, per sample and metric, the best value of the
peers at their defaults (lower is better; higher-is-better metrics enter inverted; waits are
floored at 5 minutes, lost GPU-hours at 1, as the goals read them). Lower is better.

Then each lever is switched off in Spotline's best draw, to check that it pays on the tuning set
(design-notes/tuning.md):
shortest declared run time first, moving On-Demand jobs to Spot.

`--reduced` (the default on this 2-core machine): the synthetic samples at 2,000 jobs on 128
GPUs and the first four days of the Philly window (2017-10-02..05); `--full`: the tuning set as
`make bench` would evaluate it.
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
from spotline.domain import SchedulerConfig
from spotline.domain.config import PriorityWeights, VictimStrategy
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


# The victim strategies the simulator evaluates as production runs them: `random`, and
# `least-lost-work`, whose input (the time since the last durable checkpoint) the simulator keeps
# as the checkpoint events keep it in production. `lowest-utilization` orders by the GPU
# utilization the agents report, and `least-remaining-time` by the progress they report (or a
# declared runtime); simulated jobs report neither, so in the simulator both fall back to
# effective priority, and a tuning that chose one would choose an ordering production never
# runs. Both stay ablation rows in `make bench`.
SIM_FAITHFUL_STRATEGIES = (VictimStrategy.LEAST_LOST_WORK, VictimStrategy.RANDOM)


# The shortest-declared-first weight's values, and the Slurm backfill depths: each policy's
# chosen draw is then refined over one knob, the same number of runs for both (`refine`).
SHORTEST = (0.0, 200.0, 400.0, 900.0)
BF_RESERVATIONS = (1, 4, 16, 64)


def draw_spotline(rng: random.Random, shortest_rng: random.Random) -> SchedulerConfig:
    """One draw from Spotline's knob space."""
    weights = PriorityWeights(
        age=rng.choice([300.0, 600.0, 900.0]),
        fairshare=rng.choice([0.0, 100.0, 400.0, 800.0]),
        # From its own stream, so the draws of the other knobs do not depend on it.
        shortest=shortest_rng.choice(SHORTEST),
    )
    return SchedulerConfig(
        weights=weights,
        strategy=rng.choice(SIM_FAITHFUL_STRATEGIES),
        preemption_delay_s=rng.choice([0.0, 60.0, 180.0, 600.0]),
        protection_period_s=rng.choice([300.0, 600.0, 1800.0]),
    )


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


def _one(job: tuple[pb.Sample, str, SchedulerConfig | None, SimSettings | None]) -> dict[str, Any]:
    sample, policy, config, settings = job
    pb.WORKERS = 1
    return pb.run_sample(sample, [policy], settings=settings, config=config)[policy]


def _run_all(
    jobs: list[tuple[pb.Sample, str, SchedulerConfig | None, SimSettings | None]], workers: int
) -> list[dict[str, Any]]:
    if workers <= 1:
        return [_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_one, jobs))


def tune(samples: Sequence[pb.Sample], budget: int, seed: int, workers: int) -> dict[str, Any]:
    began = time.perf_counter()
    rng = random.Random(f"spotline-tune:{seed}")
    shortest_rng = random.Random(f"spotline-tune:{seed}:shortest")
    spotline = [SchedulerConfig()] + [draw_spotline(rng, shortest_rng) for _ in range(budget - 1)]
    slurm = [SLURM_BEFORE] + [draw_slurm(rng) for _ in range(budget - 1)]
    base: list[tuple[pb.Sample, str, SchedulerConfig | None, SimSettings | None]] = [
        (s, p, None, None) for s in samples for p in PEERS_AT_DEFAULTS
    ]
    flat = _run_all(base, workers)
    references = [
        _reference({p: flat[i * len(PEERS_AT_DEFAULTS) + k] for k, p in enumerate(PEERS_AT_DEFAULTS)})
        for i in range(len(samples))
    ]

    def score_all(
        policy: str, configs: Sequence[SchedulerConfig | None], settings: Sequence[SimSettings | None]
    ) -> list[float]:
        jobs = [(s, policy, c, st) for c, st in zip(configs, settings, strict=True) for s in samples]
        results = _run_all(jobs, workers)
        n = len(samples)
        return [objective(results[i * n : (i + 1) * n], references) for i in range(len(configs))]

    spotline_scores = score_all("spotline", spotline, [None] * len(spotline))
    slurm_scores = score_all("slurm", [None] * len(slurm), [SimSettings(slurm=k) for k in slurm])
    # Refinement: the best draw of each policy with one knob set to each of its values (the
    # same number of runs for each), and the best of those is chosen.
    drawn_best = min(range(len(spotline)), key=lambda i: spotline_scores[i])
    refined = [
        spotline[drawn_best].model_copy(
            update={"weights": spotline[drawn_best].weights.model_copy(update={"shortest": w})}
        )
        for w in SHORTEST
    ]
    spotline += refined
    spotline_scores += score_all("spotline", refined, [None] * len(refined))
    slurm_drawn = min(range(len(slurm)), key=lambda i: slurm_scores[i])
    slurm_refined = [replace(slurm[slurm_drawn], bf_reservations=n) for n in BF_RESERVATIONS]
    slurm += slurm_refined
    slurm_settings = [SimSettings(slurm=k) for k in slurm_refined]
    slurm_scores += score_all("slurm", [None] * len(slurm_refined), slurm_settings)
    best = min(range(len(spotline)), key=lambda i: spotline_scores[i])
    chosen = spotline[best]
    on_shortest = chosen.weights.shortest or 200.0
    # Each lever on and off in the chosen draw (one of the two is the chosen draw itself).
    levers: dict[str, tuple[SchedulerConfig, SchedulerConfig]] = {
        "shortest declared first": (
            chosen.model_copy(
                update={"weights": chosen.weights.model_copy(update={"shortest": on_shortest})}
            ),
            chosen.model_copy(update={"weights": chosen.weights.model_copy(update={"shortest": 0.0})}),
        ),
        "moving to Spot (jobs with 1 h or more left)": (
            chosen.model_copy(
                update={"move_to_spot_min_remaining_s": chosen.move_to_spot_min_remaining_s or 3600.0}
            ),
            chosen.model_copy(update={"move_to_spot_min_remaining_s": 0.0}),
        ),
    }
    pairs = [c for pair in levers.values() for c in pair]
    scores = score_all("spotline", pairs, [None] * len(pairs))
    lever_scores = {name: (scores[2 * i], scores[2 * i + 1]) for i, name in enumerate(levers)}
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
        "refined": {"spotline": "weights.shortest", "slurm": "bf_reservations", "runs": len(SHORTEST)},
        "seed": seed,
        "spotline": [
            {"score": sc, "config": json.loads(c.model_dump_json())}
            for c, sc in zip(spotline, spotline_scores, strict=True)
        ],
        "spotline_best": best,
        "levers": {k: {"on": on, "off": off} for k, (on, off) in lever_scores.items()},
        "slurm": [{"score": sc, "knobs": asdict(k)} for k, sc in zip(slurm, slurm_scores, strict=True)],
        "slurm_best": slurm_best,
        "kueue": kueue_scores,
        "wall_s": time.perf_counter() - began,
    }


def _diff(config: dict[str, Any], default: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in config.items():
        if isinstance(value, dict):
            out += _diff(value, default[key], f"{prefix}{key}.")
        elif value != default[key]:
            out.append(f"{prefix}{key}={value}")
    return out


def report(result: dict[str, Any]) -> str:
    lines = [
        f"tuning set: {'; '.join(result['samples'])}",
        f"budget {result['budget']} draws per policy, seed {result['seed']}",
    ]
    refined = result.get("refined")
    if refined:
        lines.append(
            f"then each policy's best draw with one knob at each of its {refined['runs']} values"
            f" (Spotline: {refined['spotline']}; Slurm: {refined['slurm']}):"
            f" rows after #{result['budget'] - 1}"
        )
    lines.append(
        "objective (lower is better; 0 = the best peer at its defaults on every metric):"
        f" wall {result['wall_s']:.0f} s"
    )
    default = result["spotline"][0]["config"]
    for i, row in enumerate(result["spotline"]):
        mark = " <- chosen" if i == result["spotline_best"] else ""
        changes = ", ".join(_diff(row["config"], default)) or "(the defaults)"
        lines.append(f"  spotline #{i:2d} {row['score']:+8.3f}  {changes}{mark}")
    for label, row in result["levers"].items():
        verdict = "helps" if row["on"] < row["off"] else "does not help"
        lines.append(f"  lever {label}: on {row['on']:+8.3f}, off {row['off']:+8.3f}: {verdict}")
    for i, row in enumerate(result["slurm"]):
        mark = " <- chosen" if i == result["slurm_best"] else ""
        lines.append(f"  slurm    #{i:2d} {row['score']:+8.3f}  {row['knobs']}{mark}")
    for name, score in result["kueue"].items():
        lines.append(f"  {name:13s} {score:+8.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=12, help="draws per policy, the defaults included")
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
