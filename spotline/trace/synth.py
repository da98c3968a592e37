"""Seeded synthetic traces in the canonical format (`spotline trace synth`).

A trace of `jobs` jobs for a cluster of `gpus` GPUs at a target `load` (GPU-seconds of work over
GPU-seconds of the cluster during the arrival window), drawn from `seed` alone:

- arrivals: a two-state Markov-modulated Poisson process (bursty): calm periods (mean 6 h) and
  bursts (mean 1 h) in which jobs arrive `BURST_FACTOR` times faster, as submission waves do in
  the Philly and Helios traces (Jeon et al., ATC'19; Hu et al., SC'21); the arrival times are then
  scaled so the window has the target load;
- run times: heavy-tailed, log-normal with the Philly trace's median (about 19 minutes) and
  sigma 2.0 (Philly's mean/median ratio gives 2.2), clipped to [1 minute, 10 days];
- GPUs: 1, 2, 4, 8, 16, 32 with Philly-like shares (mostly 1 GPU), at most an eighth of the
  cluster, so a gang job fits a quarter-On-Demand cluster;
- six teams of Zipf-like sizes, each with its own class mix around critical 2%, high 38%,
  normal 20%, low 40%;
- deadlines: a quarter of the high and normal jobs have one, 1.5 to 4 times their run time after
  submission (what Spot-risk placement has to respect).

Two options shape contended samples (the defaults leave the trace as above):
- `sigma`: the log-normal's sigma (1.6: a lighter tail, more mid-length jobs);
- `long_share`: that share of the jobs (drawn from a stream of their own, so the other jobs and
  the arrivals are unchanged) run for weeks, `LONG_DAYS`, as the long-running pods of the Alibaba
  GPU 2023 trace do, with the short jobs arriving in bursts over them. The load counts their work:
  the window stretches, and the short jobs' share of it shrinks accordingly.
"""

from __future__ import annotations

import math
import random
from typing import TypeVar

from spotline.domain.models import Priority
from spotline.trace.canonical import TraceJob

TEAMS: tuple[tuple[str, float], ...] = (
    ("vision", 0.32),
    ("speech", 0.22),
    ("nlp", 0.16),
    ("ads", 0.12),
    ("research", 0.10),
    ("infra", 0.08),
)
CLASS_MIX: tuple[tuple[Priority, float], ...] = (
    (Priority.CRITICAL, 0.02),
    (Priority.HIGH, 0.38),
    (Priority.NORMAL, 0.20),
    (Priority.LOW, 0.40),
)
GPU_MIX: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.08), (4, 0.09), (8, 0.10), (16, 0.02), (32, 0.01))
MEDIAN_RUN_S = 1144.0
SIGMA = 2.0
MIN_RUN_S, MAX_RUN_S = 60.0, 10 * 86400.0
CALM_MEAN_S, BURST_MEAN_S = 6 * 3600.0, 3600.0
BURST_FACTOR = 6.0
DEADLINE_SHARE = 0.25
LONG_DAYS = (7.0, 21.0)


T = TypeVar("T")


def _pick(rng: random.Random, mix: tuple[tuple[T, float], ...]) -> T:
    x = rng.random() * sum(w for _, w in mix)
    for value, weight in mix:
        x -= weight
        if x < 0:
            return value
    return mix[-1][0]


def synth_trace(
    jobs: int, load: float, gpus: int, seed: int, sigma: float = SIGMA, long_share: float = 0.0
) -> list[TraceJob]:
    """The jobs of a synthetic trace, in submission order (see the module)."""
    if jobs <= 0:
        raise ValueError(f"--jobs must be positive, got {jobs}")
    if not math.isfinite(load) or load <= 0:
        raise ValueError(f"--load must be a positive number, got {load}")
    if gpus <= 0:
        raise ValueError(f"--gpus must be positive, got {gpus}")
    if not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"--sigma must be a positive number, got {sigma}")
    if not math.isfinite(long_share) or not 0 <= long_share <= 1:
        raise ValueError(f"--long-share must be between 0 and 1, got {long_share}")
    rng = random.Random(f"spotline-synth:{seed}")
    largest = max(1, gpus // 8)
    shapes = tuple((g, w) for g, w in GPU_MIX if g <= largest) or ((1, 1.0),)
    # Each team's class mix: the base mix with its weights jittered by up to +-50%.
    team_mix = {team: tuple((p, w * rng.uniform(0.5, 1.5)) for p, w in CLASS_MIX) for team, _ in TEAMS}
    drawn: list[tuple[float, int, str, Priority]] = []
    for _ in range(jobs):
        team = _pick(rng, TEAMS)
        run = math.exp(rng.gauss(math.log(MEDIAN_RUN_S), sigma))
        drawn.append(
            (min(MAX_RUN_S, max(MIN_RUN_S, round(run))), _pick(rng, shapes), team, _pick(rng, team_mix[team]))
        )
    if long_share > 0:
        weeks = random.Random(f"spotline-synth:{seed}:long")
        for i in sorted(weeks.sample(range(jobs), round(long_share * jobs))):
            _, g, team, priority = drawn[i]
            drawn[i] = (round(weeks.uniform(*LONG_DAYS) * 86400.0), g, team, priority)
    # Arrivals of a two-state MMPP at a unit base rate, then scaled to the target load.
    times: list[float] = []
    t = 0.0
    burst = False
    switch = rng.expovariate(1.0 / CALM_MEAN_S)
    rate = 1.0 / 60.0
    while len(times) < jobs:
        step = rng.expovariate(rate * (BURST_FACTOR if burst else 1.0))
        if t + step > switch:
            t = switch
            burst = not burst
            switch = t + rng.expovariate(1.0 / (BURST_MEAN_S if burst else CALM_MEAN_S))
            continue
        t += step
        times.append(t)
    work = sum(run * g for run, g, _, _ in drawn)
    window = work / (load * gpus)
    scale = window / times[-1] if times[-1] > 0 else 1.0
    out: list[TraceJob] = []
    for i, ((run, g, team, priority), at) in enumerate(zip(drawn, times, strict=True)):
        submit = round(at * scale)
        deadline = None
        if priority in (Priority.HIGH, Priority.NORMAL) and rng.random() < DEADLINE_SHARE:
            deadline = submit + round(run * rng.uniform(1.5, 4.0))
        out.append(
            TraceJob(
                job_id=f"synth-{i:06d}",
                submit_s=float(submit),
                duration_s=float(run),
                gpus=g,
                team=team,
                priority=priority,
                deadline_s=None if deadline is None else float(deadline),
                line=i + 2,
            )
        )
    return out
