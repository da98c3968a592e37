"""What the control plane has seen of a Spot pool's capacity: a bounded history, kept per pool.

The control plane observes a Spot pool through its own runs: a Spot interruption warning (the pool
is losing capacity), a Spot launch that sits RUNNABLE past a threshold (no capacity), a Spot
launch that starts (capacity is there), and a rebalance recommendation (capacity at risk: kept
as its time, `at_risk_at`; the pool is at risk for `AT_RISK_S` after it while Spot is there).
`PoolWatch` folds those observations into the pool's current state and its outages (intervals
without capacity) over a bounded window (`WINDOW_S`, 14 days: the length of SkyPilot's traces).
`PoolWatch.signal` turns it into what a scheduling pass plans from (`SpotPoolSignal`, carried by
the `ClusterSnapshot`), and the guard reads the pool's `SpotHistory` from that
(`spotline.domain.deadline`).

Pure: the adapter (`spotline.aws.spot_pools`) stores one item per pool and applies `observe` with
a conditional write; the simulator can fold its own observations the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spotline.domain.models import SpotPoolSignal

WINDOW_S = 14 * 24 * 3600.0
MAX_OUTAGES = 500  # outages kept at most (the oldest go first): bounds the item's size
# How long a rebalance recommendation keeps its pool at risk. EC2 sends it when an instance's
# interruption risk rises, before (or without) the 2-minute warning; half an hour covers the
# usual lead time without holding a pool at risk for good.
AT_RISK_S = 30 * 60.0


@dataclass(frozen=True, slots=True)
class PoolWatch:
    """A Spot pool as the control plane has seen it.

    `since`: the first observation; `available`: the state last observed; `changed_at`: when the
    state last changed (the start of the outage under way when not `available`); `outages`:
    completed outages `(start, end)`, oldest first, within the window; `at_risk_at`: the latest
    rebalance recommendation for one of the pool's instances.
    """

    since: float
    available: bool
    changed_at: float
    outages: tuple[tuple[float, float], ...] = ()
    at_risk_at: float | None = None

    @classmethod
    def first(cls, available: bool, at: float) -> PoolWatch:
        return cls(since=at, available=available, changed_at=at)

    def observe(self, available: bool, at: float, window_s: float = WINDOW_S) -> PoolWatch | None:
        """The watch after an observation at `at`, or None when it changes nothing: the state
        is the one already known (a duplicate or a repeat), or the observation is older than the
        last change (an event delivered late must not undo a newer one)."""
        if at < self.changed_at or available == self.available:
            return None
        outages = self.outages
        if available:  # an outage ends
            outages = (*outages, (self.changed_at, at))
        cutoff = at - window_s
        kept = tuple(o for o in outages if o[1] > cutoff)[-MAX_OUTAGES:]
        return replace(self, available=available, changed_at=at, outages=kept)

    def observe_risk(self, at: float) -> PoolWatch | None:
        """The watch after a rebalance recommendation at `at`, or None when it changes nothing
        (a duplicate, or older than the latest one known)."""
        if self.at_risk_at is not None and at <= self.at_risk_at:
            return None
        return replace(self, at_risk_at=at)

    def signal(self, now: float, window_s: float = WINDOW_S) -> SpotPoolSignal:
        """What a pass plans from at `now`: whether Spot is there, how long it has been missing,
        and the history over the window (observed and available hours, completed outages, and
        where they lay: seconds before `now`)."""
        now = float(now)  # (every figure below a float, as the signal's fields are)
        start = max(self.since, now - window_s)
        observed = max(0.0, now - start)
        down = 0.0
        lengths: list[float] = []
        spans: list[tuple[float, float]] = []
        for begin, end in self.outages:
            # Its part inside [start, now] (the bounds as max() and min() pick them; a pass builds
            # this for every Spot pool, so no calls).
            low = begin if begin >= start else start
            high = end if end <= now else now
            if begin >= start:  # an outage cut by the window's start is not counted as one
                lengths.append(float(end - begin))
            if high - low > 0:
                down += high - low
                spans.append((now - low, now - high))
        outage_s = 0.0 if self.available else max(0.0, now - self.changed_at)
        down += min(outage_s, observed)
        # Built unvalidated: each field is a float or bool found above, none below 0 (a pass
        # builds one per Spot pool, from up to `MAX_OUTAGES` outages).
        return SpotPoolSignal.model_construct(
            available=self.available,
            outage_s=outage_s,
            observed_s=observed,
            available_s=max(0.0, observed - down),
            outages_s=tuple(sorted(lengths)),
            spans_s=tuple(spans),
            at_risk=self.available
            and self.at_risk_at is not None
            and now - AT_RISK_S <= self.at_risk_at <= now,
        )
