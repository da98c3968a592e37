"""Kueue's preemption as of v0.10 (`KueuePolicy`) and the ClusterQueue setups it runs with."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.sim.blocks import BlockEnd
from spotline.sim.model import Phase, SimJob, TeamShares
from spotline.sim.peers.base import PeerPolicy
from spotline.sim.queues import OrderKey

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation


@dataclass(frozen=True)
class KueueSetup:
    """The ClusterQueue options the Kueue model can run with (see `KueuePolicy`)."""

    # `preemption.borrowWithinCohort.policy: LowerPriority`: a queue that borrows to admit a
    # workload may preempt lower-priority workloads that other queues run on borrowed quota.
    borrow_within_cohort: bool = False
    # Fair sharing (`fairSharing.enable`, admission by the queues' share, preemption with the
    # strategies [LessThanOrEqualToFinalShare, LessThanInitialShare]).
    fair_sharing: bool = False
    # `preemption.reclaimWithinCohort: LowerPriority` (False: `Any`): a queue under its nominal
    # quota reclaims only the others' borrowed workloads of lower priority than its own.
    reclaim_lower_priority: bool = False
    # `borrowWithinCohort.maxPriorityThreshold` as a class rank (None: none): while borrowing, a
    # queue preempts another's workloads only of at most this priority.
    borrow_max_priority: int | None = None


# The setups `spotline simulate --policy` accepts, by name; `kueue` is the one the bench found
# best on the tuning set (README: "Kueue's configuration").
KUEUE_SETUPS: dict[str, KueueSetup] = {
    "kueue-classic": KueueSetup(),
    "kueue-bwc": KueueSetup(borrow_within_cohort=True),
    "kueue-fair": KueueSetup(fair_sharing=True),
    # The setup Spotline's own rule matches: reclaim of lower priority only, borrowing with a
    # threshold (`PeerKnobs.kueue_borrow_max_priority` sets it; this one is the default's).
    "kueue-lp": KueueSetup(borrow_within_cohort=True, reclaim_lower_priority=True, borrow_max_priority=0),
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
       Any), or only those of lower priority than the workload (`kueue-lp`: LowerPriority; there
       also, while borrowing, only those of at most `borrow_max_priority`);
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
    # Run on Karpenter's nodes: as a Capacity Block nears its end, Karpenter drains its nodes
    # (the pods are stopped, without a checkpoint of their own).
    at_block_end = BlockEnd.DRAIN

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
                f"kueue: preemption in flavor {ps.name} (LowerPriority, reclaimWithinCohort"
                f" {'LowerPriority' if self.setup.reclaim_lower_priority else 'Any'}"
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
        lp = self.setup.reclaim_lower_priority
        top = job.rank
        if not under and self.setup.borrow_max_priority is not None:
            top = min(top, self.setup.borrow_max_priority + 1)
        if under and not lp:
            reachable = sum(usage[t] for t in borrowing)
        else:
            reachable = sum(
                held.get((t, rank), 0) for t in borrowing for rank in range(job.rank if under else top)
            )
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
            elif w.team in borrowing and not ((lower_only or lp) and w.rank >= job.rank):
                if lower_only and w.rank >= top:
                    continue  # above borrowWithinCohort's maxPriorityThreshold
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
