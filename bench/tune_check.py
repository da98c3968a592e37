"""`make bench`'s tune: `spotline tune` on a tuning-set trace, its recommendation checked on the
evaluation set: `python -m bench.tune_check`.

1. The history: the tuning set's synthetic sample (`policy_bench.TUNING_REDUCED`: seed 101, load
   0.85, 2,000 jobs on 128 GPUs), as a canonical CSV; `spotline tune --trace` on it (the command
   users run, in a process of its own), its last quarter held out, `--candidates 8 --seeds 2`.
2. The evaluation set (`policy_bench`: synthetic seeds 1-2 at loads 0.85 and 1.1, here at 2,000 jobs
   on 128 GPUs, never tuned on): Spotline with the settings in effect and with the recommendation,
   each goal metric's mean over the samples, the paired change, and whether the recommendation
   holds there (the objective better, no other goal metric more than 5% worse). Nothing
   recommended: the tune's reason is printed, and the finalist it declined that was best on the
   objective is checked the same way (whether declining it was borne out there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.policy_bench.setup import TUNING_REDUCED, Sample, _synth, load
from spotline.domain.config import SchedulerConfig
from spotline.sim.history import History
from spotline.sim.tune import GOAL_METRICS, GOALS_BY_KEY, MAX_REGRESSION, apply_diff, change, replay
from spotline.trace import write_trace

HISTORY: Sample = next(s for s in TUNING_REDUCED if s.kind == "synth")
EVALUATION: tuple[Sample, ...] = tuple(
    _synth(seed, load, 2000, 128) for load in (0.85, 1.1) for seed in (1, 2)
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--objective", default="avg_jct_s")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spotline-tune-check-") as scratch:
        trace = load(HISTORY)
        path = Path(scratch) / "history.csv"
        write_trace(trace.jobs, path)
        span_days = max(j.submit_s for j in trace.jobs) / 86400.0
        out = Path(scratch) / "tune.json"
        command = [
            sys.executable, "-m", "spotline.cli", "tune", "--trace", str(path), "--gpus", str(HISTORY.gpus),
            "--holdout-days", f"{span_days / 4:.4f}", "--candidates", str(args.candidates),
            "--seeds", str(args.seeds), "--objective", args.objective, "--workers", str(args.workers),
            "--json", str(out), "--cdk-json", str(Path(scratch) / "cdk.json"),
        ]  # fmt: skip
        print(f"$ spotline {' '.join(command[3:])}  # the trace: {HISTORY.label}", flush=True)
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        print(done.stdout, flush=True)
        if done.returncode != 0:
            print(f"spotline tune failed (exit {done.returncode}): {done.stderr}", flush=True)
            return 1
        result = json.loads(out.read_text())
    recommended = result["recommended"]
    if recommended:
        evaluate(recommended, result["objective"])
    else:
        print(f"nothing recommended on the tuning set ({result['reason']})")
        declined = best_declined(result)
        if declined is None:
            print("no finalist besides the settings in effect: nothing to check")
        else:
            # The refusal is a decision too: the finalist best on the objective, had it been taken.
            print(f"the finalist best on {result['objective']} on the tuning stretch, declined: {declined}")
            holds = evaluate(declined, result["objective"], "The declined finalist")
            verdict = "too cautious there" if holds else "borne out there"
            print(f"Declining it was {verdict} (the evaluation set, objective {result['objective']}).")
    print(f"wall {time.perf_counter() - began:.0f} s")
    return 0


def best_declined(result: dict[str, Any]) -> dict[str, Any] | None:
    """The diff of the finalist other than the settings in effect that is best on the tune's
    objective over the tuning stretch (its mean over seeds), None when there is none."""
    goal = GOALS_BY_KEY[result["objective"]]
    sign = 1.0 if goal.lower_is_better else -1.0
    finalists = [p for p in result["pareto"] if p.get("finalist") and p.get("config")]
    if not finalists:
        return None
    best = min(finalists, key=lambda p: sign * float(p["tuning"][goal.key]["mean"]))
    return dict(best["config"])


def evaluate(recommended: dict[str, Any], objective: str, what: str = "The recommendation") -> bool:
    """Replay the settings in effect and `recommended` on the evaluation set; print each goal
    metric's change and whether the recommendation (`what`) holds there (returned)."""
    goal = GOALS_BY_KEY[objective]
    base = SchedulerConfig()
    chosen = apply_diff(base, recommended)
    rows: dict[str, list[tuple[float, float]]] = {g.key: [] for g in GOAL_METRICS}
    for sample in EVALUATION:
        history = History(trace=load(sample))
        ours = replay(history, base, seed=sample.seed, gpus=sample.gpus)
        theirs = replay(history, chosen, seed=sample.seed, gpus=sample.gpus)
        for g in GOAL_METRICS:
            rows[g.key].append((g.read(ours), g.read(theirs)))
    print(f"{what} {recommended} on the evaluation set ({len(EVALUATION)} samples):")
    holds = True
    for g in GOAL_METRICS:
        pairs = rows[g.key]
        changes = [change(g, b, r) for b, r in pairs]
        mean = statistics.fmean(changes)
        base_mean = statistics.fmean(b for b, _ in pairs)
        rec_mean = statistics.fmean(r for _, r in pairs)
        bad = (g is goal and mean >= 0) or (g is not goal and mean > MAX_REGRESSION)
        holds = holds and not bad
        print(
            f"  {g.label:26s} in effect {base_mean / g.scale:10.4g}  recommended {rec_mean / g.scale:10.4g}"
            f"  worse by {mean:+7.1%} (mean of the samples' changes){'  <- fails' if bad else ''}"
        )
    verdict = "holds" if holds else "does not hold"
    print(f"On the evaluation set {what[0].lower() + what[1:]} {verdict} (objective {goal.key}).")
    return holds


if __name__ == "__main__":
    sys.exit(main())
