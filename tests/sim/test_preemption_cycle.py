"""A policy that preempts the same jobs again and again before they make any progress can never
finish its run: the engine stops it with `PreemptionCycle` (Kueue's borrowWithinCohort with
victims stopped at once has such a cycle on the ablation sample), while a job preempted after it
progressed starts its count again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim import PreemptionCycle
from spotline.sim.engine import Simulation
from spotline.sim.model import SimJob, build_jobs

from .helpers import HARD_KILL, trace

POOL = Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8)
# Restarts (1000 s) outlast the periodic pass (300 s): a job preempted at each pass never
# gets past its restart.
SLOW_RESTART = replace(HARD_KILL, restart_min_s=1000.0, restart_max_s=1000.0)


class Alternate:
    """Two 8-GPU jobs on 8 GPUs: at every pass, the waiting one stops the running one at once
    and starts; with `patience`, only in the first `swaps` passes of every `patience`, so each
    run also gets the time to progress."""

    name = "alternate"
    acts_on_notices = False
    uses_ticks = True
    plans_when_idle = False

    def __init__(self, patience: int | None = None, swaps: int = 3) -> None:
        self.pending: list[SimJob] = []
        self.patience = patience
        self.swaps = swaps
        self.passes = 0

    def attach(self, sim: Simulation) -> None:
        self.sim = sim

    def on_pending(self, job: SimJob) -> bool:
        self.pending.append(job)
        return True

    def on_leaving(self, job: SimJob) -> None:
        pass

    def on_released(self, job: SimJob) -> None:
        pass

    def pending_count(self) -> int:
        return len(self.pending)

    def schedule(self, now: float) -> None:
        self.passes += 1
        ps = self.sim.pools[0]
        running = list(ps.running.values())
        if running and self.patience and self.passes % self.patience >= self.swaps:
            return  # let the running job get past its restart and progress
        job = self.pending.pop(0)
        for victim in running:
            self.sim.stop_now(victim, job)
        self.sim.start(job, ps)


def _simulation(policy: Alternate, hours: float) -> Simulation:
    rows = [("a", 0.0, hours * 3600.0, 8, "t", "normal"), ("b", 0.0, hours * 3600.0, 8, "t", "normal")]
    jobs = build_jobs(trace(rows).jobs, SLOW_RESTART, 1, 8)
    return Simulation(jobs, [POOL], policy, SLOW_RESTART, 1)


def test_a_cycle_of_futile_preemptions_stops_the_run_with_a_clear_error() -> None:
    sim = _simulation(Alternate(), hours=2000.0)
    with pytest.raises(PreemptionCycle, match=r"alternate: [ab] was preempted 10000 times in a row"):
        sim.run()


def test_preemptions_after_progress_start_the_count_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each round of 25 passes (300 s apart): 3 swaps, the last 2 before the new run gets past
    # its 1000 s restart (futile), then 22 passes (6600 s) for the job that runs to progress;
    # the jobs take turns. A bound of 5 futile preemptions in a row is soon reached unless
    # progress starts the count again.
    monkeypatch.setattr(Simulation, "MAX_FUTILE_PREEMPTIONS", 5)
    sim = _simulation(Alternate(patience=25), hours=10.0)
    sim.run()
    assert all(job.finish is not None for job in sim.jobs)
    assert sum(job.preemptions for job in sim.jobs) > 3 * Simulation.MAX_FUTILE_PREEMPTIONS
