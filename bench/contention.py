"""`make bench`, contention part (issue 29): Spotline against the competent peers where the
cluster is genuinely full, with the loss and wait accounts side by side, and the issue's goals.

Contended samples (disjoint from each other's set, as `policy_bench`'s sets are):
- evaluation: Philly's evaluation windows at fewer GPUs (load >= 1.0 over the window: 2017-10-30..
  11-12 on 384 GPUs, load 1.12; 2017-11-13..26 on 256 GPUs with another priority draw, seed 2,
  load 1.02); synthetic traces with bursty (MMPP) arrivals and log-normal run times of sigma 1.6
  at loads 0.85 and 1.2 (seeds 1, 2); and a synthetic trace where 1% of the jobs run for 7-21
  days, the others bursting over them (seed 1, load 1.0);
- tuning (what defaults may be chosen on; `CONTENDED_TUNING`): Philly 2017-10-02..05 on 512 GPUs
  with another priority draw (seed 2; the window `bench/tune.py` searches, load 1.20), the same
  synthetic shapes at seeds 101-103.

The goals compare, per sample, Spotline with the best competent peer on each metric (lost
GPU-hours with the best *preempting* peer: FIFO loses only to Spot) over the evaluation set:
`policy_bench.EVALUATION` and the contended samples; each row says in how many samples it is met
and the mean ratio. Printed beside them, per contended sample: the loss account (lost GPU-hours
by cause, preemptions per job, repeats, preemptions by class pair) and the wait account (what the
critical and high jobs in the p99 tail of their wait waited for), for Spotline and the best
preempting peer (fewest lost GPU-hours).

Run: `.venv/bin/python -m bench.contention` (`--contended-only`: the contended samples alone;
`--tuning`: the tuning set's contended counterparts instead of the evaluation set; `--variant
NAME`, repeatable: Spotline with these simulator variants (`spotline.sim.variants`) beside the
shipped policy, its accounts and goals printed apart: how a variant is judged, first with
`--tuning`, then on the evaluation set, docs/simulator.md);
`SPOTLINE_BENCH_QUICK=1`: small samples (a smoke test, not a result).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.policy_bench import runs as pb_runs
from bench.policy_bench import setup as pb
from bench.policy_bench.tables import _fmt
from spotline.domain import SchedulerConfig
from spotline.sim import SimSettings, simulate
from spotline.sim.accounts import LOSS_CAUSES, RESTART_LABELS, SPOT, WAIT_CAUSES
from spotline.sim.variants import VARIANTS
from spotline.trace import Trace
from spotline.trace.synth import synth_trace

PREEMPTING = tuple(p for p in pb.PEERS if p != "fifo")


@dataclass(frozen=True)
class Contended:
    """A contended sample: a Philly window on fewer GPUs, or a synthetic trace of a shape."""

    kind: str  # "philly" | "bursty" | "long"
    seed: int
    gpus: int
    start: str = ""
    end: str = ""
    jobs: int = 0
    load: float = 0.0
    sigma: float = 1.6
    long_share: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == "philly":
            return f"philly {self.start}..{self.end} s{self.seed} on {self.gpus} GPUs"
        shape = f"long-running {self.long_share:.0%}" if self.long_share else "bursty"
        size = f"{self.jobs} jobs load {self.load:g} s{self.seed} on {self.gpus} GPUs"
        return f"{shape} sigma {self.sigma:g} {size}"

    def trace(self) -> Trace:
        if self.kind == "philly":
            return pb.load(pb.Sample("philly", self.seed, self.start, self.end, gpus=self.gpus))
        jobs = synth_trace(
            self.jobs, self.load, self.gpus, self.seed, sigma=self.sigma, long_share=self.long_share
        )
        return Trace(jobs=jobs, source=self.label)


def _bursty(seed: int, load: float, jobs: int = 4000, gpus: int = 256) -> Contended:
    return Contended("bursty", seed, gpus, jobs=jobs, load=load)


def _long(seed: int, jobs: int = 4000, gpus: int = 256) -> Contended:
    return Contended("long", seed, gpus, jobs=jobs, load=1.0, long_share=0.01)


CONTENDED_EVALUATION: tuple[Contended, ...] = (
    Contended("philly", 1, 384, "2017-10-30", "2017-11-12"),
    Contended("philly", 2, 256, "2017-11-13", "2017-11-26"),
    _bursty(1, 0.85),
    _bursty(2, 1.2),
    _long(1),
)
CONTENDED_TUNING: tuple[Contended, ...] = (
    Contended("philly", 2, 512, "2017-10-02", "2017-10-05"),
    _bursty(101, 0.85),
    _bursty(102, 1.2),
    _long(103),
)
if pb.QUICK:
    CONTENDED_EVALUATION = (_bursty(1, 1.2, 600, 64), _long(1, 600, 64))
    CONTENDED_TUNING = (_bursty(101, 1.2, 600, 64),)


def available(samples: Sequence[Contended]) -> list[Contended]:
    return [s for s in samples if s.kind != "philly" or pb.philly_path() is not None]


def run_contended(
    sample: Contended,
    policies: Sequence[str] = pb.EVAL_POLICIES,
    config: SchedulerConfig | None = None,
    settings: SimSettings | None = None,
    workers: int | None = None,
    variants: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    report = simulate(
        sample.trace(),
        list(policies),
        gpus=sample.gpus,
        seed=sample.seed,
        config=config,
        settings=settings,
        variants=variants,
        trace_name=sample.label,
        workers=pb_runs.WORKERS if workers is None else workers,
        keep_jobs=False,
    )
    runs: dict[str, dict[str, Any]] = report.to_json()["policies"]
    return runs


# --- the goals ------------------------------------------------------------------------------


def _urgent_wait(m: dict[str, Any]) -> float:
    """The worse of the critical and high p99 waits (with requeues)."""
    waits = m["wait_p99_s_by_priority"]
    return max(float(waits["critical"]), float(waits["high"]))


@dataclass(frozen=True)
class Goal:
    label: str
    value: Callable[[dict[str, Any]], float]
    lower_is_better: bool
    target: float
    peers: tuple[str, ...] = pb.PEERS
    absolute: float | None = None  # also met at or under this (waits: 5 minutes)


GOALS: tuple[Goal, ...] = (
    Goal(
        "lost GPU-hours <= 0.7x the best preempting peer",
        lambda m: m["lost_gpu_hours"],
        True,
        0.7,
        PREEMPTING,
    ),
    Goal("critical and high p99 wait <= 1.1x or <= 5 min", _urgent_wait, True, 1.1, absolute=300.0),
    Goal("average JCT <= 1.0x", lambda m: m["avg_jct_s"], True, 1.0),
    Goal("low-class average JCT <= 1.2x", lambda m: m["avg_jct_s_by_priority"]["low"], True, 1.2),
    Goal("cost per useful GPU-hour <= 1.0x", lambda m: m["cost_per_useful_gpu_hour"], True, 1.0),
    Goal("Jain's fairness >= 0.97x", lambda m: m["jain_fairness"], False, 0.97),
    # Worst team's finish-time fairness rho: lower is better, read as best peer / ours (>= 0.97).
    Goal(
        "finish-time fairness (worst team) >= 0.97x",
        lambda m: 1.0 / m["ftf_max"] if m["ftf_max"] else 0.0,
        False,
        0.97,
    ),
)


def best_peer(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[str, float]:
    values = {p: goal.value(runs[p]) for p in goal.peers if p in runs}
    name = (min if goal.lower_is_better else max)(values, key=lambda p: values[p])
    return name, values[name]


def judge(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[float, bool, str]:
    """(ours / best peer's, met, how) in one sample."""
    ours = goal.value(runs["spotline"])
    peer, theirs = best_peer(goal, runs)
    if goal.absolute is not None and ours <= goal.absolute:
        return (ours / theirs if theirs else 1.0), True, f"{ours / 60:.1f} min"
    ratio = (1.0 if ours == 0 else math.inf) if theirs == 0 else ours / theirs
    met = ratio <= goal.target if goal.lower_is_better else ratio >= goal.target
    return ratio, met, f"x{ratio:.3f} vs {peer}"


def goal_rows(per_sample: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for goal in GOALS:
        outcomes = [judge(goal, runs) for runs in per_sample]
        mean, half = pb.interval([r for r, _, _ in outcomes])
        rows.append(
            {
                "goal": goal.label,
                "mean_ratio": mean,
                "ci95": half,
                "met_in_samples": sum(met for _, met, _ in outcomes),
                "samples": len(outcomes),
                "per_sample": [how for _, _, how in outcomes],
            }
        )
    return rows


def with_variant(runs: dict[str, dict[str, Any]], label: str) -> dict[str, dict[str, Any]]:
    """The runs with Spotline under the variants `label` in Spotline's place."""
    return {**runs, "spotline": runs[label]}


def print_goals(
    title: str, labels: Sequence[str], per_sample: Sequence[dict[str, dict[str, Any]]], console: Console
) -> None:
    table = Table(title=title)
    for column in ("goal", "mean ratio ± CI", "met in samples", "met", *labels):
        table.add_column(column)
    for row in goal_rows(per_sample):
        met = row["met_in_samples"] == row["samples"]
        table.add_row(
            row["goal"],
            _fmt(row["mean_ratio"], row["ci95"], digits=3),
            f"{row['met_in_samples']}/{row['samples']}",
            "met" if met else "NOT met",
            *row["per_sample"],
        )
    console.print(table)


# --- the accounts -----------------------------------------------------------------------------


def best_preempting(runs: dict[str, dict[str, Any]]) -> str:
    """The preempting peer that lost the fewest GPU-hours in this sample."""
    return min((p for p in PREEMPTING if p in runs), key=lambda p: runs[p]["lost_gpu_hours"])


def spot_loss(run: dict[str, Any]) -> float:
    """GPU-hours a run lost to Spot interruptions, with the restarts after them."""
    by_cause = run["loss_account"]["lost_gpu_hours_by_cause"]
    spot = LOSS_CAUSES[SPOT]
    return float(by_cause.get(spot, 0.0)) + float(by_cause.get(RESTART_LABELS[SPOT], 0.0))


@dataclass(frozen=True)
class LossBudget:
    """What Spot leaves of the lost-work goal in one sample: the goal's budget (the target times
    the best preempting peer's loss), the least any peer or Spotline lost to Spot in the sample,
    and the rest, which is all a policy with that little Spot loss may lose to preemptions and
    still meet the goal. Each preemption costs a write and a restart whoever schedules, so a budget near 0
    (or below it) says the goal is out of reach of the queue's order, whatever it preempts."""

    peer: str
    budget: float
    least_spot: float
    least_spot_policy: str
    peer_preemption_loss: float

    @property
    def left_for_preemptions(self) -> float:
        return self.budget - self.least_spot


def loss_budget(runs: dict[str, dict[str, Any]]) -> LossBudget:
    goal = GOALS[0]
    peer = best_preempting(runs)
    budget = goal.target * float(runs[peer]["lost_gpu_hours"])
    # The peers and the Spotline judged, not the earlier variant some tables run beside them.
    policy = min((p for p in (*pb.PEERS, "spotline") if p in runs), key=lambda p: spot_loss(runs[p]))
    return LossBudget(
        peer=peer,
        budget=budget,
        least_spot=spot_loss(runs[policy]),
        least_spot_policy=policy,
        peer_preemption_loss=float(runs[peer]["lost_gpu_hours"]) - spot_loss(runs[peer]),
    )


def print_accounts(label: str, runs: dict[str, dict[str, Any]], console: Console) -> None:
    peer = best_preempting(runs)
    names = ("spotline", peer)
    table = Table(title=f"Loss account: {label} (spotline vs {peer}, the preempting peer that lost least)")
    table.add_column("GPU-hours lost by cause")
    for name in names:
        table.add_column(name, justify="right")
    for cause in (*LOSS_CAUSES.values(), *RESTART_LABELS.values()):
        values = [runs[n]["loss_account"]["lost_gpu_hours_by_cause"].get(cause, 0.0) for n in names]
        if any(values):
            table.add_row(cause, *(f"{v:.1f}" for v in values))
    table.add_row("all (lost_gpu_hours)", *(f"{runs[n]['lost_gpu_hours']:.1f}" for n in names))
    table.add_row(
        "of which Spot / preemptions (each with its restarts)",
        *(f"{spot_loss(runs[n]):.1f} / {runs[n]['lost_gpu_hours'] - spot_loss(runs[n]):.1f}" for n in names),
    )
    table.add_row("preemptions", *(str(runs[n]["preemptions"]) for n in names))
    table.add_row(
        "jobs preempted 0 / 1 / 2 / 3-5 / 6-10 / >10 times",
        *(" / ".join(str(v) for v in runs[n]["loss_account"]["preemptions_per_job"].values()) for n in names),
    )
    table.add_row(
        "repeat preemptions (within 600 s + 1 h)",
        *(str(runs[n]["loss_account"]["repeat_preemptions"]) for n in names),
    )
    for pair in sorted({k for n in names for k in runs[n]["loss_account"]["preemptions_by_class"]}):
        table.add_row(
            f"preemptions {pair}",
            *(str(runs[n]["loss_account"]["preemptions_by_class"].get(pair, 0)) for n in names),
        )
    if all("gang_account" in runs[n] for n in names):
        table.add_row(
            "multi-node jobs' p99 / max wait (min)",
            *(
                f"{runs[n]['gang_account']['multi_node_wait_p99_s'] / 60:.0f} /"
                f" {runs[n]['gang_account']['multi_node_wait_max_s'] / 60:.0f}"
                for n in names
            ),
        )
        table.add_row(
            "single-node On-Demand starts while a gang waits (their GPUs)",
            *(
                f"{runs[n]['gang_account']['single_node_on_demand_starts_while_a_gang_waits']}"
                f" ({runs[n]['gang_account']['their_gpus']})"
                for n in names
            ),
        )
    budget = loss_budget(runs)
    table.caption = (
        f"Lost-work goal ({GOALS[0].target:g}x {budget.peer}'s loss): {budget.budget:.1f} GPU-h; the least"
        f" any policy lost to Spot here: {budget.least_spot:.1f} ({budget.least_spot_policy}); left for"
        f" preemptions at that Spot loss: {budget.left_for_preemptions:.1f}, against"
        f" {budget.peer_preemption_loss:.1f} for {budget.peer}'s preemptions"
    )
    console.print(table)
    waits = Table(
        title=f"Wait account: {label}: what the p99 tail of each class waited for (share of its wait)"
    )
    waits.add_column("cause")
    for cls in ("critical", "high"):
        for name in names:
            account = runs[name]["wait_account"][cls]
            waits.add_column(
                f"{cls} {name} (p99 {account['p99_wait_s'] / 60:.1f} min, {account['tail_jobs']} jobs)",
                justify="right",
            )
    for cause in WAIT_CAUSES:
        cells = [
            f"{runs[n]['wait_account'][cls]['tail_wait_share_by_cause'][cause]:.0%}"
            for cls in ("critical", "high")
            for n in names
        ]
        waits.add_row(cause, *cells)
    console.print(waits)


def _saved_runs(path: Path | None) -> dict[str, dict[str, dict[str, Any]]]:
    """The evaluation's runs policy_bench saved, by sample label (none without a file, or with
    an unreadable one: then every sample is simulated here). The same simulations, since a run
    is deterministic wherever it runs (`policy_bench.runs.run_many`)."""
    if path is None:
        return {}
    try:
        saved: dict[str, dict[str, dict[str, Any]]] = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        print(f"(--evaluation-runs {path}: {error}; simulating the evaluation set again)", flush=True)
        return {}
    return {label: runs for label, runs in saved.items() if set(pb.EVAL_POLICIES) <= set(runs)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contention", description=__doc__.split("\n")[0])
    parser.add_argument("--contended-only", action="store_true", help="the contended samples alone")
    parser.add_argument("--tuning", action="store_true", help="the tuning set's contended counterparts")
    parser.add_argument("--synthetic-only", action="store_true", help="leave the Philly samples out")
    parser.add_argument("--json", type=Path, default=None, help="write the contended samples' metrics here")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME",
        help="also run Spotline with this simulator variant (repeatable: together), judged apart",
    )
    parser.add_argument(
        "--evaluation-runs",
        type=Path,
        default=None,
        metavar="FILE",
        help="the evaluation set's runs as `bench.policy_bench --save-evaluation FILE` wrote them"
        " (`make bench`: simulated once, for both); samples missing there are simulated",
    )
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 200))
    began = time.perf_counter()
    contended = available(CONTENDED_TUNING if args.tuning else CONTENDED_EVALUATION)
    per_contended = []
    if args.synthetic_only:
        contended = [s for s in contended if s.kind != "philly"]
    unknown = [name for name in args.variant if name not in VARIANTS]
    if unknown:
        known = ", ".join(VARIANTS) or "none"
        parser.error(f"--variant: unknown {', '.join(unknown)} (known: {known})")
    variant = f"spotline with {' + '.join(args.variant)}" if args.variant else None
    saved: dict[str, Any] = {}
    for sample in contended:
        runs = run_contended(sample)
        if variant is not None:
            runs[variant] = run_contended(sample, ["spotline"], workers=1, variants=args.variant)["spotline"]
        per_contended.append(runs)
        saved[sample.label] = runs
        print_accounts(sample.label, runs, console)
        if variant is not None:
            print_accounts(f"{sample.label}, {variant}", with_variant(runs, variant), console)
    labels = [s.label for s in contended]
    print_goals("Goals on the contended samples (issue 29)", labels, per_contended, console)
    if variant is not None:
        varied = [with_variant(r, variant) for r in per_contended]
        print_goals(f"The same goals, {variant}", labels, varied, console)
    if args.json is not None:
        args.json.write_text(json.dumps(saved))
    if not args.contended_only and not args.tuning:
        plain = pb.available(pb.EVALUATION)
        done = _saved_runs(args.evaluation_runs)
        per_plain = [done.get(s.label) or pb_runs.run_sample(s, pb.EVAL_POLICIES) for s in plain]
        print_goals(
            "Goals on the whole evaluation set (policy_bench's samples and the contended ones)",
            [s.label for s in plain] + labels,
            per_plain + per_contended,
            console,
        )
    console.print(f"contention bench: {time.perf_counter() - began:.0f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
