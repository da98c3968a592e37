"""The peers' policies, implemented from their documentation (sources and versions in each class).

Common to all peers, as to Spotline: the same pools, jobs, checkpoints, restart costs and Spot
reclaims (see `model.py` and `engine.py`), and the same agent in the jobs (`VictimStop`):

- by default (`VictimStop.CHECKPOINT`, a competent operator's setup) a victim gets SIGTERM with a
  grace period at least as long as a checkpoint write (Slurm `GraceTime`, Kubernetes
  `terminationGracePeriodSeconds`, Batch/ECS `stopTimeout`), writes a checkpoint of its state
  and leaves; the preemptor waits for the write, with the GPUs it counts on set aside. Every job
  checkpoints inside a Spot notice when the write fits. Placement follows a per-class flavor
  order: critical jobs run On-Demand (as Spotline's `on_demand_classes` routes them; Spot only
  when no On-Demand pool can host them), the other classes fill the cheapest pool first, Spot
  then On-Demand, as an AWS Batch job queue does with its Spot compute environment listed first
  (SPOT_PRICE_CAPACITY_OPTIMIZED); a job whose trace says `spot_ok=false` uses only On-Demand;
- with `VictimStop.HARD_KILL` (the ablation) victims are stopped at once and resume from their
  latest periodic checkpoint, no job acts on a Spot notice (it runs until the reclaim), and every
  class fills Spot first.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.sim.model import Phase, SimJob, SlurmKnobs, TeamShares
from spotline.sim.queues import Buckets, OrderKey
from spotline.sim.usage import DecayedUsage

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation

CRITICAL_RANK = 3


@dataclass(eq=False)
class _Waiting:
    """A preemptor waiting for its victims' checkpoint writes."""

    job: SimJob
    pool: PoolState
    victims: int
    reserved: int


class PeerPolicy:
    """What the peers share: the pool order, the queue of buckets, the engine hooks, and how a
    preemption stops its victims (`VictimStop`)."""

    name = "peer"
    acts_on_notices = False
    uses_ticks = False
    plans_when_idle = False

    def __init__(self, competent: bool = True) -> None:
        self.competent = competent
        # The agent in every job checkpoints inside a Spot notice (competent setup).
        self.acts_on_notices = competent
        self.queue = Buckets(self.bucket_key, self.order_key)
        self._sim: Simulation | None = None
        self._pool_order: list[PoolState] = []
        self._pools_for: dict[tuple[bool, int, int, str | None, bool], list[PoolState]] = {}
        # Preemptors waiting for their victims' writes (by job index), and whom each victim frees.
        self._waiting: dict[int, _Waiting] = {}
        self._draining: dict[int, _Waiting] = {}

    @property
    def sim(self) -> Simulation:
        assert self._sim is not None, "attach the policy to a simulation first"
        return self._sim

    def attach(self, sim: Simulation) -> None:
        self._sim = sim
        spot = sorted((p for p in sim.pools if p.is_spot), key=lambda p: (p.pool.price, p.name))
        on_demand = sorted((p for p in sim.pools if not p.is_spot), key=lambda p: (p.pool.price, p.name))
        self._pool_order = spot + on_demand

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.gpus, job.nodes, job.spot_ok, job.gpu_type, job.rank == CRITICAL_RANK)

    def order_key(self, job: SimJob) -> OrderKey:
        return (job.submit,)

    def pools_for(self, job: SimJob) -> list[PoolState]:
        """The pools `job` may use, in its class's flavor order (cheapest first; critical jobs
        On-Demand only in the competent setup, unless no On-Demand pool hosts them)."""
        critical = self.competent and job.rank == CRITICAL_RANK
        key = (job.spot_ok, job.gpus, job.nodes, job.gpu_type, critical)
        pools = self._pools_for.get(key)
        if pools is None:
            pools = [p for p in self._pool_order if p.accepts(job)]
            if critical:
                pools = [p for p in pools if not p.is_spot] or pools
            self._pools_for[key] = pools
        return pools

    def fitting_pool(self, job: SimJob) -> PoolState | None:
        for ps in self.pools_for(job):
            if ps.demand(job) <= ps.free:
                return ps
        return None

    def any_free(self) -> bool:
        return any(ps.free > 0 for ps in self._pool_order)

    def on_pending(self, job: SimJob) -> bool:
        self.queue.add(job)
        return True

    def on_leaving(self, job: SimJob) -> None:
        """A Spot notice: the job checkpoints (the engine's doing); nothing to track."""

    def on_released(self, job: SimJob) -> None:
        """A victim that a preemptor waited for has left: once the last one has, the preemptor
        starts on the GPUs they freed and those set aside for it."""
        waiting = self._draining.pop(job.idx, None)
        if waiting is None:
            return
        waiting.victims -= 1
        if waiting.victims > 0:
            # Its GPUs stay set aside for the preemptor until the last victim has left.
            waiting.reserved += job.held
            waiting.pool.reserved += job.held
            return
        del self._waiting[waiting.job.idx]
        waiting.pool.reserved -= waiting.reserved
        if waiting.pool.demand(waiting.job) > waiting.pool.free:
            # A Spot capacity shortage took the pool's GPUs meanwhile: no launch finds capacity,
            # and the preemptor queues again (it keeps its place: the queue orders by submission).
            self.queue.add(waiting.job)
            return
        self.start(
            waiting.job,
            waiting.pool,
            f"{self.name}: admitted in {waiting.pool.name} once its victims checkpointed"
            if self.sim.logging
            else "",
        )

    def pending_count(self) -> int:
        return len(self.queue)

    def schedule(self, now: float) -> None:
        raise NotImplementedError

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        self.sim.start(job, ps, reason)

    def preempt(self, job: SimJob, victims: list[SimJob], ps: PoolState, why: str, admitted: str) -> None:
        """Stop `victims` in `ps` for `job` (already out of the queue) and admit it.

        Competent setup: each victim gets SIGTERM, writes a checkpoint and leaves; `job` waits
        for the last write, with the free GPUs it counts on set aside. Hard kill: the victims stop
        at once (they keep their latest periodic checkpoint) and `job` starts now."""
        sim = self.sim
        if sim.logging:
            sim.log("preempt", job.id, ps.name, [v.id for v in victims], why)
        if not self.competent:
            for victim in victims:
                sim.stop_now(victim, job)
            self.start(job, ps, admitted if sim.logging else "")
            return
        from_free = ps.demand(job) - sum(v.held for v in victims)
        reserved = max(0, from_free)
        # (Free GPUs are below 0 while the jobs on instances a Spot capacity shortage withdrew
        # leave; a preemptor whose victims cover its demand needs none of them.)
        if reserved > max(ps.free, 0) and ps.capacity < ps.pool.capacity_gpus:
            # The shortage left fewer GPUs than the policy's books: no launch would find
            # capacity, so nobody is preempted and the job queues again.
            self.queue.add(job)
            return
        if reserved > max(ps.free, 0):
            raise RuntimeError(
                f"{self.name}: {job.id} counts on {reserved} free GPUs, {ps.name} has {ps.free}"
            )
        waiting = _Waiting(job, ps, len(victims), reserved)
        ps.reserved += reserved
        self._waiting[job.idx] = waiting
        for victim in victims:
            self._draining[victim.idx] = waiting
        for victim in victims:
            sim.checkpoint_then_stop(victim, job)

    @property
    def stop_label(self) -> str:
        return (
            "SIGTERM, checkpoint in the grace period, then requeue" if self.competent else "stopped at once"
        )


def _fifo_scan(policy: PeerPolicy, keys: list[Hashable] | None = None) -> None:
    """Start jobs in queue order, each where it fits, skipping (not waiting for) jobs that do
    not fit: the heads of the buckets, merged in order."""
    queue = policy.queue
    heads: list[tuple[OrderKey, int, Hashable]] = []
    for key, (order, idx, _) in queue.heads():
        if keys is None or key in keys:
            heads.append((order, idx, key))
    heapq.heapify(heads)
    while heads and policy.any_free():
        _, _, key = heapq.heappop(heads)
        job = queue.head(key)
        assert job is not None
        ps = policy.fitting_pool(job)
        if ps is None:
            continue  # nothing behind it in this bucket fits either
        queue.pop(key)
        policy.start(
            job,
            ps,
            f"{policy.name}: next in queue order that fits, in {ps.name}" if policy.sim.logging else "",
        )
        entry = queue.head_entry(key)
        if entry is not None:
            heapq.heappush(heads, (entry[0], entry[1], key))


class FifoPolicy(PeerPolicy):
    """AWS Batch's default: one FIFO job queue, no preemption.

    Rules (AWS Batch User Guide, "Job queues" and "Job scheduling"; a queue without a scheduling
    policy is FIFO):
    1. RUNNABLE jobs are dispatched in submission order (a requeued job keeps its place);
    2. each goes to the first compute environment of the queue with room for it (Spot first);
    3. a job that does not fit does not hold back later jobs that do (Batch has no reservation);
    4. nothing is ever preempted; a Spot reclaim fails the attempt and the retry strategy puts the
       job back in the queue.
    """

    name = "fifo"

    def schedule(self, now: float) -> None:
        _fifo_scan(self)


class PriorityRandomPolicy(PeerPolicy):
    """Strict priority with a random victim: the naive strategy of the seed paper.

    Rules:
    1. classes strictly in order (critical, high, normal, low); inside a class, submission order;
       a job that does not fit does not hold back the jobs after it;
    2. a job that fits nowhere preempts in the first pool (cheapest first) where free GPUs plus
       the GPUs of lower-class jobs cover it: victims are drawn uniformly at random (seeded) among
       the lower-class jobs there until it fits;
    3. victims leave as `VictimStop` says (checkpoint in a grace period, or at once).
    """

    name = "priority-random"

    def __init__(self, seed: int, competent: bool = True) -> None:
        super().__init__(competent)
        self.rng = random.Random(f"spotline-sim:{seed}:policy:{self.name}")

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.rank, job.gpus, job.nodes, job.spot_ok, job.gpu_type)

    def order_key(self, job: SimJob) -> OrderKey:
        return (-job.rank, job.submit)

    def schedule(self, now: float) -> None:
        queue = self.queue
        heads: list[tuple[OrderKey, int, Hashable]] = [(o, i, k) for k, (o, i, _) in queue.heads()]
        heapq.heapify(heads)
        blocked: set[Hashable] = set()

        def push_head(key: Hashable) -> None:
            entry = queue.head_entry(key)
            if entry is not None and key not in blocked:
                heapq.heappush(heads, (entry[0], entry[1], key))

        while heads:
            _, idx, key = heapq.heappop(heads)
            entry = queue.head_entry(key)
            if entry is None or entry[1] != idx or key in blocked:
                continue  # a stale entry: the bucket's head changed since
            job = entry[2]
            ps = self.fitting_pool(job)
            if ps is not None:
                queue.pop(key)
                self.start(job, ps, f"{self.name}: fits in {ps.name}" if self.sim.logging else "")
            else:
                ps = self._preemptable_pool(job)
                if ps is None:
                    blocked.add(key)  # nothing behind its head can start either
                    continue
                queue.pop(key)
                victims = self._random_victims(job, ps)
                self.preempt(
                    job,
                    victims,
                    ps,
                    f"{self.name}: random lower-class victims, {self.stop_label}",
                    f"{self.name}: admitted after preemption in {ps.name}",
                )
                for victim in victims:  # requeued into lower classes: they may still fit later on
                    push_head(self.bucket_key(victim))
            push_head(key)

    def _preemptable_pool(self, job: SimJob) -> PoolState | None:
        for ps in self.pools_for(job):
            if ps.free + sum(ps.held_by_rank[: job.rank]) >= ps.demand(job):
                return ps
        return None

    def _random_victims(self, job: SimJob, ps: PoolState) -> list[SimJob]:
        candidates = sorted(
            (j for j in ps.running.values() if j.rank < job.rank and j.phase is Phase.RUNNING),
            key=lambda j: j.idx,
        )
        self.rng.shuffle(candidates)
        need = ps.demand(job) - ps.free
        victims: list[SimJob] = []
        for candidate in candidates:
            if need <= 0:
                break
            victims.append(candidate)
            need -= candidate.held
        return victims


@dataclass(frozen=True)
class KueueSetup:
    """The ClusterQueue options the Kueue model can run with (see `KueuePolicy`)."""

    # `preemption.borrowWithinCohort.policy: LowerPriority`: a queue that borrows to admit a
    # workload may preempt lower-priority workloads that other queues run on borrowed quota.
    borrow_within_cohort: bool = False
    # Fair sharing (`fairSharing.enable`, admission by the queues' share, preemption with the
    # strategies [LessThanOrEqualToFinalShare, LessThanInitialShare]).
    fair_sharing: bool = False


# The setups `spotline simulate --policy` accepts, by name; `kueue` is the one the bench found
# best on the tuning set (README: "Kueue's configuration").
KUEUE_SETUPS: dict[str, KueueSetup] = {
    "kueue-classic": KueueSetup(),
    "kueue-bwc": KueueSetup(borrow_within_cohort=True),
    "kueue-fair": KueueSetup(fair_sharing=True),
}
KUEUE_DEFAULT = "kueue-classic"


class KueuePolicy(PeerPolicy):
    """Kueue's preemption as of v0.10 (kubernetes-sigs/kueue, pkg/scheduler/preemption and
    flavorassigner; docs: concepts/cluster_queue, concepts/preemption, concepts/fair_sharing).

    Setup (documented choice): one ClusterQueue per team, all in one cohort; two ResourceFlavors,
    Spot then On-Demand (critical work: On-Demand, see the module), each with the team's share of
    that pool as nominal quota (`TeamShares`), no borrowing or lending limit. Queueing strategy
    BestEffortFIFO; preemption `withinClusterQueue: LowerPriority`, `reclaimWithinCohort: Any`;
    `borrowWithinCohort` and fair sharing as `KueueSetup` says; flavor fungibility defaults
    (whenCanBorrow: Borrow, whenCanPreempt: TryNextFlavor).

    Rules:
    1. each ClusterQueue's queue is ordered by priority, then creation time (a preempted workload
       keeps its creation time); a head that cannot be admitted is set aside until something
       leaves (BestEffortFIFO), and the next one is tried;
    2. a scheduling cycle takes the head of every ClusterQueue and admits them in this order:
       not borrowing first (with fair sharing: the lowest share first), higher priority, older;
    3. flavors in order: the first where the workload fits (borrowing allowed) is used; if none
       fits, preemption is simulated flavor by flavor (a flavor where no set of candidates makes
       room is skipped) and the first flavor with a set of targets is used. Without
       borrowWithinCohort or fair sharing, a flavor is tried only when the request is within the
       queue's nominal quota there;
    4. candidates (findCandidates): lower-priority workloads of its own queue in that flavor, and
       every workload of other queues of the cohort that borrow in that flavor (reclaimWithinCohort
       Any);
    5. ordering (CandidatesOrdering): other queues first, lower priority first, most recently
       admitted first, then UID; with fair sharing, other queues by their share, highest first;
    6. minimalPreemptions: remove candidates in order (skipping another queue's once it no longer
       borrows) until the workload fits, then a reverse pass puts back each one not needed
       (fillBackWorkloads). The attempts (getTargets): with only its own queue's candidates, one
       with borrowing; with borrowWithinCohort, one with borrowing over its own and the others'
       candidates (only the others' lower-priority ones unless its queue is under its nominal
       quota now; taking one of priority at least its own forbids borrowing); otherwise, when
       its queue is under its nominal quota now, all candidates without borrowing, then its own
       queue's candidates with borrowing. With fair sharing,
       another queue's workload is a target only while the preemptor's queue, with the new
       workload, has a share no higher than the target's queue without it
       (LessThanOrEqualToFinalShare);
    7. victims leave as `VictimStop` says. Shares: a queue's GPUs above its nominal quota in the
       flavor over the flavor's GPUs (the dominant resource share with one resource, weight 1).
    """

    name = "kueue"

    def __init__(self, shares: TeamShares, setup: KueueSetup | None = None, competent: bool = True) -> None:
        super().__init__(competent)
        self.shares = shares
        self.setup = setup or KUEUE_SETUPS[KUEUE_DEFAULT]
        self.nominal: list[dict[str, int]] = []
        self.usage: list[dict[str, int]] = []
        # GPUs held per pool by (team, class): to rule out a preemption without a scan.
        self.held: list[dict[tuple[str, int], int]] = []
        self._usage_version = 0
        self._borrowing_cache: dict[int, tuple[int, set[str]]] = {}
        # Jobs whose GPUs the quota view already moved (victims counted out, a waiting preemptor
        # counted in) when a preemption was decided.
        self._charged: dict[int, bool] = {}

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self.nominal = [dict(self.shares.nominal_by_pool.get(ps.name, {})) for ps in sim.pools]
        self.usage = [{} for _ in sim.pools]
        self.held = [{} for _ in sim.pools]

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.team, job.rank, job.gpus, job.nodes, job.spot_ok, job.gpu_type)

    def order_key(self, job: SimJob) -> OrderKey:
        return (-job.rank, job.submit)

    def _borrowing(self, pool: int) -> set[str]:
        """The teams borrowing in `pool` (cached until usage changes)."""
        cached = self._borrowing_cache.get(pool)
        if cached is None or cached[0] != self._usage_version:
            usage, nominal = self.usage[pool], self.nominal[pool]
            cached = (self._usage_version, {t for t, used in usage.items() if used > nominal.get(t, 0)})
            self._borrowing_cache[pool] = cached
        return cached[1]

    def _share(self, pool: int, team: str, usage: int) -> float:
        """Fair sharing's share of `team` in `pool` when it uses `usage` GPUs there."""
        capacity = max(1, self.sim.pools[pool].capacity)
        return max(0, usage - self.nominal[pool].get(team, 0)) / capacity

    def _team_share(self, team: str) -> float:
        return max(
            (self._share(ps.index, team, self.usage[ps.index].get(team, 0)) for ps in self._pool_order),
            default=0.0,
        )

    def _use(self, job: SimJob, ps: PoolState, gpus: int) -> None:
        self._usage_version += 1
        usage = self.usage[ps.index]
        usage[job.team] = usage.get(job.team, 0) + gpus
        held = self.held[ps.index]
        held[(job.team, job.rank)] = held.get((job.team, job.rank), 0) + gpus

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        super().start(job, ps, reason)
        if not self._charged.pop(job.idx, False):
            self._use(job, ps, job.held)

    def on_released(self, job: SimJob) -> None:
        if not self._charged.pop(job.idx, False):
            self._use(job, self.sim.pools[job.pool], -job.held)
        super().on_released(job)

    def preempt(self, job: SimJob, victims: list[SimJob], ps: PoolState, why: str, admitted: str) -> None:
        """As the peers preempt; while the victims write their checkpoints, the quota view
        already has them gone and the preemptor admitted (Kueue reserves the preemptor's quota
        in the cycle that evicts, and counts evicted workloads out), so no other workload
        decides on usage that is about to change."""
        if self.competent:
            for victim in victims:
                self._use(victim, ps, -victim.held)
                self._charged[victim.idx] = True
            self._use(job, ps, ps.demand(job))
            self._charged[job.idx] = True
        super().preempt(job, victims, ps, why, admitted)

    def schedule(self, now: float) -> None:
        queue = self.queue
        # Per team: its buckets' heads, best first (priority, then creation).
        per_team: dict[str, list[tuple[OrderKey, int, Hashable]]] = {}
        for key, (order, idx, job) in queue.heads():
            per_team.setdefault(job.team, []).append((order, idx, key))
        for heads in per_team.values():
            heapq.heapify(heads)
        fair = self.setup.fair_sharing
        while per_team:
            cycle: list[tuple[tuple[bool, float, int, float, int], str, Hashable]] = []
            for team, heads in list(per_team.items()):
                if not heads:
                    del per_team[team]
                    continue
                _, idx, key = heads[0]
                head = queue.head(key)
                assert head is not None
                pools = self.pools_for(head)
                first = pools[0] if pools else None
                if fair:
                    borrows, share = False, self._team_share(team)
                else:
                    share = 0.0
                    borrows = first is None or (
                        self.usage[first.index].get(team, 0) + first.demand(head)
                        > self.nominal[first.index].get(team, 0)
                    )
                cycle.append(((borrows, share, -head.rank, head.submit, idx), team, key))
            cycle.sort(key=lambda e: e[0])
            for _, team, key in cycle:
                heads = per_team[team]
                heapq.heappop(heads)
                head = queue.head(key)
                assert head is not None
                if self._admit(head, key):
                    entry = queue.head_entry(key)
                    if entry is not None:
                        heapq.heappush(heads, (entry[0], entry[1], key))

    def _admit(self, job: SimJob, key: Hashable) -> bool:
        pools = self.pools_for(job)
        for ps in pools:
            if ps.demand(job) <= ps.free:
                self.queue.pop(key)
                self.start(job, ps, f"kueue: fits in flavor {ps.name}" if self.sim.logging else "")
                return True
        may_borrow = self.setup.borrow_within_cohort or self.setup.fair_sharing
        for ps in pools:
            if not may_borrow and ps.demand(job) > self.nominal[ps.index].get(job.team, 0):
                continue
            targets = self.targets(job, ps)
            if not targets:
                continue  # no candidates in this flavor: try the next (preemption per flavor)
            self.queue.pop(key)
            self.preempt(
                job,
                targets,
                ps,
                f"kueue: preemption in flavor {ps.name} (LowerPriority, reclaimWithinCohort Any"
                f"{', borrowWithinCohort' if self.setup.borrow_within_cohort else ''}"
                f"{', fair sharing' if self.setup.fair_sharing else ''}), {self.stop_label}",
                f"kueue: admitted after preemption in {ps.name}",
            )
            return True
        return False

    def targets(self, job: SimJob, ps: PoolState) -> list[SimJob]:
        """GetTargets: the fewest victims in `ps` for `job` (rules 4-6), or [].

        As Kueue's `getTargets` (pkg/scheduler/preemption): with candidates of other queues,
        borrowWithinCohort makes one minimal set with borrowing, from its own queue's candidates
        and, unless its queue is under its nominal quota, only the others' lower-priority ones
        (taking one of priority at least its own forbids borrowing); without it, a queue under
        its nominal quota first tries every candidate without borrowing, and the last attempt is
        its own queue's candidates with borrowing. "Under its nominal quota" is its usage now,
        before the workload (`queueUnderNominalInResourcesNeedingPreemption`)."""
        if self.setup.fair_sharing:
            return self._fair_targets(job, ps)
        team, pool = job.team, ps.index
        demand = ps.demand(job)
        usage, nominal, held = self.usage[pool], self.nominal[pool], self.held[pool]
        same_lower = sum(held.get((team, rank), 0) for rank in range(job.rank))
        under = usage.get(team, 0) < nominal.get(team, 0)
        bwc = self.setup.borrow_within_cohort
        # Without borrowWithinCohort, the attempt without borrowing can succeed only if its queue
        # is under its nominal quota and fits it once its own lower-priority workloads are gone.
        reclaim = under and usage.get(team, 0) - same_lower + demand <= nominal.get(team, 0)
        # (findCandidates: other queues' workloads only while their queue borrows in the flavor.)
        # Only the others' candidates an attempt may take are read: without borrowWithinCohort
        # and that attempt, the last one takes its own queue's (as with no others at all).
        borrowing = self._borrowing(pool) - {team} if reclaim or bwc else set()
        if not borrowing and same_lower == 0:
            return []
        # The others' candidates some attempt may take: all (reclaimWithinCohort Any) under
        # nominal quota; with borrowWithinCohort above it, the lower-priority ones; else none.
        if under:
            reachable = sum(usage[t] for t in borrowing)
        else:
            reachable = sum(held.get((t, rank), 0) for t in borrowing for rank in range(job.rank))
        # No attempt frees enough: nothing to scan.
        if ps.free + same_lower + reachable < demand:
            return []
        lower_only = bwc and not under  # candidatesFromCQOrUnderThreshold
        same: list[SimJob] = []
        others: list[SimJob] = []
        for w in ps.running.values():
            if w.phase is not Phase.RUNNING:
                continue  # already leaving
            if w.team == team:
                if w.rank < job.rank:
                    same.append(w)
            elif w.team in borrowing and not (lower_only and w.rank >= job.rank):
                others.append(w)
        if not same and not others:
            return []

        def ordering(w: SimJob) -> tuple[bool, int, int, str]:
            return (w.team == team, w.rank, -w.start_seq, w.id)

        if not others:
            return self._minimal(job, ps, sorted(same, key=ordering), allow_borrowing=True)
        if bwc:
            candidates = sorted(same + others, key=ordering)
            return self._minimal(job, ps, candidates, allow_borrowing=True, threshold=job.rank)
        found = self._minimal(job, ps, sorted(same + others, key=ordering), allow_borrowing=False)
        if found:
            return found
        return self._minimal(job, ps, sorted(same, key=ordering), allow_borrowing=True)

    def _minimal(
        self,
        job: SimJob,
        ps: PoolState,
        candidates: list[SimJob],
        allow_borrowing: bool,
        threshold: int | None = None,
    ) -> list[SimJob]:
        """minimalPreemptions. With `threshold` (borrowWithinCohort), taking another queue's
        workload of that priority or higher forbids borrowing from then on."""
        pool = ps.index
        nominal = self.nominal[pool]
        usage = dict(self.usage[pool])
        free = ps.free
        demand = ps.demand(job)
        team = job.team

        def fits(free_now: int) -> bool:
            if demand > free_now:
                return False
            return allow_borrowing or usage.get(team, 0) + demand <= nominal.get(team, 0)

        targets: list[SimJob] = []
        for w in candidates:
            if w.team != team:
                if usage.get(w.team, 0) <= nominal.get(w.team, 0):
                    continue  # that queue no longer borrows
                if threshold is not None and w.rank >= threshold:
                    allow_borrowing = False  # (read by `fits`, here and in the fill-back)
            usage[w.team] = usage.get(w.team, 0) - w.held
            free += w.held
            targets.append(w)
            if fits(free):
                break
        else:
            return []
        return self._fill_back(targets, usage, free, fits)

    @staticmethod
    def _fill_back(
        targets: list[SimJob], usage: dict[str, int], free: int, fits: Callable[[int], bool]
    ) -> list[SimJob]:
        """fillBackWorkloads: put back, last removed first, each target not needed."""
        state = {"free": free}
        for i in range(len(targets) - 2, -1, -1):
            w = targets[i]
            usage[w.team] = usage.get(w.team, 0) + w.held
            state["free"] -= w.held
            if fits(state["free"]):
                targets[i] = targets[-1]
                targets.pop()
            else:
                usage[w.team] = usage.get(w.team, 0) - w.held
                state["free"] += w.held
        return targets

    def _fair_targets(self, job: SimJob, ps: PoolState) -> list[SimJob]:
        """Fair sharing's targets (rules 4-6): own lower-priority workloads, and other queues'
        borrowed workloads while LessThanOrEqualToFinalShare holds."""
        team, pool = job.team, ps.index
        demand = ps.demand(job)
        usage = dict(self.usage[pool])
        same_lower = sum(self.held[pool].get((team, rank), 0) for rank in range(job.rank))
        # A queue is a possible target only if its share now is at least the preemptor's after
        # admission (its share only falls as its workloads are removed).
        mine_after = self._share(pool, team, usage.get(team, 0) + demand)
        borrowing = {
            t for t in self._borrowing(pool) - {team} if self._share(pool, t, usage.get(t, 0)) >= mine_after
        }
        if not borrowing and same_lower == 0:
            return []
        if ps.free + same_lower + sum(usage[t] for t in borrowing) < demand:
            return []
        others: list[SimJob] = []
        same: list[SimJob] = []
        for w in ps.running.values():
            if w.phase is not Phase.RUNNING:
                continue
            if w.team == team:
                if w.rank < job.rank:
                    same.append(w)
            elif w.team in borrowing:
                others.append(w)
        shares = {t: self._share(pool, t, usage.get(t, 0)) for t in borrowing}
        others.sort(key=lambda w: (-shares[w.team], w.rank, -w.start_seq, w.id))
        same.sort(key=lambda w: (w.rank, -w.start_seq, w.id))
        free = ps.free
        targets: list[SimJob] = []
        mine = usage.get(team, 0) + demand
        for w in others + same:
            if free >= demand:
                break
            if w.team != team:
                after = self._share(pool, w.team, usage.get(w.team, 0) - w.held)
                if self._share(pool, team, mine) > after:
                    continue  # LessThanOrEqualToFinalShare refuses it
            usage[w.team] = usage.get(w.team, 0) - w.held
            free += w.held
            targets.append(w)
        if free < demand:
            return []
        return self._fill_back(targets, usage, free, lambda f: f >= demand)


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
       it fits and then only those needed;
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
    ) -> None:
        super().__init__(competent)
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
            candidates = sorted(
                (w for w in ps.running.values() if w.rank < job.rank and w.phase is Phase.RUNNING),
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
