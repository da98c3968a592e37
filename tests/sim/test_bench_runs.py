"""`make bench` runs its single-policy simulations (ablation variants, Slurm's time-limit models,
the churn sweep's Spot-blind Spotline) in worker processes: the results are the ones a run in
this process gives, in the order asked."""

from __future__ import annotations

import pytest

from bench.policy_bench import runs as pb
from spotline.domain import SchedulerConfig
from spotline.sim import SimSettings

SMALL = pb.Sample("synth", 7, jobs=150, load=1.0, gpus=32)


def test_runs_in_worker_processes_match_runs_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[pb._Run] = [
        (SMALL, "spotline", None, None, None),
        (SMALL, "spotline", None, SchedulerConfig(preemption_delay_s=0.0), None),
        (SMALL, "slurm", SimSettings(slurm_estimates="oracle"), None, None),
    ]
    monkeypatch.setattr(pb, "WORKERS", 2)
    parallel = pb.run_many(runs)
    monkeypatch.setattr(pb, "WORKERS", 1)
    assert parallel == pb.run_many(runs)
    # the two Spotline configurations are different runs, so the order is checked too
    assert parallel[0] != parallel[1]
