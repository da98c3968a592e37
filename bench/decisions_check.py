"""Check that a change meant to keep Spotline's decisions keeps them: `python -m bench.decisions_check`.

Runs Spotline on reduced traces (Philly windows and synthetic traces) and writes, per sample, its
fingerprint (`spotline.sim.fingerprint`): the decisions by their values (never their wording), the
event and pass counts, each job's record and the metrics.

    python -m bench.decisions_check --record /tmp/ref.json      # before a change
    python -m bench.decisions_check --check /tmp/ref.json       # after it: exit 1 on any difference

`--samples` picks samples by name (`SAMPLES`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bench import policy_bench as pb
from spotline.sim.fingerprint import fingerprint as run_fingerprint
from spotline.trace.canonical import Trace

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


def fingerprint(sample: pb.Sample) -> dict[str, Any]:
    trace = pb.load(sample)
    began = time.process_time()
    got = run_fingerprint(Trace(jobs=trace.jobs, source=sample.label), gpus=sample.gpus, seed=sample.seed)
    return {**got, "cpu_s": time.process_time() - began}


def main() -> None:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record")
    mode.add_argument("--check")
    parser.add_argument("--samples", default="philly-4d,synth-2000")
    args = parser.parse_args()
    reference: dict[str, Any] = {}
    if args.check:
        with open(args.check) as f:
            reference = json.load(f)
    out: dict[str, Any] = {}
    failed = False
    for name in args.samples.split(","):
        key = f"{name}/spotline"
        got = fingerprint(SAMPLES[name])
        out[key] = got
        line = f"{key}: {got['cpu_s']:.1f} CPU-s, {got['events']} events, {got['decisions']} decisions"
        if args.check:
            want = reference.get(key)
            if want is None:
                line += " (no reference)"
            else:
                diffs = [k for k in want if k != "cpu_s" and k in got and want[k] != got[k]]
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
