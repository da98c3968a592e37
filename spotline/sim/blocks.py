"""Reserved blocks in the simulator (`spotline simulate --reservation NxG:START_H:END_H`).

A block is a reserved pool (`spotline.domain.reserved`): N instances of G GPUs, there from
START_H to END_H hours into the trace, prepaid (price 0 at the margin). The engine runs its
lifecycle as AWS does a Capacity Block's:

- at START_H its capacity is there (before, the pool has none);
- `WARNING_LEAD_S` before END_H the expiration warning comes: the policy's `at_block_end` says
  what it does then (`BlockEnd`);
- `TERMINATION_LEAD_S` before END_H the instances are terminated: the capacity goes, and a job
  still there is killed and keeps only its latest periodic checkpoint.

What each policy does at the end (`BlockEnd`): Spotline checkpoints the block's jobs before the
termination, planned from the known end (the domain's `block_drains`; the warning is its safety
net); Kueue runs with Karpenter's behaviour (the nodes are drained at the warning, the pods
stopped without a checkpoint); the others with AWS Batch's (nothing happens at expiry: the jobs
run until the instances are terminated).

`BlockAccount` keeps the `reservation_account` of `--json`: the blocks' GPU-hours, those that did
useful work (run time that counted toward completion), the unsaved GPU-hours lost at the end (work
since the last durable checkpoint of the runs the end stopped), and the block GPU-hours idle while
a queued job fit (free GPUs of an open block while a pending job's shape fitted them and its run,
or its first checkpoint, would have ended before the termination).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from spotline.domain.models import Pool, Purchase, ReservedWindow
from spotline.domain.reserved import TERMINATION_LEAD_S, WARNING_LEAD_S
from spotline.sim.model import SimJob


class Simulation(Protocol):
    """What the blocks read and call of the engine (`engine.Simulation`; no import: it owns us)."""

    pools: list[Any]  # engine.PoolState
    now: float
    policy: Any
    settings: Any
    capacity_changes: int

    def mark_dirty(self) -> None: ...

    def stop_for_block_end(self, job: SimJob) -> None: ...


PoolState = Any  # engine.PoolState

HOUR_S = 3600.0
RESERVATION_FLAG = "--reservation"
_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*:\s*([0-9.]+)\s*:\s*([0-9.]+)\s*$", re.IGNORECASE)


class ReservationError(ValueError):
    """A `--reservation` value that is not `NxG:START_H:END_H` with sensible numbers."""


@dataclass(frozen=True)
class Reservation:
    """N instances of G GPUs, reserved from `start_h` to `end_h` hours into the trace."""

    instances: int
    gpus_per_instance: int
    start_h: float
    end_h: float

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance

    @property
    def gpu_hours(self) -> float:
        return self.gpus * (self.end_h - self.start_h)


def parse_reservation(text: str) -> Reservation:
    """`NxG:START_H:END_H` (e.g. `8x8:24:192`), or `ReservationError` naming the flag and the fault."""
    match = _SPEC.match(text)
    if match is None:
        raise ReservationError(
            f"{RESERVATION_FLAG} {text!r}: expected NxG:START_H:END_H (N instances of G GPUs from START_H to"
            " END_H hours into the trace), e.g. 8x8:24:192"
        )
    n, g, start, end = int(match[1]), int(match[2]), float(match[3]), float(match[4])
    if n <= 0 or g <= 0:
        raise ReservationError(f"{RESERVATION_FLAG} {text!r}: needs at least 1 instance of at least 1 GPU")
    if not math.isfinite(start) or not math.isfinite(end) or end <= start:
        raise ReservationError(
            f"{RESERVATION_FLAG} {text!r}: END_H ({end:g}) must be after START_H ({start:g})"
        )
    if (end - start) * HOUR_S <= TERMINATION_LEAD_S:
        raise ReservationError(
            f"{RESERVATION_FLAG} {text!r}: a block must last longer than the"
            f" {TERMINATION_LEAD_S / 60:.0f} min its instances take to terminate"
        )
    return Reservation(n, g, start, end)


def block_pools(reservations: list[Reservation], gpu_type: str, instance_type: str) -> list[Pool]:
    """One reserved pool per reservation (`block-1`, ...), prepaid: price 0."""
    return [
        Pool(
            name=f"{instance_type}-block-{i}",
            gpu_type=gpu_type,
            purchase=Purchase.ON_DEMAND,
            capacity_gpus=r.gpus,
            gpus_per_node=r.gpus_per_instance,
            price=0.0,
            reservation=ReservedWindow(start=r.start_h * HOUR_S, end=r.end_h * HOUR_S),
        )
        for i, r in enumerate(reservations, start=1)
    ]


class BlockEnd(StrEnum):
    """What a policy does as a block ends."""

    # Checkpoint and requeue its jobs before the termination (Spotline: `reserved.block_drains`).
    CHECKPOINT = "checkpoint"
    # Drain the nodes at the expiration warning, stopping the jobs without a checkpoint (Karpenter).
    DRAIN = "drain"
    # Nothing: the jobs run until the instances are terminated (AWS Batch).
    NOTHING = "nothing"


# Lifecycle events of a block (the token of the engine's `_BLOCK` events).
OPEN, WARNING, TERMINATION = 0, 1, 2


@dataclass
class _Block:
    ps: PoolState
    window: ReservedWindow
    # Counted: GPU-seconds that did useful work in it, and unsaved GPU-seconds lost at its end.
    useful_gpu_s: float = 0.0
    unsaved_gpu_s: float = 0.0
    idle_fit_gpu_s: float = 0.0
    # Free GPUs counted idle while a queued job fits, since `since` (integrated at each step).
    idle_gpus: int = 0
    since: float = 0.0

    @property
    def open_until(self) -> float:
        return self.window.end - TERMINATION_LEAD_S


@dataclass
class BlockAccount:
    """The blocks of one run, their lifecycle and their account (module docstring)."""

    sim: Simulation
    blocks: list[_Block] = field(default_factory=list)
    # Pending jobs (by index) and, of those a block could host, how many per GPU demand.
    pending: dict[int, SimJob] = field(default_factory=dict)
    demands: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, sim: Simulation) -> BlockAccount | None:
        blocks = [_Block(ps, ps.pool.reservation) for ps in sim.pools if ps.pool.reservation is not None]
        if not blocks:
            return None
        account = cls(sim, blocks)
        for block in blocks:
            if block.window.start > 0:
                block.ps.capacity = 0
        return account

    @property
    def at_end(self) -> BlockEnd:
        return BlockEnd(getattr(self.sim.policy, "at_block_end", BlockEnd.NOTHING))

    def schedule(self, push: Any) -> None:
        """Put each block's lifecycle events on the engine's heap (`push(t, token, payload)`)."""
        for block in self.blocks:
            if block.window.start > 0:
                push(block.window.start, OPEN, block)
            push(block.window.end - WARNING_LEAD_S, WARNING, block)
            push(block.open_until, TERMINATION, block)

    def opens_later(self, now: float) -> bool:
        """Whether a block's capacity is still to come after `now`."""
        return any(b.window.start > now for b in self.blocks)

    # --- the lifecycle -------------------------------------------------------------------------

    def on_event(self, block: _Block, what: int) -> None:
        sim = self.sim
        ps = block.ps
        sim.capacity_changes += 1
        sim.mark_dirty()
        if what == OPEN:
            ps.capacity = ps.pool.capacity_gpus
            return
        if what == WARNING:
            end = self.at_end
            if end is BlockEnd.DRAIN:
                ps.capacity = 0  # (cordoned: nothing new starts there)
                for job in list(ps.running.values()):
                    self.stopped_by_end(job)
                    sim.stop_for_block_end(job)
            elif end is BlockEnd.CHECKPOINT:
                warned = getattr(sim.policy, "on_block_warning", None)
                if warned is not None:
                    warned(ps)
            return
        ps.capacity = 0
        for job in list(ps.running.values()):
            self.stopped_by_end(job)
            sim.stop_for_block_end(job)

    def stopped_by_end(self, job: SimJob) -> None:
        """`job` is stopped in its block now without a checkpoint of its own: count what it loses
        (its progress since its latest durable checkpoint; a write under way is lost with it)."""
        block = self._block_of(job)
        if block is None:
            return
        now = self.sim.now
        block.unsaved_gpu_s += job.gpus * max(0.0, job.progress(now) - job.durable(now))

    def run_ended(self, job: SimJob, kept_s: float) -> None:
        """A run of `job` ended keeping `kept_s` seconds of new work: useful, if in a block."""
        block = self._block_of(job)
        if block is not None and kept_s > 0:
            block.useful_gpu_s += job.gpus * kept_s

    def _block_of(self, job: SimJob) -> _Block | None:
        for block in self.blocks:
            if block.ps.index == job.pool:
                return block
        return None

    # --- idle while a queued job fits ----------------------------------------------------------

    def enqueued(self, job: SimJob) -> None:
        self.pending[job.idx] = job
        demand = self._demand(job)
        if demand is not None:
            self.demands[demand] = self.demands.get(demand, 0) + 1

    def started(self, job: SimJob) -> None:
        if self.pending.pop(job.idx, None) is None:
            return
        demand = self._demand(job)
        if demand is not None:
            left = self.demands[demand] - 1
            if left:
                self.demands[demand] = left
            else:
                del self.demands[demand]

    def _demand(self, job: SimJob) -> int | None:
        """GPUs `job` takes in the blocks (None: no block can host it; blocks share a shape)."""
        for block in self.blocks:
            if block.ps.hosts(job):
                demand: int = block.ps.demand(job)
                return demand
        return None

    def observe(self, now: float) -> None:
        """After the events and the pass at `now`: integrate each block's idle GPUs since its
        last look, and count those idle from now while a queued job fits them."""
        for block in self.blocks:
            if block.idle_gpus:
                block.idle_fit_gpu_s += block.idle_gpus * (min(now, block.open_until) - block.since)
            block.since = now
            block.idle_gpus = self._idle_fit(block, now)

    def _idle_fit(self, block: _Block, now: float) -> int:
        ps = block.ps
        if now < block.window.start or now >= block.open_until:
            return 0
        free: int = ps.capacity - ps.used - ps.reserved
        if free <= 0 or not any(d <= free for d in self.demands):
            return 0
        restart = self.sim.settings.restart_max_s
        if now + restart + self.sim.settings.checkpoint_interval_s * 2 < block.open_until:
            return free  # (every queued job checkpoints before the end: its shape decides)
        for job in self.pending.values():
            if ps.hosts(job) and ps.demand(job) <= free:
                ends = now + job.restart + min(job.work - job.saved, job.interval + job.write)
                if ends <= block.open_until:
                    return free
        return 0

    # --- the account ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, float]:
        """The `reservation_account` of `--json` (GPU-hours, all blocks together)."""
        gpu_hours = sum(b.ps.pool.capacity_gpus * (b.window.end - b.window.start) for b in self.blocks)
        return {
            "block_gpu_hours": gpu_hours / HOUR_S,
            "useful_gpu_hours": sum(b.useful_gpu_s for b in self.blocks) / HOUR_S,
            "unsaved_gpu_hours_lost_at_end": sum(b.unsaved_gpu_s for b in self.blocks) / HOUR_S,
            "idle_gpu_hours_while_a_queued_job_fit": sum(b.idle_fit_gpu_s for b in self.blocks) / HOUR_S,
        }
