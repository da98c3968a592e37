"""`make bench`, contention part: Spotline against the competent peers where the
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
`--tuning`: the tuning set's contended counterparts instead of the evaluation set; `--tuning
--reduced`: its synthetic shapes at 2,000 jobs on 128 GPUs, seeds 101-103 each; `--policy NAME`,
repeatable: only these peers beside Spotline; `--variant
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
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import goals
from bench.goals import GOALS, Goal
from bench.policy_bench import runs as pb_runs
from bench.policy_bench import setup as pb
from bench.policy_bench.tables import _fmt, cpu_s
from spotline.domain import SchedulerConfig
from spotline.sim import SimSettings, simulate
from spotline.sim.accounts import LOSS_CAUSES, RESTART_LABELS, SPOT, WAIT_CAUSES
from spotline.sim.model import PeerKnobs
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


# The contended evaluation set, frozen before any tuning (`bench/data/contention_evaluation.json`;
# its README line says so): every sample over three seeds.
EVALUATION_FILE = pb.REPO / "bench" / "data" / "contention_evaluation.json"


@dataclass(frozen=True)
class Seeded:
    """A contended sample over several seeds (each a `Contended`): judged on the mean over them."""

    members: tuple[Contended, ...]

    @property
    def label(self) -> str:
        first = self.members[0]
        seeds = ",".join(str(m.seed) for m in self.members)
        return first.label.replace(f" s{first.seed} ", f" s{seeds} ")


def load_set(path: Path) -> tuple[Seeded, ...]:
    """The samples a set file lists (`contention_evaluation.json`'s format), each over its seeds."""
    data = json.loads(path.read_text())
    out = []
    for entry in data["samples"]:
        kind = entry["kind"]
        if kind not in ("philly", "bursty", "long"):
            raise ValueError(f"{path}: unknown sample kind {kind!r} (philly, bursty or long)")
        members = tuple(
            Contended(
                kind,
                int(seed),
                int(entry["gpus"]),
                start=entry.get("start", ""),
                end=entry.get("end", ""),
                jobs=int(entry.get("jobs", 0)),
                load=float(entry.get("load", 0.0)),
                long_share=float(entry.get("long_share", 0.0)),
            )
            for seed in entry["seeds"]
        )
        out.append(Seeded(members))
    return tuple(out)


CONTENDED_EVALUATION: tuple[Seeded, ...] = load_set(EVALUATION_FILE)
# The tuning set: what Spotline's defaults were chosen on, and the earlier evaluation set, looked
# at after each of its tuning rounds (so no longer held out): one seed each, as they were run.
CONTENDED_TUNING: tuple[Seeded, ...] = tuple(
    Seeded((s,))
    for s in (
        Contended("philly", 2, 512, "2017-10-02", "2017-10-05"),
        _bursty(101, 0.85),
        _bursty(102, 1.2),
        _long(103),
        Contended("philly", 1, 384, "2017-10-30", "2017-11-12"),
        Contended("philly", 2, 256, "2017-11-13", "2017-11-26"),
        _bursty(1, 0.85),
        _bursty(2, 1.2),
        _long(1),
    )
)
# The tuning set's synthetic shapes at the evaluation's size, three seeds each (`--tuning
# --reduced`): what fits the shared machine when a variant is judged.
TUNING_REDUCED: tuple[Seeded, ...] = (
    Seeded(tuple(_bursty(s, 0.85, 2000, 128) for s in (101, 102, 103))),
    Seeded(tuple(_bursty(s, 1.2, 2000, 128) for s in (101, 102, 103))),
    Seeded(tuple(_long(s, 2000, 128) for s in (101, 102, 103))),
)
if pb.QUICK:
    CONTENDED_EVALUATION = (
        Seeded(tuple(_bursty(s, 1.2, 600, 64) for s in (1, 2))),
        Seeded(tuple(_long(s, 600, 64) for s in (1, 2))),
    )
    CONTENDED_TUNING = (Seeded((_bursty(101, 1.2, 600, 64),)),)
    TUNING_REDUCED = CONTENDED_TUNING
# The peers of the contended benches: the policy bench's and the setups added for a reviewer
# (`spotline.sim.runner.CONTENTION_PEERS`), without Kueue's borrowWithinCohort with Any.
PEERS: tuple[str, ...] = (
    "fifo",
    "batch-fair-share",
    "skypilot-recovery",
    "skypilot",
    "priority-random",
    "kueue-classic",
    "kueue-fair",
    "kueue-lp",
    "slurm",
    "slurm-exempt",
)
POLICIES: tuple[str, ...] = (*PEERS, "spotline")
# The peers' main parameters as the contended tuning set chose them (`python -m bench.peer_sweep`,
# design-notes/contention.md): the `PeerKnobs` defaults, and SkyPilot's fallback after 2 hours.
SETTINGS = SimSettings(peers=PeerKnobs(skypilot_fallback_s=7200.0))


def available(samples: Sequence[Seeded]) -> list[Seeded]:
    return [s for s in samples if s.members[0].kind != "philly" or pb.philly_path() is not None]


def run_contended(
    sample: Contended,
    policies: Sequence[str] = POLICIES,
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


# The policies whose runs take longest on a contended sample, longest first.
SLOW: tuple[str, ...] = ("spotline", "skypilot-recovery", "skypilot", "kueue-fair", "kueue-classic")


def _one(job: tuple[Contended, str, SimSettings | None, tuple[str, ...]]) -> dict[str, Any]:
    sample, policy, settings, variants = job
    runs = run_contended(sample, [policy], settings=settings or SETTINGS, workers=1, variants=variants)
    return runs[policy]


def run_seeded(
    sample: Seeded,
    policies: Sequence[str] = POLICIES,
    settings: SimSettings | None = None,
    variants: Sequence[str] = (),
) -> list[dict[str, dict[str, Any]]]:
    """Every policy on every seed of `sample`, one simulation per process (`WORKERS` at once);
    the runs per seed, in the members' order."""
    jobs = [(m, p, settings, tuple(variants)) for m in sample.members for p in policies]
    # The longest runs first, so that the workers finish together.
    order = sorted(
        range(len(jobs)), key=lambda i: SLOW.index(jobs[i][1]) if jobs[i][1] in SLOW else len(SLOW)
    )
    if pb_runs.WORKERS <= 1 or len(jobs) <= 1:
        done = [_one(jobs[i]) for i in order]
    else:
        with ProcessPoolExecutor(max_workers=min(pb_runs.WORKERS, len(jobs))) as pool:
            done = list(pool.map(_one, [jobs[i] for i in order]))
    results: list[dict[str, Any]] = [{}] * len(jobs)
    for i, run in zip(order, done, strict=True):
        results[i] = run
    out: list[dict[str, dict[str, Any]]] = []
    for i, _ in enumerate(sample.members):
        out.append(dict(zip(policies, results[i * len(policies) : (i + 1) * len(policies)], strict=True)))
    return out


def mean_metrics(runs: Sequence[Any]) -> Any:
    """The mean over seeds of one policy's metrics (numbers averaged, a key a seed lacks counted
    as 0, nested mappings alike; anything else as the first seed has it)."""
    first = runs[0]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for r in runs for k in r))
        return {k: mean_metrics([r.get(k, 0) if isinstance(r, dict) else 0 for r in runs]) for k in keys}
    if isinstance(first, bool) or not all(isinstance(r, int | float) for r in runs):
        return first
    return sum(float(r) for r in runs) / len(runs)


def mean_runs(per_seed: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each policy's metrics, the mean over the seeds."""
    return {name: mean_metrics([runs[name] for runs in per_seed]) for name in per_seed[0]}


# --- the goals (one table for every policy bench: `bench.goals`) ---------------------------


def judge(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[float, bool, str]:
    """(ours / best peer's, met, how) in one sample, against this bench's peers."""
    return goals.judge(goal, runs, PEERS)


def goal_rows(per_sample: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return goals.goal_rows(per_sample, PEERS)


def with_variant(runs: dict[str, dict[str, Any]], label: str) -> dict[str, dict[str, Any]]:
    """The runs with Spotline under the variants `label` in Spotline's place."""
    return {**runs, "spotline": runs[label]}


def seeded_goal(goal: Goal, per_seed: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A goal in one sample over its seeds: judged on the means over the seeds (ratio, met,
    against which peer), with the 95% CI of the ratio per seed against that same peer."""
    mean = mean_runs(per_seed)
    ratio, met, how = judge(goal, mean)
    best = goals.best_peer(goal, mean, PEERS)
    ratios = []
    if best is not None:
        for runs in per_seed:
            theirs = goal.value(runs[best[0]])
            if theirs:
                ratios.append(goal.value(runs["spotline"]) / theirs)
    _, half = goals.interval(ratios)
    text = how
    if how.startswith("x") and math.isfinite(half) and half > 0:
        text = how.replace(" vs ", f" ± {half:.3f} vs ", 1)
    return {"ratio": ratio, "ci95": half, "met": met, "how": text}


def print_seeded_goals(
    title: str,
    labels: Sequence[str],
    per_sample: Sequence[Sequence[dict[str, dict[str, Any]]]],
    console: Console,
) -> list[dict[str, Any]]:
    """The goals per sample, each on the mean over its seeds with the CI of its ratio."""
    table = Table(title=title)
    for column in ("goal", "met in samples", *labels):
        table.add_column(column)
    rows = []
    for goal in GOALS:
        cells = [seeded_goal(goal, seeds) for seeds in per_sample]
        met = sum(c["met"] for c in cells)
        table.add_row(
            goal.label,
            f"{met}/{len(cells)}",
            *(f"{c['how']} ({'met' if c['met'] else 'NOT met'})" for c in cells),
        )
        rows.append({"goal": goal.label, "met_in_samples": met, "samples": len(cells), "per_sample": cells})
    console.print(table)
    return rows


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
        (p for p in PEERS if p in runs and goals.is_preempting(p)),
        key=lambda p: runs[p]["preemption_churn_per_1k_useful_gpu_h"],
    )


def spot_loss(run: dict[str, Any]) -> float:
    """GPU-hours a run lost to Spot interruptions, with the restarts after them."""
    by_cause = run["loss_account"]["lost_gpu_hours_by_cause"]
    spot = LOSS_CAUSES[SPOT]
    return float(by_cause.get(spot, 0.0)) + float(by_cause.get(RESTART_LABELS[SPOT], 0.0))


# The metrics every policy's row shows per sample (`spotline simulate --json` keys), mean ± 95%
# CI over the seeds: (row, how to read it from a run, format).
LOSS_METRICS: tuple[tuple[str, Any, str], ...] = (
    ("urgent p99 wait (min)", lambda m: goals.urgent_wait(m) / 60.0, "{:.1f}"),
    ("preemption churn (lost GPU-h per 1k useful)", "preemption_churn_per_1k_useful_gpu_h", "{:.1f}"),
    ("Spot waste (lost GPU-h per 1k Spot GPU-h)", "spot_waste_per_1k_spot_gpu_h", "{:.1f}"),
    ("move loss (GPU-h)", "move_loss_gpu_hours", "{:.1f}"),
    ("priced loss (On-Demand GPU-h)", "priced_loss_on_demand_gpu_h", "{:.1f}"),
    ("lost GPU-h, all causes", "lost_gpu_hours", "{:.1f}"),
    ("Spot GPU-h held", "spot_gpu_hours", "{:.0f}"),
    ("On-Demand GPU-h held", "on_demand_gpu_hours", "{:.0f}"),
    ("preemptions", "preemptions", "{:.0f}"),
    ("moves", "moves", "{:.0f}"),
    ("cost per useful GPU-h", "cost_per_useful_gpu_hour", "{:.4f}"),
    ("avg JCT (h)", lambda m: m["avg_jct_s"] / 3600.0, "{:.2f}"),
    ("low-class avg JCT (h)", lambda m: m["avg_jct_s_by_priority"]["low"] / 3600.0, "{:.2f}"),
    ("Jain's fairness", "jain_fairness", "{:.3f}"),
    ("finish-time fairness, worst team", "ftf_max", "{:.3f}"),
)


def loss_cell(per_seed: Sequence[dict[str, Any]], key: Any, form: str) -> str:
    """One policy's metric over the seeds: the mean, ± the 95% CI's half-width with 2+ seeds."""
    values = [float(key(run) if callable(key) else run[key]) for run in per_seed]
    mean, half = goals.interval(values)
    text = form.format(mean)
    if math.isfinite(half) and half > 0:
        text += " ± " + form.format(half)
    return text


def print_losses(label: str, per_seed: Sequence[dict[str, dict[str, Any]]], console: Console) -> None:
    """Every policy's losses, waits, cost and fairness in one sample, mean ± 95% CI over its seeds."""
    seeds = f", mean ± 95% CI over {len(per_seed)} seeds" if len(per_seed) > 1 else ""
    table = Table(title=f"By policy: {label}{seeds}")
    table.add_column("metric")
    names = list(per_seed[0])
    for name in names:
        table.add_column(name, justify="right")
    for row, key, form in LOSS_METRICS:
        table.add_row(row, *(loss_cell([runs[n] for runs in per_seed], key, form) for n in names))
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
    parser.add_argument(
        "--reduced",
        action="store_true",
        help="with --tuning: its synthetic shapes at 2,000 jobs on 128 GPUs, seeds 101-103",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="NAME",
        help="only these peers beside Spotline (repeatable; default: every peer)",
    )
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
    if args.reduced and not args.tuning:
        parser.error("--reduced: only with --tuning")
    unknown_peers = [name for name in args.policy if name not in PEERS]
    if unknown_peers:
        parser.error(f"--policy: unknown {', '.join(unknown_peers)} (known: {', '.join(PEERS)})")
    if args.policy and not any(goals.is_preempting(p) for p in args.policy):
        parser.error("--policy: name at least one preempting peer (the accounts compare with one)")
    policies = (*dict.fromkeys(args.policy), "spotline") if args.policy else POLICIES
    tuning = TUNING_REDUCED if args.reduced else CONTENDED_TUNING
    contended = available(tuning if args.tuning else CONTENDED_EVALUATION)
    if args.synthetic_only:
        contended = [s for s in contended if s.members[0].kind != "philly"]
    unknown = [name for name in args.variant if name not in VARIANTS]
    if unknown:
        known = ", ".join(VARIANTS) or "none"
        parser.error(f"--variant: unknown {', '.join(unknown)} (known: {known})")
    variant = f"spotline with {' + '.join(args.variant)}" if args.variant else None
    console.print(
        (
            "Tuning set"
            if args.tuning
            else "Evaluation set (frozen before any tuning: " + str(EVALUATION_FILE.name) + ")"
        )
        + ": "
        + "; ".join(s.label for s in contended)
    )
    saved: dict[str, Any] = {}
    per_seeds: list[list[dict[str, dict[str, Any]]]] = []
    for sample in contended:
        part = time.perf_counter()
        per_seed = run_seeded(sample, policies)
        if variant is not None:
            varied_runs = run_seeded(sample, ["spotline"], variants=args.variant)
            for runs, extra in zip(per_seed, varied_runs, strict=True):
                runs[variant] = extra["spotline"]
        per_seeds.append(per_seed)
        saved[sample.label] = per_seed
        print_losses(sample.label, per_seed, console)
        mean = mean_runs(per_seed)
        print_accounts(f"{sample.label} (mean over seeds)", mean, console)
        if variant is not None:
            print_accounts(
                f"{sample.label}, {variant} (mean over seeds)", with_variant(mean, variant), console
            )
        console.print(f"({sample.label}: {time.perf_counter() - part:.0f} s wall)")
    labels = [s.label for s in contended]
    rows = print_seeded_goals(
        "Goals per contended sample (mean over its seeds; ratio ± 95% CI over the seeds)",
        labels,
        per_seeds,
        console,
    )
    if variant is not None:
        varied = [[with_variant(r, variant) for r in seeds] for seeds in per_seeds]
        print_seeded_goals(f"The same goals, {variant}", labels, varied, console)
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": saved, "goals": rows}))
    per_contended = [mean_runs(seeds) for seeds in per_seeds]
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
    # CPU seconds of this process and its workers: on an idle machine of N cores, about N times
    # the wall time it would take there (this one is shared).
    console.print(f"contention bench: {time.perf_counter() - began:.0f} s wall, {cpu_s():.0f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
