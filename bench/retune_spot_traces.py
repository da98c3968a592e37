"""Issue 29's moves to Spot and gang hold, decided again under the trace-driven Spot model.

The simulator's default Spot model follows real availability traces (bulk reclaims with the
2-minute notice; launches wait while capacity is 0), and Spotline's passes now plan from each
Spot pool's history as the control plane keeps it (`SpotlinePolicy.observe`). This runs
`bench.contention.SPOT_TRACE_STEPS` (moves weighing the pool's history with a day or 6 h left at
least, moves by the remaining time alone, no moves; each with and without the gang hold) on the
tuning set's contended counterparts only (`CONTENDED_TUNING`, never the evaluation samples), the
peers once per sample, and writes the record `bench/data/contention_tuning_3.json`: per sample
and configuration the metrics the goals read, and per configuration the goal rows met and the
mean ratios, and the configuration chosen (`"chosen"`: the most goal rows met; the defaults
are set to it). The record is rewritten after every run, so a stopped run keeps what it measured
(`"complete": false`).

Run: `nice -n 10 python -m bench.retune_spot_traces [--samples N ...] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.contention import (
    CONTENDED_TUNING,
    GOALS,
    SPOT_TRACE_STEPS,
    Contended,
    available,
    judge,
    run_contended,
)
from bench.policy_bench import setup as pb
from spotline.domain.config import SchedulerConfig

RECORD = Path(__file__).resolve().parent / "data" / "contention_tuning_3.json"
KEYS = (
    "lost_gpu_hours",
    "preemptions",
    "interruptions",
    "wait_p99_s_by_priority",
    "avg_jct_s",
    "avg_jct_s_by_priority",
    "cost_per_useful_gpu_hour",
    "jain_fairness",
    "ftf_max",
)


def kept(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: m[k] for k in KEYS if k in m}
    out["loss_account"] = {"lost_gpu_hours_by_cause": m["loss_account"]["lost_gpu_hours_by_cause"]}
    return out


def summarise(record: dict[str, Any], steps: Iterable[str] = SPOT_TRACE_STEPS) -> dict[str, Any]:
    """Per configuration of `steps`: each goal's ratio and whether it is met per sample, rows
    met, means."""
    goals: dict[str, Any] = {}
    for name in steps:
        rows: dict[str, Any] = {}
        met_total = 0
        for goal in GOALS:
            outcomes = []
            for sample in record["samples"].values():
                if name not in sample["spotline"]:
                    continue
                runs = {**sample["peers"], "spotline": sample["spotline"][name]}
                ratio, met, how = judge(goal, runs)
                outcomes.append({"ratio": ratio, "met": met, "how": how})
            if not outcomes:
                continue
            met = sum(o["met"] for o in outcomes)
            met_total += met
            finite = [o["ratio"] for o in outcomes if o["ratio"] != float("inf")]
            rows[goal.label] = {
                "met": met,
                "samples": len(outcomes),
                "mean_ratio": sum(finite) / len(finite) if finite else None,
                "per_sample": [o["how"] for o in outcomes],
            }
        if rows:
            goals[name] = {"rows_met": met_total, "rows": rows}
    return goals


def run_steps(
    sample: Contended, steps: Mapping[str, SchedulerConfig], entry: dict[str, Any], save: Callable[[], None]
) -> None:
    """Spotline in each configuration of `steps` on `sample` not yet in `entry` (a resumable
    record's sample), each run's kept metrics and wall time filed there and saved at once."""
    for name, config in steps.items():
        if name in entry["spotline"]:
            continue
        began = time.perf_counter()
        m = run_contended(sample, ["spotline"], config=config, workers=1)["spotline"]
        entry["spotline"][name] = kept(m)
        entry["wall_s"][name] = round(time.perf_counter() - began, 1)
        print(f"{sample.label} | {name}: {entry['wall_s'][name]} s", flush=True)
        save()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.retune_spot_traces", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--samples", type=int, nargs="*", default=None, help="indices into CONTENDED_TUNING (default: all)"
    )
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    samples = available(CONTENDED_TUNING)
    if args.samples is not None:
        samples = [CONTENDED_TUNING[i] for i in args.samples]
    record: dict[str, Any] = {
        "command": "nice -n 10 python -m bench.retune_spot_traces"
        + ("" if args.samples is None else " --samples " + " ".join(map(str, args.samples))),
        "spot_model": "trace (the simulator's default: the shipped 16-node traces, one per zone)",
        "set": "tuning (bench.contention.CONTENDED_TUNING)",
        "complete": False,
        "samples": {},
    }
    if args.out.exists():  # resume: keep what an earlier run of the same command measured
        earlier = json.loads(args.out.read_text())
        if earlier.get("command") == record["command"]:
            record["samples"] = earlier.get("samples", {})

    def save() -> None:
        record["goals"] = summarise(record)
        # The choice: the configuration that meets the most goal rows over the samples (the
        # first listed on a tie); `SchedulerConfig()`'s defaults are set to it by hand.
        if record["goals"]:
            record["chosen"] = max(record["goals"], key=lambda n: record["goals"][n]["rows_met"])
        args.out.write_text(json.dumps(record, indent=1) + "\n")

    for sample in samples:
        entry = record["samples"].setdefault(sample.label, {"peers": {}, "spotline": {}, "wall_s": {}})
        if not entry["peers"]:
            began = time.perf_counter()
            peers = run_contended(sample, pb.PEERS, workers=1)
            entry["peers"] = {p: kept(m) for p, m in peers.items()}
            entry["wall_s"]["peers"] = round(time.perf_counter() - began, 1)
            save()
        run_steps(sample, SPOT_TRACE_STEPS, entry, save)
    record["complete"] = True
    save()
    for name, summary in record["goals"].items():
        print(f"{summary['rows_met']:3d} rows met  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
