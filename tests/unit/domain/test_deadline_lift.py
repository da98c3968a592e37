"""Issue 30's deadline lift: a pending job whose deadline is near and still in reach ranks as one
class up (`PriorityWeights.deadline_lift_slack_s`), never above `deadline_lift_ceiling`."""

from __future__ import annotations

import pytest

from spotline.domain import PriorityWeights, SchedulerConfig
from spotline.domain.decisions import Admit, Preempt
from spotline.domain.explain import priority_terms
from spotline.domain.models import Job, Priority
from spotline.domain.priority import PriorityScorer, effective_priority, lifted_class
from spotline.domain.queue import SortedQueue, ranked, window_parts

from .builders import HOUR, NOW, cluster, job, pool, run_plan

LIFT = PriorityWeights(deadline_lift_slack_s=3 * HOUR)
OFF = PriorityWeights(deadline_lift_slack_s=0.0)


def score(weights: PriorityWeights, built: Job, remaining: float = HOUR) -> float:
    return effective_priority(built, NOW, weights, remaining_s=remaining)


def low_due(slack: float, remaining: float = HOUR) -> Job:
    """A pending low job declaring `remaining` seconds of run time, due `slack` seconds after it
    could end if it started now."""
    return job("due").low().expected_runtime(remaining).deadline(NOW + remaining + slack).build()


def test_a_low_job_near_its_deadline_ranks_above_a_normal_job_without_one() -> None:
    normal = job("n").normal().submitted(NOW - 20 * HOUR).build()
    due = low_due(HOUR)
    assert score(LIFT, due) > score(LIFT, normal)
    assert score(OFF, due) < score(OFF, normal)  # strict class order without the lift
    assert lifted_class(due, NOW, LIFT, HOUR) is Priority.NORMAL


def test_the_lift_adds_exactly_one_class_step() -> None:
    due = low_due(HOUR)
    assert score(LIFT, due) - score(OFF, due) == pytest.approx(LIFT.effective_class_step)


@pytest.mark.parametrize("slack", [4 * HOUR, -60.0])
def test_no_lift_with_slack_above_the_threshold_or_a_deadline_out_of_reach(slack: float) -> None:
    # Out of reach: it would take GPUs and still miss its deadline.
    due = low_due(slack)
    assert score(LIFT, due) == score(OFF, due)
    assert lifted_class(due, NOW, LIFT, HOUR) is Priority.LOW


def test_the_ceiling_bounds_the_lift() -> None:
    for cls in (Priority.NORMAL, Priority.HIGH, Priority.CRITICAL):
        due = job("due").priority(cls).expected_runtime(HOUR).deadline(NOW + 2 * HOUR).build()
        assert score(LIFT, due) == score(OFF, due)  # the default ceiling, normal: no lift
    normal_due = job("due").normal().expected_runtime(HOUR).deadline(NOW + 2 * HOUR).build()
    to_high = PriorityWeights(deadline_lift_slack_s=3 * HOUR, deadline_lift_ceiling=Priority.HIGH)
    assert lifted_class(normal_due, NOW, to_high, HOUR) is Priority.HIGH
    assert LIFT.lifted(Priority.LOW, 0.0) is Priority.NORMAL
    assert to_high.lifted(Priority.LOW, 0.0) is Priority.NORMAL  # one class up, not to the ceiling
    assert to_high.lifted(Priority.CRITICAL, 0.0) is Priority.CRITICAL  # never lowered


def test_a_running_job_is_never_lifted() -> None:
    running = job("due").low().expected_runtime(2 * HOUR).deadline(NOW + 2 * HOUR).running_since(NOW - HOUR)
    built = running.build()
    assert score(LIFT, built) == score(OFF, built)


def test_explain_shows_the_lift_as_a_term() -> None:
    due = low_due(HOUR)
    terms = priority_terms(due, NOW, LIFT, remaining_s=HOUR, fairshare=1.0)
    assert terms["deadline_lift"] == LIFT.effective_class_step
    assert sum(terms.values()) == pytest.approx(score(LIFT, due))
    far = priority_terms(low_due(5 * HOUR), NOW, LIFT, remaining_s=HOUR, fairshare=1.0)
    assert far["deadline_lift"] == 0.0


def test_the_pass_order_puts_the_lifted_job_first() -> None:
    # The urgent job is in the window's low head and its deadline part; the part's bound must
    # reach the lifted class or the heap would hand out the normal jobs first.
    normals = [job(f"n{i}").normal().submitted(NOW - i).build() for i in range(3)]
    due = low_due(HOUR)
    queue = SortedQueue.of([*normals, due])
    window, _, parts = window_parts(queue, 8)
    scorer = PriorityScorer(NOW, LIFT, {}, lambda _: HOUR)
    order = [j.id for j, _ in ranked(window, parts, scorer)]
    assert order[0] == "due"
    everything = sorted(window, key=lambda j: -scorer(j))
    assert order == [j.id for j in everything]


def test_a_lifted_job_takes_free_gpus_first_and_preempts_no_job_of_the_class_it_is_lifted_to() -> None:
    policy = SchedulerConfig(weights=LIFT, protection_period_s=0.0, preemption_delay_s=0.0)
    normal = job("n").normal().gpus(8).submitted(NOW - 20 * HOUR).build()
    due = job("due").low().gpus(8).expected_runtime(HOUR).deadline(NOW + 2 * HOUR).build()
    free = cluster([pool("p", capacity=8)])
    decisions = run_plan(free, [normal, due], policy)
    assert [d.job.id for d in decisions if isinstance(d, Admit)] == ["due"]
    # The pool full of a normal job: the lifted low job keeps its class for preemption.
    busy = cluster([pool("p", capacity=8)], [job("r").normal().gpus(8).running_since(NOW - 2 * HOUR).on("p")])
    decisions = run_plan(busy, [due], policy)
    assert not [d for d in decisions if isinstance(d, Preempt)]
