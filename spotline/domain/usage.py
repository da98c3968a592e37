"""Decayed GPU usage per team: the fair-share input (Slurm's PriorityDecayHalfLife), as pure math.

A team's usage at time T is, over all of its runs, gpus * integral over the run of
e^(-k (T - u)) du, with k = ln 2 / half-life: a GPU-second used one half-life ago counts half.

Stored usage never has to be rewritten as it decays. Time is cut into buckets one half-life long;
a completed run adds to each bucket it overlaps, starting at t_B, gpus * integral of
e^(k (u - t_B)) du over its part inside the bucket, which is worth bucket * e^(-k (T - t_B)) at T.
That is exact, the values stay small (within a bucket the factor is at most 2), a run touches at
most `HORIZON_HALF_LIVES + 1` buckets, and adding a run to a bucket is a plain addition, which a
database does atomically. Jobs still running are added when the usage is read, from their start.
(Changing the half-life re-weights usage recorded before the change only approximately.)

The simulator integrates the same quantity incrementally (`spotline.sim.usage.DecayedUsage`); a
property test checks that both give the same usage for the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# Usage older than this many half-lives (weight under 0.1%) is dropped when a run is recorded and
# ignored when usage is read.
HORIZON_HALF_LIVES = 10


def decay_rate(half_life_s: float) -> float:
    """k = ln 2 / half-life, per second."""
    if half_life_s <= 0:
        raise ValueError(f"usage half-life must be positive, got {half_life_s}")
    return math.log(2.0) / half_life_s


def bucket_start(at: float, half_life_s: float) -> int:
    """The start (epoch seconds) of the bucket holding time `at`."""
    return int(math.floor(at / half_life_s) * half_life_s)


def run_buckets(gpus: int, start: float, end: float, half_life_s: float) -> dict[int, float]:
    """The buckets of a completed run of `gpus` GPUs from `start` to `end` (epoch seconds): bucket
    start -> the run's part in it, scaled to the bucket's start. The part of the run older than
    the horizon before `end` is left out."""
    k = decay_rate(half_life_s)
    first = max(start, end - HORIZON_HALF_LIVES * half_life_s)
    buckets: dict[int, float] = {}
    if gpus <= 0 or end <= first:
        return buckets
    index = math.floor(first / half_life_s)
    while True:
        begins = index * half_life_s
        a, b = max(first, begins), min(end, begins + half_life_s)
        if b > a:
            buckets[int(begins)] = gpus * (math.exp(k * (b - begins)) - math.exp(k * (a - begins))) / k
        if begins + half_life_s >= end:
            return buckets
        index += 1


def decayed_usage_gpu_s(
    buckets: Mapping[int, float],
    running: Iterable[tuple[int, float]],
    now: float,
    half_life_s: float,
) -> float:
    """A team's usage at `now`, in GPU-seconds: its completed runs' `buckets` (bucket start ->
    value, from `run_buckets`) decayed to `now`, plus its `running` jobs as (gpus, start) pairs,
    each integrated from its start to `now`. Buckets that ended before the horizon are ignored."""
    k = decay_rate(half_life_s)
    oldest = now - HORIZON_HALF_LIVES * half_life_s - half_life_s
    total = 0.0
    for begins, value in buckets.items():
        if begins > oldest:
            total += value * math.exp(-k * (now - begins))
    for gpus, start in running:
        if now > start and gpus > 0:
            total += gpus * -math.expm1(-k * (now - start)) / k
    return total
