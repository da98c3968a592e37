"""Effective priority: one number that orders the queue and decides who may preempt whom."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from spotline.domain.config import (
    DEADLINE_HORIZON_S,
    HISTORY_CAP,
    SHORTEST_NORM_S,
    SIZE_NORM_GPUS,
    PriorityWeights,
)
from spotline.domain.models import Job, Priority, TeamQuota


def wait_s(job: Job, now: float) -> float:
    """Time the job has waited in the queue since it was last enqueued. A running job keeps
    the wait it had when it started, so starting never changes its standing."""
    end = now if job.started_at is None else job.started_at
    return max(0.0, end - job.enqueued_at)


def deadline_urgency(job: Job, now: float, weights: PriorityWeights, remaining_s: float) -> float:
    """0 without a deadline; otherwise 1 - slack / `DEADLINE_HORIZON_S` clamped to [0, 1], where
    slack = deadline - now - remaining work. A closer deadline never lowers it."""
    deadline = job.spec.deadline_at
    if deadline is None:
        return 0.0
    slack = deadline - now - remaining_s
    return min(1.0, max(0.0, 1.0 - slack / DEADLINE_HORIZON_S))


_HOUR_S = 3600.0
_SHORTEST_SCALE = math.log1p(SHORTEST_NORM_S / _HOUR_S)


def shortness(job: Job, now: float, weights: PriorityWeights) -> float:
    """The shortest-declared-first factor in [0, 1] (`PriorityWeights`): from the declared
    remaining run time, 0 when the job declared none or has run past it."""
    expected = job.spec.expected_runtime_s
    if expected is None:
        return 0.0
    return _shortness(expected - job.elapsed_s(now), SHORTEST_NORM_S, _SHORTEST_SCALE)


def _shortness(remaining: float, norm_s: float, scale: float) -> float:
    """`shortness` of `remaining` seconds; `scale` is ln(1 + norm_s / 1 h)."""
    if remaining <= 0.0 or remaining >= norm_s:
        return 0.0
    return 1.0 - math.log1p(remaining / _HOUR_S) / scale


def fairshare_factor(
    team: str, quotas: Mapping[str, TeamQuota], usage_gpu_hours: Mapping[str, float]
) -> float:
    """Slurm's classic fair-share factor 2^(-U/S): U is the team's share of decayed usage,
    S its share of the weights. 1.0 for an idle team, 0.5 for a team at exactly its share."""
    return fairshare_factors((team,), quotas, usage_gpu_hours)[team]


def fairshare_factors(
    teams: Iterable[str], quotas: Mapping[str, TeamQuota], usage_gpu_hours: Mapping[str, float]
) -> dict[str, float]:
    """`fairshare_factor` of each of `teams`, summing the usage and the weights once."""
    total_usage = sum(usage_gpu_hours.values())
    if total_usage <= 0.0:
        return dict.fromkeys(teams, 1.0)
    shares = _shares(quotas)
    unshared = 1.0 / max(1, len(usage_gpu_hours))  # a team without a quota, or no weights at all
    factors: dict[str, float] = {}
    for team in teams:
        share = unshared if shares is None else shares.get(team, unshared)
        usage = usage_gpu_hours.get(team, 0.0) / total_usage
        factors[team] = float(2.0 ** (-usage / share))
    return factors


def _shares(quotas: Mapping[str, TeamQuota]) -> dict[str, float] | None:
    """Each team's share of the quotas' weights (None when they weigh nothing)."""
    total_weight = sum(quota.weight for quota in quotas.values())
    if total_weight <= 0.0:
        return None
    return {team: quota.weight / total_weight for team, quota in quotas.items()}


def effective_priority(
    job: Job,
    now: float,
    weights: PriorityWeights,
    *,
    remaining_s: float,
    fairshare: float = 1.0,
) -> float:
    """The multifactor priority of `job` at `now` (see `PriorityWeights` for the formula).

    `remaining_s` is the job's estimated remaining run time and `fairshare` its team's
    fair-share factor in [0, 1]; both are computed once per pass by the caller.

    Properties (tested): waiting longer, a closer deadline and more disruptions suffered each
    never lower it.
    """
    return PriorityScorer(now, weights, {job.team: fairshare}, lambda _: remaining_s)(job)


class PriorityScorer:
    """`effective_priority` of many jobs at one `now`, for a scheduling pass.

    The formula is written here once (`effective_priority` scores one job with it). The terms
    that depend only on a job's class, size, team or disruptions are computed once per distinct
    value and kept by the scorer, whose life is one pass (tested: scoring many jobs with one
    scorer gives each job its own score).
    `remaining_s(job)`, the job's estimated remaining run time, is asked for only for a job with
    a deadline, the one term that reads it.
    """

    def __init__(
        self,
        now: float,
        weights: PriorityWeights,
        fairshare: Mapping[str, float],
        remaining_s: Callable[[Job], float],
    ) -> None:
        self._now = now
        self._remaining_s = remaining_s
        self._weights = weights
        self._fairshare = fairshare
        self._class: dict[Priority, float] = {p: weights.class_term(p) for p in Priority}
        self._size: dict[int, float] = {}
        self._history: dict[int, float] = {}
        self._team: dict[str, float] = {
            team: weights.fairshare * factor for team, factor in fairshare.items()
        }

    def __call__(self, job: Job) -> float:
        return self.scores((job,))[0]

    @property
    def weights(self) -> PriorityWeights:
        return self._weights

    def team_term(self, team: str) -> float:
        """The fair-share term of `team`'s jobs in this pass."""
        term = self._team.get(team)
        return self._team_term(team) if term is None else term

    def scores(self, jobs: Iterable[Job]) -> list[float]:
        """The effective priority of each of `jobs`, in order: the terms summed left to right, as
        `PriorityWeights` writes the formula, with the age's clamps as comparisons (the same
        floats; tested). A pass scores its whole window with it, so the weights are read once."""
        now, weights = self._now, self._weights
        w_age, max_age, w_deadline = weights.age, weights.max_age_s, weights.deadline
        w_shortest = weights.shortest
        classes, teams, sizes, histories = self._class, self._team, self._size, self._history
        log1p = math.log1p
        out: list[float] = []
        for job in jobs:
            spec = job.spec
            score = classes[spec.priority]
            started = job.started_at
            wait = (now if started is None else started) - job.enqueued_at
            if wait <= 0.0:
                age = w_age * 0.0
            elif wait >= max_age:
                age = w_age * 1.0
            else:
                age = w_age * (wait / max_age)
            score += age
            if spec.deadline is not None:
                score += w_deadline * deadline_urgency(job, now, weights, self._remaining_s(job))
            team = teams.get(job.team)
            if team is None:
                team = self._team_term(job.team)
            ran = job.runtime_s
            size = sizes.get(spec.gpus)
            if size is None:
                size = self._size_term(spec.gpus)
            disruptions = job.preemptions + job.interruptions
            history = histories.get(disruptions)
            if history is None:
                history = self._history_term(disruptions)
            expected = spec.expected_runtime_s
            if w_shortest <= 0.0 or expected is None:
                out.append(score + size + team + history)
                continue
            # Declared remaining: what was declared, less the run time so far (`Job.elapsed_s`).
            remaining = expected - ran if started is None else expected - (ran + max(0.0, now - started))
            # (`_shortness`, inlined: a pass scores every job of its window)
            if remaining <= 0.0 or remaining >= SHORTEST_NORM_S:
                short = w_shortest * 0.0
            else:
                short = w_shortest * (1.0 - log1p(remaining / _HOUR_S) / _SHORTEST_SCALE)
            out.append(score + size + team + history + short)
        return out

    def _size_term(self, gpus: int) -> float:
        weights = self._weights
        size = self._size[gpus] = weights.size * min(1.0, gpus / SIZE_NORM_GPUS)
        return size

    def _history_term(self, disruptions: int) -> float:
        weights = self._weights
        history = self._history[disruptions] = weights.history * (min(disruptions, HISTORY_CAP) / HISTORY_CAP)
        return history

    def _team_term(self, team: str) -> float:
        term = self._team[team] = self._weights.fairshare * self._fairshare.get(team, 1.0)
        return term
