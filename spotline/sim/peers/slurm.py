"""Slurm with priority/multifactor, preempt/qos and sched/backfill (`SlurmPolicy`), and the
users' time-limit estimates it reads (`EstimateModel`)."""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.sim.model import Phase, SimJob, SlurmKnobs, TeamShares
from spotline.sim.peers.base import PeerPolicy
from spotline.sim.queues import OrderKey
from spotline.sim.usage import DecayedUsage

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation

# The time limits users ask for: Slurm accepts any, these are the usual round values (hours).
TIME_LIMIT_LADDER_H: tuple[float, ...] = (1, 2, 4, 8, 12, 24, 48, 72)


@dataclass(frozen=True)
class EstimateModel:
    """How a Slurm user's time limit relates to the job's true run time.

    The limit is the true duration times an over-estimate factor, rounded up to the ladder
    (1, 2, 4, 8, 12, 24, 48, 72 h; beyond 72 h, whole days). Factors (`kind`):
    - `uniform` (the default): the accuracy, run time over estimate, is uniform on (0, 1], as
      Mu'alem and Feitelson measured on the SDSC SP2 and CTC SP2 logs (IEEE TPDS 12(6), 2001,
      "Utilization, predictability, workloads, and user runtime estimates in scheduling the IBM
      SP2 with backfilling"); the round values follow Tsafrir, Etsion and Feitelson ("Modeling
      user runtime estimates", JSSPP 2005: a handful of round limits cover most jobs);
    - `f-model`: the factor is uniform on [1, f] (the f-model of the same Mu'alem-Feitelson paper);
    - `round`: factor 1 (the user knows the run time, and rounds it up);
    - `oracle`: no rounding either; the limit is the true remaining run time (what the simulator
      used before; it flatters backfill).
    """

    kind: str = "uniform"
    f: float = 1.0

    @property
    def label(self) -> str:
        return f"f-model f={self.f:g}" if self.kind == "f-model" else self.kind

    def limit(self, job_id: str, duration_s: float, seed: int) -> float:
        if self.kind == "oracle":
            return duration_s
        factor = 1.0
        if self.kind == "uniform":
            rng = random.Random(f"spotline-sim:{seed}:estimate:{job_id}")
            factor = 1.0 / (1.0 - rng.random())  # accuracy uniform on (0, 1]
        elif self.kind == "f-model":
            rng = random.Random(f"spotline-sim:{seed}:estimate:{job_id}")
            factor = rng.uniform(1.0, self.f)
        elif self.kind != "round":
            raise ValueError(f"unknown estimate model {self.kind!r}")
        wanted_h = duration_s * factor / 3600.0
        for hours in TIME_LIMIT_LADDER_H:
            if wanted_h <= hours:
                return hours * 3600.0
        # Beyond 72 h: the run time itself needs more (the partition's MaxTime allows it).
        return max(72.0, math.ceil(duration_s / 86400.0) * 24.0) * 3600.0


ESTIMATE_MODELS: dict[str, EstimateModel] = {
    "uniform": EstimateModel("uniform"),
    "f-model-2": EstimateModel("f-model", 2.0),
    "f-model-5": EstimateModel("f-model", 5.0),
    "round": EstimateModel("round"),
    "oracle": EstimateModel("oracle"),
}


def estimate_model(name: str) -> EstimateModel:
    """The user-estimate model named `name` (`SimSettings.slurm_estimates`), or ValueError."""
    model = ESTIMATE_MODELS.get(name)
    if model is None:
        raise ValueError(f"unknown Slurm estimate model {name!r} (one of {', '.join(ESTIMATE_MODELS)})")
    return model


class _Profile:
    """Free GPUs of one pool over time, a step function: `free[i]` from `times[i]` to
    `times[i + 1]` (the last step lasts forever). Backfill's view of the future."""

    __slots__ = ("free", "times")

    def __init__(self, now: float, free_now: int, releases: list[tuple[float, int]]) -> None:
        self.times = [now]
        self.free = [free_now]
        for at, gpus in sorted(releases):
            at = max(at, now)
            if at == self.times[-1]:
                self.free[-1] += gpus
            else:
                self.times.append(at)
                self.free.append(self.free[-1] + gpus)

    def earliest(self, demand: int, duration: float) -> float:
        """The earliest time `demand` GPUs are free for `duration` seconds."""
        times, free = self.times, self.free
        n = len(times)
        i = 0
        while i < n:
            if free[i] < demand:
                i += 1
                continue
            end = times[i] + duration
            j = i + 1
            while j < n and times[j] < end and free[j] >= demand:
                j += 1
            if j >= n or times[j] >= end:
                return times[i]
            i = j + 1
        return math.inf

    def take(self, start: float, duration: float, demand: int) -> None:
        """Hold `demand` GPUs from `start` for `duration` seconds."""
        end = start + duration
        for at in (start, end):
            k = bisect_right(self.times, at) - 1
            if self.times[k] != at:
                self.times.insert(k + 1, at)
                self.free.insert(k + 1, self.free[k])
        for k in range(bisect_left(self.times, start), bisect_left(self.times, end)):
            self.free[k] -= demand


class SlurmPolicy(PeerPolicy):
    """Slurm 23.11 with priority/multifactor, preempt/qos and sched/backfill (slurm.schedmd.com:
    priority_multifactor.html, preempt.html, sched_config.html, slurm.conf.html;
    src/plugins/preempt/qos, src/plugins/sched/backfill).

    Setup (documented choice): one partition over both pools; a QOS per priority class, each
    listing the classes below it in `Preempt=`, PreemptMode=REQUEUE with GraceTime at least the
    checkpoint write in the competent setup (the job checkpoints on SIGTERM; `VictimStop`),
    classic fair-share (2^(-U/S), shares = `TeamShares`, PriorityDecayHalfLife 7 days),
    PriorityMaxAge 7 days (the default). Time limits come from a user-estimate model
    (`EstimateModel`, drawn per job from the seed).

    Rules:
    1. priority = W_qos * qos + W_age * min(wait / max_age, 1) + W_fs * 2^(-U/S)
       + W_size * gpus / cluster GPUs, with qos = class / 3 (low 0 ... critical 1), and wait the
       time since the job last became eligible (a requeued job ages again from zero); weights
       (documented choice) QOS 10000, fair-share 2000, age 1000, size 500, so the QOS decides
       (age, fair-share, PriorityMaxAge and the backfill depth are `SlurmKnobs`);
    2. the main scheduler takes jobs in priority order: a job starts where it fits (in its
       class's pool order); else it preempts lower-QOS running jobs of one pool, chosen lowest
       QOS first, then fewest nodes (preempt/qos `_gen_job_prio`), then job id, greedily until
       it fits and then only those needed; with `PreemptExemptTime` (the `slurm-exempt`
       setup) a job that has run less than that is no candidate;
    3. the first job that can do neither stops the main scheduler;
    4. backfill (at most every bf_interval, 30 s) walks the pending jobs in priority order, at
       most bf_max_job_test (500), over a profile of free GPUs in time built from the running
       jobs' time limits (from their start): a job starts if it fits now for its whole time
       limit beside the reservations already made; otherwise it gets a reservation at its
       earliest start, for up to `BF_RESERVATIONS` jobs (Slurm reserves for every job it tests;
       the cap bounds the simulator's cost), the blocked job first. Simplification: the jobs of
       one shape, team and class that cannot start now are skipped together once the
       reservations are all made.
    """

    name = "slurm"
    uses_ticks = True

    WEIGHT_QOS = 10000.0
    WEIGHT_FAIRSHARE = 2000.0
    WEIGHT_AGE = 1000.0
    WEIGHT_SIZE = 500.0
    MAX_AGE_S = 7 * 86400.0
    BF_MAX_JOB_TEST = 500
    BF_INTERVAL_S = 30.0
    BF_RESERVATIONS = 16

    def __init__(
        self,
        shares: TeamShares,
        half_life_s: float,
        estimates: EstimateModel | None = None,
        seed: int = 1,
        competent: bool = True,
        knobs: SlurmKnobs | None = None,
        preempt_exempt_s: float = 0.0,
    ) -> None:
        super().__init__(competent)
        # PreemptExemptTime: a job that has run less than this is not a preemption candidate.
        self.preempt_exempt_s = preempt_exempt_s
        knobs = knobs or SlurmKnobs()
        self.WEIGHT_AGE = knobs.weight_age
        self.WEIGHT_FAIRSHARE = knobs.weight_fairshare
        self.MAX_AGE_S = knobs.max_age_s
        self.BF_RESERVATIONS = knobs.bf_reservations
        self.shares = shares
        self.usage = DecayedUsage(half_life_s)
        self.estimates = estimates or ESTIMATE_MODELS["uniform"]
        self.seed = seed
        self.total_gpus = 1
        self._last_backfill = -self.BF_INTERVAL_S
        self._limits: dict[int, float] = {}

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self.total_gpus = max(1, sum(ps.capacity for ps in sim.pools))

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.team, job.rank, job.gpus, job.nodes, job.spot_ok, job.gpu_type)

    def order_key(self, job: SimJob) -> OrderKey:
        return (job.enqueued,)

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        super().start(job, ps, reason)
        self.usage.change(job.team, job.held, self.sim.now)

    def on_released(self, job: SimJob) -> None:
        self.usage.change(job.team, -job.held, self.sim.now)
        super().on_released(job)

    def fairshare(self, now: float) -> dict[str, float]:
        usage = self.usage.gpu_hours(now)
        total = sum(usage.values())
        weights = self.shares.weights
        if total <= 0:
            return {}
        return {team: 2.0 ** (-(u / total) / max(weights.get(team, 0.0), 1e-9)) for team, u in usage.items()}

    def priority(self, job: SimJob, now: float, fairshare: dict[str, float]) -> float:
        age = min(1.0, (now - job.enqueued) / self.MAX_AGE_S)
        return (
            self.WEIGHT_QOS * job.rank / 3.0
            + self.WEIGHT_AGE * age
            + self.WEIGHT_FAIRSHARE * fairshare.get(job.team, 1.0)
            + self.WEIGHT_SIZE * job.gpus / self.total_gpus
        )

    def time_limit(self, job: SimJob) -> float:
        """The run time backfill counts on for `job`'s next run (its time limit)."""
        if self.estimates.kind == "oracle":
            restart = job.restart if (job.preemptions or job.interruptions) else 0.0
            return restart + job.work - job.saved
        limit = self._limits.get(job.idx)
        if limit is None:
            limit = self._limits[job.idx] = self.estimates.limit(job.id, job.work, self.seed)
        return limit

    def _expected_end(self, job: SimJob, now: float) -> float:
        if job.phase is Phase.LEAVING:
            return min(job.leave_at, job.end_if_undisturbed)
        if self.estimates.kind == "oracle":
            return job.end_if_undisturbed
        # A job past its limit (its restart pushed it over) is expected to end any moment.
        return max(job.run_start + self.time_limit(job), now + self.BF_INTERVAL_S)

    def schedule(self, now: float) -> None:
        queue = self.queue
        fairshare = self.fairshare(now)
        heads: list[tuple[float, float, int, Hashable]] = []
        queued: set[Hashable] = set()

        def push_head(key: Hashable) -> None:
            entry = queue.head_entry(key)
            if entry is not None and key not in queued:
                head = entry[2]
                heapq.heappush(heads, (-self.priority(head, now, fairshare), head.enqueued, head.idx, key))
                queued.add(key)

        for key, _ in queue.heads():
            push_head(key)
        while heads:
            _, _, _, key = heapq.heappop(heads)
            queued.discard(key)
            job = queue.head(key)
            assert job is not None
            ps = self.fitting_pool(job)
            victims: list[SimJob] = []
            if ps is None:
                ps, victims = self._preemption(job)
            if ps is None:
                # The main scheduler stops at the first job that cannot start; backfill goes on,
                # every bf_interval (a pass is asked for then if GPUs are free meanwhile).
                if now - self._last_backfill >= self.BF_INTERVAL_S:
                    self._last_backfill = now
                    self._backfill(key, [k for *_, k in sorted(heads)], now)
                elif self.any_free():
                    self.sim.wake_at(self._last_backfill + self.BF_INTERVAL_S)
                return
            queue.pop(key)
            if victims:
                self.preempt(
                    job,
                    victims,
                    ps,
                    f"slurm: preempt/qos, REQUEUE, {self.stop_label}",
                    f"slurm: main scheduler, priority order, in {ps.name}",
                )
                if not self.competent:
                    for victim in victims:
                        push_head(queue.key(victim))
            else:
                self.start(
                    job,
                    ps,
                    f"slurm: main scheduler, priority order, in {ps.name}" if self.sim.logging else "",
                )
            push_head(key)

    def _profile(self, ps: PoolState, now: float) -> _Profile:
        releases = [
            (self._expected_end(w, now), w.held) for w in ps.running.values() if w.idx not in self._draining
        ]
        return _Profile(now, ps.free, releases)

    def _backfill(self, blocked: Hashable, keys: list[Hashable], now: float) -> None:
        """Rule 4: start later jobs that fit now without delaying the reservations."""
        if not self.any_free():
            return
        profiles: dict[int, _Profile] = {}

        def profile(ps: PoolState) -> _Profile:
            p = profiles.get(ps.index)
            if p is None:
                p = profiles[ps.index] = self._profile(ps, now)
            return p

        reservations = 0
        tested = 0
        for key in [blocked, *keys]:
            group = self.queue.bucket(key)
            position = 0
            while position < len(group) and tested < self.BF_MAX_JOB_TEST:
                job = group[position][2]
                pools = self.pools_for(job)
                fits_now = [ps for ps in pools if ps.demand(job) <= ps.free]
                if not fits_now and reservations >= self.BF_RESERVATIONS:
                    break  # none of this bucket starts now, and no reservation is left to make
                tested += 1
                limit = self.time_limit(job)
                best: tuple[float, PoolState] | None = None
                for ps in pools:
                    if ps not in fits_now and reservations >= self.BF_RESERVATIONS:
                        continue
                    at = profile(ps).earliest(ps.demand(job), limit)
                    if best is None or at < best[0]:
                        best = (at, ps)
                        if at <= now:
                            break
                if best is None or best[0] == math.inf:
                    position += 1
                    continue
                at, ps = best
                if at > now and reservations >= self.BF_RESERVATIONS:
                    position += 1
                    continue
                profile(ps).take(at, limit, ps.demand(job))
                if at <= now:
                    self.queue.pop(key, position)
                    self.start(job, ps, f"slurm: backfill in {ps.name}" if self.sim.logging else "")
                    group = self.queue.bucket(key)
                else:
                    reservations += 1
                    position += 1
            if tested >= self.BF_MAX_JOB_TEST or not self.any_free():
                return

    def _preemption(self, job: SimJob) -> tuple[PoolState | None, list[SimJob]]:
        for ps in self.pools_for(job):
            demand = ps.demand(job)
            if ps.free + sum(ps.held_by_rank[: job.rank]) < demand:
                continue
            exempt_after = self.sim.now - self.preempt_exempt_s
            candidates = sorted(
                (
                    w
                    for w in ps.running.values()
                    if w.rank < job.rank and w.phase is Phase.RUNNING and w.run_start <= exempt_after
                ),
                key=lambda w: (w.rank, w.nodes, w.idx),
            )
            victims: list[SimJob] = []
            free = ps.free
            for w in candidates:
                victims.append(w)
                free += w.held
                if free >= demand:
                    break
            if free < demand:
                continue
            for i in range(len(victims) - 2, -1, -1):
                if free - victims[i].held >= demand:
                    free -= victims[i].held
                    del victims[i]
            return ps, victims
        return None, []
