"""`make bench`: the scheduling pass's speed, the policies side by side on the Philly trace, then
the control plane's own figures: the pass on moto at 100, 1,000 and 10,000 pending jobs (time,
items read, writes of a pass that changes nothing) and a freed cluster's backlog (passes,
admissions per second), each handler's import against boto3's, and what it costs on AWS per
1,000 jobs, idle and per running job-hour, counted on the local runtime; last, the single-job
Spot-under-deadline benchmark (`bench.deadline_bench`: the paper's Table 3 and the goal rows).

The policies' simulations run on the simulator's compiled build (`bench.native`: the same source
compiled with mypyc, checked first to decide exactly as the interpreted code), in a process of
their own; `SPOTLINE_BENCH_NATIVE=0` runs them interpreted. Everything else measures the
interpreted code that Lambda runs: `plan()`'s speed, the control plane's passes and costs."""

from __future__ import annotations

import subprocess
import sys


def _policy_bench() -> None:
    from bench import native

    env, line = native.environment()
    print(line, flush=True)
    done = subprocess.run([sys.executable, "-m", "bench.policy_bench"], env=env, check=False)
    if done.returncode != 0:
        print(f"policy bench failed (exit {done.returncode})", file=sys.stderr, flush=True)


def main() -> int:
    from bench import plan_bench

    plan_bench.main()
    sys.stdout.flush()
    _policy_bench()
    from bench import aws_costs, cold_start, pass_scale

    print()
    pass_scale.main(["--pending", "100,1000,10000", "--backlog", "1000", "--skip-fixed"])
    print()
    cold_start.main(["--runs", "5"])
    print()
    aws_costs.main(["--jobs", "10", "--idle-runs", "5"])
    print()
    from bench import deadline_bench

    # the single-job Spot-under-deadline benchmark (issue 30): Table 3, the C/R sweep, the goals;
    # 100 starts per trace keeps it to about 5 CPU-minutes (the paper's 300: --starts 300)
    deadline_bench.main(["--starts", "100", "--ratios", "0.6,0.7,0.8,0.9,0.95"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
