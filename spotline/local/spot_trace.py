"""A local Spot pool whose capacity follows an availability trace (`spotline local up
--spot-availability FILE`).

The trace is SkyPilot's format (`spotline.sim.availability`): instances obtainable per tick of
`gap_seconds`. Locally a tick lasts `tick_s` wall seconds instead (`--spot-tick-seconds`), so a
trace of hours plays in seconds. At each tick the fleet's Spot pool is set to the trace's count,
capped at the pool's nodes (`LocalFleet.set_capacity`): nodes beyond it get EC2's Spot interruption
warning and die when the notice ends; at 0 a Spot launch waits RUNNABLE; when capacity returns,
nodes join and waiting launches start. After the last tick the last count holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spotline.local.fleet import LocalFleet
from spotline.sim.availability import AvailabilityTrace

log = logging.getLogger("spotline.local.spot_trace")


@dataclass
class SpotTraceReplay:
    """Plays `trace` on the fleet's Spot `pool`, one tick per `tick_s` seconds, from `start()`."""

    fleet: LocalFleet
    pool: str
    trace: AvailabilityTrace
    tick_s: float
    notice_s: float
    clock: Callable[[], float] = time.monotonic
    # (tick, instances, instances warned) of each change applied, for the logs and the tests.
    applied: list[tuple[int, int, list[str]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if self.tick_s <= 0:
            raise ValueError(f"the Spot tick must be a positive number of seconds, got {self.tick_s!r}")

    def start(self) -> None:
        self.apply(0)
        self._thread = threading.Thread(target=self._run, name=f"spot-trace-{self.pool}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def apply(self, tick: int) -> None:
        """Set the pool to the trace's count at `tick` (the last count past its end)."""
        counts = self.trace.counts
        instances = counts[min(tick, len(counts) - 1)]
        if self.applied and self.applied[-1][1] == instances:
            return
        warned = self.fleet.set_capacity(self.pool, instances, self.notice_s)
        self.applied.append((tick, instances, warned))
        log.info("Spot pool %s: %d instance(s) at tick %d; warned %s", self.pool, instances, tick, warned)

    def _run(self) -> None:
        began = self.clock()
        last = len(self.trace.counts) - 1
        tick = 0
        while tick < last:
            tick += 1
            if self._stop.wait(max(0.0, began + tick * self.tick_s - self.clock())):
                return
            try:
                self.apply(tick)
            except Exception:  # a replay that fails must not take the runtime down; the log says why
                log.exception("Spot trace tick %d failed", tick)
