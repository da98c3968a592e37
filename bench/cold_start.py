"""Cold start: how long each Lambda entry point takes to import, against a bare `import boto3`.

The handlers are imported from the Lambda code asset as the stack stages it
(`stacks.packaging.stage_lambda_code`), not from the repository, whose bytecode caches a function
never has: once with the bytecode a deploy ships where the deploying machine has the runtime's
Python (compiled here by this interpreter), once as source only (a deploy from a machine without
it: every cold start compiles the library). Each import runs in a fresh interpreter (as a Lambda
init does) that may not write bytecode (a function's code directory is read-only), several times,
each handler's paired with a bare `import boto3` run next to it; the median of the ratios is
kept, so a load that changes during the bench moves both sides of each ratio alike. The
environment is the one the stack gives every function (`resources.function_environment`, tracing
per `SPOTLINE_BENCH_TRACING`, default off as in cdk.json's default), so the Tracer decides as it
would there.

    .venv/bin/python -m bench.cold_start [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from spotline.resources import function_environment
from stacks.packaging import stage_lambda_code

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
REPO = Path(__file__).resolve().parents[1]

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
            "PYTHONDONTWRITEBYTECODE": "1",
            **function_environment(tracing),
        }
    )
    return env


def import_seconds(module: str, env: dict[str, str], code_dir: Path) -> float:
    """CPU time of `import module` in a fresh interpreter whose first path entry is `code_dir`."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module)],
        env=env,
        cwd=code_dir,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def paired(module: str, runs: int, env: dict[str, str], shipped: Path, source: Path) -> dict[str, float]:
    """Medians over `runs` of: the import from the asset with bytecode, from the source-only
    asset, a bare `import boto3`, and the ratio of each import to the boto3 run next to it."""
    rows = []
    for _ in range(runs):
        base = import_seconds("boto3", env, shipped)
        with_bytecode = import_seconds(module, env, shipped)
        source_only = import_seconds(module, env, source)
        rows.append((with_bytecode, source_only, base, with_bytecode / base, source_only / base))
    keys = ("bytecode", "source", "boto3", "ratio", "source_ratio")
    return {key: statistics.median(row[i] for row in rows) for i, key in enumerate(keys)}


def stage(build_dir: Path) -> tuple[Path, Path]:
    """(the asset with this interpreter's bytecode, the asset as source only)."""
    packages = {"spotline": REPO / "spotline", "functions": REPO / "functions"}
    shipped = stage_lambda_code(packages, build_dir, compile_with=sys.executable)
    return shipped, stage_lambda_code(packages, build_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    if args.runs <= 0:
        parser.error("--runs must be positive")
    tracing = os.environ.get("SPOTLINE_BENCH_TRACING", "0") == "1"
    env = lambda_environment(tracing)
    with tempfile.TemporaryDirectory(prefix="spotline-cold-start-") as build:
        shipped, source = stage(Path(build))
        # Warm the page cache once before timing.
        for module in ("boto3", *HANDLERS):
            import_seconds(module, env, shipped)
            import_seconds(module, env, source)
        mode = "on" if tracing else "off"
        print(
            f"cold start: import CPU time per handler from the staged Lambda asset against boto3's,"
            f" timed in pairs (median of {args.runs}, tracing {mode}, the stack's function environment;"
            " Lambda's Init Duration is not readable here: the import is its main part)"
        )
        print(
            f"  {'module':34s} {'boto3 ms':>8s} {'bytecode':>9s} {'x boto3':>8s}  goal <= {GOAL_RATIO:.1f}x"
            f" | {'source only':>11s} {'x boto3':>8s}"
        )
        worst = worst_source = 0.0
        for module in HANDLERS:
            row = paired(module, args.runs, env, shipped, source)
            worst = max(worst, row["ratio"])
            worst_source = max(worst_source, row["source_ratio"])
            print(
                f"  {module:34s} {row['boto3'] * 1000:8.1f} {row['bytecode'] * 1000:9.1f} {row['ratio']:8.2f}"
                f"  {'met' if row['ratio'] <= GOAL_RATIO else 'MISSED':>13s}"
                f" | {row['source'] * 1000:11.1f} {row['source_ratio']:8.2f}"
            )
        print(
            f"  worst handler: {worst:.2f}x boto3 with the bytecode the stack ships"
            f" ({'met' if worst <= GOAL_RATIO else 'missed'}); {worst_source:.2f}x from source only"
            " (a deploy from a machine without the runtime's Python)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
