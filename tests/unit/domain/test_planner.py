"""One scheduling pass: plan() over a snapshot and a queue, decision by decision."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from spotline.domain import (
    Allocation,
    ClusterSnapshot,
    Job,
    Priority,
    PriorityWeights,
    ReclaimPolicy,
    SchedulerConfig,
    SortedQueue,
    plan,
    plan_with_stats,
    planner,
)
from spotline.domain.planner import MAX_PREEMPTIONS_PER_PASS
from spotline.domain.running import RunningIndex

from .builders import DAY, HOUR, NOW, cluster, config, job, pool, quota, run_plan, summary

OD16 = pool("od", capacity=16)
SPOT16 = pool("spot", capacity=16, purchase="spot", rate=0.01)
OD16_ONE_NODE = pool("od", capacity=16, per_node=16)


def low_on(job_id: str, gpus: int, pool_name: str = "od", team: str = "b", **changes: float) -> Allocation:
    """A low job of team b, running for a day without a checkpoint (unless `checkpoint_s`)."""
    builder = job(job_id).low().gpus(gpus).team(team)
    if "checkpoint_s" in changes:
        builder = builder.running_since(NOW - DAY).checkpointed(NOW - changes["checkpoint_s"])
    return builder.on(pool_name)


@dataclass(frozen=True)
class Case:
    snapshot: ClusterSnapshot
    pending: list[Job]
    decisions: list[tuple[str, ...]]
    reasons: dict[str, str] = field(default_factory=dict)
    policy: SchedulerConfig = field(default_factory=config)
    # The preemptions a pass may start (`planner.MAX_PREEMPTIONS_PER_PASS`).
    budget: int = MAX_PREEMPTIONS_PER_PASS


CASES: dict[str, Case] = {
    "admit-to-cheapest-spot": Case(
        cluster([OD16, SPOT16]),
        [job("j").gpus(8).build()],
        [("admit", "j", "spot")],
        {"j": "admitted to spot: 8 of 16 free GPUs"},
    ),
    "rank-order-until-the-pool-is-full": Case(
        cluster([OD16]),
        [
            job("l").low().gpus(8).submitted(NOW - 200).build(),
            job("n").gpus(8).submitted(NOW - 100).build(),
            job("h").high().gpus(8).build(),
        ],
        [("admit", "h", "od"), ("admit", "n", "od"), ("wait", "l")],
        {
            "l": "waiting: pool od has 0 free GPUs of the 8 needed, and nothing lower-priority to preempt"
            " in pool od",
        },
    ),
    "admit-in-second-pool-when-first-is-full": Case(
        cluster([OD16, SPOT16], [job("r").gpus(16).nodes(2).on("spot")]),
        [job("j").gpus(8).build()],
        [("admit", "j", "od")],
        {"j": "admitted to od: 8 of 16 free GPUs; not spot: pool spot has 0 free GPUs of the 8 needed"},
    ),
    "gang-takes-whole-nodes": Case(
        cluster([pool("g", capacity=32, per_node=8)]),
        [job("gang").gpus(8).nodes(2).build(), job("j").gpus(8).submitted(NOW + 1).build()],
        [("admit", "gang", "g"), ("admit", "j", "g")],
        {"gang": "admitted to g: 16 of 32 free GPUs", "j": "admitted to g: 8 of 16 free GPUs"},
    ),
    "team-quota-exhausted-by-borrowing-limit": Case(
        cluster([pool("od", capacity=32)], quotas=[quota("a", 8, borrow=0), quota("b", 8)]),
        [job("a1").gpus(8).submitted(NOW - 100).build(), job("a2").gpus(8).build()],
        [("admit", "a1", "od"), ("wait", "a2")],
        {"a2": "waiting: team quota exhausted: a would use 16 GPUs, nominal 8 + borrowing limit 0"},
    ),
    "borrows-idle-quota-then-runs-out": Case(
        cluster([pool("od", capacity=32)], quotas=[quota("a", 8), quota("b", 8)]),
        [job(f"a{i}").gpus(8).submitted(NOW - 100 + i).build() for i in range(3)],
        [("admit", "a0", "od"), ("admit", "a1", "od"), ("wait", "a2")],
        {"a2": "team quota exhausted: a is at its nominal 8 GPUs and no idle quota to borrow"},
    ),
    "no-pool-has-the-gpu-type": Case(
        cluster([OD16]),
        [job("j").gpus(8).gpu_type("h100").build()],
        [("wait", "j")],
        {"j": "waiting: no pool has GPU type h100"},
    ),
    "spot-required-without-spot-pool": Case(
        cluster([OD16]),
        [job("j").gpus(8).spot("required").build()],
        [("wait", "j")],
        {"j": "waiting: no pool can host 8 GPUs on 1 node(s) with spot=required for a normal job"},
    ),
    "preempt-the-victim-with-least-lost-work": Case(
        cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)]),
        [job("c").critical().gpus(8).build()],
        [("preempt", "c", "od", "v1")],
        {"c": "preempting 1 job(s) in od by least-lost-work: pool od has 0 free GPUs of the 8 needed"},
    ),
    "two-preemptors-take-distinct-victims": Case(
        cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)]),
        [job("c1").critical().gpus(8).submitted(NOW - 10).build(), job("c2").critical().gpus(8).build()],
        [("preempt", "c1", "od", "v1"), ("preempt", "c2", "od", "v2")],
    ),
    "preemptors-never-share-the-same-free-gpus": Case(
        cluster([OD16_ONE_NODE], [low_on("v1", 8), low_on("v2", 4)]),
        [
            job("p1").critical().gpus(12).submitted(NOW - 10).build(),
            job("p2").high().gpus(8).spot("never").build(),
        ],
        [("preempt", "p1", "od", "v1"), ("wait", "p2")],
        {"p2": "pool od has 0 free GPUs of the 8 needed"},
    ),
    "fewest-victims-across-pools": Case(
        cluster(
            [OD16, SPOT16],
            [low_on(f"s{i}", 4, "spot") for i in range(4)] + [low_on("o1", 8), low_on("o2", 8)],
        ),
        [job("n").gpus(8).build()],
        [("preempt", "n", "od", "o1")],
    ),
    "same-class-does-not-preempt": Case(
        cluster([OD16], [job("n1").gpus(16).nodes(2).on("od")]),
        [job("n2").gpus(8).build()],
        [("wait", "n2")],
        {"n2": "nothing lower-priority to preempt in pool od"},
    ),
    "preemptor-whose-victims-are-draining-waits": Case(
        cluster([OD16], [low_on("v1", 8).model_copy(update={"draining_for": "c"}), low_on("v2", 8)]),
        [job("c").critical().gpus(8).build()],
        [("wait", "c")],
        {"c": "waiting for 1 preempted job(s) to checkpoint and leave"},
    ),
    "draining-preemptor-keeps-the-free-gpus-it-counts-on": Case(
        cluster([OD16], [low_on("v1", 8).model_copy(update={"draining_for": "c"})]),
        [job("c").critical().gpus(16).nodes(2).submitted(NOW - 100).build(), job("n").gpus(8).build()],
        [("wait", "c"), ("wait", "n")],
        {"n": "pool od has 0 free GPUs of the 8 needed, and nothing lower-priority to preempt"},
    ),
    "per-pass-preemption-budget": Case(
        cluster([OD16], [low_on(f"l{i}", 4) for i in range(1, 5)]),
        [job("c1").critical().gpus(4).submitted(NOW - 10).build(), job("c2").critical().gpus(4).build()],
        [("preempt", "c1", "od", "l1"), ("wait", "c2")],
        {"c2": "waiting: pool od has 0 free GPUs of the 4 needed; preemption budget of this pass spent"},
        budget=1,
    ),
    "no-preemption-budget": Case(
        cluster([OD16], [low_on(f"l{i}", 4) for i in range(1, 5)]),
        [job("c1").critical().gpus(4).build()],
        [("wait", "c1")],
        {"c1": "preemption budget of this pass spent"},
        budget=0,
    ),
    "protected-victims-are-not-preempted": Case(
        cluster([OD16], [job("v").low().gpus(16).nodes(2).team("b").running_since(NOW - 60).on("od")]),
        [job("c").critical().gpus(8).build()],
        [("wait", "c")],
        {"c": "nothing lower-priority to preempt in pool od"},
        config(protection_period_s=600.0),
    ),
    "reclaim-borrowed-capacity-from-another-team": Case(
        cluster(
            [OD16],
            [job("b1").gpus(8).team("b").on("od"), job("b2").gpus(8).team("b").on("od")],
            [quota("a", 8), quota("b", 8)],
        ),
        [job("a1").gpus(8).team("a").build()],
        [("preempt", "a1", "od", "b1")],
        policy=config(reclaim_within_cohort=ReclaimPolicy.SAME_OR_LOWER_PRIORITY),
    ),
    "no-reclaim-from-the-same-class-by-default": Case(
        cluster(
            [OD16],
            [job("b1").gpus(8).team("b").on("od"), job("b2").gpus(8).team("b").on("od")],
            [quota("a", 8), quota("b", 8)],
        ),
        [job("a1").gpus(8).team("a").build()],
        [("wait", "a1")],
    ),
    "reclaim-from-a-lower-class-by-default": Case(
        cluster(
            [OD16],
            [
                job("b1").low().gpus(8).team("b").submitted(NOW - DAY).on("od"),
                job("b2").low().gpus(8).team("b").submitted(NOW - DAY).on("od"),
            ],
            [quota("a", 8), quota("b", 8)],
        ),
        [job("a1").gpus(8).team("a").build()],
        [("preempt", "a1", "od", "b1")],
    ),
    "aging-ranks-by-time-waited-not-queue-position": Case(
        cluster([pool("od", capacity=8)]),
        [
            job("requeued").low().gpus(8).submitted(NOW - 3 * DAY).enqueued(NOW).build(),
            job("waited").low().gpus(8).submitted(NOW - DAY).build(),
        ],
        [("admit", "waited", "od"), ("wait", "requeued")],
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_plan(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner, "MAX_PREEMPTIONS_PER_PASS", case.budget)
    before = case.snapshot.model_dump()
    decisions = run_plan(case.snapshot, case.pending, case.policy)
    assert summary(decisions) == case.decisions
    reasons = {d.job.id: d.reason for d in decisions}
    for job_id, reason in case.reasons.items():
        assert reason in reasons[job_id]
    assert case.snapshot.model_dump() == before


# --- the bounded window -------------------------------------------------------------------


def big_queue(count: int, *, gpus: int = 8, deadlines: int = 0) -> list[Job]:
    """`count` jobs spread over the four classes, oldest first; the last `deadlines` ones
    (the newest, so never at the head of their class) have deadlines."""
    classes = [Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW]
    jobs = []
    for i in range(count):
        builder = job(f"j{i:06d}").priority(classes[i % 4]).gpus(gpus).submitted(NOW - count + i)
        if i >= count - deadlines:
            builder = builder.deadline(NOW + DAY + i)
        jobs.append(builder.build())
    return jobs


@dataclass
class CountingQueue:
    """A PendingQueue that counts what a pass reads from it."""

    inner: SortedQueue
    calls: list[tuple[str, int, int]] = field(default_factory=list)

    def head(self, priority: Priority, limit: int) -> Sequence[Job]:
        jobs = self.inner.head(priority, limit)
        self.calls.append((f"head:{priority.value}", limit, len(jobs)))
        return jobs

    def urgent(self, limit: int) -> Sequence[Job]:
        jobs = self.inner.urgent(limit)
        self.calls.append(("urgent", limit, len(jobs)))
        return jobs

    @property
    def items_read(self) -> int:
        return sum(n for _, _, n in self.calls)


@pytest.mark.parametrize(
    ("count", "deadlines", "window", "examined"),
    [
        (10, 0, 8, 10),
        (100, 0, 8, 32),
        (100, 20, 8, 40),
        (10_000, 500, 8, 40),
        (10_000, 500, 64, 320),
        (400, 400, 64, 256),
    ],
    ids=[
        "small-queue-read-whole",
        "head-of-each-class",
        "plus-nearest-deadlines",
        "ten-thousand-jobs",
        "default-window",
        "urgent-index-overlaps-heads",
    ],
)
def test_plan_reads_a_bounded_window(count: int, deadlines: int, window: int, examined: int) -> None:
    queue = CountingQueue(SortedQueue.of(big_queue(count, deadlines=deadlines)))
    snapshot = cluster([pool("od", capacity=64)])
    decisions, stats = plan_with_stats(
        snapshot, queue, NOW, config(), random.Random(0), window_per_class=window
    )
    assert stats.candidates_examined == examined
    assert len(decisions) == examined
    assert len({d.job.id for d in decisions}) == examined
    assert queue.items_read <= 4 * window + window
    assert sorted(name for name, _, _ in queue.calls) == [
        "head:critical",
        "head:high",
        "head:low",
        "head:normal",
        "urgent",
    ]
    assert {limit for _, limit, _ in queue.calls} == {window}
    # 64 GPUs: the eight best-ranked jobs are admitted, the rest wait.
    assert sum(d.action == "admit" for d in decisions) == min(8, examined)


def test_urgent_deadline_deep_in_its_class_is_seen() -> None:
    regular = [job(f"n{i}").gpus(8).submitted(NOW - 1000 + i).build() for i in range(10)]
    # 1.5 h of work due in 2 h: slack 30 min -> urgency 1 - 1800/21600 -> +1375 effective priority.
    urgent = (
        job("urgent").gpus(8).submitted(NOW).expected_runtime(1.5 * HOUR).deadline(NOW + 2 * HOUR).build()
    )
    queue = SortedQueue.of([*regular, urgent])
    decisions = plan(
        cluster([pool("od", capacity=8)]), queue, NOW, config(), random.Random(0), window_per_class=2
    )
    assert summary(decisions) == [("admit", "urgent", "od"), ("wait", "n0"), ("wait", "n1")]
    # ... and it declared 1.5 h: the shortest-declared term adds 200 x (1 - ln(2.5) / ln(73)).
    shortest = 200 * (1 - math.log1p(1.5) / math.log1p(72))
    # The normal class's step is the within-class span (3,160 with the defaults) plus 1,000.
    assert decisions[0].effective_priority == pytest.approx(4160 + 1375 + 12.5 + 400 + shortest)


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        (PriorityWeights(), ("admit", "n00", "od")),
        # Strict class order: no age weight lifts it over the class above.
        (PriorityWeights(age=2000.0), ("admit", "n00", "od")),
    ],
    ids=["class-step-outweighs-a-day-of-waiting", "strict-class-order-keeps-it-below"],
)
def test_aging_reaches_an_old_low_job_behind_many_fresh_ones(
    weights: PriorityWeights, first: tuple[str, ...]
) -> None:
    fresh = [job(f"n{i:02d}").gpus(8).submitted(NOW - 50 + i).build() for i in range(40)]
    fresh_low = [job(f"l{i:02d}").low().gpus(8).submitted(NOW - 20 + i).build() for i in range(10)]
    old = job("old").low().gpus(8).submitted(NOW - DAY).build()
    queue = SortedQueue.of([*fresh, *fresh_low, old])
    decisions = plan(
        cluster([pool("od", capacity=8)]),
        queue,
        NOW,
        config(weights=weights),
        random.Random(0),
        window_per_class=4,
    )
    assert summary(decisions)[0] == first
    low_ids = [d.job.id for d in decisions if d.job.priority is Priority.LOW]
    assert low_ids == ["old", "l00", "l01", "l02"]


def test_same_seed_same_decisions_with_random_victims() -> None:
    snapshot = cluster([pool("od", capacity=64)], [low_on(f"v{i:02d}", 4) for i in range(16)])
    pending = [
        job(f"c{i}").critical().gpus(gpus).submitted(NOW - i).build() for i, gpus in enumerate((4, 8, 8))
    ]
    policy = config(strategy="random")
    runs = [summary(run_plan(snapshot, pending, policy, seed=seed)) for seed in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert [r[0] for r in runs[0]] == ["preempt", "preempt", "preempt"]
    victims = [v for r in runs[0] for v in r[3:]]
    assert len(victims) == len(set(victims)) == 1 + 2 + 2


# --- the in-memory queue ------------------------------------------------------------------


def test_sorted_queue_orders_adds_and_removes() -> None:
    a = job("a").submitted(NOW - 10).build()
    b = job("b").submitted(NOW - 20).deadline(NOW + 2 * HOUR).build()
    c = job("c").submitted(NOW - 20).deadline(NOW + HOUR).build()
    h = job("h").high().build()
    queue = SortedQueue.of([a, h])
    queue.add(c)
    queue.add(b)
    assert len(queue) == 4
    assert [j.id for j in queue.head(Priority.NORMAL, 10)] == ["b", "c", "a"]
    assert [j.id for j in queue.head(Priority.NORMAL, 2)] == ["b", "c"]
    assert [j.id for j in queue.urgent(10)] == ["c", "b"]
    assert [j.id for j in queue.head(Priority.HIGH, 10)] == ["h"]
    queue.remove(c)
    assert [j.id for j in queue.head(Priority.NORMAL, 10)] == ["b", "a"]
    assert [j.id for j in queue.urgent(10)] == ["b"]
    with pytest.raises(KeyError):
        queue.remove(c)
    # (The count is kept as jobs come and go, a failed removal included.)
    assert len(queue) == 3 == sum(len(queue.head(p, 10)) for p in Priority)
    queue.remove(h)
    assert len(queue) == 2


@pytest.mark.parametrize(
    ("preemptor", "stop_at_once_for", "checkpoint"),
    [
        ("critical", None, False),  # the default: a critical preemptor stops its victims at once
        ("high", None, True),
        ("critical", frozenset(), True),
        ("high", frozenset({Priority.HIGH}), False),
    ],
)
def test_a_preemptor_in_stop_at_once_for_does_not_wait_for_a_checkpoint(
    preemptor: str, stop_at_once_for: frozenset[Priority] | None, checkpoint: bool
) -> None:
    policy = config() if stop_at_once_for is None else config(stop_at_once_for=stop_at_once_for)
    snapshot = cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)])
    [decision] = run_plan(snapshot, [job("p").priority(preemptor).gpus(8).build()], policy)
    assert decision.action == "preempt"
    assert decision.checkpoint is checkpoint  # type: ignore[union-attr]
    assert (f"; stopped at once for a {preemptor} job" in decision.reason) is not checkpoint


@pytest.mark.parametrize(
    ("preemptor", "waited_s", "action"),
    [
        ("high", 0.0, "wait"),  # a fresh high job does not preempt yet
        ("high", 179.0, "wait"),
        ("high", 180.0, "preempt"),  # once it has waited the delay, it does
        ("critical", 0.0, "preempt"),  # a class in stop_at_once_for never waits for it
    ],
)
def test_a_job_preempts_only_after_waiting_the_preemption_delay(
    preemptor: str, waited_s: float, action: str
) -> None:
    policy = config(preemption_delay_s=180.0)
    snapshot = cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)])
    pending = job("p").priority(preemptor).gpus(8).spot("never").submitted(NOW - waited_s).build()
    [decision] = run_plan(snapshot, [pending], policy)
    assert decision.action == action
    if action == "wait":
        assert decision.reason.endswith("it may preempt after waiting 180 s in the queue")


@pytest.mark.parametrize(
    ("stop_at_once", "preemptor", "waited_s", "action", "checkpoint"),
    [
        # A critical preemptor that checkpoints its victims waits the delay like any class...
        (frozenset(), "critical", 0.0, "wait", None),
        (frozenset(), "critical", 180.0, "preempt", True),
        # ... one of a class that stops at once does not (the default for critical).
        (frozenset({Priority.CRITICAL}), "critical", 0.0, "preempt", False),
        # The waiver is per class: a high job still waits it.
        (frozenset({Priority.CRITICAL}), "high", 0.0, "wait", None),
    ],
)
def test_a_class_that_stops_at_once_preempts_without_the_delay(
    stop_at_once: frozenset[Priority], preemptor: str, waited_s: float, action: str, checkpoint: bool | None
) -> None:
    policy = config(preemption_delay_s=180.0, stop_at_once_for=stop_at_once)
    snapshot = cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)])
    pending = job("p").priority(preemptor).gpus(8).spot("never").submitted(NOW - waited_s).build()
    [decision] = run_plan(snapshot, [pending], policy)
    assert decision.action == action
    if checkpoint is not None:
        assert decision.checkpoint is checkpoint  # type: ignore[union-attr]


def test_jobs_share_the_gpus_a_victim_frees_beyond_its_preemptors_need() -> None:
    # Two 8-GPU low jobs fill the pool; nine 1-GPU high jobs wait. The first preempts one victim
    # (8 GPUs for its 1); the next seven claim the 7 spare GPUs and wait for them instead of
    # preempting; the ninth finds no spare GPU left and preempts the second victim.
    snapshot = cluster([OD16], [low_on("v1", 8, checkpoint_s=60), low_on("v2", 8)])
    pending = [job(f"h{i}").high().gpus(1).spot("never").submitted(NOW - 100 + i).build() for i in range(9)]
    decisions = run_plan(snapshot, pending, config())
    assert summary(decisions) == [
        ("preempt", "h0", "od", "v1"),
        *[("wait", f"h{i}") for i in range(1, 8)],
        ("preempt", "h8", "od", "v2"),
    ]
    assert all(
        d.reason == "waiting for 1 GPUs in od that preempted jobs free as they leave" for d in decisions[1:8]
    )


def test_spare_gpus_of_victims_still_leaving_are_claimed_in_the_next_pass() -> None:
    # v1 (8 GPUs) is checkpointing for h0 (1 GPU): 7 GPUs will be spare when it leaves.
    v1 = job("v1").low().gpus(8).team("b").running_since(NOW - DAY).on("od", draining_for="h0")
    snapshot = cluster([OD16], [v1, low_on("v2", 8)])
    pending = [job(f"h{i}").high().gpus(1).spot("never").submitted(NOW - 100 + i).build() for i in range(3)]
    decisions = run_plan(snapshot, pending, config())
    assert summary(decisions) == [("wait", "h0"), ("wait", "h1"), ("wait", "h2")]
    assert decisions[0].reason == "waiting for 1 preempted job(s) to checkpoint and leave"
    assert (
        decisions[1].reason
        == decisions[2].reason
        == ("waiting for 1 GPUs in od that preempted jobs free as they leave")
    )


def test_a_job_past_one_waiting_for_its_delay_still_reclaims() -> None:
    # Given a full pool where team b borrows with two low jobs that scored high when they started
    snapshot = cluster(
        [OD16],
        [
            job("b1").low().gpus(8).team("b").submitted(NOW - DAY).running_since(NOW - 60).on("od"),
            job("b2").low().gpus(8).team("b").submitted(NOW - DAY).running_since(NOW - 60).on("od"),
        ],
        [quota("a", 8), quota("b", 8)],
    )
    pending = [
        job("h").high().gpus(8).team("a").build(),  # has not waited the preemption delay yet
        # not enough above b's jobs to preempt them by priority, but team a may reclaim from b
        job("a1").gpus(8).team("a").submitted(NOW - 2 * HOUR).build(),
        job("l").low().gpus(8).team("b").build(),  # nothing left for it once a1 has reclaimed
    ]
    policy = config(preemption_delay_s=60.0)

    # Then the pass goes on past h's wait and makes the reclaim
    assert summary(run_plan(snapshot, pending, policy)) == [
        ("wait", "h"),
        ("preempt", "a1", "od", "b1"),
        ("wait", "l"),
    ]


def test_a_running_index_refuses_two_allocations_of_a_job() -> None:
    held = job("r1").gpus(8).on("od")
    with pytest.raises(ValueError, match=r"job r1 holds two allocations \(od, spot\)"):
        RunningIndex.of([held, held.model_copy(update={"pool": "spot"})])


def test_a_running_index_keeps_the_elastic_and_the_dated_allocations_in_order() -> None:
    plain = job("r1").gpus(8).on("od")
    grown = job("r2").gpus(4).elastic(2, 8).on("spot")
    dated = job("r3").gpus(2).deadline(DAY).on("od")
    other = job("r4").gpus(2).elastic(1, 4).on("spot")
    index = RunningIndex.of([plain, grown, dated, other])
    assert index.elastic == {"spot": [grown, other]}
    assert index.dated == [dated]
