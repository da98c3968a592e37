"""Properties of the scheduling core, checked on generated clusters (Hypothesis).

Each check recomputes what it asserts with a small, independent model of the rules (pool
capacity, Kueue-style borrowing) instead of trusting the planner's own ledger.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from spotline.domain import (
    Admit,
    Allocation,
    ClusterSnapshot,
    Decision,
    Job,
    Ledger,
    Move,
    Pool,
    Preempt,
    Priority,
    PriorityWeights,
    ReclaimPolicy,
    SchedulerConfig,
    SortedQueue,
    TeamQuota,
    VictimStrategy,
    Wait,
    effective_priority,
    fairshare_factor,
    plan,
    select_victims,
)
from spotline.domain.planner import MAX_PREEMPTIONS_PER_PASS
from spotline.domain.preemption import (
    MAX_PREEMPTIONS_PER_JOB,
    _may_reclaim,
    estimated_remaining_s,
    reclaim_allowed_between,
    shielded,
)
from spotline.domain.priority import PriorityScorer, fairshare_factors, shortness
from spotline.domain.quota import borrowed_gpus
from spotline.domain.running import RunningIndex
from spotline.domain.victims import RunningJobs
from tests.budget import examples

from .builders import DAY, HOUR, NOW, JobBuilder, candidate, cluster, job, pool, quota

PROPERTY = settings(max_examples=examples(150), deadline=None)
TEAMS = ("a", "b", "c")

# --- an independent model of the capacity rules -------------------------------------------


def quota_allows(
    team: str, new_usage: int, usage: Mapping[str, int], quotas: Mapping[str, TeamQuota]
) -> bool:
    """May `team` use `new_usage` GPUs, the others using `usage`? Within nominal always; beyond
    it, up to its borrowing limit and to what the other teams lend minus what they borrow."""
    own = quotas.get(team)
    if own is None:
        return True
    borrowed = new_usage - own.nominal_gpus
    if borrowed <= 0:
        return True
    if own.borrowing_limit_gpus is not None and borrowed > own.borrowing_limit_gpus:
        return False
    others = [q for q in quotas.values() if q.team != team]
    lent = sum(
        min(
            max(0, q.nominal_gpus - usage.get(q.team, 0)),
            math.inf if q.lending_limit_gpus is None else q.lending_limit_gpus,
        )
        for q in others
    )
    borrowed_by_others = sum(max(0, usage.get(q.team, 0) - q.nominal_gpus) for q in others)
    return borrowed <= lent - borrowed_by_others


def usage_of(allocations: Sequence[Allocation]) -> tuple[dict[str, int], dict[str, int]]:
    pools: dict[str, int] = {}
    teams: dict[str, int] = {}
    for a in allocations:
        pools[a.pool] = pools.get(a.pool, 0) + a.gpus
        teams[a.job.team] = teams.get(a.job.team, 0) + a.gpus
    return pools, teams


# --- generators ---------------------------------------------------------------------------


@st.composite
def pools(draw: st.DrawFn) -> list[Pool]:
    count = draw(st.integers(1, 3))
    result = []
    for i in range(count):
        per_node = draw(st.sampled_from([8, 8, 4]))
        spot = draw(st.booleans())
        result.append(
            pool(
                f"p{i}",
                capacity=per_node * draw(st.integers(1, 6)),
                per_node=per_node,
                purchase="spot" if spot else "on-demand",
                gpu_type=draw(st.sampled_from(["a100", "a100", "a100", "h100"])),
                price=draw(st.sampled_from([0.3, 0.5])) if spot else 1.0,
                rate=draw(st.sampled_from([0.0, 0.1, 1.0])) if spot else 0.0,
            )
        )
    return result


@st.composite
def quotas(draw: st.DrawFn) -> list[TeamQuota]:
    result = []
    for team in TEAMS:
        if draw(st.integers(0, 3)) == 0:
            continue  # a team without a quota
        result.append(
            quota(
                team,
                draw(st.integers(0, 24)),
                borrow=draw(st.none() | st.integers(0, 16)),
                lend=draw(st.none() | st.integers(0, 16)),
                weight=draw(st.sampled_from([1.0, 2.0])),
            )
        )
    return result


@st.composite
def job_shapes(draw: st.DrawFn, job_id: str, classes: Sequence[Priority] = tuple(Priority)) -> JobBuilder:
    nodes = draw(st.sampled_from([1, 1, 1, 2]))
    builder = (
        job(job_id)
        .priority(draw(st.sampled_from(classes)))
        .team(draw(st.sampled_from(TEAMS)))
        .nodes(nodes)
        .gpus(nodes * draw(st.sampled_from([1, 2, 4, 4, 8])))
        .preemptions(draw(st.sampled_from([0, 0, 1, 2, 4])))
        .interruptions(draw(st.integers(0, 3)))
    )
    if draw(st.booleans()):
        builder = builder.expected_runtime(draw(st.floats(60, 2 * DAY)))
    return builder


@st.composite
def running(draw: st.DrawFn, job_id: str) -> JobBuilder:
    # Mostly the lower classes run, so that pending jobs have someone to preempt.
    builder = draw(job_shapes(job_id, (Priority.LOW, Priority.LOW, Priority.NORMAL, Priority.HIGH)))
    started = NOW - draw(st.floats(0, 2 * DAY))
    builder = builder.submitted(started - draw(st.floats(0, DAY))).running_since(started)
    if draw(st.booleans()):
        builder = builder.checkpointed(NOW - draw(st.floats(0, 2 * HOUR)))
    if draw(st.booleans()):
        builder = builder.progress(draw(st.floats(0.0, 1.0)))
    if draw(st.booleans()):
        builder = builder.utilization(draw(st.floats(0.0, 1.0)))
    return builder


@st.composite
def pending(draw: st.DrawFn, job_id: str) -> Job:
    builder = draw(job_shapes(job_id)).submitted(NOW - draw(st.floats(0, 2 * DAY)))
    # A gang job may not require Spot (AWS Batch runs no multi-node parallel job there).
    spots = ["auto", "auto", "auto", "never"] + (["required"] if builder.build().nodes == 1 else [])
    builder = builder.spot(draw(st.sampled_from(spots)))
    if draw(st.integers(0, 5)) == 0:
        builder = builder.gpu_type(draw(st.sampled_from(["a100", "h100"])))
    if draw(st.booleans()):
        builder = builder.deadline(NOW + draw(st.floats(60, 2 * DAY)))
    return builder.build()


@st.composite
def snapshots(draw: st.DrawFn, max_running: int = 16) -> ClusterSnapshot:
    """A cluster in a valid state: pools within capacity, every team's usage admissible."""
    the_pools = draw(pools())
    the_quotas = {q.team: q for q in draw(quotas())}
    allocations: list[Allocation] = []
    for i in range(draw(st.integers(0, max_running))):  # tries: the ones that do not fit are dropped
        target = draw(st.sampled_from(the_pools))
        builder = draw(running(f"r{i:02d}"))
        subject = builder.build()
        if not target.can_host(subject):
            continue
        demand = target.demand_gpus(subject)
        pool_used, team_used = usage_of(allocations)
        if pool_used.get(target.name, 0) + demand > target.capacity_gpus:
            continue
        if not quota_allows(subject.team, team_used.get(subject.team, 0) + demand, team_used, the_quotas):
            continue
        draining = "elsewhere" if draw(st.integers(0, 7)) == 0 else None
        allocations.append(builder.on(target.name, gpus=demand, draining_for=draining))
    usage = {t: draw(st.floats(0, 1000)) for t in TEAMS if draw(st.booleans())}
    return cluster(the_pools, allocations, the_quotas.values(), usage)


@st.composite
def policies(draw: st.DrawFn) -> SchedulerConfig:
    return SchedulerConfig(
        strategy=draw(st.sampled_from(list(VictimStrategy))),
        protection_period_s=draw(st.sampled_from([0.0, 0.0, 600.0, 4 * HOUR])),
        on_demand_classes=frozenset(draw(st.sets(st.sampled_from(list(Priority))))),
        # Other weights than the defaults: the rules must hold under every weight.
        weights=PriorityWeights(
            fairshare=draw(st.sampled_from([400.0, 0.0, 100.0, 800.0])),
            shortest=draw(st.sampled_from([200.0, 0.0, 900.0])),
            age=draw(st.sampled_from([900.0, 300.0])),
        ),
        preemption_delay_s=draw(st.sampled_from([0.0, 0.0, 60.0, 3600.0])),
        move_to_spot_min_remaining_s=draw(st.sampled_from([0.0, 0.0, 3600.0])),
        stop_at_once_for=frozenset(draw(st.sets(st.sampled_from(list(Priority))))),
        preempt_for_class_head_only=frozenset(draw(st.sets(st.sampled_from(list(Priority))))),
    )


# A pass's inputs: the cluster, the queue, the policy, the seed, the window per class.
Scenario = tuple[ClusterSnapshot, list[Job], SchedulerConfig, int, int]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    snapshot = draw(snapshots())
    queue = [draw(pending(f"q{i:02d}")) for i in range(draw(st.integers(0, 12)))]
    return snapshot, queue, draw(policies()), draw(st.integers(0, 2**16)), draw(st.integers(1, 4))


def run(
    snapshot: ClusterSnapshot, queue: list[Job], policy: SchedulerConfig, seed: int, window: int
) -> list[Decision]:
    return plan(snapshot, SortedQueue.of(queue), NOW, policy, random.Random(seed), window_per_class=window)


def outcome(decisions: list[Decision]) -> list[tuple[object, ...]]:
    """Everything a decision says, comparable."""
    rows: list[tuple[object, ...]] = []
    for d in decisions:
        pool_name = d.pool if isinstance(d, Admit | Preempt | Move) else None
        victims = d.victims if isinstance(d, Preempt) else ()
        rows.append((d.action, d.job.id, pool_name, victims, d.effective_priority, d.reason))
    return rows


# --- plan(): capacity, eligibility, minimality --------------------------------------------


@dataclass
class Replay:
    """Applies a plan's decisions, in order, to an independent model of the cluster."""

    snapshot: ClusterSnapshot
    policy: SchedulerConfig

    def __post_init__(self) -> None:
        self.present, self.team_used = usage_of(self.snapshot.allocations)  # victims still there
        self.after = dict(self.present)  # once every victim has left and every preemptor runs
        self.reserved: dict[str, int] = {}  # what the planner holds back for preemptors
        self.held: dict[str, int] = {}  # free GPUs held for the pass's first blocked gang
        self.gone: set[str] = set()
        self.by_id = {a.job.id: a for a in self.snapshot.allocations}
        self.fairshare = {
            t: fairshare_factor(t, self.snapshot.quotas, self.snapshot.usage_gpu_hours) for t in TEAMS
        }

    def priority(self, subject: Job) -> float:
        remaining = estimated_remaining_s(subject, NOW, self.policy)
        return effective_priority(
            subject, NOW, self.policy.weights, remaining_s=remaining, fairshare=self.fairshare[subject.team]
        )

    def check_capacity(self, name: str) -> None:
        capacity = self.snapshot.pools[name].capacity_gpus
        assert self.present.get(name, 0) <= capacity, f"{name} over-committed while victims leave"
        assert self.after.get(name, 0) <= capacity, f"{name} over-committed once they have left"

    def hold(self, d: Wait) -> None:
        if d.holds is not None:
            pool, gpus = d.holds
            self.held[pool] = self.held.get(pool, 0) + gpus

    def admit(self, d: Admit) -> None:
        demand = self.snapshot.pools[d.pool].demand_gpus(d.job)
        if self.held.get(d.pool):
            # A job backfilled into the gang's hold takes the held GPUs it needs beyond the free.
            capacity = self.snapshot.pools[d.pool].capacity_gpus
            free = capacity - self.present.get(d.pool, 0) - self.reserved.get(d.pool, 0) - self.held[d.pool]
            self.held[d.pool] -= min(self.held[d.pool], max(0, demand - free))
        team = d.job.team
        new_usage = self.team_used.get(team, 0) + demand
        assert quota_allows(team, new_usage, self.team_used, self.snapshot.quotas), f"{d.job.id} over quota"
        self.team_used[team] = new_usage
        self.present[d.pool] = self.present.get(d.pool, 0) + demand
        self.after[d.pool] = self.after.get(d.pool, 0) + demand
        self.check_capacity(d.pool)

    def preempt(self, d: Preempt) -> None:
        victims = [self.by_id[v] for v in d.victims]
        target = self.snapshot.pools[d.pool]
        demand = target.demand_gpus(d.job)
        assert victims, "a preemption names its victims"
        assert len(set(d.victims)) == len(d.victims)
        assert d.effective_priority == self.priority(d.job)
        self.check_victims_eligible(d, victims, demand)
        self.check_minimal(d, victims, target)
        freed = sum(v.gpus for v in victims)
        for v in victims:
            self.team_used[v.job.team] -= v.gpus
            self.gone.add(v.job.id)
        team = d.job.team
        new_usage = self.team_used.get(team, 0) + demand
        assert quota_allows(team, new_usage, self.team_used, self.snapshot.quotas), f"{d.job.id} over quota"
        self.team_used[team] = new_usage
        self.after[d.pool] = self.after.get(d.pool, 0) - freed + demand
        self.reserved[d.pool] = self.reserved.get(d.pool, 0) + max(0, demand - freed)
        self.check_capacity(d.pool)

    def check_victims_eligible(self, d: Preempt, victims: list[Allocation], demand: int) -> None:
        policy = self.policy
        own = self.snapshot.quotas.get(d.job.team)
        may_reclaim = own is not None and self.team_used.get(d.job.team, 0) + demand <= own.nominal_gpus
        for v in victims:
            assert v.pool == d.pool
            assert v.draining_for is None and v.job.id not in self.gone
            assert v.job.started_at is not None
            assert NOW - v.job.started_at >= policy.protection_period_s, (
                f"{v.job.id} preempted inside its protection period"
            )
            assert v.job.preemptions < MAX_PREEMPTIONS_PER_JOB
            lower = v.job.priority.rank < d.job.priority.rank
            theirs = self.snapshot.quotas.get(v.job.team)
            borrowing = theirs is not None and self.team_used.get(v.job.team, 0) > theirs.nominal_gpus
            assert lower or (may_reclaim and v.job.team != d.job.team and borrowing), (
                f"{v.job.id} not eligible"
            )

    def check_minimal(self, d: Preempt, victims: list[Allocation], target: Pool) -> None:
        """The victims free enough, and no proper subset of them does (by brute force)."""
        pool_used = {
            n: self.present.get(n, 0) + self.reserved.get(n, 0) + self.held.get(n, 0)
            for n in self.snapshot.pools
        }
        ledger = Ledger(self.snapshot.pools, self.snapshot.quotas, pool_used, dict(self.team_used))
        assert ledger.fits_without(d.job, target, victims)
        for size in range(len(victims)):
            for subset in itertools.combinations(victims, size):
                assert not ledger.fits_without(d.job, target, list(subset)), (
                    f"{d.job.id}: victims not minimal"
                )


@PROPERTY
@given(scenarios())
def test_plan_never_over_commits_and_preempts_only_eligible_minimal_sets(scenario: Scenario) -> None:
    snapshot, queue, policy, seed, window = scenario
    replay = Replay(snapshot, policy)
    decisions = run(snapshot, queue, policy, seed, window)
    assert len({d.job.id for d in decisions}) == len(decisions)
    assert sum(isinstance(d, Preempt | Move) for d in decisions) <= MAX_PREEMPTIONS_PER_PASS
    event(f"preemptions: {min(2, sum(isinstance(d, Preempt) for d in decisions))}")
    event(f"admits: {min(3, sum(isinstance(d, Admit) for d in decisions))}")
    for d in decisions:
        if isinstance(d, Admit):
            replay.admit(d)
        elif isinstance(d, Preempt):
            replay.preempt(d)
        else:
            assert d.reason
            if isinstance(d, Wait):
                replay.hold(d)


@PROPERTY
@given(scenarios())
def test_plan_is_deterministic_and_leaves_the_snapshot_unchanged(scenario: Scenario) -> None:
    snapshot, queue, policy, seed, window = scenario
    before = snapshot.model_dump()
    ledger_before = Ledger.of(snapshot)
    first = outcome(run(snapshot, queue, policy, seed, window))
    assert snapshot.model_dump() == before
    assert Ledger.of(snapshot) == ledger_before
    # Same seed, same decisions, whatever order the snapshot and the queue list things in.
    shuffled = snapshot.model_copy(update={"allocations": tuple(reversed(snapshot.allocations))})
    second = outcome(run(shuffled, list(reversed(queue)), policy, seed, window))
    assert first == second


@st.composite
def busy_scenarios(draw: st.DrawFn) -> Scenario:
    """Mostly full clusters with longer queues."""
    snapshot = draw(snapshots(max_running=48))
    queue = [draw(pending(f"q{i:02d}")) for i in range(draw(st.integers(4, 16)))]
    return snapshot, queue, draw(policies()), draw(st.integers(0, 2**16)), draw(st.integers(1, 4))


# --- select_victims: minimal and eligible, on small clusters ------------------------------


@PROPERTY
@given(snapshots(max_running=8), st.data())
def test_select_victims_returns_a_minimal_set_of_eligible_victims(
    snapshot: ClusterSnapshot, data: st.DataObject
) -> None:
    policy = data.draw(policies())
    preemptor = data.draw(pending("pre"))
    target = data.draw(st.sampled_from(list(snapshot.pools.values())))
    candidates = [candidate(a, policy=policy) for a in snapshot.allocations]
    ledger = Ledger.of(snapshot)
    chosen = select_victims(preemptor, target, candidates, ledger, NOW, policy, random.Random(0))
    assert ledger == Ledger.of(snapshot)
    if chosen is None:
        return
    victims = [c.allocation for c in chosen]
    assert ledger.fits_without(preemptor, target, victims)
    for size in range(len(victims)):
        for subset in itertools.combinations(victims, size):
            assert not ledger.fits_without(preemptor, target, list(subset))
    own = snapshot.quotas.get(preemptor.team)
    used = ledger.team_used
    may_reclaim = (
        own is not None and used.get(preemptor.team, 0) + target.demand_gpus(preemptor) <= own.nominal_gpus
    )
    for c in chosen:
        assert c.allocation.pool == target.name and c.allocation.draining_for is None
        assert c.job.started_at is not None and NOW - c.job.started_at >= policy.protection_period_s
        assert c.job.preemptions < MAX_PREEMPTIONS_PER_JOB
        theirs = snapshot.quotas.get(c.job.team)
        borrowing = theirs is not None and used.get(c.job.team, 0) > theirs.nominal_gpus
        lower = c.job.priority.rank < preemptor.priority.rank
        assert lower or (may_reclaim and borrowing and c.job.team != preemptor.team)


# --- effective priority is monotone -------------------------------------------------------

WEIGHTS = PriorityWeights()


def score(subject: Job, now: float) -> float:
    remaining = subject.remaining_s(now)
    return effective_priority(subject, now, WEIGHTS, remaining_s=3600.0 if remaining is None else remaining)


@PROPERTY
@given(st.data(), st.floats(0, 3 * DAY))
def test_waiting_longer_never_lowers_effective_priority(data: st.DataObject, later: float) -> None:
    subject = data.draw(pending("j") | running("j").map(lambda b: b.build()))
    expected = subject.spec.expected_runtime_s
    if expected is not None and subject.elapsed_s(NOW + later) >= expected:
        # A running job that overruns what it declared loses the shortest-declared term (by
        # design: `test_overrunning_the_declared_run_time_loses_the_shortest_term`); aging and
        # the other terms still never lower its priority.
        weights = WEIGHTS.model_copy(update={"shortest": 0.0})
        later_score = effective_priority(subject, NOW + later, weights, remaining_s=3600.0)
        assert later_score >= effective_priority(subject, NOW, weights, remaining_s=3600.0)
        return
    assert score(subject, NOW + later) >= score(subject, NOW)


def test_overrunning_the_declared_run_time_loses_the_shortest_term() -> None:
    weights = PriorityWeights(shortest=900.0)
    subject = job("j").expected_runtime(HOUR).running_since(NOW).build()
    within = effective_priority(subject, NOW + 0.9 * HOUR, weights, remaining_s=HOUR)
    at_start = effective_priority(subject, NOW, weights, remaining_s=HOUR)
    overran = effective_priority(subject, NOW + 1.1 * HOUR, weights, remaining_s=HOUR)
    nothing_declared = job("j").running_since(NOW).build()
    assert within > at_start > overran
    assert overran == effective_priority(nothing_declared, NOW + 1.1 * HOUR, weights, remaining_s=HOUR)


@PROPERTY
@given(st.data(), st.floats(60, 2 * DAY), st.floats(0, 2 * DAY))
def test_closer_deadline_never_lowers_effective_priority(
    data: st.DataObject, due: float, sooner: float
) -> None:
    builder = data.draw(job_shapes("j")).submitted(NOW - data.draw(st.floats(0, DAY)))
    far = builder.deadline(NOW + due + sooner).build()
    near = builder.deadline(NOW + due).build()
    none = builder.build()
    assert score(near, NOW) >= score(far, NOW) >= score(none, NOW)


@PROPERTY
@given(st.data(), st.integers(0, 5), st.integers(0, 5))
def test_more_disruptions_never_lower_effective_priority(
    data: st.DataObject, preempted: int, interrupted: int
) -> None:
    base = data.draw(job_shapes("j")).preemptions(0).interruptions(0)
    fewer = base.preemptions(preempted // 2).interruptions(interrupted // 2).build()
    more = base.preemptions(preempted).interruptions(interrupted).build()
    assert score(more, NOW) >= score(fewer, NOW)


@PROPERTY
@given(st.data(), st.floats(60, 3 * DAY), st.floats(0, 3 * DAY))
def test_a_shorter_declared_run_time_never_lowers_effective_priority(
    data: st.DataObject, declared: float, longer: float
) -> None:
    weights = PriorityWeights(shortest=900.0)
    base = data.draw(job_shapes("j"))
    short, long = base.expected_runtime(declared).build(), base.expected_runtime(declared + longer).build()
    assert effective_priority(short, NOW, weights, remaining_s=HOUR) >= effective_priority(
        long, NOW, weights, remaining_s=HOUR
    )


@PROPERTY
@given(
    st.data(),
    st.floats(0, 2 * DAY),
    st.sampled_from([0.0, 0.25, 1.0]),
    st.sampled_from(
        [
            PriorityWeights(),
            PriorityWeights(size=0.0, age=1500.0, max_age_s=3600.0),
            PriorityWeights(shortest=900.0, fairshare=0.0),
        ]
    ),
)
def test_the_pass_scorer_gives_exactly_effective_priority(
    data: st.DataObject, later: float, share: float, weights: PriorityWeights
) -> None:
    """The pass scores its whole window with one `PriorityScorer`, which keeps terms per class,
    size, team and history: each job gets exactly the float `effective_priority` gives it alone,
    for pending and running jobs, with and without deadlines (kept terms must not leak between
    jobs)."""
    subjects = data.draw(
        st.lists(pending("j") | running("j").map(lambda b: b.build()), min_size=1, max_size=6)
    )
    now = NOW + later
    fairshare = {"a": share, "b": 1.0 - share}

    def remaining_of(subject: Job) -> float:
        remaining = subject.remaining_s(now)
        return 3600.0 if remaining is None else remaining

    scorer = PriorityScorer(now, weights, fairshare, remaining_of)
    for subject in subjects:
        expected = effective_priority(
            subject,
            now,
            weights,
            remaining_s=remaining_of(subject),
            fairshare=fairshare.get(subject.team, 1.0),
        )
        assert scorer(subject) == expected
        assert expected == documented_formula(subject, now, weights, remaining_of(subject), fairshare)
    assert PriorityScorer(now, weights, fairshare, remaining_of).scores(subjects) == [
        scorer(subject) for subject in subjects
    ]


def documented_formula(
    subject: Job, now: float, weights: PriorityWeights, remaining: float, fairshare: Mapping[str, float]
) -> float:
    """`PriorityWeights`'s formula as its docstring writes it, term by term, left to right (the
    scorer's comparisons in place of min and max must give the same float)."""
    end = now if subject.started_at is None else subject.started_at
    wait = max(0.0, end - subject.enqueued_at)
    deadline = subject.spec.deadline_at
    urgency = 0.0
    if deadline is not None:
        urgency = min(1.0, max(0.0, 1.0 - (deadline - now - remaining) / (6 * HOUR)))
    disruptions = subject.preemptions + subject.interruptions
    return (
        weights.class_step * subject.priority.rank
        + weights.age * min(wait / weights.max_age_s, 1.0)
        + weights.deadline * urgency
        + weights.size * min(1.0, subject.gpus / 64)
        + weights.fairshare * fairshare.get(subject.team, 1.0)
        + weights.history * (min(disruptions, 3) / 3)
        + (weights.shortest * shortness(subject, now, weights) if weights.shortest > 0.0 else 0.0)
    )


# --- the victim search -----------------------------------------------------------------------


@PROPERTY
@given(st.one_of(scenarios(), busy_scenarios()), st.sampled_from(list(ReclaimPolicy)), st.data())
def test_the_victim_search_finds_exactly_the_running_jobs_of_lower_classes_or_reclaimable(
    scenario: Scenario, reclaim: ReclaimPolicy, data: st.DataObject
) -> None:
    # (The preemptors come in any order, and victims are taken along the way; each search is
    # checked against the definition.)
    snapshot, queue, policy, _, _ = scenario
    policy = policy.model_copy(update={"reclaim_within_cohort": reclaim})
    teams = {*snapshot.usage_gpu_hours, *snapshot.quotas}
    fairshare = fairshare_factors(teams, snapshot.quotas, snapshot.usage_gpu_hours)
    score = PriorityScorer(NOW, policy.weights, fairshare, lambda j: estimated_remaining_s(j, NOW, policy))
    search = RunningJobs(snapshot, RunningIndex.of(snapshot.allocations), score, NOW, policy)
    ledger = search.ledger
    running_ids = sorted(a.job.id for a in snapshot.allocations)
    taken: set[str] = set()
    for preemptor in data.draw(st.permutations(queue)):
        for name in snapshot.pools:
            stoppable = [
                a
                for a in snapshot.allocations
                if a.pool == name and a.job.id not in taken and shielded(a, NOW, policy) is None
            ]
            may_reclaim = _may_reclaim(preemptor, ledger.team_used, ledger, name)
            want = {
                a.job.id
                for a in stoppable
                if a.job.priority.rank < preemptor.priority.rank
                or (
                    may_reclaim
                    and a.job.team != preemptor.team
                    and reclaim_allowed_between(a.job.priority, preemptor.priority, policy)
                    and borrowed_gpus(a.job.team, ledger.team_used, ledger.quotas) > 0
                )
            }
            found = search.possible_victims(preemptor, name, ledger, taken)
            assert sorted(c.job_id for c in found) == sorted(want)
            assert all(c.effective_priority == score(c.job) for c in found)
        if running_ids and data.draw(st.booleans()):
            taken.add(data.draw(st.sampled_from(running_ids)))
