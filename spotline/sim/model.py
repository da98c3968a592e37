"""The job model every policy is simulated with, so the comparison is fair.

A job runs `work` seconds in total (the trace's `duration_s`, which already includes the cost of
its own periodic checkpoints). While it runs it checkpoints every `interval` seconds of progress;
a periodic checkpoint of the state at progress `base + k * interval` becomes durable `write`
seconds later. After any stop it resumes from its latest durable checkpoint, and each restart
costs `restart` seconds on all its GPUs before it progresses again (image pull, loading the
checkpoint: 25-250 s, the range Sia measured), drawn once per job from the seed.

How a job leaves early decides what it keeps:
- stopped at once (the peers' preemption, or a Spot reclaim nobody acted on): the work since its
  latest durable periodic checkpoint is lost;
- checkpoint-then-stop (Spotline's preemption, and its handling of a Spot notice when a write fits
  in the 2-minute notice): the state at the start of the write is kept, and the job holds its
  GPUs for the `write` seconds it takes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from spotline.domain.models import Priority, TeamQuota
from spotline.trace.canonical import TraceJob

DAY_S = 86400.0


class VictimStop(StrEnum):
    """How the peers' jobs leave when they are preempted or their Spot instance is reclaimed.

    - `checkpoint` (the default, a competent operator's setup): every policy's jobs run under the
      same agent. A victim gets SIGTERM with a grace period (Slurm GraceTime, Kubernetes
      terminationGracePeriodSeconds, Batch/ECS stopTimeout) at least as long as a checkpoint
      write, writes a checkpoint of its state and leaves; the preemptor waits for the write, with
      the GPUs it counts on set aside. Every job checkpoints on a Spot notice when the write fits.
      Critical jobs are routed to On-Demand (per-class flavor order), as Spotline routes them.
    - `hard-kill` (the ablation, the peers as they stop jobs without the agent's help): victims are
      stopped at once and resume from their latest periodic checkpoint, Spot notices are ignored,
      and every class fills Spot first.
    """

    CHECKPOINT = "checkpoint"
    HARD_KILL = "hard-kill"


@dataclass(frozen=True)
class SlurmKnobs:
    """The Slurm peer's operator knobs (`SlurmPolicy`): what its tuning may change
    (`bench/tune_slurm.py`), as an operator sets them in slurm.conf. The defaults are what the
    tuning set chose (design-notes/tuning.md)."""

    # PriorityWeightAge, PriorityWeightFairshare, PriorityMaxAge.
    weight_age: float = 4000.0
    weight_fairshare: float = 500.0
    max_age_s: float = 86400.0
    # Reservations backfill makes per cycle (its depth; bf_max_job_test bounds the jobs tested).
    bf_reservations: int = 1


@dataclass(frozen=True)
class PeerKnobs:
    """The main parameter of each peer setup added for the contended benches, as its operator
    sets it; the defaults are what the contended tuning set chose (design-notes/contention.md).

    - `kueue_borrow_max_priority`: `kueue-lp`'s `borrowWithinCohort.maxPriorityThreshold`, as a
      class rank (low 0 ... critical 3): a queue borrowing to admit a workload may preempt the
      others' borrowed workloads of at most this priority (and lower than the workload's);
    - `slurm_preempt_exempt_s`: `slurm-exempt`'s `PreemptExemptTime`: a job that has run less
      than this is not a preemption candidate;
    - `skypilot_fallback_s`: `skypilot`'s wait for Spot before a job falls back to On-Demand
      (`skypilot-recovery` never falls back);
    - `batch_share_decay_s`: `batch-fair-share`'s `shareDecaySeconds` (the half-life of a share
      identifier's usage; 0: its GPUs held now alone).
    """

    kueue_borrow_max_priority: int = 0
    slurm_preempt_exempt_s: float = 3600.0
    # (The many-jobs Spot bench's documented 10 minutes; the contended benches run the value the
    # contended tuning set chose, `bench.contention.SETTINGS`.)
    skypilot_fallback_s: float = 600.0
    batch_share_decay_s: float = 0.0


@dataclass(frozen=True)
class SimSettings:
    """The model's knobs; the defaults are what `spotline simulate` uses."""

    # How the peers stop their victims (Spotline always checkpoints: `VictimStop`).
    victim_stop: VictimStop = VictimStop.CHECKPOINT
    # Spotline checkpoints inside a Spot notice (False: the "without the notice" ablation, its jobs
    # run on until the reclaim and keep their latest periodic checkpoint).
    spotline_acts_on_notices: bool = True
    # A Spot notice requeues every job on the instance that acts on it and has not ended by the
    # time its checkpoint is written, as the control plane does (it cannot tell that a job would
    # end before the reclaim): how a deployment's history replays (`spotline.sim.history`).
    # False: a job that would end before the reclaim finishes undisturbed.
    notice_requeues_every_job: bool = False
    # Slurm's user time-limit model (`spotline.sim.peers.ESTIMATE_MODELS`).
    slurm_estimates: str = "uniform"
    # Spotline's jobs declare a run time (`expected_runtime_s`): the time limit the same user
    # would give Slurm (the same model and draw as `slurm_estimates`), so both policies are told
    # the same thing. False: nothing is declared (the "without declared run times" ablation).
    spotline_declared_runtimes: bool = True
    slurm: SlurmKnobs = field(default_factory=SlurmKnobs)
    peers: PeerKnobs = field(default_factory=PeerKnobs)

    # Spot capacity shortages (`engine.py`): periods, a Poisson process of this many per Spot pool
    # per day, during which `shortage_share` of the pool's instances are withdrawn (their jobs get
    # the 2-minute notice) and no launch finds capacity beyond what is left, for an exponential
    # time of mean `shortage_mean_h`. 0: none.
    shortage_rate_per_day: float = 0.0
    shortage_share: float = 0.5
    shortage_mean_h: float = 4.0

    # Deadlines given to jobs that have none in the trace (`build_jobs`): each such job, with
    # probability `deadline_share` (a seeded draw, the same for every policy), gets the deadline
    # submission + run time x slack, slack uniform in `deadline_slack`. 0 (the default): none.
    deadline_share: float = 0.0
    deadline_slack: tuple[float, float] = (1.2, 3.0)

    # Elastic jobs: this share of the multi-GPU jobs (a seeded draw, the same for every policy)
    # may run on half to double their GPUs (`elastic_range`); their progress per second at g GPUs
    # is (g / the trace's GPUs) ** `elastic_scaling` (1: linear). Only Spotline resizes them.
    elastic_share: float = 0.0
    elastic_scaling: float = 1.0

    # A Spot launch that waits this long finds the pool without capacity (the control plane's
    # `spot_missing_after_s`, its default): what Spotline's pool history observes
    # (`spotline_policy.SpotlinePolicy`).
    spot_missing_after_s: float = 300.0

    checkpoint_interval_s: float = 1800.0
    checkpoint_write_s: float = 60.0
    restart_min_s: float = 25.0
    restart_max_s: float = 250.0
    notice_s: float = 120.0
    # The periodic scheduling pass (aging, protection periods running out) when nothing else
    # happens: an EventBridge schedule in production; Slurm's PriorityCalcPeriod is also 5 min.
    tick_s: float = 300.0
    # Slurm's fair-share usage decays with this half-life (its PriorityDecayHalfLife default, 7
    # days); Spotline's comes from its own `SchedulerConfig.usage_half_life_s` (also 7 days).
    usage_half_life_s: float = 7 * DAY_S


class Phase(IntEnum):
    PENDING = 0
    RUNNING = 1
    # Still holding its GPUs, on its way out: checkpointing for a preemptor or a Spot notice, or
    # waiting for a reclaim that nobody acted on.
    LEAVING = 2
    DONE = 3


class Exit(IntEnum):
    """Why a run ended early."""

    PREEMPTED = 0
    INTERRUPTED = 1
    # A checkpoint before an elastic job restarts at another size in the same pool.
    RESIZED = 2


@dataclass(slots=True, eq=False)
class SimJob:
    """One job's static description and its simulated state."""

    idx: int
    id: str
    submit: float
    work: float
    gpus: int
    nodes: int
    team: str
    priority: Priority
    rank: int
    deadline: float | None
    spot_ok: bool
    gpu_type: str | None
    interval: float
    write: float
    restart: float
    # The run time the job declared (its trace's `expected_runtime_s`); None: drawn by the policy.
    declared: float | None = None

    phase: Phase = Phase.PENDING
    # Work kept by durable checkpoints (seconds of progress).
    saved: float = 0.0
    # When the job last entered the queue (its submission or its last requeue).
    enqueued: float = 0.0
    run_id: int = 0
    run_start: float = 0.0
    run_base: float = 0.0
    run_overhead: float = 0.0
    pool: int = -1
    held: int = 0
    # Position in its pool's start order (the packing order of the instances, see the engine).
    start_seq: int = 0
    first_start: float | None = None
    # Seconds spent queued: from submission to the first start, plus each requeue to its restart.
    queued_s: float = 0.0
    finish: float | None = None
    preemptions: int = 0
    interruptions: int = 0
    # Voluntary moves between Spot and On-Demand (checkpoint, leave, resume elsewhere): not
    # preemptions, as no other job asked for the GPUs.
    moves: int = 0
    lost_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    # While LEAVING: when it leaves, what it keeps (None: its latest periodic checkpoint), why.
    leave_at: float = math.inf
    leave_saved: float | None = None
    leave_exit: Exit = Exit.PREEMPTED
    # A Spot reclaim is due at this time and the job does not act on it (peers).
    doomed_at: float = math.inf
    # The loss account (`accounts.py`): why the current run is ending early, why the run before
    # it ended (what its restart is charged to), its latest preemption, and the preemptor (idx)
    # waiting for its checkpoint write (-1: none).
    exit_cause: int = 0
    restart_cause: int = 0
    last_preempted_at: float = -math.inf
    leaving_for: int = -1
    # Preemptions in a row before its run made any progress (a preemption cycle's mark, see
    # `Simulation.MAX_FUTILE_PREEMPTIONS`).
    futile_preemptions: int = 0
    # Elastic jobs (`spotline.sim.elastic`): the GPUs the trace gave it (its `work` is seconds at
    # that size), its (min, max) GPUs when elastic, its progress per second at its current size,
    # its resizes (when each started), and the GPUs it held before it grew into idle ones (0:
    # it has not grown) with the GPU-seconds held above them.
    declared_gpus: int = 0
    elastic: tuple[int, int] | None = None
    speed: float = 1.0
    resize_times: list[float] = field(default_factory=list)
    grown_from: int = 0
    absorbed_gpu_s: float = 0.0
    # Spotline's answer to its deadline at submission (`admission.AnswerKind` value; None: none).
    deadline_answer: str | None = None

    @property
    def end_if_undisturbed(self) -> float:
        return self.run_start + self.run_overhead + (self.work - self.run_base) / self.speed

    def progress(self, t: float) -> float:
        """Work done by `t` in the current run, counting what earlier runs kept."""
        done = t - self.run_start - self.run_overhead
        if done <= 0.0:
            return self.run_base
        return min(self.work, self.run_base + done * self.speed)

    def durable(self, t: float) -> float:
        """Work kept by the latest periodic checkpoint durable at `t`."""
        done = t - self.run_start - self.run_overhead - self.write
        if done < self.interval:
            return self.run_base
        kept = math.floor(done / self.interval) * self.interval * self.speed
        return min(self.run_base + kept, self.progress(t))

    def last_checkpoint_at(self, t: float) -> float | None:
        """When the latest periodic checkpoint of this run became durable (None: none yet)."""
        done = t - self.run_start - self.run_overhead - self.write
        if done < self.interval:
            return None
        return (
            self.run_start + self.run_overhead + math.floor(done / self.interval) * self.interval + self.write
        )

    def next_checkpoint_at(self, t: float) -> float:
        """When the next periodic checkpoint after `t` becomes durable."""
        origin = self.run_start + self.run_overhead + self.write
        k = max(1, math.floor((t - origin) / self.interval) + 1)
        at = origin + k * self.interval
        # (Rounding can put `t - origin` just below a multiple of the interval while
        # `origin + k * interval` rounds back to `t`: the next one is then the one after.)
        return at if at > t else origin + (k + 1) * self.interval


def gang_nodes(gpus: int, gpus_per_node: int) -> int:
    """Nodes of a job: one up to a full node, else the fewest whole nodes that share the GPUs
    evenly (12 GPUs -> 2 nodes of 6)."""
    if gpus <= gpus_per_node:
        return 1
    nodes = math.ceil(gpus / gpus_per_node)
    while gpus % nodes:
        nodes += 1
    return nodes


def build_jobs(
    trace: Sequence[TraceJob], settings: SimSettings, seed: int, gpus_per_node: int
) -> list[SimJob]:
    """The simulated jobs of a trace; restart costs and the deadlines of `deadline_share` come
    from the seed, so every policy gets the same ones."""
    if not 0.0 <= settings.deadline_share <= 1.0:
        raise ValueError(f"deadline share must be in [0, 1], got {settings.deadline_share}")
    low, high = settings.deadline_slack
    if not 1.0 <= low <= high:
        raise ValueError(f"deadline slack must be 1 <= low <= high, got {settings.deadline_slack}")
    rng = random.Random(f"spotline-sim:{seed}:restart")
    draws = random.Random(f"spotline-sim:{seed}:deadline")
    jobs: list[SimJob] = []
    for idx, t in enumerate(trace):
        restart = rng.uniform(settings.restart_min_s, settings.restart_max_s)
        deadline = t.deadline_s
        if settings.deadline_share > 0.0:
            given, slack = draws.random() < settings.deadline_share, draws.uniform(low, high)
            if deadline is None and given:
                deadline = t.submit_s + t.duration_s * slack
        jobs.append(
            SimJob(
                idx=idx,
                id=t.job_id,
                submit=t.submit_s,
                work=t.duration_s,
                gpus=t.gpus,
                nodes=gang_nodes(t.gpus, gpus_per_node),
                team=t.team,
                priority=t.priority,
                rank=t.priority.rank,
                deadline=deadline,
                spot_ok=t.spot_ok,
                gpu_type=t.gpu_type,
                interval=t.checkpoint_interval_s or settings.checkpoint_interval_s,
                write=t.checkpoint_write_s or settings.checkpoint_write_s,
                restart=restart,
                declared=t.expected_runtime_s,
                enqueued=t.submit_s,
                declared_gpus=t.gpus,
            )
        )
    if settings.elastic_share > 0.0:
        _make_elastic(jobs, settings.elastic_share, seed, gpus_per_node)
    return jobs


def elastic_range(gpus: int, nodes: int, gpus_per_node: int) -> tuple[int, int] | None:
    """(min, max) GPUs of an elastic job of `gpus` on `nodes`: half to double its size, a
    single-node job within one node, a multi-node one by whole nodes of its shape and on two or
    more (JobSpec's rules); None when that leaves it one size."""
    if nodes > 1:
        per = gpus // nodes
        low, high = max(2, nodes // 2) * per, 2 * gpus
    else:
        low, high = max(1, gpus // 2), min(2 * gpus, gpus_per_node)
    return None if low == high else (low, high)


def _make_elastic(jobs: list[SimJob], share: float, seed: int, gpus_per_node: int) -> None:
    """Make a seeded `share` of the multi-GPU jobs elastic (one draw per such job)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"elastic share must be in [0, 1], got {share}")
    draws = random.Random(f"spotline-sim:{seed}:elastic")
    for job in jobs:
        if job.gpus < 2:
            continue
        if draws.random() < share:
            job.elastic = elastic_range(job.gpus, job.nodes, gpus_per_node)


@dataclass(frozen=True)
class TeamShares:
    """The teams' quotas (Kueue's nominal quota, Slurm's shares, Spotline's `TeamQuota`).

    Documented choice: a team's share is its share of the trace's GPU-seconds (what a Philly
    virtual cluster was sized for), split into whole GPUs by largest remainder, so the quotas add
    up to the cluster and every pool is divided the same way.
    """

    weights: Mapping[str, float]
    nominal: Mapping[str, int]
    nominal_by_pool: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def quotas(self) -> list[TeamQuota]:
        return [
            TeamQuota(team=t, nominal_gpus=n, weight=max(self.weights[t], 1e-9))
            for t, n in self.nominal.items()
        ]


def team_shares(trace: Sequence[TraceJob], pool_capacity: Mapping[str, int]) -> TeamShares:
    demand: dict[str, float] = {}
    for job in trace:
        demand[job.team] = demand.get(job.team, 0.0) + job.gpus * job.duration_s
    total = sum(demand.values()) or 1.0
    weights = {team: d / total for team, d in sorted(demand.items())}
    by_pool = {name: _largest_remainder(weights, cap) for name, cap in pool_capacity.items()}
    nominal = {team: sum(by_pool[p][team] for p in by_pool) for team in weights}
    return TeamShares(weights=weights, nominal=nominal, nominal_by_pool=by_pool)


def _largest_remainder(weights: Mapping[str, float], amount: int) -> dict[str, int]:
    exact = {team: w * amount for team, w in weights.items()}
    parts = {team: math.floor(x) for team, x in exact.items()}
    left = amount - sum(parts.values())
    for team in sorted(exact, key=lambda t: (-(exact[t] - parts[t]), t))[:left]:
        parts[team] += 1
    return parts
