"""The peers' policies, implemented from their documentation (sources in each class).

Common to all peers, as to Spotline: the same pools, jobs, checkpoints and Spot reclaims (see
`model.py` and `engine.py`). Placement: every peer fills the cheapest pool first, Spot then
On-Demand, as an AWS Batch job queue does with its Spot compute environment listed before the
On-Demand one (the Spot environment using SPOT_PRICE_CAPACITY_OPTIMIZED); a job whose trace says
`spot_ok=false` only uses On-Demand. No peer acts on a Spot notice: its jobs run until the
instance is reclaimed and resume from their latest periodic checkpoint. A peer's preemption stops
its victims at once, and they resume from their latest periodic checkpoint.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from spotline.sim.model import SimJob, TeamShares
from spotline.sim.queues import Buckets, OrderKey
from spotline.sim.usage import DecayedUsage

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation


class PeerPolicy:
    """What the peers share: the pool order, the queue of buckets, the engine hooks."""

    name = "peer"
    acts_on_notices = False
    uses_ticks = False

    def __init__(self) -> None:
        self.queue = Buckets(self.bucket_key, self.order_key)
        self._sim: Simulation | None = None
        self._pool_order: list[PoolState] = []
        self._pools_for: dict[tuple[bool, int, int, str | None], list[PoolState]] = {}

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
        return (job.gpus, job.nodes, job.spot_ok, job.gpu_type)

    def order_key(self, job: SimJob) -> OrderKey:
        return (job.submit,)

    def pools_for(self, job: SimJob) -> list[PoolState]:
        """The pools `job` may use, cheapest first."""
        key = (job.spot_ok, job.gpus, job.nodes, job.gpu_type)
        pools = self._pools_for.get(key)
        if pools is None:
            pools = [p for p in self._pool_order if p.accepts(job)]
            self._pools_for[key] = pools
        return pools

    def fitting_pool(self, job: SimJob) -> PoolState | None:
        for ps in self.pools_for(job):
            if ps.demand(job) <= ps.free:
                return ps
        return None

    def any_free(self) -> bool:
        return any(ps.used < ps.capacity for ps in self._pool_order)

    def on_pending(self, job: SimJob) -> bool:
        self.queue.add(job)
        return True

    def on_leaving(self, job: SimJob) -> None:
        """Peers do not act on Spot notices."""

    def on_released(self, job: SimJob) -> None:
        """Nothing to track by default."""

    def pending_count(self) -> int:
        return len(self.queue)

    def schedule(self, now: float) -> None:
        raise NotImplementedError

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        self.sim.start(job, ps, reason)

    def evict(self, victims: list[SimJob], preemptor: SimJob, ps: PoolState, why: str) -> None:
        """Stop `victims` at once (they keep their latest periodic checkpoint)."""
        sim = self.sim
        if sim.logging:
            sim.log("preempt", preemptor.id, ps.name, [v.id for v in victims], why)
        for victim in victims:
            sim.stop_now(victim, preemptor)


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
    3. victims are stopped at once and lose the work since their latest periodic checkpoint.
    """

    name = "priority-random"

    def __init__(self, seed: int) -> None:
        super().__init__()
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
                self.evict(victims, job, ps, f"{self.name}: random lower-class victims stopped at once")
                self.start(
                    job,
                    ps,
                    f"{self.name}: admitted after preemption in {ps.name}" if self.sim.logging else "",
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
        candidates = sorted((j for j in ps.running.values() if j.rank < job.rank), key=lambda j: j.idx)
        self.rng.shuffle(candidates)
        need = ps.demand(job) - ps.free
        victims: list[SimJob] = []
        for candidate in candidates:
            if need <= 0:
                break
            victims.append(candidate)
            need -= candidate.held
        return victims


class KueuePolicy(PeerPolicy):
    """Kueue's classic preemption (kubernetes-sigs/kueue, pkg/scheduler/preemption, v0.6-0.9;
    docs: concepts/cluster_queue and concepts/preemption).

    Setup (documented choice): one ClusterQueue per team, all in one cohort; two ResourceFlavors,
    Spot then On-Demand, each with the team's share of that pool as nominal quota
    (`TeamShares`), no borrowing or lending limit. Queueing strategy BestEffortFIFO; preemption
    `withinClusterQueue: LowerPriority`, `reclaimWithinCohort: Any`, `borrowWithinCohort: Never`;
    flavor fungibility defaults (whenCanBorrow: Borrow, whenCanPreempt: TryNextFlavor).

    Rules:
    1. each ClusterQueue's queue is ordered by priority, then creation time (a preempted workload
       keeps its creation time); a head that cannot be admitted is set aside until something
       leaves (BestEffortFIFO), and the next one is tried;
    2. a scheduling cycle takes the head of every ClusterQueue and admits them in this order:
       not borrowing first, higher priority, older;
    3. flavors in order: the first where the workload fits (borrowing allowed) is used; if none
       fits, the first flavor where its request is within the queue's nominal quota may preempt;
    4. candidates (findCandidates): lower-priority workloads of its own queue in that flavor, and
       every workload of other queues of the cohort that borrow in that flavor;
    5. ordering (CandidatesOrdering): other queues first, lower priority first, most recently
       admitted first, then UID;
    6. minimalPreemptions: remove candidates in order (skipping another queue's once it no longer
       borrows) until the workload fits, then a reverse pass puts back each one not needed
       (fillBackWorkloads); without borrowing when the queue stays within its nominal quota and
       candidates from other queues exist, else only its own queue's candidates with borrowing;
    7. victims are evicted at once and lose the work since their latest periodic checkpoint.
    """

    name = "kueue"

    def __init__(self, shares: TeamShares) -> None:
        super().__init__()
        self.shares = shares
        self.nominal: list[dict[str, int]] = []
        self.usage: list[dict[str, int]] = []
        # GPUs held per pool by (team, class): to rule out a preemption without a scan.
        self.held: list[dict[tuple[str, int], int]] = []
        self._usage_version = 0
        self._borrowing_cache: dict[int, tuple[int, set[str]]] = {}

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

    def _use(self, job: SimJob, ps: PoolState, sign: int) -> None:
        self._usage_version += 1
        usage = self.usage[ps.index]
        usage[job.team] = usage.get(job.team, 0) + sign * job.held
        held = self.held[ps.index]
        held[(job.team, job.rank)] = held.get((job.team, job.rank), 0) + sign * job.held

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        super().start(job, ps, reason)
        self._use(job, ps, +1)

    def on_released(self, job: SimJob) -> None:
        self._use(job, self.sim.pools[job.pool], -1)

    def schedule(self, now: float) -> None:
        queue = self.queue
        # Per team: its buckets' heads, best first (priority, then creation).
        per_team: dict[str, list[tuple[OrderKey, int, Hashable]]] = {}
        for key, (order, idx, job) in queue.heads():
            per_team.setdefault(job.team, []).append((order, idx, key))
        for heads in per_team.values():
            heapq.heapify(heads)
        while per_team:
            cycle: list[tuple[tuple[bool, int, float, int], str, Hashable]] = []
            for team, heads in list(per_team.items()):
                if not heads:
                    del per_team[team]
                    continue
                _, idx, key = heads[0]
                head = queue.head(key)
                assert head is not None
                pools = self.pools_for(head)
                first = pools[0] if pools else None
                borrows = first is None or (
                    self.usage[first.index].get(team, 0) + first.demand(head)
                    > self.nominal[first.index].get(team, 0)
                )
                cycle.append(((borrows, -head.rank, head.submit, idx), team, key))
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
        preempt_in: PoolState | None = None
        for ps in pools:
            demand = ps.demand(job)
            if demand <= ps.free:
                self.queue.pop(key)
                self.start(job, ps, f"kueue: fits in flavor {ps.name}" if self.sim.logging else "")
                return True
            if preempt_in is None and demand <= self.nominal[ps.index].get(job.team, 0):
                preempt_in = ps
        if preempt_in is None:
            return False
        targets = self.targets(job, preempt_in)
        if not targets:
            return False
        self.queue.pop(key)
        self.evict(
            targets, job, preempt_in, "kueue: classic preemption (LowerPriority, reclaimWithinCohort Any)"
        )
        self.start(
            job,
            preempt_in,
            f"kueue: admitted after preemption in {preempt_in.name}" if self.sim.logging else "",
        )
        return True

    def targets(self, job: SimJob, ps: PoolState) -> list[SimJob]:
        """GetTargets: the fewest victims in `ps` for `job` (rules 4-6), or []."""
        team, pool = job.team, ps.index
        demand = ps.demand(job)
        usage, nominal, held = self.usage[pool], self.nominal[pool], self.held[pool]
        same_lower = sum(held.get((team, rank), 0) for rank in range(job.rank))
        # Rule 6 without a scan: reclaiming without borrowing needs room in the preemptor's
        # nominal quota and a borrowing queue; its own queue's candidates with borrowing, enough.
        own = same_lower > 0 and ps.free + same_lower >= demand
        borrowing: set[str] = set()
        if usage.get(team, 0) + demand <= nominal.get(team, 0):
            borrowing = self._borrowing(pool) - {team}
        reclaim = bool(borrowing)
        if not reclaim and not own:
            return []
        if reclaim and not own and ps.free + same_lower + sum(usage[t] for t in borrowing) < demand:
            return []
        same: list[SimJob] = []
        others: list[SimJob] = []
        for w in ps.running.values():
            if w.team == team:
                if w.rank < job.rank:
                    same.append(w)
            elif w.team in borrowing:
                others.append(w)
        if not same and not others:
            return []

        def ordering(w: SimJob) -> tuple[bool, int, int, str]:
            return (w.team == team, w.rank, -w.start_seq, w.id)

        if not others:
            return self._minimal(job, ps, sorted(same, key=ordering), allow_borrowing=True)
        candidates = sorted(same + others, key=ordering)
        if usage.get(team, 0) + demand <= nominal.get(team, 0):
            found = self._minimal(job, ps, candidates, allow_borrowing=False)
            if found:
                return found
        return self._minimal(job, ps, sorted(same, key=ordering), allow_borrowing=True)

    def _minimal(
        self, job: SimJob, ps: PoolState, candidates: list[SimJob], allow_borrowing: bool
    ) -> list[SimJob]:
        pool = ps.index
        nominal = self.nominal[pool]
        usage = dict(self.usage[pool])
        free = ps.free
        demand = ps.demand(job)
        team = job.team

        def fits() -> bool:
            if demand > free:
                return False
            return allow_borrowing or usage.get(team, 0) + demand <= nominal.get(team, 0)

        targets: list[SimJob] = []
        for w in candidates:
            if w.team != team and usage.get(w.team, 0) <= nominal.get(w.team, 0):
                continue  # that queue no longer borrows
            usage[w.team] = usage.get(w.team, 0) - w.held
            free += w.held
            targets.append(w)
            if fits():
                break
        else:
            return []
        for i in range(len(targets) - 2, -1, -1):
            w = targets[i]
            usage[w.team] = usage.get(w.team, 0) + w.held
            free -= w.held
            if fits():
                targets[i] = targets[-1]
                targets.pop()
            else:
                usage[w.team] = usage.get(w.team, 0) - w.held
                free += w.held
        return targets


class SlurmPolicy(PeerPolicy):
    """Slurm with priority/multifactor, preempt/qos and sched/backfill (slurm.schedmd.com:
    priority_multifactor.html, preempt.html, sched_config.html; src/plugins/preempt/qos).

    Setup (documented choice): one partition over both pools; a QOS per priority class, each
    listing the classes below it in `Preempt=`, PreemptMode=REQUEUE with GraceTime=0 (the
    default), classic fair-share (2^(-U/S), shares = `TeamShares`, PriorityDecayHalfLife 7 days),
    PriorityMaxAge 7 days (the default). Time limits are the jobs' true remaining run times, an
    oracle that flatters backfill.

    Rules:
    1. priority = W_qos * qos + W_age * min(wait / max_age, 1) + W_fs * 2^(-U/S)
       + W_size * gpus / cluster GPUs, with qos = class / 3 (low 0 ... critical 1), and wait the
       time since the job last became eligible (a requeued job ages again from zero); weights
       (documented choice) QOS 10000, fair-share 2000, age 1000, size 500, so the QOS decides;
    2. the main scheduler takes jobs in priority order: a job starts where it fits (Spot first);
       else it preempts lower-QOS jobs of one pool, chosen lowest QOS first, then fewest nodes
       (preempt/qos `_gen_job_prio`), then job id, greedily until it fits and then only those
       needed; victims are requeued at once (GraceTime 0) and lose the work since their latest
       periodic checkpoint;
    3. the first job that can do neither stops the main scheduler and gets a reservation: the
       earliest time enough GPUs free up in a pool, from the running jobs' time limits;
    4. backfill (at most every bf_interval, 30 s) then tests the next jobs in priority order, at
       most bf_max_job_test (500): one starts if it fits now and does not delay the reservation (it
       ends before the reservation starts, or uses GPUs the reservation does not need).
       Simplifications: one reservation (EASY backfill; Slurm reserves for every job it tests),
       and the jobs of one shape, team and class are tested together, oldest first.
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

    def __init__(self, shares: TeamShares, half_life_s: float) -> None:
        super().__init__()
        self.shares = shares
        self.usage = DecayedUsage(half_life_s)
        self.total_gpus = 1
        self._last_backfill = -self.BF_INTERVAL_S

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
                    self._backfill(job, [k for *_, k in sorted(heads)], now)
                elif self.any_free():
                    self.sim.wake_at(self._last_backfill + self.BF_INTERVAL_S)
                return
            queue.pop(key)
            if victims:
                self.evict(victims, job, ps, "slurm: preempt/qos, REQUEUE with GraceTime 0")
                for victim in victims:
                    push_head(queue.key(victim))
            self.start(
                job, ps, f"slurm: main scheduler, priority order, in {ps.name}" if self.sim.logging else ""
            )
            push_head(key)

    def _backfill(self, blocked: SimJob, keys: list[Hashable], now: float) -> None:
        """Start later jobs that fit now without delaying `blocked` (rule 4). Buckets are taken in
        the order of their heads' priority, and each bucket's jobs in its order; each job looked
        at counts toward bf_max_job_test."""
        if not self.any_free():
            return
        reservation = self._reserve(blocked, now)
        tested = 0
        for key in keys:
            group = self.queue.bucket(key)
            position = 0  # the jobs before it were looked at and must wait
            while position < len(group) and tested < self.BF_MAX_JOB_TEST:
                position, ps, looked = self._backfill_candidate(
                    group, position, now, reservation, self.BF_MAX_JOB_TEST - tested
                )
                tested += looked
                if ps is None:
                    break
                job = self.queue.pop(key, position)
                if (
                    reservation is not None
                    and ps is reservation[0]
                    and now + self._time_limit(job) > reservation[1]
                ):
                    reservation = (ps, reservation[1], reservation[2] - ps.demand(job))
                self.start(job, ps, f"slurm: backfill in {ps.name}" if self.sim.logging else "")
                group = self.queue.bucket(key)
            if tested >= self.BF_MAX_JOB_TEST or not self.any_free():
                return

    def _backfill_candidate(
        self,
        group: list[tuple[Any, int, SimJob]],
        first: int,
        now: float,
        reservation: tuple[PoolState, float, int] | None,
        budget: int,
    ) -> tuple[int, PoolState | None, int]:
        """The first job from position `first` of a bucket (all of one shape) that backfill may
        start, where (None: none may), and how many jobs were looked at: the first pool (in
        order) with room where the job does not delay the reservation."""
        head = group[first][2]
        rooms = [ps for ps in self.pools_for(head) if ps.demand(head) <= ps.free]
        if not rooms:
            return 0, None, 0  # no job of this shape fits now

        def unconditional(ps: PoolState) -> bool:
            return reservation is None or ps is not reservation[0] or ps.demand(head) <= reservation[2]

        if unconditional(rooms[0]):
            return first, rooms[0], 1
        assert reservation is not None  # rooms[0] is the reservation's pool, without GPUs to spare
        window = reservation[1] - now
        fallback = next((ps for ps in rooms[1:] if unconditional(ps)), None)
        if fallback is not None:
            return first, (rooms[0] if self._time_limit(head) <= window else fallback), 1
        last = min(len(group), first + budget)
        for position in range(first, last):
            if self._time_limit(group[position][2]) <= window:
                return position, rooms[0], position - first + 1
        return last, None, last - first

    def _time_limit(self, job: SimJob) -> float:
        restart = job.restart if (job.preemptions or job.interruptions) else 0.0
        return restart + job.work - job.saved

    def _preemption(self, job: SimJob) -> tuple[PoolState | None, list[SimJob]]:
        for ps in self.pools_for(job):
            demand = ps.demand(job)
            if ps.free + sum(ps.held_by_rank[: job.rank]) < demand:
                continue
            candidates = sorted(
                (w for w in ps.running.values() if w.rank < job.rank), key=lambda w: (w.rank, w.nodes, w.idx)
            )
            victims: list[SimJob] = []
            free = ps.free
            for w in candidates:
                victims.append(w)
                free += w.held
                if free >= demand:
                    break
            for i in range(len(victims) - 2, -1, -1):
                if free - victims[i].held >= demand:
                    free -= victims[i].held
                    del victims[i]
            return ps, victims
        return None, []

    def _reserve(self, job: SimJob, now: float) -> tuple[PoolState, float, int] | None:
        """The earliest start of `job` from the running jobs' time limits: (pool, time, GPUs
        free then beyond what the job needs)."""
        best: tuple[PoolState, float, int] | None = None
        for ps in self.pools_for(job):
            demand = ps.demand(job)
            free = ps.free
            at = now
            if free < demand:
                for end, held in sorted((w.end_if_undisturbed, w.held) for w in ps.running.values()):
                    free += held
                    at = end
                    if free >= demand:
                        break
                else:
                    continue
            if best is None or at < best[1]:
                best = (ps, at, free - demand)
        return best
