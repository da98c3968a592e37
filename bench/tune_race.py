"""Two races of `spotline tune` side by side, on the same replays: `python -m bench.tune_race`.

A race decides which candidates replay what (`spotline.sim.tune.tune`'s `finalists`,
`screen_days`, `semifinalists`). Each replay is deterministic in its configuration, stretch and
seed, so the races share a cache of replays (`--cache FILE`, JSON lines: the metrics and the CPU
seconds each replay took when it ran); a race's CPU figure is the sum over the replays it asks for,
cached or not, so it reads as if it had run alone.

`--set month`: the speed bench's month (`bench.tune_speed`: Philly 2017-10-02..31, 512 GPUs, 7
days held out, 20 candidates, `--seeds` 1). `--set check`: the tune check's history and evaluation
set (`bench.tune_check`: 8 candidates, 2 seeds), the recommendation also replayed on the
evaluation set. `--race NAME=FINALISTS/SCREEN_SHARE/SEMIFINALISTS` (repeatable; SCREEN_SHARE the
screen's share of the tuning stretch, SEMIFINALISTS 0 for none) names each race; each prints its
finalists, pick, holdout change and CPU seconds. A measurement, never a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import spotline.sim.tune as tuner
from spotline.sim.history import History, holdout_cut, split
from spotline.sim.tune import GOAL_METRICS, GOALS_BY_KEY, TuneResult, change, cluster_for, tune

_original_run_all = tuner._run_all


def _key(run: tuple[int, str, int]) -> str:
    assert tuner._FORKED is not None
    clusters, configs = tuner._FORKED
    index, stretch, seed = run
    cluster = clusters[stretch]
    jobs = cluster.history.trace.jobs
    what = [
        configs[index].model_dump_json(),
        len(jobs),
        round(cluster.history.span_s, 3),
        round(sum(j.submit_s for j in jobs), 3),
        sum(p.capacity_gpus for p in cluster.pools),
        seed,
    ]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


@contextmanager
def cached_replays(path: Path) -> Iterator[dict[str, int]]:
    """`spotline.sim.tune`'s replays read from (and added to) the cache at `path`; yields counts of
    the replays found and run."""
    cache: dict[str, tuple[dict[str, Any], float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            cache[entry["key"]] = (entry["metrics"], entry["cpu_s"])
    counts = {"cached": 0, "ran": 0}

    def run_all(runs: Sequence[tuple[int, str, int]], workers: int) -> list[tuple[dict[str, Any], float]]:
        keys = [_key(r) for r in runs]
        missing = [r for r, k in zip(runs, keys, strict=True) if k not in cache]
        # Unique missing runs only (the same replay asked twice runs once).
        todo: dict[str, tuple[int, str, int]] = {}
        for r in missing:
            todo.setdefault(_key(r), r)
        if todo:
            results = _original_run_all(list(todo.values()), workers)
            with path.open("a") as out:
                for k, (metrics, cpu) in zip(todo, results, strict=True):
                    cache[k] = (metrics, cpu)
                    out.write(json.dumps({"key": k, "metrics": metrics, "cpu_s": cpu}) + "\n")
        counts["ran"] += len(todo)
        counts["cached"] += len(runs) - len(todo)
        return [cache[k] for k in keys]

    tuner._run_all = run_all
    try:
        yield counts
    finally:
        tuner._run_all = _original_run_all


def cpu_of(result: TuneResult) -> float:
    return sum(c.screen_cpu_s + c.semifinal_cpu_s + c.cpu_s + c.holdout_cpu_s for c in result.candidates)


def month_history() -> tuple[History, int]:
    from bench.policy_bench.setup import philly_path
    from bench.tune_speed import END, START
    from spotline.trace import parse_when, read_philly

    path = philly_path()
    if path is None:
        raise SystemExit("no Philly trace (bench/data/philly.csv.gz)")
    return History(trace=read_philly(path, parse_when(START), parse_when(END, end=True), 1)), 512


def check_history() -> tuple[History, int]:
    from bench.policy_bench.setup import load
    from bench.tune_check import HISTORY

    return History(trace=load(HISTORY)), HISTORY.gpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("month", "check"), default="month")
    parser.add_argument("--race", action="append", required=True)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--candidates", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.set == "month":
        history, gpus = month_history()
        holdout, candidates, seeds = 7.0, args.candidates or 20, args.seeds or 1
    else:
        history, gpus = check_history()
        # As bench.tune_check gives it to the command line
        holdout, candidates, seeds = (
            float(f"{history.span_s / 86400.0 / 4:.4f}"),
            args.candidates or 8,
            args.seeds or 2,
        )
    pools, zones = cluster_for(history, gpus)
    for spec in args.race:
        name, _, params = spec.partition("=")
        k, share, semi = params.split("/")
        began = time.perf_counter()

        def say(line: str, began: float = began) -> None:
            print(f"  [{time.perf_counter() - began:6.0f} s] {line}", flush=True)

        with cached_replays(args.cache) as counts:
            head = split(history, holdout_cut(history, holdout))[0]
            head_days = float(share) * head.span_s / 86400.0
            result = tune(
                history,
                pools,
                zone_traces=zones,
                holdout_days=holdout,
                seeds=tuple(range(1, seeds + 1)),
                candidates=candidates,
                workers=args.workers,
                finalists=int(k),
                screen_days=head_days,
                semifinalists=int(semi),
                progress=say,
            )
        report(name, spec, result, counts, args.set)
    return 0


def report(name: str, spec: str, result: TuneResult, counts: dict[str, int], which: str) -> None:
    goal = GOALS_BY_KEY[result.objective]
    print(f"race {name} ({spec}): {result.runs} replays ({counts['ran']} ran now, {counts['cached']} cached),"
          f" {cpu_of(result):.0f} CPU s as if alone")  # fmt: skip
    screen = [c.screen_cpu_s for c in result.candidates if c.screen]
    semi = [c.semifinal_cpu_s for c in result.candidates if c.semifinal]
    print(
        f"  CPU s: screen {sum(screen):.0f} ({len(screen)} replays), semi-final {sum(semi):.0f}"
        f" ({len(semi)}), tuning {sum(c.cpu_s for c in result.candidates):.0f}"
        f" ({sum(len(c.tuning[goal.key].values) for c in result.finalists)}),"
        f" holdout {sum(c.holdout_cpu_s for c in result.candidates):.0f}"
    )
    if result.semifinal_days is not None:
        print(f"  semi-finalists: {[c.index for c in result.candidates if c.semifinal]}")
    print(
        f"  finalists: {[c.index for c in result.finalists]}; pick: {result.checked and result.checked.index}"
    )
    print(f"  recommended: {result.recommended}")
    print(f"  {result.reason}")
    table = result.holdout_table()
    for g in GOAL_METRICS:
        row = table[g.key]
        print(
            f"    holdout {g.label:26s} {row['defaults'] / g.scale:10.4g}"
            f" -> {row['recommended'] / g.scale:10.4g}"
            f" ({change(g, row['defaults'], row['recommended']):+.1%} worse)"
        )
    if which == "check" and result.recommended:
        from bench.tune_check import evaluate

        evaluate(result.recommended, result.objective)
    print(
        json.dumps({"race": name, "spec": spec, "cpu_s": cpu_of(result), "result": result.to_json()}),
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
