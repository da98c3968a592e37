"""Effective priority, factor by factor (each case isolates one weight), and fair-share."""

from __future__ import annotations

import pytest

from spotline.domain import Job, PriorityWeights, TeamQuota, effective_priority, fairshare_factor

from .builders import DAY, HOUR, NOW, job, quota

NONE = {"age": 0.0, "deadline": 0.0, "size": 0.0, "fairshare": 0.0, "history": 0.0, "shortest": 0.0}


def only(**weights: float) -> PriorityWeights:
    """Weights where every factor but the given ones counts zero."""
    return PriorityWeights(**{**NONE, **weights})


@pytest.mark.parametrize(
    ("weights", "subject", "remaining", "fairshare", "expected"),
    [
        # aging: linear up to max_age_s, then capped; counted from the last enqueue
        (only(age=900), job("j").submitted(NOW).build(), 0.0, 1.0, 0.0),
        (only(age=900), job("j").submitted(NOW - 12 * HOUR).build(), 0.0, 1.0, 450.0),
        (only(age=900), job("j").submitted(NOW - 3 * DAY).build(), 0.0, 1.0, 900.0),
        (only(age=900), job("j").submitted(NOW - 2 * DAY).enqueued(NOW - 6 * HOUR).build(), 0.0, 1.0, 225.0),
        (
            only(age=900),
            job("j").submitted(NOW - 10 * HOUR).running_since(NOW - 4 * HOUR).build(),
            0.0,
            1.0,
            225.0,
        ),
        # deadline urgency: 1 - slack / 6h, clamped; slack = deadline - now - remaining
        (only(deadline=1500), job("j").build(), HOUR, 1.0, 0.0),
        (only(deadline=1500), job("j").deadline(NOW + 10 * HOUR).build(), HOUR, 1.0, 0.0),
        (only(deadline=1500), job("j").deadline(NOW + 7 * HOUR).build(), HOUR, 1.0, 0.0),
        (only(deadline=1500), job("j").deadline(NOW + 4 * HOUR).build(), HOUR, 1.0, 750.0),
        (only(deadline=1500), job("j").deadline(NOW + 4 * HOUR).build(), 2.5 * HOUR, 1.0, 1125.0),
        (only(deadline=1500), job("j").deadline(NOW + HOUR).build(), 2 * HOUR, 1.0, 1500.0),
        # size: gpus / 64, capped
        (only(size=100), job("j").gpus(8).build(), 0.0, 1.0, 12.5),
        (only(size=100), job("j").gpus(128).nodes(16).build(), 0.0, 1.0, 100.0),
        # fair-share: weight x factor
        (only(fairshare=400), job("j").build(), 0.0, 1.0, 400.0),
        (only(fairshare=400), job("j").build(), 0.0, 0.25, 100.0),
        # history: disruptions suffered / cap, capped
        (only(history=600), job("j").preemptions(1).build(), 0.0, 1.0, 200.0),
        (only(history=600), job("j").preemptions(1).interruptions(1).build(), 0.0, 1.0, 400.0),
        (only(history=600), job("j").preemptions(2).interruptions(4).build(), 0.0, 1.0, 600.0),
        # shortest declared first: 1 - ln(1 + r/1h) / ln(1 + 72), of the declared remaining r
        (only(shortest=900), job("j").build(), 0.0, 1.0, 0.0),
        (
            only(shortest=900),
            job("j").expected_runtime(HOUR).build(),
            0.0,
            1.0,
            900 * (1 - 0.6931472 / 4.2904594),
        ),
        (
            only(shortest=900),
            job("j").expected_runtime(3 * HOUR).runtime(HOUR).running_since(NOW - 0.5 * HOUR).build(),
            0.0,
            1.0,
            900 * (1 - 0.9162907 / 4.2904594),
        ),
        (only(shortest=900), job("j").expected_runtime(HOUR).runtime(2 * HOUR).build(), 0.0, 1.0, 0.0),
        (only(shortest=900), job("j").expected_runtime(100 * HOUR).build(), 0.0, 1.0, 0.0),
        # all factors with the default weights: 450 (12h) + 750 (slack 3h) + 12.5 (8 GPUs) + 200
        # (fs 0.5, x400) + 20 (1 of 3, x60)
        (
            PriorityWeights(),
            job("j").gpus(8).submitted(NOW - 12 * HOUR).deadline(NOW + 4 * HOUR).preemptions(1).build(),
            HOUR,
            0.5,
            1432.5,
        ),
    ],
    ids=[
        "age-fresh",
        "age-half-day",
        "age-capped-at-max-age",
        "age-since-requeue-not-submission",
        "age-frozen-at-start-while-running",
        "deadline-none",
        "deadline-far",
        "deadline-slack-exactly-horizon",
        "deadline-slack-half-horizon",
        "deadline-longer-remaining-is-more-urgent",
        "deadline-already-unreachable",
        "size-eighth",
        "size-capped",
        "fairshare-idle-team",
        "fairshare-heavy-user",
        "history-one-preemption",
        "history-preemption-plus-interruption",
        "history-capped",
        "shortest-nothing-declared",
        "shortest-one-hour-declared",
        "shortest-declared-less-run-so-far",
        "shortest-overran-what-it-declared",
        "shortest-beyond-the-norm",
        "all-factors-default-weights",
    ],
)
def test_effective_priority(
    weights: PriorityWeights, subject: Job, remaining: float, fairshare: float, expected: float
) -> None:
    """`expected`: the job's score above its class term."""
    score = effective_priority(subject, NOW, weights, remaining_s=remaining, fairshare=fairshare)
    assert score - weights.class_term(subject.priority) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("weights", "step"),
    [
        # With no other factor, the classes are CLASS_GAP (1000) apart.
        (only(), 1000.0),
        # With the defaults, the gap plus the sum of the other weights (3160).
        (PriorityWeights(), 4160.0),
    ],
)
def test_each_class_is_one_class_step_above_the_one_below(weights: PriorityWeights, step: float) -> None:
    scores = [
        effective_priority(job("j").priority(cls).build(), NOW, weights, remaining_s=0.0, fairshare=0.0)
        for cls in ("low", "normal", "high", "critical")
    ]
    assert [score - scores[0] for score in scores] == pytest.approx([0.0, step, 2 * step, 3 * step])


def test_fully_aged_job_never_passes_a_fresh_job_of_the_class_above() -> None:
    weights = PriorityWeights()
    old_low = job("old").low().gpus(8).submitted(NOW - 30 * DAY).build()
    fresh_normal = job("new").normal().gpus(8).submitted(NOW).build()
    old = effective_priority(old_low, NOW, weights, remaining_s=HOUR)
    fresh = effective_priority(fresh_normal, NOW, weights, remaining_s=HOUR)
    # 900 (a full day of age) + 12.5 + 400 (fair share, no usage) against 4160 (one class step
    # with strict class order: 1000 + the within-class weights' 3160) + 12.5 + 400
    assert old == pytest.approx(1312.5)
    assert fresh == pytest.approx(4572.5)
    # However large the age weight, the class step grows with it.
    heavy = PriorityWeights(age=10_000.0)
    assert effective_priority(old_low, NOW, heavy, remaining_s=HOUR) < effective_priority(
        fresh_normal, NOW, heavy, remaining_s=HOUR
    )


@pytest.mark.parametrize(
    ("team", "quotas", "usage", "expected"),
    [
        ("a", [quota("a", 8), quota("b", 8)], {}, 1.0),
        ("a", [quota("a", 8), quota("b", 8)], {"a": 0.0, "b": 0.0}, 1.0),
        ("a", [quota("a", 8), quota("b", 8)], {"a": 50.0, "b": 50.0}, 0.5),
        ("a", [quota("a", 8), quota("b", 8)], {"a": 100.0}, 0.25),
        ("b", [quota("a", 8), quota("b", 8)], {"a": 100.0}, 1.0),
        ("a", [quota("a", 8, weight=3), quota("b", 8)], {"a": 75.0, "b": 25.0}, 0.5),
        ("b", [quota("a", 8, weight=3), quota("b", 8)], {"a": 75.0, "b": 25.0}, 0.5),
        ("c", [quota("a", 8)], {"a": 50.0, "c": 50.0}, 0.5),
    ],
    ids=[
        "no-history",
        "zero-usage",
        "exactly-at-share",
        "all-the-usage",
        "idle-team",
        "weighted-heavy-team-at-share",
        "weighted-light-team-at-share",
        "team-without-quota-shares-by-head-count",
    ],
)
def test_fairshare_factor(
    team: str, quotas: list[TeamQuota], usage: dict[str, float], expected: float
) -> None:
    assert fairshare_factor(team, {q.team: q for q in quotas}, usage) == pytest.approx(expected)
