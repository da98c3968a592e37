"""The single-job Spot-under-deadline table, per trace family, with 95% confidence intervals.

`python -m bench.deadline_families` runs Spotline's deadline guard, Uniform Progress (UP), greedy
and the omniscient optimum on the same seeded start hours of each trace family, with the paper's
settings (C = 48 h, D = 0.2 h, K = 3), and prints for each family and C/R:

- each policy's mean cost (fraction of On-Demand) with its 95% CI over the starts, and its misses;
- Spotline's mean cost less the cheaper simple policy's (UP or greedy, whichever is cheaper on
  those starts), and its gap to the optimum against that policy's gap, each with its CI, and the
  ratio of the gaps with its CI;
- the three single-job goals, each met or missed: 0 misses; mean cost <= min(UP, greedy); gap
  <= 0.5x the best simple policy's gap.

The families:

- the repository's traces (`spotline/sim/data/availability/`): the eight single-node traces of
  2022-10-26 (600 s) and the three 16-node traces of 2023-08-27 (300 s, Spot there when at least
  one instance is). The guard was tuned on the first half of each, so starts are drawn from
  windows in their second half (`eval`);
- held out, never tuned on (`bench/data/spot-traces/`, SkyPilot's files, gzipped): the 45-day
  single-node V100 traces of 2023-02-15 in nine zones (195 s), and the 4-node V100 preemption
  traces of 2023-08-03 in three zones (300 s); starts anywhere in the trace (`all`).

CIs are percentile bootstraps over the starts (paired: each resample takes the same starts for
every policy; 2,000 resamples, seeded). Options: `--starts N` per trace, `--ratios`, `--families`
(comma-separated keys), `--seed`, `--json OUT`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.deadline_bench import CHANGEOVER_H, JOB_H, PRICE_RATIO, start_hours
from spotline.sim.availability import AvailabilityTrace, load_shipped, parse_availability, shipped_traces
from spotline.sim.deadline import JobSetup, Outcome, simulate_deadline

DATA = Path(__file__).resolve().parent / "data" / "spot-traces"
POLICIES = ("spotline", "uniform-progress", "greedy", "omniscient")
SIMPLE = ("uniform-progress", "greedy")
DEFAULT_RATIOS = (0.6, 0.75, 0.9, 0.95)
RESAMPLES = 2000


@dataclass(frozen=True)
class Family:
    key: str
    title: str
    held_out: bool
    part: str  # where the starts lie: the evaluation half (tuned families) or the whole trace
    load: Callable[[], list[AvailabilityTrace]]


def _shipped(prefix: str) -> Callable[[], list[AvailabilityTrace]]:
    return lambda: [load_shipped(n) for n in shipped_traces() if n.startswith(prefix)]


def _bundled(pattern: str) -> Callable[[], list[AvailabilityTrace]]:
    def load() -> list[AvailabilityTrace]:
        paths = sorted(DATA.glob(pattern))
        if not paths:
            raise FileNotFoundError(f"no trace matches {DATA / pattern}")
        return [
            parse_availability(gzip.decompress(p.read_bytes()).decode(), p.name.removesuffix(".json.gz"))
            for p in paths
        ]

    return load


FAMILIES = (
    Family("aws-2022-10-1node", "AWS 2022-10, 1 node, p2/p3 in us-west-2a/b (600 s; repo, eval half)",
           False, "eval", _shipped("1-node__")),
    Family("aws-2023-08-16node", "AWS 2023-08, 16-node p3.2xlarge pools (300 s; repo, eval half)",
           False, "eval", _shipped("16-node__")),
    Family("aws-2023-02-1node", "AWS 2023-02, 1 node p3.2xlarge, 9 zones (195 s; held out)",
           True, "all", _bundled("availability__1-node__aws-02-15-2023__*.json.gz")),
    Family("aws-2023-08-4node-preempt", "AWS 2023-08, 4-node p3.2xlarge preemption (300 s; held out)",
           True, "all", _bundled("preemption__4-node__aws-08-03-2023__*.json.gz")),
)  # fmt: skip


def run_family(
    family: Family, ratio: float, starts: int, seed: int, policies: Sequence[str] = POLICIES
) -> dict[str, list[Outcome]]:
    """Every policy on the same starts of every trace of the family (paired by position)."""
    setup = JobSetup(JOB_H, JOB_H / ratio, CHANGEOVER_H, PRICE_RATIO)
    out: dict[str, list[Outcome]] = {p: [] for p in policies}
    for trace in family.load():
        hours = start_hours(trace, setup.deadline_h, starts, seed, family.part)
        for policy in policies:
            out[policy].extend(simulate_deadline(trace, setup, hours, policy))
    return out


def _ci(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(low), float(high)


def summarise(results: dict[str, list[Outcome]], seed: int) -> dict[str, object]:
    """Means with paired bootstrap CIs, misses, gaps and the goal rows for one family and C/R."""
    costs = {p: np.array([o.cost_fraction_of_on_demand for o in outs]) for p, outs in results.items()}
    n = len(costs["omniscient"])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    boot = {p: c[picks].mean(axis=1) for p, c in costs.items()}
    means = {p: float(c.mean()) for p, c in costs.items()}
    best = min(SIMPLE, key=lambda p: means[p])
    opt = boot["omniscient"]
    ours_gap, best_gap = boot["spotline"] - opt, boot[best] - opt
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_boot = np.where(best_gap > 0, ours_gap / best_gap, np.inf)
    point_gap = means["spotline"] - means["omniscient"]
    point_best = means[best] - means["omniscient"]
    ratio = point_gap / point_best if point_best > 0 else math.inf
    over_simple = boot["spotline"] - np.minimum(boot["uniform-progress"], boot["greedy"])
    missed = {p: sum(not o.met_deadline for o in outs) for p, outs in results.items()}
    ratio_ci = _ci(ratio_boot)
    return {
        "runs": n,
        "mean": means,
        "ci": {p: _ci(b) for p, b in boot.items()},
        "missed": missed,
        "best_simple": best,
        "gap": {"spotline": point_gap, "best_simple": point_best},
        "gap_ci": {"spotline": _ci(ours_gap), "best_simple": _ci(best_gap)},
        "gap_ratio": ratio,
        "gap_ratio_ci": ratio_ci,
        "over_min_simple": float(means["spotline"] - min(means[p] for p in SIMPLE)),
        "over_min_simple_ci": _ci(over_simple),
        "goals": {
            "no_misses": missed["spotline"] == 0,
            "cost_at_most_min_simple": means["spotline"] <= min(means[p] for p in SIMPLE),
            "gap_at_most_half": ratio <= 0.5,
            "gap_at_most_half_whole_ci": ratio_ci[1] <= 0.5,
        },
    }


def _fmt(mean: float, ci: tuple[float, float]) -> str:
    return f"{mean:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def print_family(family: Family, rows: dict[float, dict[str, object]], starts: int, traces: int) -> None:
    print(f"\n{family.title}: {traces} traces x {starts} starts per C/R")
    head = ["C/R", "Spotline", "UP", "greedy", "optimum", "misses S/U/G/O"]
    print("  " + " | ".join(head))
    for ratio, row in rows.items():
        mean, ci, missed = row["mean"], row["ci"], row["missed"]
        assert isinstance(mean, dict) and isinstance(ci, dict) and isinstance(missed, dict)
        cells = [f"{ratio:g}"] + [_fmt(mean[p], ci[p]) for p in POLICIES]
        cells.append("/".join(str(missed[p]) for p in POLICIES))
        print("  " + " | ".join(cells))
    print(
        "  C/R | Spotline - min(UP, greedy) | Spotline's gap to the optimum | best simple policy's gap"
        " | ratio [95% CI] | goals"
    )
    for ratio, row in rows.items():
        gap, gap_ci, goals = row["gap"], row["gap_ci"], row["goals"]
        assert isinstance(gap, dict) and isinstance(gap_ci, dict) and isinstance(goals, dict)
        ratio_ci, over, over_ci = row["gap_ratio_ci"], row["over_min_simple"], row["over_min_simple_ci"]
        assert isinstance(ratio_ci, tuple) and isinstance(over, float) and isinstance(over_ci, tuple)
        verdict = ", ".join(
            f"{name} {'met' if goals[key] else 'MISSED'}"
            for name, key in (("0 misses", "no_misses"), ("cost<=min(UP,greedy)", "cost_at_most_min_simple"),
                              ("gap<=0.5x", "gap_at_most_half"))
        )  # fmt: skip
        if goals["gap_at_most_half"] and not goals["gap_at_most_half_whole_ci"]:
            verdict += " (not over the whole CI)"
        print(
            f"  {ratio:g} | {over:+.3f} [{over_ci[0]:+.3f}, {over_ci[1]:+.3f}]"
            f" | {_fmt(gap['spotline'], gap_ci['spotline'])}"
            f" | {row['best_simple']} {_fmt(gap['best_simple'], gap_ci['best_simple'])}"
            f" | {row['gap_ratio']:.2f}x [{ratio_ci[0]:.2f}, {ratio_ci[1]:.2f}] | {verdict}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadline_families", description=__doc__)
    parser.add_argument("--starts", type=int, default=5, help="start hours per trace and C/R")
    parser.add_argument("--ratios", default=",".join(f"{r:g}" for r in DEFAULT_RATIOS))
    parser.add_argument("--families", default=",".join(f.key for f in FAMILIES))
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        ratios = [float(r) for r in args.ratios.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--ratios: not a comma-separated list of numbers: {args.ratios!r}")
    if not ratios or any(not 0 < r < 1 for r in ratios):
        parser.error("--ratios: every C/R must be between 0 and 1")
    if args.starts < 1:
        parser.error("--starts must be >= 1")
    known = {f.key: f for f in FAMILIES}
    keys = [k.strip() for k in args.families.split(",") if k.strip()]
    unknown = [k for k in keys if k not in known]
    if unknown or not keys:
        given = ", ".join(unknown) or "(none given)"
        parser.error(f"--families: unknown {given} (one of {', '.join(known)})")
    began = time.monotonic()
    print(
        f"Single job under a deadline, per trace family: C = {JOB_H:g} h, D = {CHANGEOVER_H:g} h,"
        f" K = {PRICE_RATIO:g}; mean cost as a fraction of On-Demand [95% CI over the starts];"
        f" seed {args.seed}"
    )
    record: dict[str, dict[str, object]] = {}
    for key in keys:
        family = known[key]
        rows: dict[float, dict[str, object]] = {}
        traces = len(family.load())
        for ratio in ratios:
            rows[ratio] = summarise(run_family(family, ratio, args.starts, args.seed), args.seed)
            took = time.monotonic() - began
            print(f"  {key} C/R {ratio:g} done ({took:.0f} s)", file=sys.stderr, flush=True)
        print_family(family, rows, args.starts, traces)
        record[key] = {"title": family.title, "held_out": family.held_out, "part": family.part,
                       "rows": {f"{r:g}": v for r, v in rows.items()}}  # fmt: skip
    print(f"\n({time.monotonic() - began:.0f} s of wall time)")
    if args.json is not None:
        document = {"starts": args.starts, "seed": args.seed, "families": record}
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
