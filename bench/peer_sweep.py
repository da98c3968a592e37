"""Each contended peer's main parameter (`spotline.sim.model.PeerKnobs`), swept on the contended
tuning set: how the defaults of `kueue-lp`, `slurm-exempt`, `skypilot` and `batch-fair-share`
are chosen (never on the evaluation set).

Per peer, every value of its parameter runs on every tuning sample; a value's score is the mean,
over the samples and the goal metrics (`bench.goals`: urgent wait, churn, Spot waste, cost,
average and low-class JCT, Jain, finish-time fairness), of its value over the best value any
setting of that peer reached there (inverted where higher is better, so 1.0 is best on all):
the setting a careful operator would pick with no metric favoured. The lowest score wins.

Run: `.venv/bin/python -m bench.peer_sweep [--json FILE] [--full]` (default: the tuning set's
synthetic shapes at 2,000 jobs on 128 GPUs, seeds 101-103, the reduced size that fits the shared
machine; `--full`: Spotline's own contended tuning samples as they are).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import contention as c
from bench import goals
from bench.policy_bench import runs as pb_runs
from spotline.sim import SimSettings
from spotline.sim.model import PeerKnobs

SWEEP: dict[str, tuple[str, tuple[float, ...]]] = {
    "kueue-lp": ("kueue_borrow_max_priority", (0, 1, 2)),
    "slurm-exempt": ("slurm_preempt_exempt_s", (600.0, 1800.0, 3600.0)),
    "skypilot": ("skypilot_fallback_s", (600.0, 1800.0, 7200.0)),
    "batch-fair-share": ("batch_share_decay_s", (0.0, 3600.0, 86400.0)),
}
REDUCED: tuple[c.Contended, ...] = (
    c._bursty(101, 0.85, 2000, 128),
    c._bursty(102, 1.2, 2000, 128),
    c._long(103, 2000, 128),
)
FULL: tuple[c.Contended, ...] = tuple(s.members[0] for s in c.CONTENDED_TUNING[:4])


def _run(job: tuple[c.Contended, str, str, float]) -> dict[str, Any]:
    sample, peer, knob, value = job
    update: dict[str, Any] = {knob: int(value) if knob == "kueue_borrow_max_priority" else value}
    settings = SimSettings(peers=replace(PeerKnobs(), **update))
    return c.run_contended(sample, [peer], settings=settings, workers=1)[peer]


def score(per_value: dict[float, list[dict[str, Any]]]) -> dict[float, float]:
    """Each value's mean ratio to the best value of the sweep, over samples and goal metrics."""
    values = list(per_value)
    n = len(next(iter(per_value.values())))
    ratios: dict[float, list[float]] = {v: [] for v in values}
    for i in range(n):
        for goal in goals.GOALS:
            got = {v: goal.value(per_value[v][i]) for v in values}
            best = min(got.values()) if goal.lower_is_better else max(got.values())
            for v in values:
                if goal.lower_is_better:
                    ratios[v].append(got[v] / best if best > 0 else (1.0 if got[v] == 0 else 2.0))
                else:
                    ratios[v].append(best / got[v] if got[v] > 0 else 2.0)
    return {v: sum(r) / len(r) for v, r in ratios.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="write every run's goal metrics here")
    parser.add_argument("--full", action="store_true", help="Spotline's contended tuning samples as they are")
    parser.add_argument("--peer", action="append", default=[], help="sweep only this peer (repeatable)")
    args = parser.parse_args(argv)
    unknown = [p for p in args.peer if p not in SWEEP]
    if unknown:
        parser.error(f"--peer: unknown {', '.join(unknown)} (one of {', '.join(SWEEP)})")
    samples = FULL if args.full else REDUCED
    peers = args.peer or list(SWEEP)
    console = Console(width=max(Console().width, 200))
    console.print("Tuning samples: " + "; ".join(s.label for s in samples))
    began = time.perf_counter()
    jobs = [(s, p, SWEEP[p][0], v) for p in peers for v in SWEEP[p][1] for s in samples]
    with ProcessPoolExecutor(max_workers=max(1, pb_runs.WORKERS)) as pool:
        results = list(pool.map(_run, jobs))
    record: dict[str, Any] = {"samples": [s.label for s in samples], "peers": {}}
    k = 0
    for peer in peers:
        knob, values = SWEEP[peer]
        per_value: dict[float, list[dict[str, Any]]] = {}
        for v in values:
            per_value[v] = results[k : k + len(samples)]
            k += len(samples)
        scores = score(per_value)
        chosen = min(scores, key=lambda v: scores[v])
        table = Table(title=f"{peer}: {knob} (mean over the tuning samples; score: lower is better)")
        for column in ("value", "score", *(g.label.split(" <=")[0].split(" >=")[0] for g in goals.GOALS)):
            table.add_column(column)
        rows = {}
        for v in values:
            means = [sum(g.value(r) for r in per_value[v]) / len(samples) for g in goals.GOALS]
            rows[str(v)] = {"score": scores[v], "means": means}
            table.add_row(
                f"{v:g}{' (chosen)' if v == chosen else ''}", f"{scores[v]:.3f}", *(f"{m:.4g}" for m in means)
            )
        console.print(table)
        record["peers"][peer] = {"knob": knob, "chosen": chosen, "values": rows}
    console.print(f"peer sweep: {time.perf_counter() - began:.0f} s wall")
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
