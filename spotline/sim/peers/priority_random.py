"""Priority with random victims (`PriorityRandomPolicy`)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Hashable
from typing import TYPE_CHECKING

from spotline.sim.model import Phase, SimJob
from spotline.sim.peers.base import PeerPolicy
from spotline.sim.queues import OrderKey

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState


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
