"""A pass reads as many jobs per class as the GPUs free (`pass_window`), so a freed cluster with
a backlog fills in one pass, not in one window of 256 per pass.

The passes here are the control plane's pass without AWS: `pass_window` on the snapshot, then
`plan` over the queue, the admitted jobs leaving the queue and holding their GPUs in the next
snapshot. No timing: passes are counted."""

from __future__ import annotations

import random

import pytest

from spotline.control.scheduling import MAX_WINDOW_PER_CLASS, pass_window, usage_moved
from spotline.domain import Admit, Allocation, Job, SchedulerConfig, SortedQueue, plan
from spotline.domain.queue import WINDOW_PER_CLASS
from tests.unit.domain.builders import NOW, cluster, job, pool, quota

FIXED_WINDOW = WINDOW_PER_CLASS
MAX_WINDOW = MAX_WINDOW_PER_CLASS


def passes_to_admit(backlog: list[Job], gpus: int, *, max_window: int) -> tuple[int, int]:
    """(passes until no pass admits more, jobs admitted) for `backlog` on `gpus` free GPUs."""
    pools = [pool("od", capacity=gpus)]
    quotas = [quota("a", gpus)]
    config = SchedulerConfig(protection_period_s=0, preemption_delay_s=0)
    queue = SortedQueue.of(backlog)
    allocations: list[Allocation] = []
    passes = 0
    while True:
        snapshot = cluster(pools, allocations, quotas)
        window = pass_window(snapshot, WINDOW_PER_CLASS, max_window)
        decisions = plan(snapshot, queue, NOW, config, random.Random(0), window_per_class=window)
        admitted = [d for d in decisions if isinstance(d, Admit)]
        if not admitted:
            return passes, len(allocations)
        passes += 1
        for decision in admitted:
            queue.remove(decision.job)
            allocations.append(Allocation(job=decision.job, pool=decision.pool, gpus=decision.job.gpus))


def backlog(count: int) -> list[Job]:
    return [job(f"j{i:05d}").submitted(NOW - count + i).build() for i in range(count)]


def test_a_thousand_freed_gpus_admit_a_thousand_pending_jobs_in_one_pass() -> None:
    # Given 1,000 pending 1-GPU jobs of one class and 1,000 free GPUs
    # When passes run back to back until one admits nothing
    passes, admitted = passes_to_admit(backlog(1000), 1000, max_window=MAX_WINDOW)
    # Then every job is admitted, within 3 passes (in one: the window is the free GPUs)
    assert admitted == 1000
    assert passes <= 3
    assert passes == 1


def test_a_fixed_window_needs_one_pass_per_256_jobs() -> None:
    """What the scaled window replaced: with the window fixed at 256 per class, the same backlog
    takes 4 passes (so the test above would fail without `pass_window`)."""
    passes, admitted = passes_to_admit(backlog(1000), 1000, max_window=FIXED_WINDOW)
    assert (passes, admitted) == (4, 1000)


def test_the_window_is_the_free_gpus_between_the_configured_window_and_its_cap() -> None:
    od = pool("od", capacity=1000)
    busy = [job(f"r{i}").gpus(8).on("od") for i in range(100)]  # 800 GPUs held
    assert pass_window(cluster([od]), 256, 2048) == 1000
    assert pass_window(cluster([od], busy), 256, 2048) == 256  # 200 free: the configured window
    assert pass_window(cluster([od, pool("big", capacity=9000)]), 256, 2048) == 2048  # the cap
    # A pool over-committed (its capacity lowered below what runs) counts no free GPUs, not fewer.
    small = pool("od", capacity=8)
    assert pass_window(cluster([small, pool("b", capacity=300)], busy[:2]), 16, 4096) == 300


@pytest.mark.parametrize(
    ("shown", "usage", "moved"),
    [
        ({}, {}, False),
        ({"a": 10.0}, {"a": 10.05}, False),  # under 1%: the decay of one pass
        ({"a": 10.0}, {"a": 10.2}, True),
        ({"a": 0.0}, {"a": 0.005}, False),  # under 0.01 GPU-hour
        ({"a": 0.0}, {"a": 0.5}, True),
        ({"a": 1.0}, {"a": 1.0, "b": 0.0}, True),  # a team came
        ({}, {"a": 0.0}, True),  # nothing kept yet
    ],
)
def test_the_usage_shown_is_rewritten_only_when_it_moved(
    shown: dict[str, float], usage: dict[str, float], moved: bool
) -> None:
    assert usage_moved(shown, usage) is moved
