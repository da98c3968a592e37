"""AWS Batch with a fair-share scheduling policy (`BatchFairSharePolicy`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING

from spotline.sim.model import SimJob, TeamShares
from spotline.sim.peers.base import PeerPolicy
from spotline.sim.queues import OrderKey
from spotline.sim.usage import DecayedUsage

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState


class BatchFairSharePolicy(PeerPolicy):
    """AWS Batch, one job queue with a fair-share scheduling policy (AWS Batch User Guide,
    "Fair-share scheduling policies" and "Share identifiers"; API `CreateSchedulingPolicy`:
    `fairsharePolicy.shareDecaySeconds`, `shareDistribution[].weightFactor`).

    Setup (documented choice): a share identifier per team, its `weightFactor` the inverse of the
    team's share (`TeamShares.weights`: Batch gives a share identifier with a lower weight factor
    more of the resources), `shareDecaySeconds` from `PeerKnobs.batch_share_decay_s`, no
    compute reservation; the job's `schedulingPriority` is its class; the Spot compute
    environment first, On-Demand second (critical work On-Demand, as every competent peer).

    Rules:
    1. the share identifier with the least usage over its share goes first: usage is the GPUs
       it holds now with a decay of 0, else its GPU-hours decayed with a half-life of
       `shareDecaySeconds` (the simulator's reading of the decay window);
    2. within a share identifier, jobs by scheduling priority, then submission (a requeued job
       keeps its place);
    3. a job that does not fit does not hold back later jobs or other shares (Batch has no
       reservation); nothing is ever preempted (fair share orders dispatch only), and a Spot
       reclaim fails the attempt and the retry strategy requeues it.
    """

    name = "batch-fair-share"

    def __init__(self, shares: TeamShares, decay_s: float, competent: bool = True) -> None:
        super().__init__(competent)
        self.weights = {t: max(w, 1e-9) for t, w in shares.weights.items()}
        self.decay_s = decay_s
        self.usage = DecayedUsage(decay_s) if decay_s > 0 else None
        self.held: dict[str, int] = {}

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.team, job.rank, job.gpus, job.nodes, job.spot_ok, job.gpu_type)

    def order_key(self, job: SimJob) -> OrderKey:
        return (-job.rank, job.submit)

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        super().start(job, ps, reason)
        self._change(job.team, job.held)

    def on_released(self, job: SimJob) -> None:
        self._change(job.team, -job.held)
        super().on_released(job)

    def _change(self, team: str, gpus: int) -> None:
        self.held[team] = self.held.get(team, 0) + gpus
        if self.usage is not None:
            self.usage.change(team, gpus, self.sim.now)

    def _usage(self, now: float) -> dict[str, float]:
        """Each share identifier's usage in GPUs: held now (decay 0), else the exponentially
        weighted mean of the GPUs it held, with a half-life of `shareDecaySeconds`."""
        if self.usage is None:
            return {t: float(g) for t, g in self.held.items()}
        k = math.log(2.0) / self.decay_s
        return {t: gpu_h * 3600.0 * k for t, gpu_h in self.usage.gpu_hours(now).items()}

    def schedule(self, now: float) -> None:
        queue = self.queue
        usage = self._usage(now)
        # Per share identifier: its buckets' heads, best first (priority, then submission).
        per_team: dict[str, list[tuple[OrderKey, int, Hashable]]] = {}
        for key, (order, idx, job) in queue.heads():
            per_team.setdefault(job.team, []).append((order, idx, key))
        shares: list[tuple[float, str]] = []
        for team, heads in per_team.items():
            heapq.heapify(heads)
            shares.append((usage.get(team, 0.0) / self.weights.get(team, 1e-9), team))
        heapq.heapify(shares)
        while shares and self.any_free():
            _, team = heapq.heappop(shares)
            heads = per_team[team]
            while heads:
                _, _, key = heads[0]
                head = queue.head(key)
                assert head is not None
                ps = self.fitting_pool(head)
                heapq.heappop(heads)
                if ps is None:
                    continue  # nothing behind it in this bucket fits either
                queue.pop(key)
                self.start(head, ps, f"{self.name}: share {team}, in {ps.name}" if self.sim.logging else "")
                entry = queue.head_entry(key)
                if entry is not None:
                    heapq.heappush(heads, (entry[0], entry[1], key))
                # Its usage grew by the job's GPUs: it competes again at its new score.
                usage[team] = usage.get(team, 0.0) + head.held
                heapq.heappush(shares, (usage[team] / self.weights.get(team, 1e-9), team))
                break
