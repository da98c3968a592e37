"""AWS Batch's default: one FIFO job queue, no preemption (`FifoPolicy`)."""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import TYPE_CHECKING

from spotline.sim.blocks import BlockEnd
from spotline.sim.peers.base import PeerPolicy
from spotline.sim.queues import OrderKey

if TYPE_CHECKING:
    pass


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
    # AWS Batch does nothing as a Capacity Block expires: its jobs run until the instances go.
    at_block_end = BlockEnd.NOTHING

    def schedule(self, now: float) -> None:
        _fifo_scan(self)
