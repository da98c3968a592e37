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
    """Each team's share of the quotas' weights (None when they weigh nothing), kept for the
    last quotas asked about: every pass asks, and they seldom change (compared by their items,
    so quotas changed in place are not mistaken for the last ones)."""
    items = tuple(quotas.items())
    if _SHARES and _SHARES[0][0] == items:
        return _SHARES[0][1]
    total_weight = sum(quota.weight for _, quota in items)
    shares = None if total_weight <= 0.0 else {team: quota.weight / total_weight for team, quota in items}
    _SHARES[:] = [(items, shares)]
    return shares


# The last quotas `_shares` was asked about (their items), and their shares.
_SHARES: list[tuple[tuple[tuple[str, TeamQuota], ...], dict[str, float] | None]] = []


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
    floor = weights.class_step * spec.priority.rank
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


class _JobTerms:
    """What a score reads of a job record besides `now` and its team's fair-share
    (`PriorityScorer`), read once per record. (A class, not a tuple: compiled, its numbers are
    kept unboxed and read without a type check.)"""

    __slots__ = (
        "attained",
        "class_term",
        "deadline",
        "declared",
        "enqueued",
        "history",
        "job",
        "size",
        "started",
        "team",
    )

    def __init__(
        self,
        job: Job,
        class_term: float,
        enqueued: float,
        started: float | None,
        deadline: bool,
        attained: float | None,
        size: float,
        team: str,
        history: float,
        declared: tuple[float, float, float] | None,
    ) -> None:
        self.job = job  # the record (an id reused by another record is not mistaken for it)
        self.class_term = class_term
        self.enqueued = enqueued  # enqueued_at
        self.started = started  # started_at
        self.deadline = deadline  # whether it has one
        self.attained = attained  # the attained-service term, or None
        self.size = size  # the size term
        self.team = team
        self.history = history  # the history term
        # The declared run time, the run time before `started_at` and the term while pending;
        # None when the shortest-declared term is off or nothing was declared.
        self.declared = declared


# Per set of weights: the class, size and history terms (`PriorityScorer`), and each job record's
# terms by the record's id, for a few sets at most.
_TERMS: dict[
    PriorityWeights,
    tuple[dict[Priority, float], dict[int, float], dict[int, float], dict[int, _JobTerms]],
] = {}
_TERMS_KEPT = 16
# Job records whose terms are kept (a pass scores its window and the running jobs, the same
# records pass after pass); all are forgotten beyond it.
_JOBS_KEPT = 1 << 13


class PriorityScorer:
    """`effective_priority` of many jobs at one `now`, for a scheduling pass.

    The formula is written here once (`effective_priority` scores one job with it). The terms
    that depend only on a job's class, size, team or disruptions are computed once per distinct
    value and kept: the team terms for this scorer (they read the pass's fair-share), the others
    for every scorer with the same weights (tested: scoring many jobs with one scorer gives each
    job's own score).
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
        self._age = weights.age
        self._max_age_s = weights.max_age_s
        self._attained = weights.attained
        self._attained_norm_s = weights.attained_norm_gpu_h * 3600.0
        self._shortest = weights.shortest
        self._shortest_norm_s = weights.shortest_norm_s
        self._shortest_scale = math.log1p(weights.shortest_norm_s / _HOUR_S)
        # The class, size and history terms depend on the weights alone: kept across passes.
        terms = _TERMS.get(weights)
        if terms is None:
            if len(_TERMS) >= _TERMS_KEPT:
                _TERMS.clear()
            terms = _TERMS[weights] = ({p: weights.class_step * p.rank for p in Priority}, {}, {}, {})
        self._class, self._size, self._history, self._jobs = terms
        self._team: dict[str, float] = {
            team: weights.fairshare * factor for team, factor in fairshare.items()
        }

    def __call__(self, job: Job) -> float:
        return self.scores((job,))[0]

    @property
    def weights(self) -> PriorityWeights:
        return self._weights

    def static_bound(self, job: Job) -> tuple[str, float, float | None]:
        """The job's team; the most its terms other than the class, age and fair-share terms add
        up to, at any `now` (the attained-service term, which only lowers a score, counted as 0;
        the deadline term at its weight; the shortest-declared term as while it waits, or at its
        weight once it started); and its `enqueued_at`, or None once it started (its age no longer
        grows). Up to rounding, with non-negative weights."""
        terms = self._jobs.get(id(job))
        if terms is None or terms.job is not job:
            terms = self._job_terms(job)
        started, declared = terms.started, terms.declared
        static = terms.size + terms.history
        if declared is not None:
            static += declared[2] if started is None else self._shortest
        if terms.deadline:
            static += self._weights.deadline
        return terms.team, static, terms.enqueued if started is None else None

    def team_term(self, team: str) -> float:
        """The fair-share term of `team`'s jobs in this pass."""
        term = self._team.get(team)
        return self._team_term(team) if term is None else term

    def upper_bound(self, class_term: float, deadline: bool) -> float:
        """A number no job's score exceeds when its class term is at most `class_term` (and it
        has no deadline, unless `deadline`): each other term at its largest, the attained-service
        term (which only lowers a score) at 0, with room for rounding. Infinite when a weight is
        negative (a term's largest value is then not its weight)."""
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
        """The effective priority of each of `jobs`, in order.

        A pass scores its whole window and the running jobs it may preempt, so the loop reads
        each job's fields once, with the clamps of `age` as comparisons (the same values as
        min(1, max(0, wait) / max_age_s)); the per-value terms come from the caches."""
        now = self._now
        w_age = self._age
        max_age = self._max_age_s
        teams = self._team
        kept = self._jobs
        out: list[float] = []
        append = out.append
        for job in jobs:
            terms = kept.get(id(job))
            if terms is None or terms.job is not job:
                terms = self._job_terms(job)
            score = terms.class_term
            started = terms.started
            wait = (now if started is None else started) - terms.enqueued
            if wait <= 0.0:
                age = w_age * 0.0
            elif wait >= max_age:
                age = w_age * 1.0
            else:
                age = w_age * (wait / max_age)
            score += age
            if terms.deadline:
                # (Without a deadline the term is 0, and adding it would change nothing.)
                weights = self._weights
                score += weights.deadline * deadline_urgency(job, now, weights, self._remaining_s(job))
            team = teams.get(terms.team)
            if team is None:
                team = self._team_term(terms.team)
            attained = terms.attained
            if attained is not None:
                score -= attained
            size, history, declared = terms.size, terms.history, terms.declared
            if declared is None:
                append(score + size + team + history)
            elif started is None:
                append(score + size + team + history + declared[2])
            else:
                # Declared remaining: what was declared, less the run time so far (`Job.elapsed_s`).
                expected, ran, _ = declared
                remaining = expected - (ran + max(0.0, now - started))
                short = self._shortest * _shortness(remaining, self._shortest_norm_s, self._shortest_scale)
                append(score + size + team + history + short)
        return out

    def _job_terms(self, job: Job) -> _JobTerms:
        """The terms of `scores` that depend on the job record alone (kept by the record's id,
        with the record, so that an id reused by another record is not mistaken for it)."""
        spec = job.spec
        size = self._size.get(spec.gpus)
        if size is None:
            size = self._size_term(spec.gpus)
        disruptions = job.preemptions + job.interruptions
        history = self._history.get(disruptions)
        if history is None:
            history = self._history_term(disruptions)
        attained: float | None = None
        if self._attained > 0.0 and job.runtime_s > 0.0:
            service = spec.gpus * job.runtime_s
            norm = self._attained_norm_s
            attained = self._attained * (1.0 if service >= norm else service / norm)
        declared: tuple[float, float, float] | None = None
        if self._shortest > 0.0 and spec.expected_runtime_s is not None:
            expected, ran = spec.expected_runtime_s, job.runtime_s
            # A pending job's term does not change until it runs: computed once.
            pending = self._shortest * _shortness(expected - ran, self._shortest_norm_s, self._shortest_scale)
            declared = (expected, ran, pending)
        terms = _JobTerms(
            job,
            self._class[spec.priority],
            job.enqueued_at,
            job.started_at,
            spec.deadline is not None,
            attained,
            size,
            job.team,
            history,
            declared,
        )
        kept = self._jobs
        if len(kept) >= _JOBS_KEPT:
            kept.clear()
        kept[id(job)] = terms
        return terms

    def _size_term(self, gpus: int) -> float:
        weights = self._weights
        size = self._size[gpus] = weights.size * min(1.0, gpus / weights.size_norm_gpus)
        return size

    def _team_term(self, team: str) -> float:
        term = self._team[team] = self._weights.fairshare * self._fairshare.get(team, 1.0)
        return term

    def _history_term(self, disruptions: int) -> float:
        weights = self._weights
        history = self._history[disruptions] = weights.history * (
            min(disruptions, weights.history_cap) / weights.history_cap
        )
        return history
