"""A pass's releases list each pool's running jobs ending within the window as `Job.remaining_s`
says (`release.PassReleases`: read from the pass's running index, the remaining time inlined):
by reported progress, else by the declared run time; none without either; draining jobs and
victims taken before the pool is listed free nothing."""

from __future__ import annotations

import random

from spotline.domain.decisions import Preempt
from spotline.domain.release import PassReleases
from spotline.domain.running import RunningIndex
from tests.unit.domain.builders import HOUR, NOW, cluster, config, job, pool

WINDOW = config(release_wait_s=1.5 * HOUR)


def test_each_pool_lists_the_jobs_that_remaining_s_ends_within_the_window() -> None:
    rng = random.Random(3)
    pools = [pool("od", capacity=4096), pool("spot", capacity=4096, purchase="spot")]
    allocations = []
    for i in range(400):
        builder = job(f"r{i:03d}").low().gpus(rng.choice([1, 2, 8])).runtime(rng.choice([0.0, 600.0]))
        if rng.random() < 0.8:
            builder = builder.expected_runtime(rng.choice([1.0, 0.5, 2.0, 3.0, 9.0]) * HOUR)
        if rng.random() < 0.3:
            builder = builder.progress(rng.choice([0.0, 0.25, 0.9, 0.999]))
        started = NOW - rng.choice([0.0, 0.5, 1.0, 2.0, 2.9]) * HOUR + rng.choice([0.0, 1.0])
        draining = "someone" if rng.random() < 0.1 else None
        where = rng.choice(["od", "spot"])
        allocations.append(builder.running_since(started).on(where, draining_for=draining))
    snapshot = cluster(pools, allocations)
    releases = PassReleases(snapshot, RunningIndex.of(snapshot.allocations), NOW, WINDOW)
    preemptor = job("p").high().gpus(8).build()
    taken = tuple(a.job.id for a in allocations[:40] if a.pool == "spot")
    releases.decided(Preempt(preemptor, "spot", taken, 1.0, "test"))

    for name in ("od", "spot"):
        want = sorted(
            (remaining, a.job.id, a.gpus)
            for a in allocations
            if a.pool == name
            and a.draining_for is None
            and (remaining := a.job.remaining_s(NOW)) is not None
            and 0.0 < remaining <= WINDOW.release_wait_s
            and not (name == "spot" and a.job.id in taken)
        )
        assert releases._ending(name) == want
        assert releases.ending_gpus[name] == sum(gpus for _, _, gpus in want)
        assert len(want) > 20
