"""The project's tuning of Spotline's defaults, with the tuner users run: `python -m bench.tune`.

It calls `spotline tune`'s tuner (`spotline.sim.tune.tune`) on the tuning set's Philly window
(`policy_bench.TUNING`: 2017-10-02..15; `--reduced`, the default on this 2-core machine, its first
four days as `policy_bench.TUNING_REDUCED`), on the cluster `spotline simulate` sizes for the
sample's GPUs, with the shipped defaults (`SchedulerConfig()`) as the settings in effect: its last
`--holdout-days` held out (default: a quarter of the window), `--candidates` raced to
`--finalists` and replayed on `--seeds`, the recommendation guarded as `spotline tune` guards it.
Never the evaluation set: a recommendation becomes the defaults only once it also holds there
(`python -m bench.tune_check` checks one on it).

`--out FILE` writes the record (`bench/data/tuning_spotline.json`): the tuner's JSON
(`TuneResult.to_json`), the history's label, and the settings in effect in full;
`tests/unit/domain/test_config.py` checks that the shipped defaults are those settings with the
recorded recommendation applied. The Slurm peer's knobs are tuned by `python -m bench.tune_slurm`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.policy_bench.setup import TUNING, TUNING_REDUCED, Sample, load
from spotline.cli.tune import print_result
from spotline.domain.config import SchedulerConfig
from spotline.sim.history import History
from spotline.sim.tune import DEFAULT_FINALISTS, DEFAULT_OBJECTIVE, TuneResult, cluster_for, tune

TUNER = "spotline.sim.tune"


def history_sample(full: bool) -> Sample:
    """The tuning set's Philly window (whole, or reduced)."""
    return next(s for s in (TUNING if full else TUNING_REDUCED) if s.kind == "philly")


def run(
    sample: Sample,
    *,
    holdout_days: float | None = None,
    candidates: int = 20,
    finalists: int = DEFAULT_FINALISTS,
    seeds: int = 3,
    objective: str = DEFAULT_OBJECTIVE,
    workers: int = 2,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], TuneResult]:
    """Tune the shipped defaults on `sample`: the record (module docstring), and the result."""
    history = History(trace=load(sample))
    span_days = history.span_s / 86400.0
    pools, zones = cluster_for(history, sample.gpus)
    result = tune(
        history,
        pools,
        zone_traces=zones,
        objective=objective,
        holdout_days=span_days / 4 if holdout_days is None else holdout_days,
        seeds=tuple(range(1, seeds + 1)),
        candidates=candidates,
        finalists=finalists,
        workers=workers,
        progress=progress,
    )
    record = {
        "tuner": TUNER,
        "history": sample.label,
        "gpus": sample.gpus,
        "settings_in_effect": SchedulerConfig().model_dump(mode="json"),
        "result": result.to_json(),
    }
    return record, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the whole Philly window of the tuning set")
    parser.add_argument("--holdout-days", type=float, default=None)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--finalists", type=int, default=DEFAULT_FINALISTS)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--objective", default=DEFAULT_OBJECTIVE)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the record here (JSON)")
    args = parser.parse_args(argv)
    sample = history_sample(args.full)
    console = Console(width=160)
    console.print(f"history: {sample.label} on {sample.gpus} GPUs (the tuning set's Philly window)")
    record, result = run(
        sample,
        holdout_days=args.holdout_days,
        candidates=args.candidates,
        finalists=args.finalists,
        seeds=args.seeds,
        objective=args.objective,
        workers=args.workers,
        progress=lambda line: console.print(line),
    )
    print_result(result, console)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
