"""Issue 29's rules for a full cluster, each against the behaviour without it (design-notes/contention.md):
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


# --- preemption for the head of each class only ---------------------------------------------


@pytest.mark.parametrize(
    ("head_only", "decisions"),
    [
        # Without it, every normal job of the window preempts a low job of its own.
        (frozenset(), [("preempt", "n1", "od", "l1"), ("preempt", "n2", "od", "l2")]),
        # With it, the first normal job that neither starts nor claims spare GPUs is the class's
        # head: it preempts, and the one behind it waits for the GPUs that free up next.
        (frozenset({Priority.NORMAL}), [("preempt", "n1", "od", "l1"), ("wait", "n2")]),
        # The rule is per class: a class not in it preempts as before.
        (frozenset({Priority.HIGH}), [("preempt", "n1", "od", "l1"), ("preempt", "n2", "od", "l2")]),
    ],
)
def test_only_the_head_of_a_class_preempts(
    head_only: frozenset[Priority], decisions: list[tuple[str, ...]]
) -> None:
    policy = config(preempt_for_class_head_only=head_only, preempt_lower_class_only=True)
    lows = [
        job(f"l{i}").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 60 * i).on("od")
        for i in (1, 2)
    ]
    pending = [job("n1").gpus(8).submitted(NOW - 20).build(), job("n2").gpus(8).submitted(NOW - 10).build()]
    got = run_plan(cluster([OD16], lows), pending, policy)
    assert summary(got) == decisions
    if head_only == {Priority.NORMAL}:
        assert got[1].reason.endswith("n1 is the head of its class in this pass, and only the head preempts")


def test_a_job_behind_the_head_still_starts_where_it_fits() -> None:
    # The rule holds back preemption only: a job that fits free GPUs starts.
    policy = config(preempt_for_class_head_only=frozenset({Priority.NORMAL}), preempt_lower_class_only=True)
    lows = [job(f"l{i}").low().gpus(8).team("b").running_since(NOW - DAY).on("od") for i in (1, 2)]
    pending = [job("big").gpus(16).nodes(2).submitted(NOW - 20).build(), job("small").gpus(4).build()]
    # 12 GPUs free of 28: the gang preempts one low job and takes 8 of the free ones; 4 are left.
    got = run_plan(cluster([pool("od", capacity=28)], lows), pending, policy)
    assert summary(got) == [("preempt", "big", "od", "l1"), ("admit", "small", "od")]


# --- freed GPUs held for the top blocked gang ----------------------------------------------


@pytest.mark.parametrize(
    ("hold", "decisions"),
    [
        # Without it, the small normal job takes the 8 free GPUs the blocked gang needs half of.
        (False, [("wait", "gang"), ("admit", "small", "od")]),
        # With it, the free GPUs are held for the gang, and the small job waits.
        (True, [("wait", "gang"), ("wait", "small")]),
    ],
)
def test_free_gpus_are_held_for_the_top_blocked_gang(hold: bool, decisions: list[tuple[str, ...]]) -> None:
    policy = config(hold_for_blocked_gang=hold, protection_period_s=600.0, preempt_lower_class_only=True)
    # The low job holding the other 8 GPUs started a minute ago: inside its protection period.
    fresh = job("f").low().gpus(8).team("b").running_since(NOW - 60).on("od")
    gang = job("gang").high().gpus(16).nodes(2).submitted(NOW - 10).build()
    small = job("small").gpus(4).submitted(NOW - 5).build()
    got = run_plan(cluster([OD16], [fresh]), [gang, small], policy)
    assert summary(got) == decisions
    if hold:
        assert got[1].reason.endswith("the free GPUs of od are held for the blocked multi-node job gang")


def test_only_the_first_blocked_gang_holds_and_the_rest_of_the_pool_stays_free() -> None:
    # 8 GPUs free in a 32-GPU pool: the first gang holds all 8 (it needs 16); the second gang
    # holds nothing more, and a job that fits elsewhere (the other pool) still starts there.
    policy = config(hold_for_blocked_gang=True, protection_period_s=600.0, preempt_lower_class_only=True)
    fresh = [job(f"f{i}").low().gpus(8).team("b").running_since(NOW - 60).on("od") for i in range(3)]
    other = pool("od2", capacity=8)
    pending = [
        job("g1").high().gpus(16).nodes(2).submitted(NOW - 20).build(),
        job("g2").high().gpus(16).nodes(2).submitted(NOW - 10).build(),
        job("small").gpus(8).submitted(NOW - 5).build(),
    ]
    got = run_plan(cluster([pool("od", capacity=32), other], fresh), pending, policy)
    assert summary(got) == [("wait", "g1"), ("wait", "g2"), ("admit", "small", "od2")]


# --- no protection for jobs that went ahead of a blocked gang or critical job ---------------


@pytest.mark.parametrize(
    ("protect", "preemptor", "decision"),
    [
        # With the protection period shielding it, the small low job that started after the
        # critical job was queued (a minute ago, inside its 600 s) cannot be stopped: the critical
        # job stops the normal job instead (lowest class first would have taken the low one).
        (True, job("c").critical().gpus(8).submitted(NOW - 300), ("preempt", "c", "od", "other")),
        # Without it, the job that went ahead of the critical one is its victim.
        (False, job("c").critical().gpus(8).submitted(NOW - 300), ("preempt", "c", "od", "small")),
        # The same for a gang (here it needs both nodes; the other job's node is one it may take).
        (
            False,
            job("g").high().gpus(16).nodes(2).submitted(NOW - 300),
            ("preempt", "g", "od", "small", "other"),
        ),
        (True, job("g").high().gpus(16).nodes(2).submitted(NOW - 300), ("wait", "g")),
        # A single-node high job gets no such exception.
        (False, job("h").high().gpus(8).submitted(NOW - 300), ("preempt", "h", "od", "other")),
        # Nor does a critical job queued after the small one started.
        (False, job("c").critical().gpus(8).submitted(NOW - 30), ("preempt", "c", "od", "other")),
    ],
)
def test_protection_does_not_shield_a_job_that_went_ahead_of_a_gang_or_critical_job(
    protect: bool, preemptor: object, decision: tuple[str, ...]
) -> None:
    policy = config(
        protect_backfill=protect,
        protection_period_s=600.0,
        preempt_lower_class_only=True,
        strategy=VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK,
    )
    small = job("small").low().gpus(8).team("b").running_since(NOW - 60).on("od")
    # The other 8 GPUs: a normal job that started before anything was queued, past its protection.
    other = job("other").gpus(8).team("b").running_since(NOW - DAY).on("od")
    got = run_plan(cluster([OD16], [small, other]), [preemptor.build()], policy)  # type: ignore[attr-defined]
    assert summary(got) == [decision]


def test_a_job_that_went_ahead_keeps_the_preemption_cap() -> None:
    # Without `protect_backfill`, only the protection period is lifted: a job that went ahead of
    # the critical one but has reached the preemption cap is never its victim (Hypothesis found
    # the cap skipped when the protection check came first in `preemption.shielded`).
    policy = config(
        protect_backfill=False,
        protection_period_s=600.0,
        max_preemptions_per_job=1,
        preempt_lower_class_only=True,
        strategy=VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK,
    )
    small = job("small").low().gpus(8).team("b").running_since(NOW - 60).preemptions(1).on("od")
    other = job("other").gpus(8).team("b").running_since(NOW - DAY).on("od")
    critical = job("c").critical().gpus(8).submitted(NOW - 300).build()
    got = run_plan(cluster([OD16], [small, other]), [critical], policy)
    assert summary(got) == [("preempt", "c", "od", "other")]
