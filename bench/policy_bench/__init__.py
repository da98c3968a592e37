"""`make bench`, policy part: Spotline against competent peers, on data it was not tuned on.

Sets (disjoint; `TUNING` is what defaults may be chosen on, `EVALUATION` what is reported):
- tuning: Philly 2017-10-02..15 (seed 1) and synthetic traces of seeds 101-102
  (`spotline trace synth`), loads 0.85 and 1.1;
- evaluation: Philly 2017-10-16..29, 2017-10-30..11-12 and 2017-11-13..26 (seed 1), and synthetic
  traces of seeds 1-2 at loads 0.85 and 1.1 (512 GPUs, 75% Spot).

Every policy runs competently (`VictimStop.CHECKPOINT`): victims checkpoint in a grace period
and the preemptor waits, every job checkpoints on a Spot notice, critical work runs On-Demand.
Kueue runs in each of its setups (`KUEUE_SETUPS`), and every peer counts as a peer: for each
metric the goal compares Spotline with the best peer on that metric in the same sample, and
reports the mean and 95% confidence interval (Student's t) over the samples. A ratio whose
denominator is 0 is replaced by the absolute value.

Then: the ablations (Spotline without each mechanism, each victim strategy, the peers with hard
kills), Slurm's sensitivity to its time-limit model, the Spot churn sweep (advisor bands and a
high-churn scenario: cost and deadline misses, Spotline's Spot decisions against Spotline
without them and against the peers), and `speed()`: the whole 82,247-job Philly trace through
the five policies.

The package: `setup` (samples, traces, metrics and goals), `runs` (the simulations), `tables`
(what is printed), `__main__` (the order of it all).

Run: `.venv/bin/python -m bench` (all benches) or `.venv/bin/python -m bench.policy_bench`;
`SPOTLINE_BENCH_QUICK=1` runs every table on small traces (a smoke test, not a result).
"""

from bench.policy_bench.runs import _Run, run_many, run_sample
from bench.policy_bench.setup import (
    EVAL_POLICIES,
    TUNING,
    TUNING_REDUCED,
    WHOLE_END,
    WHOLE_START,
    Sample,
    _synth,
    available,
    load,
    philly_path,
)
from bench.policy_bench.tables import over_samples

__all__ = [
    "EVAL_POLICIES",
    "TUNING",
    "TUNING_REDUCED",
    "WHOLE_END",
    "WHOLE_START",
    "Sample",
    "_Run",
    "_synth",
    "available",
    "load",
    "over_samples",
    "philly_path",
    "run_many",
    "run_sample",
]
