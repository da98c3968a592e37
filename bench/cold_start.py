"""Cold start: how long each Lambda entry point takes to import, against a bare `import boto3`.

Each import runs in a fresh interpreter (as a Lambda init does), several times, each handler's
paired with a bare `import boto3` run next to it; the median of the ratios is kept, so a load
that changes during the bench moves both sides of each ratio alike. The environment is a
Lambda's as the stack sets it (tracing per `SPOTLINE_BENCH_TRACING`, default off as in cdk.json's
default), so the Tracer decides as it would there.

    .venv/bin/python -m bench.cold_start [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HANDLERS = (
    "functions.api",
    "functions.scheduler",
    "functions.heartbeat",
    "functions.checkpoint_completed",
    "functions.batch_state_change",
    "functions.spot_interruption",
    "functions.rebalance",
    "functions.reconciler",
    "functions.workflow_tasks",
)

GOAL_RATIO = 2.0

# CPU time of the importing process, not wall time: on a shared machine the other processes
# stretch wall time but not the work the import itself does.
_PROBE = "import time; t = time.process_time(); import {module}; print(time.process_time() - t)"


def lambda_environment(tracing: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "LAMBDA_TASK_ROOT": "/var/task",
            "AWS_LAMBDA_FUNCTION_NAME": "spotline-bench",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "spotline",
            "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


def import_seconds(module: str, runs: int, env: dict[str, str]) -> float:
    """Median CPU time of `import module` in a fresh interpreter."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _PROBE.format(module=module)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def paired(module: str, runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """(median seconds of `import module`, median of `import boto3`, median of their ratios),
    each run timing boto3 and the module one after the other: a load that changes during the
    bench moves both sides of each ratio alike."""
    pairs = [(import_seconds(module, 1, env), import_seconds("boto3", 1, env)) for _ in range(runs)]
    return (
        statistics.median(m for m, _ in pairs),
        statistics.median(b for _, b in pairs),
        statistics.median(m / b for m, b in pairs),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    if args.runs <= 0:
        parser.error("--runs must be positive")
    tracing = os.environ.get("SPOTLINE_BENCH_TRACING", "0") == "1"
    env = lambda_environment(tracing)
    # Warm the page cache and the bytecode of every module once before timing.
    for module in ("boto3", *HANDLERS):
        import_seconds(module, 1, env)
    mode = "on" if tracing else "off"
    print(
        f"cold start: import CPU time per handler against boto3's, timed in pairs (median of"
        f" {args.runs}, tracing {mode}; Lambda's Init Duration is not readable here: the import is its"
        " main part)"
    )
    print(f"  {'module':34s} {'ms':>8s} {'boto3 ms':>9s} {'x boto3':>8s}  goal <= {GOAL_RATIO:.1f}x")
    worst = 0.0
    for module in HANDLERS:
        seconds, base, ratio = paired(module, args.runs, env)
        worst = max(worst, ratio)
        print(
            f"  {module:34s} {seconds * 1000:8.1f} {base * 1000:9.1f} {ratio:8.2f}"
            f"  {'met' if ratio <= GOAL_RATIO else 'MISSED'}"
        )
    print(f"  worst handler: {worst:.2f}x boto3 ({'met' if worst <= GOAL_RATIO else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
