"""Whether moving a job from On-Demand to Spot pays for itself under the pool's history.

A move to Spot saves the price difference on the rest of the run, and costs a checkpoint write
and a restart. Once on Spot, the job may be reclaimed: on real capacity, reclaims come in bulk
outages (as the published availability traces show), and each one costs the job a write
(inside the 2-minute notice), a restart, and the wait until capacity comes back or it is placed
elsewhere. `move_value` weighs
the two from what the control plane has seen of the pool (`SpotPoolSignal`,
`spot_watch.PoolWatch.signal`), all in GPU-seconds at the On-Demand price (the value of the job's
time: what it pays On-Demand to make that progress):

- saving = (On-Demand price - Spot price) x GPUs x remaining;
- expected reclaims = remaining x outages / available time: the pool's completed outages over
  the time it had capacity (a job on Spot runs only while capacity is there, so outages start
  at that rate during its run);
- each reclaim = On-Demand price x GPUs x (write + restart + the mean completed outage: the
  expected wait until capacity returns);
- the move itself = On-Demand price x GPUs x (write + restart).

It moves only when the saving exceeds the expected reclaims' cost plus the move's. Per second
of the remaining run, the reclaims' waits cost about outages x mean outage / available time, the
pool's missing time over its available time: a pool missing for more than (1 - Spot price /
On-Demand price) of the time it has capacity never pays for a move, however long the job.

Thin history (less than `min_history_s` observed, or nothing seen of the pool): no verdict
(None); the caller keeps its conservative rule, the remaining-time threshold alone
(`SchedulerConfig.move_to_spot_min_remaining_s`, a day by default), as it did before the
pool's history was kept.

Pure: the history is an input.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotline.domain.models import SpotPoolSignal


@dataclass(frozen=True, slots=True)
class MoveValue:
    """The weighing of one move (amounts in On-Demand-priced GPU-seconds)."""

    worth: bool
    saving: float
    move_cost: float
    reclaims: float  # expected over the remaining run
    reclaim_cost: float  # each
    outages: int
    available_h: float

    def describe(self) -> str:
        """A phrase for the decision's reason (amounts in GPU-hours at the On-Demand price)."""
        verdict = "saves" if self.worth else "would save"
        cost = self.move_cost + self.reclaims * self.reclaim_cost
        return (
            f"{verdict} {self.saving / 3600.0:.1f} GPU-h against {cost / 3600.0:.1f} for the move"
            f" and ~{self.reclaims:.1f} reclaims ({self.outages} outages in {self.available_h:.0f} h"
            " of Spot there)"
        )


def move_value(
    *,
    remaining_s: float,
    gpus: int,
    spot_price: float,
    on_demand_price: float,
    signal: SpotPoolSignal | None,
    write_s: float,
    restart_s: float,
    min_history_s: float,
) -> MoveValue | None:
    """The weighing of a move of a job with `remaining_s` to run on `gpus` GPUs from On-Demand
    to a Spot pool whose history is `signal`; None when the history is thin (module docstring)."""
    if signal is None or signal.observed_s < min_history_s:
        return None
    saving = max(0.0, on_demand_price - spot_price) * gpus * max(0.0, remaining_s)
    move_cost = on_demand_price * gpus * (write_s + restart_s)
    outages = len(signal.outages_s)
    mean_outage = sum(signal.outages_s) / outages if outages else 0.0
    reclaim_cost = on_demand_price * gpus * (write_s + restart_s + mean_outage)
    if signal.available_s <= 0.0:
        # Never seen with capacity over the window: no run there can be expected to last.
        return MoveValue(False, saving, move_cost, float("inf"), reclaim_cost, outages, 0.0)
    reclaims = max(0.0, remaining_s) * outages / signal.available_s
    worth = saving > move_cost + reclaims * reclaim_cost
    return MoveValue(worth, saving, move_cost, reclaims, reclaim_cost, outages, signal.available_s / 3600.0)
