"""Issue 29's rules for a full cluster, each against the behaviour without it (docs/contention.md):
critical victims stopped at once only within their write, strict class order, and victims of the
lowest class first."""

from __future__ import annotations

import random

import pytest

from spotline.domain import Priority, PriorityWeights
from spotline.domain.config import VictimStrategy
from spotline.domain.planner import stops_at_once
from spotline.domain.preemption import ORDERINGS

from .builders import DAY, HOUR, NOW, candidate, cluster, config, job, pool, run_plan, summary

OD16 = pool("od", capacity=16)
CRITICAL_AT_ONCE = frozenset({Priority.CRITICAL})


# --- stop at once only within the write -------------------------------------------------------


@pytest.mark.parametrize(
    ("unsaved_s", "measured_write_s", "within_write", "preemptor", "at_once"),
    [
        # The rule off (the behaviour before): a critical preemptor stops every victim at once.
        (3000.0, None, False, "critical", True),
        # On: a victim with more unsaved work than the write (default 60 s) checkpoints...
        (3000.0, None, True, "critical", False),
        (61.0, None, True, "critical", False),
        # ... one with no more than it is stopped at once (the write would save no more).
        (60.0, None, True, "critical", True),
        (10.0, None, True, "critical", True),
        # The victim's measured write counts, not the default.
        (600.0, 900.0, True, "critical", True),
        (600.0, 300.0, True, "critical", False),
        # A class not in stop_at_once_for checkpoints its victims either way.
        (10.0, None, True, "high", False),
    ],
)
def test_a_critical_preemptor_stops_a_victim_at_once_only_within_its_write(
    unsaved_s: float, measured_write_s: float | None, within_write: bool, preemptor: str, at_once: bool
) -> None:
    policy = config(stop_at_once_for=CRITICAL_AT_ONCE, stop_at_once_within_write=within_write)
    victim = job("v").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - unsaved_s).build()
    if measured_write_s is not None:
        victim = victim.with_changes(checkpoint_write_s=measured_write_s)
    pre = job("p").priority(preemptor).gpus(8).build()
    assert (stops_at_once(pre, [victim], NOW, policy) is not None) is at_once


def test_one_victim_beyond_its_write_makes_the_whole_preemption_checkpoint() -> None:
    policy = config(stop_at_once_for=CRITICAL_AT_ONCE, stop_at_once_within_write=True)
    fresh = job("f").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 10).on("od")
    stale = job("s").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    [decision] = run_plan(
        cluster([OD16], [fresh, stale]), [job("c").critical().gpus(16).nodes(2).build()], policy
    )
    assert summary([decision]) == [("preempt", "c", "od", "f", "s")]
    assert decision.checkpoint is True  # type: ignore[union-attr]
    [alone] = run_plan(cluster([OD16], [fresh, stale]), [job("c").critical().gpus(8).build()], policy)
    assert summary([alone]) == [("preempt", "c", "od", "f")]
    assert alone.checkpoint is False  # type: ignore[union-attr]
    assert alone.reason.endswith("each has no more unsaved work than its checkpoint write")


def test_a_critical_preemptor_whose_victims_checkpoint_does_not_wait_the_delay() -> None:
    policy = config(
        preemption_delay_s=180.0, stop_at_once_for=CRITICAL_AT_ONCE, stop_at_once_within_write=True
    )
    stale = job("s").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    other = job("o").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    [decision] = run_plan(cluster([OD16], [stale, other]), [job("c").critical().gpus(8).build()], policy)
    assert decision.action == "preempt"
    assert decision.checkpoint is True  # type: ignore[union-attr]


# --- strict class order -----------------------------------------------------------------------


def test_the_class_step_covers_every_within_class_term_with_strict_order() -> None:
    weights = PriorityWeights(strict_class_order=True)
    span = weights.age + weights.deadline + weights.size + weights.fairshare + weights.history
    span += weights.attained + weights.shortest
    assert weights.within_class_span == span
    assert weights.class_term(Priority.HIGH) == 2 * (weights.class_step + span)
    loose = PriorityWeights(strict_class_order=False)
    assert loose.class_term(Priority.HIGH) == 2 * loose.class_step


AGED_LOW = job("aged").low().gpus(8).submitted(NOW - DAY)
FRESH_NORMAL = job("fresh").gpus(8).submitted(NOW)


@pytest.mark.parametrize(
    ("strict", "admitted", "waiting"),
    [
        # Without it, a day of waiting (900) and fair-share lift the low job over the fresh normal
        # one, which takes the only free GPUs.
        (False, "aged", "fresh"),
        (True, "fresh", "aged"),
    ],
)
def test_strict_class_order_admits_the_class_above_first(strict: bool, admitted: str, waiting: str) -> None:
    policy = config(weights=PriorityWeights(fairshare=400.0, strict_class_order=strict))
    snapshot = cluster([pool("od", capacity=8)])
    # Team b (the normal job's) used GPU-hours, so its fair-share term is lower than team a's.
    snapshot = snapshot.model_copy(update={"usage_gpu_hours": {"a": 0.0, "b": 100.0}})
    decisions = run_plan(snapshot, [AGED_LOW.team("a").build(), FRESH_NORMAL.team("b").build()], policy)
    assert summary(decisions) == [("admit", admitted, "od"), ("wait", waiting)]


@pytest.mark.parametrize(("strict", "action"), [(False, "preempt"), (True, "wait")])
def test_strict_class_order_keeps_an_urgent_deadline_from_preempting_the_class_above(
    strict: bool, action: str
) -> None:
    # A normal job whose deadline is near (+1,500) outranks a fresh high job by more than the
    # margin unless classes are strict.
    policy = config(weights=PriorityWeights(fairshare=400.0, strict_class_order=strict))
    high = job("h").high().gpus(8).team("b").running_since(NOW - HOUR).on("od")
    urgent = job("n").gpus(8).deadline(NOW + 2 * HOUR).expected_runtime(2 * HOUR).submitted(NOW - DAY).build()
    [decision] = run_plan(cluster([pool("od", capacity=8)], [high]), [urgent], policy)
    assert decision.action == action


# --- victims of the lowest class first ------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "order"),
    [
        # Least lost work alone picks the normal job (2 GPUs x 220 s) before the low ones...
        (VictimStrategy.LEAST_LOST_WORK, ["n", "l1", "l2"]),
        # ... lowest class first takes the low jobs first, least lost work among them.
        (VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK, ["l1", "l2", "n"]),
    ],
)
def test_victims_of_the_lowest_class_first(strategy: VictimStrategy, order: list[str]) -> None:
    def running(job_id: str, cls: str, gpus: int, unsaved_s: float) -> object:
        built = job(job_id).priority(cls).gpus(gpus).running_since(NOW - DAY).checkpointed(NOW - unsaved_s)
        return candidate(built.on("p"), priority=Priority(cls).rank * 1000.0)

    candidates = [
        running("n", "normal", 2, 100.0),
        running("l2", "low", 8, 900.0),
        running("l1", "low", 4, 900.0),
    ]
    ordered = ORDERINGS[strategy](candidates, random.Random(0))  # type: ignore[arg-type]
    assert [c.job_id for c in ordered] == order


def test_the_planner_preempts_the_low_job_with_lowest_class_first() -> None:
    normal = job("n").gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 10).on("od")
    low = job("l").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    pending = [job("c").critical().gpus(8).build()]
    by_work = run_plan(cluster([OD16], [normal, low]), pending, config())
    by_class = run_plan(
        cluster([OD16], [normal, low]), pending, config(strategy=VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK)
    )
    assert summary(by_work) == [("preempt", "c", "od", "n")]
    assert summary(by_class) == [("preempt", "c", "od", "l")]


@pytest.mark.parametrize(
    ("strategy", "victim"),
    [
        # A 1-GPU critical job: least lost work stops the 8-GPU job that checkpointed a minute ago
        # (8 x 180 s, against 1 x 3,720 s)...
        (VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK, "big"),
        # ... though both checkpoint, and then the big one wastes 8 x (60 s write + 120 s restart)
        # against the small one's 1 x 180 s: least cost stops the small one.
        (VictimStrategy.LOWEST_CLASS_LEAST_COST, "small"),
    ],
)
def test_least_cost_stops_a_victim_no_larger_than_needed(strategy: VictimStrategy, victim: str) -> None:
    big = job("big").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 60).on("od")
    small = job("small").low().gpus(1).team("b").running_since(NOW - DAY).checkpointed(NOW - HOUR).on("od")
    filler = job("f").low().gpus(7).team("b").running_since(NOW - HOUR).checkpointed(NOW - 1800).on("od")
    policy = config(strategy=strategy, stop_at_once_within_write=True)
    [decision] = run_plan(
        cluster([OD16], [big, small, filler]), [job("c").critical().gpus(1).build()], policy
    )
    assert summary([decision]) == [("preempt", "c", "od", victim)]


# --- lower classes do not preempt below a blocked class -------------------------------------


@pytest.mark.parametrize(
    ("rule", "decisions"),
    [
        # Without it, the high gang finds no victim (the low jobs are in their protection period)
        # and the normal job behind it preempts the one old low job anyway.
        (False, [("wait", "gang"), ("preempt", "n", "od", "old")]),
        # With it, the normal job waits: the next GPUs to free go to the high class first.
        (True, [("wait", "gang"), ("wait", "n")]),
    ],
)
def test_lower_classes_do_not_preempt_below_a_blocked_class(
    rule: bool, decisions: list[tuple[str, ...]]
) -> None:
    policy = config(
        protection_period_s=600.0, preempt_below_blocked_class=rule, preempt_lower_class_only=True
    )
    fresh = [job(f"f{i}").low().gpus(4).team("b").running_since(NOW - 60).on("od") for i in range(3)]
    old = job("old").low().gpus(4).team("b").running_since(NOW - DAY).on("od")
    gang = job("gang").high().gpus(16).nodes(2).submitted(NOW - 10).build()
    normal = job("n").gpus(4).submitted(NOW - 5).build()
    got = run_plan(cluster([OD16], [*fresh, old]), [gang, normal], policy)
    assert summary(got) == decisions
    if rule:
        assert got[1].reason.endswith(
            "a high job found nothing to preempt in this pass, so lower classes do not preempt"
        )
