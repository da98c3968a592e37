"""Victim selection: the eligibility predicate, each strategy's order, greedy + reverse pass."""

from __future__ import annotations

import random
from typing import Any

import pytest

from spotline.domain import (
    Allocation,
    Candidate,
    ClusterSnapshot,
    Job,
    Ledger,
    ReclaimPolicy,
    SchedulerConfig,
    TeamQuota,
    VictimStrategy,
    select_victims,
)
from spotline.domain.preemption import (
    MAX_PREEMPTIONS_PER_JOB,
    NOT_LOWER,
    eligibility,
    estimated_remaining_s,
    lost_work_gpu_s,
    order_victims,
)

from .builders import NOW, candidate, cluster, config, job, pool, quota

P = pool("p", capacity=16, per_node=8)
PREEMPTOR = job("pre").critical().gpus(8).team("a").build()
POLICY = config(protection_period_s=600.0)
CAP = MAX_PREEMPTIONS_PER_JOB


def check(
    cand: Candidate,
    *,
    preemptor: Job = PREEMPTOR,
    quotas: tuple[TeamQuota, ...] = (),
    others: tuple[Allocation, ...] = (),
    policy: SchedulerConfig = POLICY,
) -> str | None:
    snapshot = cluster([P, pool("q", capacity=64)], (cand.allocation, *others), quotas)
    ledger = Ledger.of(snapshot)
    return eligibility(cand, preemptor, NOW, policy, ledger.team_used, ledger)


LOW = job("v").low().gpus(8).team("b")
B_OVER = (job("b-more").team("b").gpus(8).on("q"),)  # puts team b at 16 with 8 in p: borrowing 8


@pytest.mark.parametrize(
    ("cand", "kwargs", "reason"),
    [
        (candidate(LOW.on("p"), priority=0.0), {}, None),
        (candidate(LOW.critical().on("p"), priority=0.0), {}, NOT_LOWER),
        (candidate(LOW.running_since(NOW - 100).on("p"), priority=0.0), {}, "inside its protection period"),
        (candidate(LOW.running_since(NOW - 600).on("p"), priority=0.0), {}, None),
        (candidate(LOW.preemptions(CAP).on("p"), priority=0.0), {}, "reached the preemption cap"),
        (candidate(LOW.preemptions(CAP - 1).on("p"), priority=0.0), {}, None),
        (candidate(LOW.on("p", draining_for="other"), priority=0.0), {}, "already leaving"),
        (candidate(job("pre").on("p"), priority=0.0), {}, "already leaving"),
        # reclaim: b is over its nominal 8, a is within its nominal -> with policy `any` even a
        # higher class may go; by default (Kueue's LowerPriority) only a lower class; with
        # same-or-lower-priority also the preemptor's class; `never` nothing.
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 16), quota("b", 8)),
                "others": B_OVER,
                "policy": config(reclaim_within_cohort=ReclaimPolicy.ANY),
                "preemptor": job("pre").normal().gpus(8).team("a").build(),
            },
            None,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 16), quota("b", 8)),
                "others": B_OVER,
                "preemptor": job("pre").normal().gpus(8).team("a").build(),
            },
            NOT_LOWER,
        ),
        (
            candidate(LOW.normal().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 16), quota("b", 8)),
                "others": B_OVER,
                "policy": config(reclaim_within_cohort=ReclaimPolicy.SAME_OR_LOWER_PRIORITY),
                "preemptor": job("pre").normal().gpus(8).team("a").build(),
            },
            None,
        ),
        (
            candidate(LOW.normal().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 16), quota("b", 8)),
                "others": B_OVER,
                "policy": config(reclaim_within_cohort=ReclaimPolicy.LOWER_PRIORITY),
                "preemptor": job("pre").normal().gpus(8).team("a").build(),
            },
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 16), quota("b", 8)),
                "others": B_OVER,
                "policy": config(reclaim_within_cohort=ReclaimPolicy.NEVER),
            },
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {"quotas": (quota("a", 16), quota("b", 16)), "others": B_OVER},
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {"quotas": (quota("a", 4), quota("b", 8)), "others": B_OVER},
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().team("a").on("p"), priority=3500.0),
            {"quotas": (quota("a", 16),), "others": (job("a-more").team("a").gpus(16).on("q"),)},
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {
                "quotas": (quota("a", 12), quota("b", 8)),
                "others": B_OVER,
                "preemptor": job("pre").critical().gpus(8).nodes(2).team("a").build(),
            },
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().on("p"), priority=3500.0),
            {"quotas": (quota("b", 8),), "others": B_OVER},
            NOT_LOWER,
        ),
        (
            candidate(LOW.critical().running_since(NOW - 10).on("p"), priority=3500.0),
            {"quotas": (quota("a", 16), quota("b", 8)), "others": B_OVER},
            "inside its protection period",
        ),
    ],
    ids=[
        "lower-class",
        "same-class",
        "inside-protection-period",
        "protection-period-just-over",
        "at-preemption-cap",
        "below-preemption-cap",
        "already-draining-for-another",
        "the-preemptor-itself",
        "reclaim-borrowed-capacity-any-class",
        "no-reclaim-of-a-higher-class-by-default",
        "reclaim-same-class-under-same-or-lower",
        "no-reclaim-same-class-under-lower-priority",
        "no-reclaim-under-never",
        "no-reclaim-when-lender-within-nominal",
        "no-reclaim-when-preemptor-would-exceed-nominal",
        "no-reclaim-from-own-team",
        "no-reclaim-when-gang-whole-nodes-exceed-nominal",
        "no-reclaim-for-team-without-quota",
        "reclaim-still-respects-protection",
    ],
)
def test_eligibility(cand: Candidate, kwargs: dict[str, Any], reason: str | None) -> None:
    assert check(cand, **kwargs) == reason


@pytest.mark.parametrize(
    ("victim", "preemptor", "reason"),
    [
        # Never its own class, never a class above, however the two rank; a lower class always.
        ("critical", "critical", NOT_LOWER),
        ("critical", "high", NOT_LOWER),
        ("high", "critical", None),
        ("low", "normal", None),
        ("normal", "normal", NOT_LOWER),
    ],
)
def test_preemption_rights_by_class(victim: str, preemptor: str, reason: str | None) -> None:
    cand = candidate(job("v").priority(victim).gpus(8).team("b").on("p"), priority=0.0)
    pre = job("pre").priority(preemptor).gpus(8).team("a").build()
    assert check(cand, preemptor=pre) == reason


def test_the_class_rule_leaves_the_quota_reclaim_alone() -> None:
    # Team b borrows; a, within its nominal, reclaims from b's job of its own class (as
    # same-or-lower-priority allows).
    policy = POLICY.model_copy(update={"reclaim_within_cohort": ReclaimPolicy.SAME_OR_LOWER_PRIORITY})
    cand = candidate(LOW.normal().on("p"), priority=3500.0)
    pre = job("pre").normal().gpus(8).team("a").build()
    kwargs: dict[str, Any] = {"quotas": (quota("a", 16), quota("b", 8)), "others": B_OVER}
    assert check(cand, preemptor=pre, policy=policy, **kwargs) is None


# --- ordering ---------------------------------------------------------------------------


def c(job_id: str, **knobs: float) -> Candidate:
    """A candidate with explicit ordering inputs: priority, remaining, utilization,
    running_s (since its start) and checkpoint_s (since its last checkpoint)."""
    builder = job(job_id).low().gpus(int(knobs.get("gpus", 4)))
    builder = builder.running_since(NOW - knobs.get("running_s", 3600.0))
    if "checkpoint_s" in knobs:
        builder = builder.checkpointed(NOW - knobs["checkpoint_s"])
    if "utilization" in knobs:
        builder = builder.utilization(knobs["utilization"])
    return candidate(
        builder.on("p"), priority=knobs.get("priority", 0.0), remaining=knobs.get("remaining", 0.0)
    )


@pytest.mark.parametrize(
    ("strategy", "candidates", "order"),
    [
        # lost work = gpus x (unsaved + 120 s restart): x 8x1120, y 4x220, z 4x620, w 4x220 (lower prio)
        (
            VictimStrategy.LEAST_LOST_WORK,
            [
                c("x", gpus=8, running_s=1000),
                c("y", running_s=3000, checkpoint_s=100, priority=50),
                c("z", running_s=500),
                c("w", running_s=9000, checkpoint_s=100, priority=10),
            ],
            ["w", "y", "z", "x"],
        ),
        (
            VictimStrategy.LEAST_LOST_WORK,
            [c("b", running_s=100), c("a", running_s=100), c("c", gpus=1, running_s=300)],
            ["c", "a", "b"],
        ),
        (
            VictimStrategy.LEAST_REMAINING_TIME,
            [
                c("a", remaining=100),
                c("b", remaining=50, priority=20),
                c("d", remaining=50, priority=10),
                c("c", remaining=50, priority=10),
            ],
            ["c", "d", "b", "a"],
        ),
        (
            VictimStrategy.LOWEST_UTILIZATION,
            [
                c("u", utilization=0.2, priority=20),
                c("v", utilization=0.9),
                c("w"),
                c("x", utilization=0.2, priority=10),
                c("y", utilization=1.0),
            ],
            ["x", "u", "v", "w", "y"],
        ),
        (
            VictimStrategy.RANDOM,
            [c("a"), c("b"), c("c"), c("d"), c("e")],
            ["e", "a", "d", "b", "c"],
        ),
    ],
    ids=[
        "least-lost-work-then-priority",
        "least-lost-work-tie-break-by-id",
        "least-remaining-time-then-priority-then-id",
        "lowest-utilization-unreported-counts-as-full",
        "random-seeded",
    ],
)
def test_ordering(strategy: VictimStrategy, candidates: list[Candidate], order: list[str]) -> None:
    ordered = order_victims(candidates, strategy, random.Random(7))
    assert [x.job_id for x in ordered] == order
    # The order does not depend on the order the candidates came in.
    again = order_victims(list(reversed(candidates)), strategy, random.Random(7))
    assert [x.job_id for x in again] == order


def test_random_order_depends_on_seed_only() -> None:
    candidates = [c(name) for name in "abcdefgh"]
    orders = {
        tuple(x.job_id for x in order_victims(candidates, VictimStrategy.RANDOM, random.Random(s)))
        for s in range(8)
    }
    assert len(orders) > 1
    assert all(sorted(o) == list("abcdefgh") for o in orders)


# --- select_victims: greedy, then the reverse pass ----------------------------------------


def setting(
    allocations: list[Allocation], quotas: tuple[TeamQuota, ...] = ()
) -> tuple[ClusterSnapshot, Ledger]:
    snapshot = cluster([P, pool("g", capacity=32, per_node=8), pool("q", capacity=64)], allocations, quotas)
    return snapshot, Ledger.of(snapshot)


def lrt(job_id: str, gpus: int, remaining: float, pool_name: str = "p", team: str = "b") -> Candidate:
    """A low job for the least-remaining-time strategy (its order is the `remaining` given)."""
    alloc = job(job_id).low().team(team).gpus(gpus).on(pool_name)
    return candidate(alloc, priority=0.0, remaining=remaining)


@pytest.mark.parametrize(
    ("candidates", "preemptor", "pool_name", "quotas", "victims"),
    [
        (
            [lrt("s1", 2, 10), lrt("s2", 2, 20), lrt("big", 8, 30), lrt("mid", 4, 40)],
            job("pre").critical().gpus(8).build(),
            "p",
            (),
            ["big"],
        ),
        (
            [lrt("s1", 2, 10), lrt("s2", 2, 20), lrt("big", 8, 30), lrt("mid", 4, 40)],
            job("pre").critical().gpus(8).nodes(1).build(),
            "p",
            (),
            ["big"],
        ),
        (
            [lrt("s1", 4, 10), lrt("s2", 4, 20), lrt("big", 8, 30)],
            job("pre").critical().gpus(4).build(),
            "p",
            (),
            ["s1"],
        ),
        (
            [lrt("s1", 2, 10), lrt("s2", 2, 20), lrt("big", 8, 30), lrt("mid", 4, 40)],
            job("pre").critical().gpus(12).nodes(2).build(),
            "p",
            (),
            ["s1", "s2", "big", "mid"],
        ),
        (
            [lrt("s1", 2, 10), lrt("big", 8, 30), lrt("mid", 4, 40)],
            job("pre").critical().gpus(10).nodes(2).build(),
            "p",
            (),
            ["s1", "big", "mid"],
        ),
        (
            [lrt(f"g{i}", 8, 10 * i, "g") for i in range(4)],
            job("pre").critical().gpus(8).nodes(2).build(),
            "g",
            (),
            ["g0", "g1"],
        ),
        (
            [lrt("s1", 2, 10), lrt("s2", 2, 20), lrt("big", 8, 30)],
            job("pre").critical().gpus(8).build(),
            "p",
            (),
            ["s1", "s2"],
        ),
        (
            [lrt("a1", 4, 10, team="a"), lrt("b1", 4, 20), lrt("b2", 4, 30), lrt("b3", 4, 40)],
            job("pre").critical().gpus(4).team("a").build(),
            "p",
            (quota("a", 4, borrow=0), quota("b", 12)),
            ["a1"],
        ),
        (
            [lrt("x1", 4, 10, "q"), lrt("s1", 4, 20), lrt("s2", 4, 30), lrt("s3", 8, 40)],
            job("pre").critical().gpus(4).build(),
            "p",
            (),
            ["s1"],
        ),
    ],
    ids=[
        "greedy-then-reverse-pass-puts-back-small-victims",
        "same-with-explicit-single-node",
        "first-victim-suffices",
        "everything-needed",
        "reverse-pass-keeps-what-is-needed",
        "gang-takes-whole-nodes",
        "free-gpus-count-so-small-victims-suffice",
        "quota-bound-preemptor-preempts-its-own-team",
        "only-victims-in-the-pool",
    ],
)
def test_select_victims(
    candidates: list[Candidate],
    preemptor: Job,
    pool_name: str,
    quotas: tuple[TeamQuota, ...],
    victims: list[str],
) -> None:
    snapshot, ledger = setting([x.allocation for x in candidates], quotas)
    before = (dict(ledger.pool_used), dict(ledger.team_used))
    chosen = select_victims(
        preemptor,
        snapshot.pools[pool_name],
        candidates,
        ledger,
        NOW,
        config(),
        random.Random(0),
        strategy=VictimStrategy.LEAST_REMAINING_TIME,
    )
    assert chosen is not None
    assert [v.job_id for v in chosen] == victims
    assert (ledger.pool_used, ledger.team_used) == before


@pytest.mark.parametrize(
    ("candidates", "preemptor", "quotas", "expected"),
    [
        ([lrt("s1", 4, 10)], job("pre").critical().gpus(8).build(), (), []),
        ([lrt("s1", 8, 10), lrt("s2", 8, 20)], job("pre").critical().gpus(16).nodes(4).build(), (), None),
        ([lrt("s1", 8, 10), lrt("s2", 4, 20)], job("pre").critical().gpus(8).build(), (), ["s2"]),
        (
            [lrt("s1", 8, 10).allocation.model_copy(update={"draining_for": "x"}), lrt("s2", 8, 20)],
            job("pre").critical().gpus(16).nodes(2).build(),
            (),
            None,
        ),
        ([lrt("s1", 16, 10)], job("pre").critical().gpus(32).nodes(4).build(), (), None),
        (
            [lrt("s1", 8, 10), lrt("s2", 8, 20)],
            job("pre").critical().gpus(8).gpu_type("h100").build(),
            (),
            None,
        ),
        # reclaim: b (nominal 8) borrows 8 in p; a's preemptor (nominal 16) may reclaim them, but
        # only down to b's nominal quota, not below.
        (
            [candidate(job(f"b{i}").normal().team("b").gpus(4).on("p"), priority=3500.0) for i in range(4)],
            job("pre").high().gpus(8).team("a").build(),
            (quota("a", 16), quota("b", 8)),
            ["b0", "b1"],
        ),
        (
            [candidate(job(f"b{i}").critical().team("b").gpus(4).on("p"), priority=3500.0) for i in range(4)],
            job("pre").high().gpus(16).nodes(2).team("a").build(),
            (quota("a", 16), quota("b", 8)),
            None,
        ),
    ],
    ids=[
        "fits-already",
        "not-enough-to-free",
        "default-strategy-least-lost-work-4-gpus-before-8",
        "draining-victim-does-not-count",
        "preemptor-larger-than-pool",
        "pool-of-another-gpu-type",
        "reclaim-borrowed-only",
        "reclaim-never-below-nominal",
    ],
)
def test_select_victims_edges(
    candidates: list[Candidate | Allocation],
    preemptor: Job,
    quotas: tuple[TeamQuota, ...],
    expected: list[str] | None,
) -> None:
    cands = [x if isinstance(x, Candidate) else candidate(x, priority=0.0) for x in candidates]
    snapshot, ledger = setting([x.allocation for x in cands], quotas)
    chosen = select_victims(preemptor, snapshot.pools["p"], cands, ledger, NOW, config(), random.Random(0))
    assert (None if chosen is None else [v.job_id for v in chosen]) == expected


def test_a_candidate_computes_its_remaining_time_and_lost_work_when_first_read() -> None:
    held = (
        job("r")
        .gpus(8)
        .expected_runtime(4 * 3600.0)
        .running_since(NOW - 3600.0)
        .checkpointed(NOW - 600.0)
        .on("p")
    )
    lazy = Candidate(held, 100.0, at=(NOW, POLICY))
    assert lazy.remaining_s == estimated_remaining_s(held.job, NOW, POLICY) == 3 * 3600.0
    assert (
        lazy.lost_work_gpu_s
        == lost_work_gpu_s(held.job, 8, NOW, POLICY)
        == 8 * (600.0 + POLICY.restart_cost_s)
    )
    given = Candidate(held, 100.0, remaining_s=5.0, lost_work_gpu_s=7.0)
    assert (given.remaining_s, given.lost_work_gpu_s) == (5.0, 7.0)
    with pytest.raises(ValueError, match="remaining_s and lost_work_gpu_s, or at"):
        Candidate(held, 100.0, remaining_s=5.0)
