"""`make bench`: the scheduling pass's speed, the policies side by side on the Philly trace (and
under contention, and with elastic jobs: `bench.elastic`'s goals table), then
the control plane's own figures: the pass on moto at 100 and 1,000 pending jobs (time,
items read, writes of a pass that changes nothing) and a freed cluster's backlog (passes,
admissions per second), each handler's import against boto3's, and what it costs on AWS per
1,000 jobs, idle and per running job-hour, counted on the local runtime; last, the single-job
Spot-under-deadline benchmark (`bench.deadline_bench`: the paper's Table 3 and the goal rows) and
many jobs on real Spot capacity (`bench.spot_pools`: the Spot peers and the many-jobs goal rows)
and many deadline jobs on equal terms (`bench.deadline_cluster`: admission, the trade-off curve).

Everything runs as plain Python, the code Lambda runs; the policies' simulations run in a process
of their own. The evaluation set is simulated once: the policy part saves its runs and the
contention part's whole-set goals read them.

What each part prints is also written to `bench/results/<UTC start>-<commit>.md` and
`bench/results/latest.md` (`bench.results`), with the commit, the machine and each part's wall
time. `python -m bench --speed` (`make bench-speed`): the whole 82,247-job Philly trace through
the five policies, a speed figure alone, filed in a dated file of its own (latest.md untouched)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _policy_bench(*arguments: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.policy_bench", *arguments], check=False)
    if done.returncode != 0:
        # On standard output too, so the results file says its tables are missing.
        print(f"policy bench failed (exit {done.returncode})", flush=True)
        print(f"policy bench failed (exit {done.returncode})", file=sys.stderr, flush=True)


def _contention_bench(*arguments: str) -> None:
    """The policy under contention: the accounts and the goals, `bench.contention`."""
    done = subprocess.run([sys.executable, "-m", "bench.contention", *arguments], check=False)
    if done.returncode != 0:
        print(f"contention bench failed (exit {done.returncode})", flush=True)
        print(f"contention bench failed (exit {done.returncode})", file=sys.stderr, flush=True)


def _tune_check() -> None:
    """`spotline tune` on the tuning set, checked on the evaluation set (`bench.tune_check`)."""
    done = subprocess.run([sys.executable, "-m", "bench.tune_check"], check=False)
    if done.returncode != 0:
        print(f"tune check failed (exit {done.returncode})", flush=True)
        print(f"tune check failed (exit {done.returncode})", file=sys.stderr, flush=True)


def speed() -> int:
    """`make bench-speed`: the whole-Philly speed run, filed on its own."""
    from bench.results import Recorder

    record = Recorder("make bench-speed")
    with record.section("Speed: the whole Philly trace through the five policies"):
        _policy_bench("--speed")
    print(f"\nresults: {record.finish(latest=False)}")
    return 0


def main(argv: Sequence[str] = ()) -> int:
    if list(argv) == ["--speed"]:
        return speed()
    if argv:
        print(f"usage: python -m bench [--speed]; got {' '.join(argv)}", file=sys.stderr)
        return 2
    from bench import plan_bench
    from bench.results import Recorder

    record = Recorder("make bench")
    with record.section("plan() at scale"):
        plan_bench.main()
    with tempfile.TemporaryDirectory(prefix="spotline-bench-") as scratch:
        evaluation = str(Path(scratch) / "evaluation-runs.json")
        with record.section("Policies on the evaluation set"):
            _policy_bench("--save-evaluation", evaluation)
        with record.section("The policy under contention"):
            _contention_bench("--evaluation-runs", evaluation)
        from bench import elastic

        # elastic jobs: 30% of the multi-GPU jobs of the contended synthetic shapes, three seeds
        with record.section("Elastic jobs"):
            elastic.main([])
    # `spotline tune` on a tuning-set trace, its recommendation checked on the evaluation set
    with record.section("Tune on the tuning set, checked on the evaluation set"):
        _tune_check()
    from bench import aws_costs, cli_startup, cold_start, pass_scale

    with record.section("The scheduling pass on moto"):
        pass_scale.main(["--pending", "100,1000", "--backlog", "200", "--skip-fixed"])
    with record.section("Cold start"):
        cold_start.main(["--runs", "5"])
    with record.section("CLI start-up"):
        cli_startup.main(["--runs", "5"])
    with record.section("Control plane cost"):
        aws_costs.main(["--jobs", "10", "--idle-runs", "5"])
    from bench import deadline_bench

    # the single-job Spot-under-deadline benchmark: Table 3, the C/R sweep, the goals,
    # on the evaluation half of the traces (the guard's plan was tuned on the first half); 100
    # starts per trace (the paper's 300: --starts 300 --part all)
    with record.section("Single job under a deadline"):
        deadline_bench.main(["--starts", "100", "--ratios", "0.6,0.7,0.8,0.9,0.95", "--part", "eval"])
    from bench import deadline_families

    # the single-job table per trace family with 95% CIs and the goals: the repository's traces
    # (their evaluation half) and two held-out families of SkyPilot's (bench/data/spot-traces/)
    with record.section("Single job under a deadline, per trace family"):
        deadline_families.main(["--starts", "3"])
    from bench import spot_pools

    # many jobs on real Spot capacity: the Philly evaluation windows' first days on
    # three Spot zones following the 16-node traces, On-Demand capped, against the Spot peers
    with record.section("Many jobs on real Spot capacity"):
        spot_pools.main([])
    from bench import deadline_cluster

    # many deadline jobs on equal terms: load against usable capacity, the all-On-Demand baseline
    # sized to the cluster, the same run times for all, Slurm, Kueue and EDF peers, Spotline's
    # admission answers, cost against deadline attainment
    with record.section("Deadlines across the cluster"):
        deadline_cluster.main([])
    print(f"\nresults: {record.finish()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
