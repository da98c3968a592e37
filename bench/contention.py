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
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import goals
from bench.goals import Goal
from bench.policy_bench import runs as pb_runs
from bench.policy_bench import setup as pb
from bench.policy_bench.tables import _fmt
from spotline.domain import SchedulerConfig
from spotline.sim import SimSettings, simulate
from spotline.sim.accounts import LOSS_CAUSES, RESTART_LABELS, SPOT, WAIT_CAUSES
from spotline.sim.variants import VARIANTS
from spotline.trace import Trace
from spotline.trace.synth import synth_trace


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


# --- the goals (one table for every policy bench: `bench.goals`) ---------------------------


def judge(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[float, bool, str]:
    """(ours / best peer's, met, how) in one sample, against this bench's peers."""
    return goals.judge(goal, runs, pb.PEERS)


def goal_rows(per_sample: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return goals.goal_rows(per_sample, pb.PEERS)


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
    """The preempting peer with the least preemption churn in this sample."""
    return min(
        (p for p in pb.PEERS if p in runs and goals.is_preempting(p)),
        key=lambda p: runs[p]["preemption_churn_per_1k_useful_gpu_h"],
    )


def spot_loss(run: dict[str, Any]) -> float:
    """GPU-hours a run lost to Spot interruptions, with the restarts after them."""
    by_cause = run["loss_account"]["lost_gpu_hours_by_cause"]
    spot = LOSS_CAUSES[SPOT]
    return float(by_cause.get(spot, 0.0)) + float(by_cause.get(RESTART_LABELS[SPOT], 0.0))


# The loss metrics every policy reports (`spotline simulate --json`), as the tables print them.
LOSS_METRICS: tuple[tuple[str, str, str], ...] = (
    ("preemption churn (lost GPU-h per 1k useful)", "preemption_churn_per_1k_useful_gpu_h", "{:.1f}"),
    ("Spot waste (lost GPU-h per 1k Spot GPU-h)", "spot_waste_per_1k_spot_gpu_h", "{:.1f}"),
    ("move loss (GPU-h)", "move_loss_gpu_hours", "{:.1f}"),
    ("priced loss (On-Demand GPU-h)", "priced_loss_on_demand_gpu_h", "{:.1f}"),
    ("lost GPU-h, all causes", "lost_gpu_hours", "{:.1f}"),
    ("Spot / On-Demand GPU-h held", "", ""),
    ("preemptions / moves", "", ""),
    ("cost per useful GPU-h", "cost_per_useful_gpu_hour", "{:.4f}"),
)


def loss_cell(run: dict[str, Any], key: str, form: str, label: str) -> str:
    if label.startswith("Spot / On-Demand"):
        return f"{run['spot_gpu_hours']:.0f} / {run['on_demand_gpu_hours']:.0f}"
    if label.startswith("preemptions / moves"):
        return f"{run['preemptions']} / {run['moves']}"
    return form.format(float(run[key]))


def print_losses(label: str, runs: dict[str, dict[str, Any]], console: Console) -> None:
    """Every policy's loss metrics in one sample."""
    table = Table(title=f"Losses by policy: {label}")
    table.add_column("metric")
    names = list(runs)
    for name in names:
        table.add_column(name, justify="right")
    for row, key, form in LOSS_METRICS:
        table.add_row(row, *(loss_cell(runs[n], key, form, row) for n in names))
    console.print(table)


def print_accounts(label: str, runs: dict[str, dict[str, Any]], console: Console) -> None:
    peer = best_preempting(runs)
    names = ("spotline", peer)
    table = Table(
        title=f"Loss account: {label} (spotline vs {peer}, the preempting peer with the least churn)"
    )
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
        print_losses(sample.label, runs, console)
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
