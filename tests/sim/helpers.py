"""Builders for small, hand-computed simulations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from spotline.domain import PriorityWeights, SchedulerConfig
from spotline.domain.models import Priority
from spotline.sim import SimSettings, simulate
from spotline.sim.model import SimJob, VictimStop
from spotline.sim.runner import PolicyRun, SimulationReport
from spotline.trace import Trace, TraceJob

# Round numbers: every restart costs 100 s, checkpoints every 1000 s of progress, 50 s to write.
SETTINGS = SimSettings(
    restart_min_s=100.0, restart_max_s=100.0, checkpoint_interval_s=1000.0, checkpoint_write_s=50.0
)

# The policy the hand-computed scenarios are worked out with: the defaults (a 600 s protection
# period, least lost work, ...) without the mechanisms they do not test: the shortest-declared
# term, the class head rule, moves to Spot and waiting for releases.
BEFORE = SchedulerConfig(
    weights=PriorityWeights(shortest=0.0),
    preempt_for_class_head_only=frozenset(),
    move_to_spot_min_remaining_s=0.0,
    release_wait_s=0.0,
)


def before(**changes: object) -> SchedulerConfig:
    return BEFORE.model_copy(update=changes)


# The peers as they stop jobs without the agent's help (the `--victim-stop hard-kill` ablation).
HARD_KILL = replace(SETTINGS, victim_stop=VictimStop.HARD_KILL)

Row = tuple[str, float, float, int, str, str]  # job_id, submit_s, duration_s, gpus, team, priority


def trace(rows: Sequence[Row]) -> Trace:
    return Trace(
        jobs=[
            TraceJob(job_id=i, submit_s=s, duration_s=d, gpus=g, team=t, priority=Priority(p), line=n + 2)
            for n, (i, s, d, g, t, p) in enumerate(rows)
        ],
        source="test",
    )


def run(
    rows: Sequence[Row], policy: str, gpus: int = 8, spot_fraction: float = 0.0, **kwargs: object
) -> PolicyRun:
    """One policy on an On-Demand cluster of `gpus` GPUs (no Spot, so no interruptions)."""
    options: dict[str, object] = {"settings": SETTINGS, **kwargs}
    if policy == "spotline":
        options.setdefault("config", BEFORE)
    report = simulate(trace(rows), [policy], gpus=gpus, spot_fraction=spot_fraction, **options)  # type: ignore[arg-type]
    return report.runs[policy]


def report(rows: Sequence[Row], policies: Sequence[str], **kwargs: object) -> SimulationReport:
    options: dict[str, object] = {"gpus": 8, "spot_fraction": 0.0, "settings": SETTINGS, **kwargs}
    return simulate(trace(rows), policies, **options)  # type: ignore[arg-type]


def by_id(run: PolicyRun) -> dict[str, SimJob]:
    return {job.id: job for job in run.jobs}


def waits(run: PolicyRun) -> dict[str, float]:
    return {job.id: job.first_start - job.submit for job in run.jobs if job.first_start is not None}


def queued(run: PolicyRun) -> dict[str, float]:
    """Each started job's time queued, requeues included."""
    return {job.id: job.queued_s for job in run.jobs if job.first_start is not None}


def jcts(run: PolicyRun) -> dict[str, float]:
    return {job.id: job.finish - job.submit for job in run.jobs if job.finish is not None}
