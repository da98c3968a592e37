"""Tune the kept settings (`SchedulerConfig`) on a deployment's own history: `spotline tune`.

1. The history splits into a tuning stretch and a held-out final stretch (`history.split`).
2. Candidates: the baseline (the settings in effect) and seeded draws that change one to three of
   the settings of `SEARCH_SPACE` from it (`draw_candidates`).
3. The race (`race`), when there are more candidates than `finalists`: every candidate replays a
   screen, the first days of the tuning stretch, on the first seed; a candidate another screened
   one dominates is dropped, and of the rest the `finalists` best on the objective go on, with the
   baseline. With more candidates than `semifinalists` too, the screen's `semifinalists` best
   first replay a semi-final (twice the screen's days, the first seed), and the finalists are
   raced there the same way.
4. Every finalist replays the whole tuning stretch through the pure core (the simulator's Spotline
   policy) once per seed; the goal metrics (`GOAL_METRICS`) get a mean and a 95% CI over seeds.
   The Pareto front over the finalists' tuning means; the pick is the finalist best on the
   objective among those whose paired gain on it clears its CI and that regress no other goal
   metric by more than `MAX_REGRESSION` on the tuning stretch.
5. The front, the baseline and the pick replay the holdout; the pick is recommended only if there
   it improves the objective and regresses no other goal metric by more than `MAX_REGRESSION`;
   otherwise nothing is recommended, and the result says why.

Values under a metric's floor compare as the floor (a wait under 5 minutes is no wait to speak of,
less than one lost GPU-hour is none), as the bench's goals read them.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Pool
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.history import History, holdout_cut, split
from spotline.sim.model import SimSettings
from spotline.sim.pools import spot_advice
from spotline.sim.runner import DEFAULT_GPUS, DEFAULT_SPOT_FRACTION, check_hostable, run_policy
from spotline.sim.spot_zones import ZoneCapacity, default_zone_traces, zone_capacities, zone_pools

# Most a recommendation may make any other goal metric worse, relative to the baseline.
MAX_REGRESSION = 0.05
# Student's t, two-sided 95%, by degrees of freedom (1.96 beyond).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


@dataclass(frozen=True)
class GoalMetric:
    """One goal metric: its key in `spotline simulate --json` (dotted into nested keys)."""

    key: str
    label: str
    lower_is_better: bool
    # Values below it compare as it (module docstring).
    floor: float
    # Shown divided by this (seconds as hours or minutes).
    scale: float = 1.0

    def read(self, metrics: Mapping[str, Any]) -> float:
        value: Any = metrics
        for part in self.key.split("."):
            value = value[part]
        return float(value)

    @property
    def better(self) -> str:
        return "lower" if self.lower_is_better else "higher"


# The bench's goal metrics (bench/policy_bench/setup.py `GOALS`), by their simulate --json keys.
GOAL_METRICS: tuple[GoalMetric, ...] = (
    GoalMetric("avg_jct_s", "avg JCT (h)", True, 1.0, 3600.0),
    GoalMetric("avg_jct_s_by_priority.low", "low avg JCT (h)", True, 1.0, 3600.0),
    GoalMetric("wait_p99_s_by_priority.critical", "critical p99 wait (min)", True, 300.0, 60.0),
    GoalMetric("wait_p99_s_by_priority.high", "high p99 wait (min)", True, 300.0, 60.0),
    GoalMetric("lost_gpu_hours", "lost GPU-h", True, 1.0),
    GoalMetric("cost_per_useful_gpu_hour", "cost / useful GPU-h", True, 1e-6),
    GoalMetric("ftf_max", "FTF worst team", True, 1e-6),
    GoalMetric("jain_fairness", "Jain's fairness", False, 1e-6),
)
GOALS_BY_KEY: dict[str, GoalMetric] = {g.key: g for g in GOAL_METRICS}
DEFAULT_OBJECTIVE = "avg_jct_s"
# Candidates besides the baseline that go on from the screen to the whole tuning stretch.
DEFAULT_FINALISTS = 2
# The screen's share of the tuning stretch, when its days are not given.
DEFAULT_SCREEN_SHARE = 0.125
# Candidates besides the baseline that go on from the screen to a semi-final (0: none).
DEFAULT_SEMIFINALISTS = 0

# The settings a tune searches, with the values it tries: the policy a site chooses. Left out: what
# describes the deployment (restart and checkpoint costs, the pass's cadence), and the victim
# strategies the simulator cannot evaluate as production runs them (they order by what agents
# report: utilization, progress), so a tune never recommends an ordering production would not run.
SEARCH_SPACE: dict[str, tuple[Any, ...]] = {
    "weights.age": (300.0, 600.0, 900.0, 1800.0),
    "weights.fairshare": (0.0, 100.0, 400.0, 800.0),
    "weights.shortest": (0.0, 200.0, 400.0, 900.0),
    "weights.size": (0.0, 100.0, 300.0),
    "weights.history": (0.0, 60.0, 200.0),
    "strategy": ("least-lost-work", "random"),
    "preemption_delay_s": (0.0, 60.0, 180.0, 600.0),
    # Off (preempt at once past the delay), 30 minutes, 90, 3 hours: how long a job short of GPUs
    # waits for running jobs' ends instead of preempting.
    "release_wait_s": (0.0, 1800.0, 5400.0, 10800.0),
    "protection_period_s": (300.0, 600.0, 1800.0),
    "move_to_spot_min_remaining_s": (0.0, 3600.0, 21600.0),
    "max_interruptions_on_spot": (1, 2, 4),
    "usage_half_life_s": (86400.0, 7 * 86400.0),
    "reclaim_within_cohort": ("lower-priority", "any"),
}


class TuneError(ValueError):
    """A tune that cannot run as asked; the message names what is wrong."""


def setting_value(config: SchedulerConfig, setting: str) -> Any:
    """A setting's value by its dotted name (`weights.age`), as JSON writes it."""
    value: Any = config.model_dump(mode="json")
    for part in setting.split("."):
        value = value[part]
    return value


def apply_diff(base: SchedulerConfig, diff: Mapping[str, Any]) -> SchedulerConfig:
    """`base` with the settings of `diff` (dotted names) changed; an unknown one is refused."""
    data = base.model_dump(mode="json")
    for setting, value in diff.items():
        target = data
        *parents, leaf = setting.split(".")
        for part in parents:
            if not isinstance(target.get(part), dict):
                raise TuneError(f"not a setting: {setting}")
            target = target[part]
        if leaf not in target:
            raise TuneError(f"not a setting: {setting}")
        target[leaf] = value
    return SchedulerConfig.model_validate(data)


def nested(diff: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted settings as cdk.json's nested `scheduler` context."""
    out: dict[str, Any] = {}
    for setting, value in diff.items():
        target = out
        *parents, leaf = setting.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return out


def flatten(context: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """cdk.json's nested `scheduler` context as dotted settings."""
    out: dict[str, Any] = {}
    for key, value in context.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def draw_candidates(base: SchedulerConfig, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` candidates as diffs from `base`: first `{}` (the baseline), then seeded draws that
    each change one to three settings of `SEARCH_SPACE` to a value other than `base`'s (no two
    alike; fewer when the space runs out)."""
    rng = random.Random(f"spotline-tune:{seed}")
    names = sorted(SEARCH_SPACE)
    out: list[dict[str, Any]] = [{}]
    seen: set[tuple[tuple[str, Any], ...]] = {()}
    for _ in range(count * 50):
        if len(out) >= count:
            break
        diff: dict[str, Any] = {}
        for name in rng.sample(names, rng.choice((1, 1, 2, 3))):
            current = setting_value(base, name)
            choices = [v for v in SEARCH_SPACE[name] if v != current]
            if choices:
                diff[name] = rng.choice(choices)
        key = tuple(sorted(diff.items()))
        if diff and key not in seen:
            seen.add(key)
            out.append(dict(sorted(diff.items())))
    return out


@dataclass(frozen=True)
class Summary:
    """A metric over seeds: mean and the half-width of its 95% CI (nan with one seed)."""

    mean: float
    ci95: float
    values: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci95": None if math.isnan(self.ci95) else self.ci95}


def summarize(values: Sequence[float]) -> Summary:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Summary(mean, math.nan, tuple(values))
    half = _T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return Summary(mean, half, tuple(values))


@dataclass(frozen=True)
class Gain:
    """A candidate's relative change on a metric against the baseline, paired by seed (the same
    seed: the same restart costs, Spot and random draws): mean and 95% CI half-width; negative
    is better."""

    mean: float
    ci95: float

    @property
    def upper(self) -> float:
        """The CI's worse end (the mean itself with one seed)."""
        return self.mean if math.isnan(self.ci95) else self.mean + self.ci95


def paired_gain(goal: GoalMetric, base: Summary, other: Summary) -> Gain:
    """`other`'s change against `base` on `goal`, seed by seed (`change`), summarized."""
    summary = summarize([change(goal, b, o) for b, o in zip(base.values, other.values, strict=True)])
    return Gain(summary.mean, summary.ci95)


def change(goal: GoalMetric, base: float, other: float) -> float:
    """How much worse `other` is than `base` on `goal`, relative to `base` (floored values;
    negative: better)."""
    b, o = max(base, goal.floor), max(other, goal.floor)
    return (o - b) / b if goal.lower_is_better else (b - o) / b


def dominates(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """`a` is at least as good as `b` on every goal metric and better on one (floored values)."""
    strictly = False
    for goal in GOAL_METRICS:
        worse = change(goal, b[goal.key], a[goal.key])
        if worse > 1e-12:
            return False
        strictly = strictly or worse < -1e-12
    return strictly


@dataclass
class Candidate:
    index: int
    diff: dict[str, Any]
    tuning: dict[str, Summary] = field(default_factory=dict)
    holdout: dict[str, Summary] = field(default_factory=dict)
    # Its metrics on the screen (the first seed), when there was one.
    screen: dict[str, Summary] = field(default_factory=dict)
    # Its metrics on the semi-final (the first seed), when it went on to one.
    semifinal: dict[str, Summary] = field(default_factory=dict)
    # It replayed the whole tuning stretch (it went on from the screen, or there was none).
    finalist: bool = True
    pareto: bool = False
    # CPU seconds its replays took (all seeds), on the tuning stretch, the holdout and the screen.
    cpu_s: float = 0.0
    holdout_cpu_s: float = 0.0
    screen_cpu_s: float = 0.0
    semifinal_cpu_s: float = 0.0

    def means(self, stretch: str) -> dict[str, float]:
        summaries = {
            "tuning": self.tuning,
            "holdout": self.holdout,
            "screen": self.screen,
            "semifinal": self.semifinal,
        }[stretch]
        return {k: s.mean for k, s in summaries.items()}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "candidate": self.index,
            "config": dict(self.diff),
            "finalist": self.finalist,
            "tuning": {k: s.to_json() for k, s in self.tuning.items()},
        }
        if self.screen:
            out["screen"] = {k: s.to_json() for k, s in self.screen.items()}
        if self.semifinal:
            out["semifinal"] = {k: s.to_json() for k, s in self.semifinal.items()}
        if self.holdout:
            out["holdout"] = {k: s.to_json() for k, s in self.holdout.items()}
        return out


@dataclass
class TuneResult:
    objective: str
    trace: str
    gpus: int
    seeds: tuple[int, ...]
    holdout_days: float
    tuning_days: float | None
    tuning_jobs: int
    holdout_jobs: int
    # The screen's days and jobs (None and 0: every candidate replayed the whole tuning stretch).
    screen_days: float | None
    screen_jobs: int
    # The semi-final's days and jobs (None and 0: none).
    semifinal_days: float | None
    semifinal_jobs: int
    baseline: dict[str, Any]
    candidates: list[Candidate]
    recommended: dict[str, Any]
    # The candidate checked on the holdout (None: none improved the objective on the tuning stretch).
    checked: Candidate | None
    reason: str
    runs: int
    wall_s: float

    @property
    def pareto(self) -> list[Candidate]:
        return [c for c in self.candidates if c.pareto]

    @property
    def finalists(self) -> list[Candidate]:
        return [c for c in self.candidates if c.finalist]

    @property
    def defaults(self) -> Candidate:
        return self.candidates[0]

    def holdout_table(self) -> dict[str, dict[str, Any]]:
        """Each goal metric on the holdout: the baseline's, the recommendation's (the baseline's
        when nothing is recommended), which way is better."""
        base = self.defaults.means("holdout")
        chosen = self.checked.means("holdout") if self.recommended and self.checked else base
        return {
            g.key: {"defaults": base[g.key], "recommended": chosen[g.key], "better": g.better}
            for g in GOAL_METRICS
        }

    def context(self) -> dict[str, Any]:
        """cdk.json's `scheduler` context with the recommendation applied."""
        return nested({**self.baseline, **self.recommended})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "objective": self.objective,
            "trace": self.trace,
            "gpus": self.gpus,
            "seeds": list(self.seeds),
            "holdout_days": self.holdout_days,
            "tuning_days": self.tuning_days,
            "jobs": {"tuning": self.tuning_jobs, "holdout": self.holdout_jobs},
            "screen": {
                "days": self.screen_days,
                "jobs": self.screen_jobs,
                "seed": self.seeds[0] if self.screen_days is not None else None,
                "finalists": [c.index for c in self.finalists],
                "semifinal": None
                if self.semifinal_days is None
                else {
                    "days": self.semifinal_days,
                    "jobs": self.semifinal_jobs,
                    "candidates": [c.index for c in self.candidates if c.semifinal],
                },
            },
            "baseline": dict(self.baseline),
            "pareto": [c.to_json() for c in self.pareto],
            "recommended": dict(self.recommended),
            "holdout": self.holdout_table(),
            "reason": self.reason,
            "cdk_context": {"scheduler": self.context()},
            "candidates": [c.to_json() for c in self.candidates],
            "runs": self.runs,
            "wall_s": self.wall_s,
        }
        if self.checked is not None and not self.recommended:
            out["rejected"] = self.checked.to_json()
        return out


@dataclass(frozen=True)
class Cluster:
    """What every run of a stretch shares: the history, the pools, and for a cluster sized as
    `spotline simulate` sizes one, the zones' shipped availability traces (read from a seeded start)."""

    history: History
    pools: list[Pool]
    settings: SimSettings
    zone_traces: Mapping[str, AvailabilityTrace] = field(default_factory=dict)


def cluster_for(
    history: History, gpus: int | None = None, spot_fraction: float | None = None
) -> tuple[list[Pool], dict[str, AvailabilityTrace]]:
    """The pools a history replays on, and the shipped zone traces when they are `spotline
    simulate`'s: the recorded cluster (its Spot pools with an observed availability reclaim as
    it says, no Poisson reclaims besides), else `gpus` and `spot_fraction` as `spotline
    simulate` sizes a cluster (refused for a history that records its cluster)."""
    if history.has_cluster:
        if gpus is not None or spot_fraction is not None:
            raise TuneError(
                "the history records its cluster (its .cluster.json file): --gpus and --spot-fraction"
                " are for a trace without one"
            )
        pools = [
            p.model_copy(update={"interruption_rate_per_hour": 0.0}) if p.name in history.availability else p
            for p in history.pools
        ]
        return pools, {}
    pools, traces = zone_pools(
        DEFAULT_GPUS if gpus is None else gpus,
        DEFAULT_SPOT_FRACTION if spot_fraction is None else spot_fraction,
        spot_advice(),
        default_zone_traces(),
    )
    return pools, traces


# The runs' inputs in forked workers: the stretches by name, and the candidates' configurations.
_FORKED: tuple[dict[str, Cluster], list[SchedulerConfig]] | None = None
# One run: (candidate index, stretch name, seed).
_Run = tuple[int, str, int]


def _replay(cluster: Cluster, config: SchedulerConfig, seed: int) -> tuple[dict[str, Any], float]:
    history = cluster.history
    zones: dict[str, ZoneCapacity] | None = history.zones() or None
    if zones is None and cluster.zone_traces:
        zones = zone_capacities(cluster.pools, cluster.zone_traces, seed)
    run = run_policy(
        history.trace,
        "spotline",
        cluster.pools,
        history.shares(cluster.pools),
        cluster.settings,
        seed,
        config,
        keep_jobs=False,
        zones=zones,
    )
    return run.metrics, run.cpu_s


def replay(
    history: History,
    config: SchedulerConfig,
    seed: int = 1,
    settings: SimSettings | None = None,
    gpus: int | None = None,
) -> dict[str, Any]:
    """One replay of `history` with `config` on its cluster (`cluster_for`): the metrics
    `spotline simulate --json` reports for Spotline."""
    settings = settings or history.sim_settings()
    pools, traces = cluster_for(history, gpus)
    check_hostable(history.trace, pools, settings)
    return _replay(Cluster(history, pools, settings, traces), config, seed)[0]


def _run_forked(run: _Run) -> tuple[dict[str, Any], float]:
    assert _FORKED is not None, "a forked worker starts with the inputs its parent set"
    clusters, configs = _FORKED
    index, stretch, seed = run
    return _replay(clusters[stretch], configs[index], seed)


def _run_all(runs: Sequence[_Run], workers: int) -> list[tuple[dict[str, Any], float]]:
    if workers <= 1 or len(runs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_run_forked(r) for r in runs]
    # Longest first: tuning stretches before holdouts, so the last runs are the short ones.
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
        return list(pool.map(_run_forked, runs, chunksize=1))


def _summaries(results: Sequence[dict[str, Any]]) -> dict[str, Summary]:
    return {g.key: summarize([g.read(m) for m in results]) for g in GOAL_METRICS}


def race(goal: GoalMetric, screen: Mapping[int, Mapping[str, float]], finalists: int) -> list[int]:
    """The candidates that go on from the screen (`screen`: each candidate's goal metrics there,
    the baseline's under 0): the baseline, and of the others that no screened candidate
    dominates, the `finalists` best on `goal` (then the first drawn), in the order drawn."""
    others = [
        i for i in screen if i != 0 and not any(dominates(screen[o], screen[i]) for o in screen if o != i)
    ]
    base = screen[0]
    others.sort(key=lambda i: (change(goal, base[goal.key], screen[i][goal.key]), i))
    return sorted({0, *others[:finalists]})


def tune(
    history: History,
    pools: Sequence[Pool],
    *,
    zone_traces: Mapping[str, AvailabilityTrace] | None = None,
    baseline: Mapping[str, Any] | None = None,
    objective: str = DEFAULT_OBJECTIVE,
    holdout_days: float = 7.0,
    tuning_days: float | None = None,
    seeds: Sequence[int] = (1, 2, 3),
    candidates: int = 20,
    search_seed: int = 1,
    workers: int = 1,
    settings: SimSettings | None = None,
    progress: Callable[[str], None] | None = None,
    finalists: int = DEFAULT_FINALISTS,
    screen_days: float | None = None,
    semifinalists: int = DEFAULT_SEMIFINALISTS,
) -> TuneResult:
    """Tune on `history` replayed on `pools` (module docstring; `pools` and `zone_traces` as
    `cluster_for` gives them). `baseline`: the settings in effect (dotted names, cdk.json's
    `scheduler` flattened); the candidates are diffs from it. `tuning_days`: tune on that much of
    the history just before the holdout only (None: all of it), a bound on the replays' cost.
    `finalists`: the candidates besides the baseline that replay the whole tuning stretch on every
    seed; with more candidates than that, the others race for it on a screen of the first
    `screen_days` of the tuning stretch (None: `DEFAULT_SCREEN_SHARE` of it). `semifinalists`:
    with more candidates than that besides the baseline, the screen's `semifinalists` best replay
    twice the screen's days first, and the finalists are the best there (0: no semi-final)."""
    began = time.perf_counter()
    goal = GOALS_BY_KEY.get(objective)
    if goal is None:
        raise TuneError(f"unknown objective {objective!r} (one of {', '.join(GOALS_BY_KEY)})")
    if candidates < 2:
        raise TuneError(f"--candidates must be at least 2 (the baseline and one more), got {candidates}")
    if not seeds:
        raise TuneError("at least one seed")
    if finalists < 1:
        raise TuneError(f"--finalists must be at least 1, got {finalists}")
    if semifinalists < 0:
        raise TuneError(f"--semifinalists must be 0 or more, got {semifinalists}")
    if screen_days is not None and (not math.isfinite(screen_days) or screen_days <= 0):
        raise TuneError(f"--screen-days must be positive, got {screen_days:g}")
    settings = settings or history.sim_settings()
    base_diff = dict(baseline or {})
    try:
        base = apply_diff(SchedulerConfig(), base_diff)
    except ValueError as error:
        raise TuneError(f"the settings in effect: {error}") from None
    cut = holdout_cut(history, holdout_days)
    head, tail = split(history, cut)
    if tuning_days is not None:
        if not math.isfinite(tuning_days) or tuning_days <= 0:
            raise TuneError(f"--tuning-days must be positive, got {tuning_days:g}")
        # Only the stretch just before the holdout (its start shifted to 0, as the holdout's).
        head = split(head, max(0.0, cut - tuning_days * 86400.0))[1]
        head.trace.source = f"{history.trace.source} (tuning)"
    check_hostable(history.trace, pools, settings)
    traces = dict(zone_traces or {})
    clusters = {
        "tuning": Cluster(head, list(pools), settings, traces),
        "holdout": Cluster(tail, list(pools), settings, traces),
    }
    diffs = draw_candidates(base, candidates, search_seed)
    configs = [apply_diff(base, d) for d in diffs]
    entries = [Candidate(i, d) for i, d in enumerate(diffs)]
    say = progress or (lambda _: None)
    screened = finalists < len(entries) - 1
    screen_jobs = semifinal_jobs = 0
    semifinal_days: float | None = None
    if screened:
        if screen_days is None:
            screen_days = DEFAULT_SCREEN_SHARE * head.span_s / 86400.0
        screen = split(head, screen_days * 86400.0)[0]
        screen.trace.source = f"{history.trace.source} (screen)"
        screen_jobs = len(screen.trace.jobs)
        if not screen_jobs:
            raise TuneError(
                f"--screen-days {screen_days:g}: no job of the tuning stretch is submitted that early"
            )
        clusters["screen"] = Cluster(screen, list(pools), settings, traces)
        if finalists < semifinalists < len(entries) - 1 and 2 * screen_days * 86400.0 < head.span_s:
            semifinal_days = 2 * screen_days
            semi = split(head, semifinal_days * 86400.0)[0]
            semi.trace.source = f"{history.trace.source} (semi-final)"
            semifinal_jobs = len(semi.trace.jobs)
            clusters["semifinal"] = Cluster(semi, list(pools), settings, traces)
    else:
        screen_days = None

    global _FORKED
    _FORKED = (clusters, configs)
    try:
        runs0: list[_Run] = []
        if screened:
            runs0 = [(c.index, "screen", seeds[0]) for c in entries]
            say(
                f"screen: {len(entries)} candidates x 1 seed on the first {screen_days:.3g} days of the"
                f" tuning stretch ({screen_jobs:,} jobs)"
            )
            for c, (metrics, cpu) in zip(entries, _run_all(runs0, workers), strict=True):
                c.screen = _summaries([metrics])
                c.screen_cpu_s = cpu
            first = semifinalists if semifinal_days is not None else finalists
            kept = set(race(goal, {c.index: c.means("screen") for c in entries}, first))
            if semifinal_days is not None:
                semis = [c for c in entries if c.index in kept]
                runs0 += [(c.index, "semifinal", seeds[0]) for c in semis]
                say(
                    f"semi-final: {len(semis)} candidates x 1 seed on the first {semifinal_days:.3g} days"
                    f" of the tuning stretch ({semifinal_jobs:,} jobs)"
                )
                for c, (metrics, cpu) in zip(semis, _run_all(runs0[len(entries) :], workers), strict=True):
                    c.semifinal = _summaries([metrics])
                    c.semifinal_cpu_s = cpu
                kept = set(race(goal, {c.index: c.means("semifinal") for c in semis}, finalists))
            for c in entries:
                c.finalist = c.index in kept
            say(f"finalists: {', '.join(f'#{i}' for i in sorted(kept))}")
        final = [c for c in entries if c.finalist]
        runs: list[_Run] = [(c.index, "tuning", s) for c in final for s in seeds]
        say(f"tuning stretch: {len(final)} candidates x {len(seeds)} seeds ({len(head.trace.jobs):,} jobs)")
        results = _run_all(runs, workers)
        for c in final:
            mine = [results[i] for i, r in enumerate(runs) if r[0] == c.index]
            c.tuning = _summaries([m for m, _ in mine])
            c.cpu_s += sum(cpu for _, cpu in mine)
        means = {c.index: c.means("tuning") for c in final}
        for c in final:
            c.pareto = not any(dominates(means[o.index], means[c.index]) for o in final if o is not c)
        base_means = means[0]
        eligible = [
            c
            for c in final[1:]
            if paired_gain(goal, entries[0].tuning[goal.key], c.tuning[goal.key]).upper < 0
            and all(
                change(g, base_means[g.key], means[c.index][g.key]) <= MAX_REGRESSION
                for g in GOAL_METRICS
                if g is not goal
            )
        ]
        eligible.sort(key=lambda c: change(goal, base_means[goal.key], means[c.index][goal.key]))
        pick = eligible[0] if eligible else None
        checked = {0, *(c.index for c in final if c.pareto)} | ({pick.index} if pick else set())
        runs2: list[_Run] = [(i, "holdout", s) for i in sorted(checked) for s in seeds]
        say(f"holdout: {len(checked)} configurations x {len(seeds)} seeds ({len(tail.trace.jobs):,} jobs)")
        results2 = _run_all(runs2, workers)
        for i in sorted(checked):
            mine = [results2[k] for k, r in enumerate(runs2) if r[0] == i]
            entries[i].holdout = _summaries([m for m, _ in mine])
            entries[i].holdout_cpu_s += sum(cpu for _, cpu in mine)
    finally:
        _FORKED = None

    if pick is None:
        recommended: dict[str, Any] = {}
        reason = (
            f"no {'finalist' if screened else 'candidate'} improves {goal.key} on the tuning stretch"
            f" (the 95% CI of its paired change over seeds below 0) without making another goal metric"
            f" more than {MAX_REGRESSION:.0%} worse: the settings in effect stay"
        )
    else:
        ok, why = holdout_verdict(goal, entries[0].means("holdout"), pick.means("holdout"))
        recommended = dict(pick.diff) if ok else {}
        tuned = paired_gain(goal, entries[0].tuning[goal.key], pick.tuning[goal.key])
        held = paired_gain(goal, entries[0].holdout[goal.key], pick.holdout[goal.key])
        reason = (
            f"candidate {pick.index} {why} (paired change over seeds: tuning {_pct(tuned)},"
            f" holdout {_pct(held)})"
        )
    return TuneResult(
        objective=goal.key,
        trace=history.trace.source,
        gpus=sum(p.capacity_gpus for p in pools),
        seeds=tuple(seeds),
        holdout_days=holdout_days,
        tuning_days=tuning_days,
        tuning_jobs=len(head.trace.jobs),
        holdout_jobs=len(tail.trace.jobs),
        screen_days=screen_days,
        screen_jobs=screen_jobs,
        semifinal_days=semifinal_days,
        semifinal_jobs=semifinal_jobs,
        baseline=base_diff,
        candidates=entries,
        recommended=recommended,
        checked=pick,
        reason=reason,
        runs=len(runs0) + len(runs) + len(runs2),
        wall_s=time.perf_counter() - began,
    )


def holdout_verdict(
    goal: GoalMetric, base: Mapping[str, float], pick: Mapping[str, float]
) -> tuple[bool, str]:
    """Whether the pick may be recommended, from the goal metrics' holdout means: it must improve
    `goal` and make no other goal metric more than `MAX_REGRESSION` worse; and why."""
    gain = change(goal, base[goal.key], pick[goal.key])
    regressions = [
        f"{g.key} {change(g, base[g.key], pick[g.key]):+.1%}"
        for g in GOAL_METRICS
        if g is not goal and change(g, base[g.key], pick[g.key]) > MAX_REGRESSION
    ]
    if gain >= 0:
        return False, (
            f"improved {goal.key} on the tuning stretch but not on the holdout ({-gain:+.1%}):"
            " nothing is recommended"
        )
    if regressions:
        return False, (
            f"improved {goal.key} by {-gain:.1%} on the holdout but made {', '.join(regressions)} worse"
            f" there (more than {MAX_REGRESSION:.0%}): nothing is recommended"
        )
    return True, (
        f"improves {goal.key} by {-gain:.1%} on the holdout, and no other goal metric is more than"
        f" {MAX_REGRESSION:.0%} worse there"
    )


def _pct(gain: Gain) -> str:
    return f"{gain.mean:+.1%}" + ("" if math.isnan(gain.ci95) else f" ± {gain.ci95:.1%}")


def default_workers() -> int:
    return os.cpu_count() or 1
