"""Check that an optimization leaves the simulator's decisions unchanged: `python -m bench.decisions_check`.

Runs policies on reduced traces (a Philly window and synthetic traces) and writes, per sample and
policy, a fingerprint of the run: the metrics JSON, the event and pass counts, each job's record
(first start, finish, preemptions, interruptions, lost and useful GPU-seconds, time queued) and a
SHA-256 of every decision the run logged (time, action, job, pool, victims, reason), in order.

    python -m bench.decisions_check --record /tmp/ref.json      # before a change
    python -m bench.decisions_check --check /tmp/ref.json       # after it: exit 1 on any difference

`--samples` picks samples by name (`SAMPLES`), `--policies` the policies (default: spotline;
`evaluated`: every policy of the evaluation, `policy_bench.EVAL_POLICIES`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Any

from bench import policy_bench as pb
from spotline.sim import simulate
from spotline.sim.spot_zones import SpotModel

SAMPLES: dict[str, pb.Sample] = {
    "philly-4d": pb.Sample("philly", 1, "2017-10-02", "2017-10-05"),
    "philly-1w": pb.Sample("philly", 1, "2017-10-16", "2017-10-22"),
    "philly-nov": pb.Sample("philly", 1, "2017-11-13", "2017-11-19"),
    "philly-dec": pb.Sample("philly", 1, "2017-12-04", "2017-12-10"),
    "philly-sep": pb.Sample("philly", 1, "2017-09-11", "2017-09-17"),
    "philly-2w": pb.Sample("philly", 1, "2017-10-16", "2017-10-29"),
    # A backlog like the whole trace's (the window full most passes): a week on half the GPUs.
    "philly-1w-256": pb.Sample("philly", 1, "2017-10-16", "2017-10-22", gpus=256),
    "synth-2000": pb._synth(101, 1.1, 2000, 128),
    "synth-600": pb._synth(1, 1.1, 600, 64),
}

JOB_FIELDS = (
    "id",
    "first_start",
    "finish",
    "preemptions",
    "interruptions",
    "lost_gpu_s",
    "useful_gpu_s",
    "queued_s",
)


def fingerprint(sample: pb.Sample, policy: str) -> dict[str, Any]:
    trace = pb.load(sample)
    digest = hashlib.sha256()
    count = 0

    def sink(entry: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        digest.update(json.dumps(entry, sort_keys=True).encode())

    began = time.process_time()
    # The advisor scenario: the pinned decisions predate the trace-driven Spot pools, and the pin
    # is about speed-ups that must not change decisions, not about the Spot model.
    report = simulate(
        trace,
        [policy],
        gpus=sample.gpus,
        seed=sample.seed,
        sink=sink,
        trace_name=sample.label,
        spot_model=SpotModel.ADVISOR,
    )
    cpu = time.process_time() - began
    run = report.runs[policy]
    jobs = [[getattr(j, name) for name in JOB_FIELDS] for j in run.jobs]
    return {
        "metrics": report.to_json()["policies"][policy],
        "events": run.events,
        "passes": run.passes,
        "decisions": count,
        "decisions_sha256": digest.hexdigest(),
        "jobs_sha256": hashlib.sha256(json.dumps(jobs).encode()).hexdigest(),
        "cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record")
    mode.add_argument("--check")
    parser.add_argument("--samples", default="philly-4d,synth-2000")
    parser.add_argument("--policies", default="spotline")
    args = parser.parse_args()
    reference: dict[str, Any] = {}
    if args.check:
        with open(args.check) as f:
            reference = json.load(f)
    out: dict[str, Any] = {}
    failed = False
    for name in args.samples.split(","):
        policies = pb.EVAL_POLICIES if args.policies == "evaluated" else args.policies.split(",")
        for policy in policies:
            key = f"{name}/{policy}"
            got = fingerprint(SAMPLES[name], policy)
            out[key] = got
            line = f"{key}: {got['cpu_s']:.1f} CPU-s, {got['events']} events, {got['decisions']} decisions"
            if args.check:
                want = reference.get(key)
                if want is None:
                    line += " (no reference)"
                else:
                    diffs = [k for k in want if k != "cpu_s" and want[k] != got[k]]
                    verdict = "DIFFERENT " + ",".join(diffs) if diffs else "same"
                    line += f" (reference {want['cpu_s']:.1f} CPU-s): {verdict}"
                    failed = failed or bool(diffs)
            print(line, flush=True)
    if args.record:
        with open(args.record, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
