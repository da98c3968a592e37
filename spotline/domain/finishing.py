"""Waiting for running jobs that end soon instead of preempting (issue 29, the lost-work row).

A checkpoint-then-stop preemption makes its preemptor wait for the victims' checkpoint write,
and costs the victims that write plus a restart and a restore on every GPU. When running jobs
of one of the preemptor's pools will have ended by the time the write would finish, and their
GPUs (and their team's quota) make room for it, preempting buys the preemptor nothing: it waits
for their end instead, and no victim loses work.

A running job's end comes from its estimated remaining run time (`Job.remaining_s`: reported
progress, else its declared `expected_runtime_s`). Declared run times are time limits, over-
estimates as a rule, so the predicted end is an upper bound. A job with no estimate, or one that
has run past its declared time (remaining 0: the estimate was wrong), is not counted on.

Pure: reads the pass's ledger and running index, changes neither.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from spotline.domain.checkpoint_cost import restore_s, write_s
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, Job, Pool
from spotline.domain.quota import Ledger
from spotline.domain.running import RunningIndex


def horizon_s(preemptor: Job, demand: int, victims: Sequence[Allocation], config: SchedulerConfig) -> float:
    """How long `preemptor` may wait for ends instead of preempting `victims`: the longest of
    their checkpoint writes (it waits that long for them anyway); with
    `wait_for_ending_weighs_loss`, for a class that waits `preemption_delay_s`, plus the
    victims' loss (GPUs x (write + restart + restore)) over its `demand` GPUs, so the extra
    wait in its GPU-seconds is at most the lost work avoided."""
    within = max(write_s(v.job, config) for v in victims)
    if config.wait_for_ending_weighs_loss and not config.waives_preemption_delay(preemptor.priority):
        restart = config.restart_cost_s
        lost = sum(v.gpus * (write_s(v.job, config) + restart + restore_s(v.job)) for v in victims)
        within += lost / max(1, demand)
    return within


@dataclass(frozen=True, slots=True)
class FinishingFirst:
    """Running jobs `ending` in `pool` end within `within_s` (the checkpoint write a preemption
    would wait for) and free enough for the preemptor: it waits for them instead."""

    pool: str
    ending: tuple[Allocation, ...]
    within_s: float


def ending_soon(
    job: Job,
    pools: Sequence[Pool],
    ledger: Ledger,
    running: RunningIndex,
    taken: Collection[str],
    now: float,
    within_s: float,
) -> FinishingFirst | None:
    """The first of `pools` (preference order) where running jobs estimated to end within
    `within_s` of `now` free enough for `job` (capacity and quota, `Ledger.fits_without`), with
    the fewest such jobs, soonest ending first; None when no pool has them.

    Jobs already leaving (checkpointing for a preemptor) or in `taken` (victims, or ends counted
    on by another preemptor of the pass) are not counted."""
    if within_s <= 0:
        return None
    for pool in pools:
        soon: list[tuple[float, str, Allocation]] = []
        for members in running.groups.get(pool.name, {}).values():
            for job_id, allocation in members.items():
                if allocation.draining_for is not None or job_id in taken:
                    continue
                remaining = allocation.job.remaining_s(now)
                if remaining is not None and 0.0 < remaining <= within_s:
                    soon.append((remaining, job_id, allocation))
        if not soon:
            continue
        soon.sort(key=lambda entry: (entry[0], entry[1]))
        ending: list[Allocation] = []
        for _, _, allocation in soon:
            ending.append(allocation)
            if ledger.fits_without(job, pool, ending):
                return FinishingFirst(pool.name, tuple(ending), within_s)
    return None
