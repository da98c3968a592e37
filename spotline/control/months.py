"""Calendar months (UTC) of GPU usage and what a team's month cost: the values the cost
store (`spotline.control.ports.CostStore`) returns, priced when read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotline.control.settings import SpotlineConfig


def month_of(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m")


def month_start(month: str) -> float:
    return datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC).timestamp()


def _next_month(month: str) -> str:
    year, mon = (int(p) for p in month.split("-"))
    return f"{year + mon // 12:04d}-{mon % 12 + 1:02d}"


def month_segments(start: float, end: float) -> list[tuple[str, float]]:
    """(month, seconds) of [start, end) cut at UTC month boundaries."""
    out: list[tuple[str, float]] = []
    at = start
    while at < end:
        month = month_of(at)
        boundary = month_start(_next_month(month))
        upto = min(end, boundary)
        out.append((month, upto - at))
        at = upto
    return out


@dataclass
class MonthUsage:
    """A team's month: GPU-seconds and lost GPU-seconds per pool (ended runs and running ones)."""

    team: str
    month: str
    gpu_s: dict[str, float] = field(default_factory=dict)
    lost_gpu_s: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    running: int = 0
    notified: str | None = None

    def add_running(self, pool: str, gpus: int, held_since: float, now: float) -> None:
        seconds = sum(s for m, s in month_segments(held_since, now) if m == self.month)
        if seconds > 0:
            self.gpu_s[pool] = self.gpu_s.get(pool, 0.0) + gpus * seconds
            self.running += 1

    def dollars(self, prices: Mapping[str, float]) -> float:
        return sum(s / 3600.0 * prices.get(p, 0.0) for p, s in self.gpu_s.items())

    def to_json(self, config: SpotlineConfig) -> dict[str, Any]:
        pools = config.pools_by_name
        prices = {name: p.price for name, p in pools.items()}
        spot = sum(s for p, s in self.gpu_s.items() if p in pools and pools[p].is_spot)
        total = sum(self.gpu_s.values())
        lost = sum(self.lost_gpu_s.values())
        return {
            "team": self.team,
            "month": self.month,
            "gpu_hours": round(total / 3600.0, 4),
            "dollars": round(self.dollars(prices), 4),
            "spot_share": round(spot / total, 4) if total else 0.0,
            "gpu_hours_by_pool": {p: round(s / 3600.0, 4) for p, s in sorted(self.gpu_s.items())},
            "dollars_by_pool": {
                p: round(s / 3600.0 * prices.get(p, 0.0), 4) for p, s in sorted(self.gpu_s.items())
            },
            "lost_gpu_hours": round(lost / 3600.0, 4),
            "lost_dollars": round(
                sum(s / 3600.0 * prices.get(p, 0.0) for p, s in self.lost_gpu_s.items()), 4
            ),
            "runs_ended": self.runs,
            "runs_going": self.running,
        }
