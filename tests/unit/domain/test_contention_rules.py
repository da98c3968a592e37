"""The rules for a full cluster, as they ship: critical victims stopped at once only within their
write, a strict class order for admission and preemption, victims of the lowest class first,
only the head of a class preempting (for the classes so set), GPUs held for a blocked gang, and
the protection period shielding every job."""

from __future__ import annotations

import random

import pytest

from spotline.domain import Priority
from spotline.domain.config import VictimStrategy
from spotline.domain.gang_hold import GANG_HOLD_AFTER_S
from spotline.domain.planner import stops_at_once
from spotline.domain.preemption import order_victims

from .builders import DAY, HOUR, NOW, candidate, cluster, config, job, pool, run_plan, summary

OD16 = pool("od", capacity=16)
CRITICAL_AT_ONCE = frozenset({Priority.CRITICAL})
# A gang that has waited long enough for GPUs to be held for it.
HELD_GANG_SINCE = NOW - GANG_HOLD_AFTER_S


# --- stop at once only within the write -------------------------------------------------------


@pytest.mark.parametrize(
    ("unsaved_s", "measured_write_s", "preemptor", "at_once"),
    [
        # A victim with more unsaved work than the write (default 60 s) checkpoints...
        (3000.0, None, "critical", False),
        (61.0, None, "critical", False),
        # ... one with no more than it is stopped at once (the write would save no more).
        (60.0, None, "critical", True),
        (10.0, None, "critical", True),
        # The victim's measured write counts, not the default.
        (600.0, 900.0, "critical", True),
        (600.0, 300.0, "critical", False),
        # A class not in stop_at_once_for checkpoints its victims either way.
        (10.0, None, "high", False),
    ],
)
def test_a_critical_preemptor_stops_a_victim_at_once_only_within_its_write(
    unsaved_s: float, measured_write_s: float | None, preemptor: str, at_once: bool
) -> None:
    policy = config(stop_at_once_for=CRITICAL_AT_ONCE)
    victim = job("v").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - unsaved_s).build()
    if measured_write_s is not None:
        victim = victim.with_changes(checkpoint_write_s=measured_write_s)
    pre = job("p").priority(preemptor).gpus(8).build()
    assert (stops_at_once(pre, [victim], NOW, policy) is not None) is at_once


def test_one_victim_beyond_its_write_makes_the_whole_preemption_checkpoint() -> None:
    policy = config(stop_at_once_for=CRITICAL_AT_ONCE)
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
    policy = config(preemption_delay_s=180.0, stop_at_once_for=CRITICAL_AT_ONCE)
    stale = job("s").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    other = job("o").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    [decision] = run_plan(cluster([OD16], [stale, other]), [job("c").critical().gpus(8).build()], policy)
    assert decision.action == "preempt"
    assert decision.checkpoint is True  # type: ignore[union-attr]


# --- strict class order -----------------------------------------------------------------------


def test_a_day_of_waiting_and_fair_share_do_not_lift_a_job_over_the_class_above() -> None:
    snapshot = cluster([pool("od", capacity=8)])
    # Team b (the normal job's) used GPU-hours, so its fair-share term is lower than team a's.
    snapshot = snapshot.model_copy(update={"usage_gpu_hours": {"a": 0.0, "b": 100.0}})
    aged_low = job("aged").low().gpus(8).submitted(NOW - DAY).team("a").build()
    fresh_normal = job("fresh").gpus(8).submitted(NOW).team("b").build()
    decisions = run_plan(snapshot, [aged_low, fresh_normal], config())
    assert summary(decisions) == [("admit", "fresh", "od"), ("wait", "aged")]


def test_an_urgent_deadline_does_not_preempt_the_class_above() -> None:
    high = job("h").high().gpus(8).team("b").running_since(NOW - HOUR).on("od")
    urgent = job("n").gpus(8).deadline(NOW + 2 * HOUR).expected_runtime(2 * HOUR).submitted(NOW - DAY).build()
    [decision] = run_plan(cluster([pool("od", capacity=8)], [high]), [urgent], config())
    assert decision.action == "wait"


def test_a_job_does_not_preempt_its_own_class_however_long_it_waited() -> None:
    running = job("r").gpus(8).team("b").running_since(NOW - HOUR).on("od")
    aged = job("n").gpus(8).submitted(NOW - 7 * DAY).build()
    [decision] = run_plan(cluster([pool("od", capacity=8)], [running]), [aged], config())
    assert decision.action == "wait"
    assert "nothing lower-priority to preempt" in decision.reason


# --- victims of the lowest class first ------------------------------------------------------


@pytest.mark.parametrize("strategy", list(VictimStrategy))
def test_every_strategy_takes_victims_of_the_lowest_class_first(strategy: VictimStrategy) -> None:
    def running(job_id: str, cls: str, gpus: int, unsaved_s: float) -> object:
        built = job(job_id).priority(cls).gpus(gpus).running_since(NOW - DAY).checkpointed(NOW - unsaved_s)
        return candidate(built.on("p"), priority=Priority(cls).rank * 1000.0)

    candidates = [
        running("n", "normal", 2, 100.0),
        running("l2", "low", 8, 900.0),
        running("l1", "low", 4, 900.0),
    ]
    ordered = order_victims(candidates, strategy, random.Random(0))  # type: ignore[arg-type]
    assert [c.job_id for c in ordered][2] == "n"


def test_least_lost_work_orders_a_class_by_its_lost_work() -> None:
    def running(job_id: str, gpus: int, unsaved_s: float) -> object:
        built = job(job_id).low().gpus(gpus).running_since(NOW - DAY).checkpointed(NOW - unsaved_s)
        return candidate(built.on("p"))

    candidates = [running("a", 8, 900.0), running("b", 4, 900.0), running("c", 8, 10.0)]
    ordered = order_victims(candidates, VictimStrategy.LEAST_LOST_WORK, random.Random(0))  # type: ignore[arg-type]
    assert [c.job_id for c in ordered] == ["c", "b", "a"]


def test_the_planner_preempts_the_low_job_before_the_normal_one() -> None:
    # The normal job checkpointed 10 s ago (least lost work alone would stop it first).
    normal = job("n").gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 10).on("od")
    low = job("l").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 900).on("od")
    got = run_plan(cluster([OD16], [normal, low]), [job("c").critical().gpus(8).build()], config())
    assert summary(got) == [("preempt", "c", "od", "l")]


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
    policy = config(preempt_for_class_head_only=head_only)
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
    policy = config(preempt_for_class_head_only=frozenset({Priority.NORMAL}))
    lows = [job(f"l{i}").low().gpus(8).team("b").running_since(NOW - DAY).on("od") for i in (1, 2)]
    pending = [job("big").gpus(16).nodes(2).submitted(NOW - 20).build(), job("small").gpus(4).build()]
    # 12 GPUs free of 28: the gang preempts one low job and takes 8 of the free ones; 4 are left.
    got = run_plan(cluster([pool("od", capacity=28)], lows), pending, policy)
    assert summary(got) == [("preempt", "big", "od", "l1"), ("admit", "small", "od")]


# --- freed GPUs held for the top blocked gang ----------------------------------------------


@pytest.mark.parametrize(
    ("gang_since", "decisions"),
    [
        # A gang that has waited less than GANG_HOLD_AFTER_S holds nothing: the small normal job
        # takes the free GPUs (most gangs start soon as jobs end).
        (NOW - 10, [("wait", "gang"), ("admit", "small", "od")]),
        # One that has waited that long has the free GPUs held for it, and the small job (which
        # declares no run time, so may not backfill) waits.
        (HELD_GANG_SINCE, [("wait", "gang"), ("wait", "small")]),
    ],
)
def test_free_gpus_are_held_for_the_top_blocked_gang(
    gang_since: float, decisions: list[tuple[str, ...]]
) -> None:
    policy = config(protection_period_s=600.0)
    # The low job holding the other 8 GPUs started a minute ago: inside its protection period.
    fresh = job("f").low().gpus(8).team("b").running_since(NOW - 60).on("od")
    gang = job("gang").high().gpus(16).nodes(2).submitted(gang_since).build()
    small = job("small").gpus(4).submitted(NOW - 5).build()
    got = run_plan(cluster([OD16], [fresh]), [gang, small], policy)
    assert summary(got) == decisions
    if gang_since == HELD_GANG_SINCE:
        assert "the free GPUs of od are held for the blocked multi-node job gang" in got[1].reason


def test_only_the_first_blocked_gang_holds_and_the_rest_of_the_pool_stays_free() -> None:
    # 8 GPUs free in a 32-GPU pool: the first gang holds all 8 (it needs 16); the second gang
    # holds nothing more, and a job that fits elsewhere (the other pool) still starts there.
    policy = config(protection_period_s=600.0)
    fresh = [job(f"f{i}").low().gpus(8).team("b").running_since(NOW - 60).on("od") for i in range(3)]
    other = pool("od2", capacity=8)
    pending = [
        job("g1").high().gpus(16).nodes(2).submitted(HELD_GANG_SINCE - 20).build(),
        job("g2").high().gpus(16).nodes(2).submitted(HELD_GANG_SINCE - 10).build(),
        job("small").gpus(8).submitted(NOW - 5).build(),
    ]
    got = run_plan(cluster([pool("od", capacity=32), other], fresh), pending, policy)
    assert summary(got) == [("wait", "g1"), ("wait", "g2"), ("admit", "small", "od2")]


# --- the protection period shields every job ----------------------------------------------


@pytest.mark.parametrize(
    ("preemptor", "decision"),
    [
        # The small low job that started after the critical job was queued (a minute ago,
        # inside its 600 s) cannot be stopped: the critical job stops the normal job instead.
        (job("c").critical().gpus(8).submitted(NOW - 300), ("preempt", "c", "od", "other")),
        # A gang needing both nodes cannot have it either: it waits.
        (job("g").high().gpus(16).nodes(2).submitted(NOW - 300), ("wait", "g")),
    ],
)
def test_the_protection_period_shields_a_job_that_went_ahead_of_a_gang_or_critical_job(
    preemptor: object, decision: tuple[str, ...]
) -> None:
    policy = config(protection_period_s=600.0)
    small = job("small").low().gpus(8).team("b").running_since(NOW - 60).on("od")
    # The other 8 GPUs: a normal job that started before anything was queued, past its protection.
    other = job("other").gpus(8).team("b").running_since(NOW - DAY).on("od")
    got = run_plan(cluster([OD16], [small, other]), [preemptor.build()], policy)  # type: ignore[attr-defined]
    assert summary(got) == [decision]
