"""Effective priority: one number that orders the queue and decides who may preempt whom."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from spotline.domain.config import PriorityWeights
from spotline.domain.models import Job, Priority, TeamQuota


def wait_s(job: Job, now: float) -> float:
    """Time the job has waited in the queue since it was last enqueued. A running job keeps
    the wait it had when it started, so starting never changes its standing."""
    end = now if job.started_at is None else job.started_at
    return max(0.0, end - job.enqueued_at)


def deadline_urgency(job: Job, now: float, weights: PriorityWeights, remaining_s: float) -> float:
    """0 without a deadline; otherwise 1 - slack / horizon clamped to [0, 1], where
    slack = deadline - now - remaining work. A closer deadline never lowers it."""
    deadline = job.spec.deadline_at
    if deadline is None:
        return 0.0
    slack = deadline - now - remaining_s
    return min(1.0, max(0.0, 1.0 - slack / weights.deadline_horizon_s))


_HOUR_S = 3600.0


def shortness(job: Job, now: float, weights: PriorityWeights) -> float:
    """The shortest-declared-first factor in [0, 1] (`PriorityWeights`): from the declared
    remaining run time, 0 when the job declared none or has run past it."""
    expected = job.spec.expected_runtime_s
    if expected is None:
        return 0.0
    norm_s = weights.shortest_norm_s
    return _shortness(expected - job.elapsed_s(now), norm_s, math.log1p(norm_s / _HOUR_S))


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
    never lower it; more attained service never raises it.
    """
    return PriorityScorer(now, weights, {job.team: fairshare}, lambda _: remaining_s)(job)


def lifted_class(job: Job, now: float, weights: PriorityWeights, remaining_s: float) -> Priority:
    """The class `job` ranks as at `now` (`PriorityWeights.lifted`): its own, or for a pending
    job whose deadline is near and still in reach, with the deadline lift on, one class up."""
    deadline = job.spec.deadline_at
    if weights.deadline_lift_slack_s <= 0.0 or deadline is None or job.started_at is not None:
        return job.priority
    return weights.lifted(job.priority, deadline - now - remaining_s)


def score_floor(job: Job, weights: PriorityWeights) -> tuple[float, float, float]:
    """What `effective_priority` of a running `job` less its team's fair-share term never falls
    below, as long as no weight is negative (the caller checks): (a floor until a time, that time,
    a floor from then on).

    The floor from then on is its class, age (fixed once it started), size and history terms less
    its attained-service term; the deadline and shortest-declared terms, never negative, are left
    out. Until a second before the job runs past its declared run time, the shortest-declared
    term is at least what it was when the job started (its declared remaining time only shrinks),
    and the first floor adds it. Up to rounding: compare with a margin."""
    spec = job.spec
    floor = weights.class_term(spec.priority)
    if job.started_at is not None:
        wait = job.started_at - job.enqueued_at
        if wait > 0.0:
            floor += weights.age * min(1.0, wait / weights.max_age_s)
    if weights.attained > 0.0 and job.runtime_s > 0.0:
        service = spec.gpus * job.runtime_s
        floor -= weights.attained * min(1.0, service / (weights.attained_norm_gpu_h * 3600.0))
    floor += weights.size * min(1.0, spec.gpus / weights.size_norm_gpus)
    disruptions = job.preemptions + job.interruptions
    floor += weights.history * (min(disruptions, weights.history_cap) / weights.history_cap)
    expected = spec.expected_runtime_s
    if expected is None or weights.shortest <= 0.0 or job.started_at is None:
        return floor, math.inf, floor
    norm_s = weights.shortest_norm_s
    short = weights.shortest * _shortness(expected - job.runtime_s, norm_s, math.log1p(norm_s / _HOUR_S))
    if short <= 0.0:
        return floor, math.inf, floor
    return floor + short, job.started_at + (expected - job.runtime_s) - 1.0, floor


class PriorityScorer:
    """`effective_priority` of many jobs at one `now`, for a scheduling pass.

    The formula is written here once (`effective_priority` scores one job with it). The terms
    that depend only on a job's class, size, team or disruptions are computed once per distinct
    value and kept by the scorer, whose life is one pass (tested: scoring many jobs with one
    scorer gives each job its own score).
    `remaining_s(job)`, the job's estimated remaining run time, is asked for only for a job with
    a deadline, the terms that read it (its urgency, and its class's `PriorityWeights.lifted`).
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
        self._shortest_scale = math.log1p(weights.shortest_norm_s / _HOUR_S)
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

    def upper_bound(self, class_term: float, deadline: bool) -> float:
        """A number no job's score exceeds when its class term is at most `class_term` (and it
        has no deadline, unless `deadline`): each other term at its largest, the attained-service
        term (which only lowers a score) at 0, with room for rounding. Infinite when a weight is
        negative (a term's largest value is then not its weight). A part of the window with a
        deadline is bounded with the class its jobs may be lifted to (`queue.ranked`)."""
        weights = self._weights
        terms = (weights.age, weights.deadline, weights.size, weights.history, weights.fairshare)
        if min(terms) < 0.0 or weights.attained < 0.0 or weights.shortest < 0.0:
            return math.inf
        # The fair-share term of a team missing from the pass's fair-share is weights.fairshare.
        team = max(self._team.values(), default=weights.fairshare)
        bound = class_term + weights.age + weights.size + weights.history + max(team, weights.fairshare)
        bound += weights.shortest
        if deadline:
            bound += weights.deadline
        return bound + abs(bound) * 1e-9 + 1e-9

    def scores(self, jobs: Iterable[Job]) -> list[float]:
        """The effective priority of each of `jobs`, in order: the terms summed left to right, as
        `PriorityWeights` writes the formula, with the age's clamps as comparisons (the same
        floats; tested). A pass scores its whole window with it, so the weights are read once."""
        now, weights = self._now, self._weights
        w_age, max_age, w_deadline = weights.age, weights.max_age_s, weights.deadline
        w_attained, attained_norm = weights.attained, weights.attained_norm_gpu_h * 3600.0
        w_shortest, shortest_norm, shortest_scale = (
            weights.shortest,
            weights.shortest_norm_s,
            self._shortest_scale,
        )
        classes, teams, sizes, histories = self._class, self._team, self._size, self._history
        out: list[float] = []
        lift = weights.deadline_lift_slack_s > 0.0
        for job in jobs:
            spec = job.spec
            started = job.started_at
            deadline = spec.deadline_at
            remaining_s = 0.0 if deadline is None else self._remaining_s(job)
            cls = spec.priority
            if lift and deadline is not None and started is None:
                cls = weights.lifted(cls, deadline - now - remaining_s)
            score = classes[cls]
            wait = (now if started is None else started) - job.enqueued_at
            if wait <= 0.0:
                age = w_age * 0.0
            elif wait >= max_age:
                age = w_age * 1.0
            else:
                age = w_age * (wait / max_age)
            score += age
            if deadline is not None:
                score += w_deadline * deadline_urgency(job, now, weights, remaining_s)
            team = teams.get(job.team)
            if team is None:
                team = self._team_term(job.team)
            ran = job.runtime_s
            if w_attained > 0.0 and ran > 0.0:
                service = spec.gpus * ran
                score -= w_attained * (1.0 if service >= attained_norm else service / attained_norm)
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
            short = w_shortest * _shortness(remaining, shortest_norm, shortest_scale)
            out.append(score + size + team + history + short)
        return out

    def _size_term(self, gpus: int) -> float:
        weights = self._weights
        size = self._size[gpus] = weights.size * min(1.0, gpus / weights.size_norm_gpus)
        return size

    def _history_term(self, disruptions: int) -> float:
        weights = self._weights
        history = self._history[disruptions] = weights.history * (
            min(disruptions, weights.history_cap) / weights.history_cap
        )
        return history

    def _team_term(self, team: str) -> float:
        term = self._team[team] = self._weights.fairshare * self._fairshare.get(team, 1.0)
        return term
