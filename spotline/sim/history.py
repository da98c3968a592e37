"""A deployment's history as the simulator replays it: the canonical trace, and beside it the
cluster that ran it (`<trace>.cluster.json`, written by `spotline history export`).

The cluster file, all keys optional but `format`:

    {"format": "spotline-history/1",
     "start": "2026-11-05T00:00:00+00:00",          # the trace's second 0
     "pools": [{"name", "gpu_type", "purchase", "capacity_gpus", "gpus_per_node", "price"}],
     "teams": [{"team", "nominal_gpus", "weight"}],
     "availability": {"<Spot pool>": {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}},
     "scheduler": {...},                            # the settings that ran (cdk.json's `scheduler`)
     "deployment": {"spot_notice_s", "grace_period_s", "spot_missing_after_s"},
     "observed": {"avg_jct_s", "lost_gpu_hours", "lost_gpu_hours_since_checkpoint",
                  "preemptions", "interruptions", ...}}

`availability` is what the control plane observed of each Spot pool, in instances, in SkyPilot's
format from the trace's second 0: replayed as it was (tick 0 at second 0, never wrapped; after the
last tick the last count holds), not from a seeded start as the shipped zone traces are.

A history splits at a cut (`split`): the jobs submitted before it, and the ones after it with their
times and the availability shifted to start at 0 (the held-out stretch `spotline tune` checks a
recommendation on; it starts on an empty cluster).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Pool
from spotline.sim.availability import AvailabilityError, AvailabilityTrace, parse_availability
from spotline.sim.model import SimSettings, TeamShares, team_shares
from spotline.sim.spot_zones import ZoneCapacity
from spotline.trace.canonical import Trace, TraceJob, read_trace

HISTORY_FORMAT = "spotline-history/1"
CLUSTER_SUFFIX = ".cluster.json"
DAY_S = 86400.0


class HistoryError(ValueError):
    """A history that cannot be replayed; the message names the file and what is wrong."""


class TeamRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    team: str
    nominal_gpus: int = Field(ge=0)
    weight: float = Field(default=1.0, gt=0)


class ClusterRecord(BaseModel):
    """The cluster file's contents (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    format: str
    start: str | None = None
    pools: list[Pool] = Field(default_factory=list)
    teams: list[TeamRecord] = Field(default_factory=list)
    availability: dict[str, dict[str, Any]] = Field(default_factory=dict)
    scheduler: dict[str, Any] = Field(default_factory=dict)
    deployment: dict[str, float] = Field(default_factory=dict)
    observed: dict[str, Any] = Field(default_factory=dict)


@dataclass(eq=False)
class ObservedCapacity(ZoneCapacity):
    """A Spot pool's capacity as the control plane observed it: the trace's count of instances
    (at most the pool's), from tick 0, the last count holding after the trace ends."""

    def _count(self, tick: int) -> int:
        counts = self.trace.counts
        return counts[min(max(tick, 0), len(counts) - 1)]

    def gpus_at_tick(self, tick: int) -> int:
        return min(self._count(tick), self.instances) * self.gpus_per_node

    def next_change(self, tick: int) -> int | None:
        now = self.gpus_at_tick(tick)
        for later in range(tick + 1, len(self.trace.counts)):
            if self.gpus_at_tick(later) != now:
                return later
        return None


@dataclass
class History:
    """A trace and, when its cluster file says so, the cluster it ran on."""

    trace: Trace
    pools: list[Pool] = field(default_factory=list)
    teams: list[TeamRecord] = field(default_factory=list)
    availability: dict[str, AvailabilityTrace] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, float] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    start: str | None = None

    @property
    def has_cluster(self) -> bool:
        return bool(self.pools)

    @property
    def span_s(self) -> float:
        """From the trace's second 0 to its last submission."""
        return max((j.submit_s for j in self.trace.jobs), default=0.0)

    def sim_settings(self) -> SimSettings:
        """The simulator's model of the deployment that ran the history: its restart cost (fixed,
        the settings' `restart_cost_s`), its Spot notice (which requeues every job on the warned
        instance, as the control plane does), its pass cadence (`deadline_step_s`), when it counts
        Spot as missing; the simulator's defaults for a trace without a cluster."""
        if not self.has_cluster:
            return SimSettings()
        config, d = self.config(), self.deployment
        return SimSettings(
            restart_min_s=config.restart_cost_s,
            restart_max_s=config.restart_cost_s,
            checkpoint_write_s=config.checkpoint_write_s,
            notice_s=float(d.get("spot_notice_s", SimSettings.notice_s)),
            spot_missing_after_s=float(d.get("spot_missing_after_s", SimSettings.spot_missing_after_s)),
            tick_s=config.deadline_step_s or SimSettings.tick_s,
            notice_requeues_every_job=True,
        )

    def config(self) -> SchedulerConfig:
        """The settings that ran (the defaults where the file records none)."""
        return SchedulerConfig.model_validate(self.scheduler)

    def shares(self, pools: Sequence[Pool]) -> TeamShares:
        """The teams' quotas on `pools`: the recorded ones, else each team's share of the trace's
        GPU-time."""
        capacity = {p.name: p.capacity_gpus for p in pools}
        if not self.teams:
            return team_shares(self.trace.jobs, capacity)
        nominal = {t.team: t.nominal_gpus for t in self.teams}
        for job in self.trace.jobs:
            nominal.setdefault(job.team, 0)
        total = sum(nominal.values()) or 1
        # Weights by nominal quota (a team with none gets a sliver, as an unshared team would).
        weights = {team: max(n / total, 1e-6) for team, n in sorted(nominal.items())}
        shares = team_shares(
            [
                TraceJob(f"w:{team}", 0.0, w, 1, team, self.trace.jobs[0].priority)
                for team, w in weights.items()
            ],
            capacity,
        )
        return TeamShares(weights=shares.weights, nominal=nominal, nominal_by_pool=shares.nominal_by_pool)

    def zones(self) -> dict[str, ZoneCapacity]:
        """Each Spot pool's observed capacity, by pool name."""
        by_name = {p.name: p for p in self.pools}
        return {
            name: ObservedCapacity(
                trace,
                by_name[name].capacity_gpus // by_name[name].gpus_per_node,
                by_name[name].gpus_per_node,
                0,
            )
            for name, trace in self.availability.items()
        }


def cluster_path(trace_path: Path) -> Path:
    """Where the cluster file of `trace_path` lies: `history.csv` -> `history.cluster.json`."""
    return trace_path.with_name(trace_path.stem + CLUSTER_SUFFIX)


def read_history(path: Path | str, cluster: Path | str | None = None) -> History:
    """The trace at `path` and, when it exists, its cluster file (`cluster`, default beside it)."""
    path = Path(path)
    trace = read_trace(path)
    if not trace.jobs:
        raise HistoryError(f"{path}: the trace has no job")
    side = Path(cluster) if cluster is not None else cluster_path(path)
    if not side.exists():
        if cluster is not None:
            raise HistoryError(f"{side}: no such cluster file")
        return History(trace=trace)
    try:
        document = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HistoryError(f"{side}: cannot read ({error})") from None
    return history_from(trace, document, str(side))


def history_from(trace: Trace, document: Any, source: str) -> History:
    """A history from a trace and its cluster file's parsed JSON (`source` names it in errors)."""
    if not isinstance(document, dict) or document.get("format") != HISTORY_FORMAT:
        raise HistoryError(f'{source}: not a cluster file (expected "format": "{HISTORY_FORMAT}")')
    try:
        record = ClusterRecord.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise HistoryError(f"{source}: {where}: {first['msg']}") from None
    spot = {p.name for p in record.pools if p.is_spot}
    availability: dict[str, AvailabilityTrace] = {}
    for name, raw in record.availability.items():
        if name not in spot:
            raise HistoryError(f"{source}: availability for {name!r}, which is no Spot pool of the file")
        try:
            availability[name] = parse_availability(json.dumps(raw), f"{source} availability {name!r}")
        except AvailabilityError as error:
            raise HistoryError(str(error)) from None
    try:
        SchedulerConfig.model_validate(record.scheduler)
    except (ValidationError, ValueError) as error:
        raise HistoryError(f"{source}: scheduler: {error}") from None
    return History(
        trace=trace,
        pools=list(record.pools),
        teams=list(record.teams),
        availability=availability,
        scheduler=dict(record.scheduler),
        deployment=dict(record.deployment),
        observed=dict(record.observed),
        start=record.start,
    )


def cluster_document(
    pools: Sequence[Pool],
    *,
    start: str | None = None,
    teams: Sequence[Mapping[str, Any]] = (),
    availability: Mapping[str, AvailabilityTrace] | None = None,
    scheduler: Mapping[str, Any] | None = None,
    observed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The cluster file's JSON for these parts."""
    return {
        "format": HISTORY_FORMAT,
        "start": start,
        "pools": [json.loads(p.model_dump_json()) for p in pools],
        "teams": [dict(t) for t in teams],
        "availability": {
            name: {"metadata": {"gap_seconds": t.gap_seconds}, "data": list(t.counts)}
            for name, t in (availability or {}).items()
        },
        "scheduler": dict(scheduler or {}),
        "observed": dict(observed or {}),
    }


def split(history: History, cut_s: float) -> tuple[History, History]:
    """The jobs submitted before `cut_s`, and the ones from it on, shifted to start at 0 (their
    deadlines and the observed availability with them)."""
    before = [j for j in history.trace.jobs if j.submit_s < cut_s]
    after = [
        replace(
            j,
            submit_s=j.submit_s - cut_s,
            deadline_s=None if j.deadline_s is None else j.deadline_s - cut_s,
        )
        for j in history.trace.jobs
        if j.submit_s >= cut_s
    ]
    shifted: dict[str, AvailabilityTrace] = {}
    for name, trace in history.availability.items():
        skip = min(int(cut_s // trace.gap_seconds), len(trace.counts) - 1)
        shifted[name] = AvailabilityTrace(trace.name, trace.gap_seconds, trace.counts[skip:])
    source = history.trace.source
    head = replace(history, trace=Trace(jobs=before, source=f"{source} (tuning)"))
    tail = replace(history, trace=Trace(jobs=after, source=f"{source} (holdout)"), availability=shifted)
    return head, tail


def holdout_cut(history: History, holdout_days: float) -> float:
    """The second the held-out final stretch starts at: `holdout_days` before the last submission;
    refused when either side would have no job."""
    if not math.isfinite(holdout_days) or holdout_days <= 0:
        raise HistoryError(f"--holdout-days must be positive, got {holdout_days:g}")
    span = history.span_s
    cut = span - holdout_days * DAY_S
    days = span / DAY_S
    if cut <= 0 or not any(j.submit_s < cut for j in history.trace.jobs):
        raise HistoryError(
            f"{history.trace.source}: the history covers {days:.1f} days of submissions; a holdout of"
            f" {holdout_days:g} days leaves nothing to tune on (give fewer --holdout-days or more history)"
        )
    return cut
