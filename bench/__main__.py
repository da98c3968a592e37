"""`make bench`: the scheduling pass's speed, the policies side by side on the Philly trace, then
the control plane's own figures: the pass on moto at 100, 1,000 and 10,000 pending jobs (time,
items read, writes of a pass that changes nothing) and a freed cluster's backlog (passes,
admissions per second), each handler's import against boto3's, and what it costs on AWS per
1,000 jobs, idle and per running job-hour, counted on the local runtime."""

from __future__ import annotations

import sys


def main() -> int:
    from bench import plan_bench

    plan_bench.main()
    try:
        from bench import policy_bench
    except ImportError as error:  # the simulator bench lands separately
        print(f"policy bench unavailable: {error}", file=sys.stderr)
    else:
        policy_bench.main()
    from bench import aws_costs, cold_start, pass_scale

    print()
    pass_scale.main(["--pending", "100,1000,10000", "--backlog", "1000", "--skip-fixed"])
    print()
    cold_start.main(["--runs", "5"])
    print()
    aws_costs.main(["--jobs", "10", "--idle-runs", "5"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
