"""Deadline admission (`spotline.domain.admission`): the answer at submission, and the On-Demand
GPUs the planner keeps for the jobs answered."""

from __future__ import annotations

import pytest

from spotline.domain.admission import (
    AnswerKind,
    OnDemandHold,
    PassHolds,
    RuntimeRange,
    answer_deadline,
    declared_runtime,
    held_on_demand_gpus,
)
from spotline.domain.decisions import Admit, Wait
from spotline.domain.explain import wait_text
from spotline.domain.models import SpotPreference
from tests.unit.domain.builders import HOUR, NOW, cluster, config, job, pool, run_plan

OD = pool("od", capacity=16)
OD8 = pool("od", capacity=8)
SPOT = pool("spot", capacity=16, purchase="spot")
POLICY = config()
CHANGEOVER = POLICY.deadline_changeover_s
STEP = POLICY.deadline_step_s


def runtime(hours: float) -> RuntimeRange:
    return RuntimeRange(planned_s=hours * HOUR, low_s=hours * HOUR, high_s=hours * HOUR, source="declared")


def deadline_job(job_id: str, hours_left: float, gpus: int = 8, **spec: str) -> object:
    built = job(job_id).gpus(gpus).deadline(NOW + hours_left * HOUR).expected_runtime(2 * HOUR)
    for key, value in spec.items():
        built = getattr(built, key)(value)
    return built.build()


def test_an_empty_cluster_meets_it_and_holds_the_safety_net_window():
    target = deadline_job("d", hours_left=6)
    answer = answer_deadline(target, runtime(2), cluster([OD, SPOT]), [], NOW, POLICY)
    assert answer.kind is AnswerKind.MEETS
    assert answer.hold is not None
    deadline = NOW + 6 * HOUR
    assert answer.hold.end == deadline
    assert answer.hold.start == deadline - 2 * HOUR - CHANGEOVER - STEP
    assert answer.earliest_finish == NOW + 2 * HOUR + CHANGEOVER
    # 8 GPUs for 2 h at the On-Demand price (1.0 per GPU-hour here).
    assert answer.on_demand_cost == pytest.approx(16.0)
    assert answer.feasible


@pytest.mark.parametrize(
    ("name", "spot", "priority", "pools"),
    [
        ("spot never", "never", "normal", [OD, SPOT]),
        ("critical runs On-Demand", "auto", "critical", [OD, SPOT]),
        ("no Spot pool", "auto", "normal", [OD]),
    ],
)
def test_a_job_that_cannot_use_spot_meets_it_only_on_demand(name, spot, priority, pools):
    target = job("d").gpus(8).spot(spot).priority(priority).deadline(NOW + 6 * HOUR).build()
    answer = answer_deadline(target, runtime(2), cluster(pools), [], NOW, POLICY)
    assert answer.kind is AnswerKind.ON_DEMAND_ONLY, name
    assert "only On-Demand, at about $16.00" in answer.summary
    assert answer.hold is not None and answer.hold.end == NOW + 6 * HOUR


def test_no_slack_for_spot_meets_it_only_on_demand():
    # 2 h of work, a changeover and a step fit; nothing is left to try Spot first.
    target = deadline_job("d", hours_left=2 + (CHANGEOVER + STEP / 2) / HOUR)
    answer = answer_deadline(target, runtime(2), cluster([OD, SPOT]), [], NOW, POLICY)
    assert answer.kind is AnswerKind.ON_DEMAND_ONLY
    assert answer.hold is not None and answer.hold.start == NOW


def test_a_deadline_before_any_on_demand_finish_cannot_be_met():
    target = deadline_job("d", hours_left=1.5)
    answer = answer_deadline(target, runtime(2), cluster([OD, SPOT]), [], NOW, POLICY)
    assert answer.kind is AnswerKind.CANNOT
    assert answer.earliest_finish == NOW + 2 * HOUR + CHANGEOVER
    assert answer.hold is None and not answer.feasible
    assert answer.summary.startswith("cannot: the earliest finish is 2024-01-01T02:12:00Z")


def test_running_jobs_push_the_earliest_finish_to_their_end():
    busy = job("r").gpus(16).expected_runtime(5 * HOUR).running_since(NOW - HOUR).on("od")
    target = deadline_job("d", hours_left=4)
    answer = answer_deadline(target, runtime(2), cluster([OD, SPOT], [busy]), [], NOW, POLICY)
    assert answer.kind is AnswerKind.CANNOT
    assert answer.earliest_finish == NOW + 4 * HOUR + 2 * HOUR + CHANGEOVER


def test_holds_of_jobs_answered_before_take_their_window():
    first = deadline_job("first", hours_left=6)
    first_answer = answer_deadline(first, runtime(2), cluster([OD8, SPOT]), [], NOW, POLICY)
    assert first_answer.kind is AnswerKind.MEETS
    held = first.with_changes(deadline_answer=first_answer)
    # Same window, the pool's 8 GPUs held: the second can only run before the first's window.
    second = deadline_job("second", hours_left=6)
    answer = answer_deadline(second, runtime(2), cluster([OD8, SPOT]), [held], NOW, POLICY)
    assert answer.kind is AnswerKind.ON_DEMAND_ONLY
    assert answer.hold is not None
    assert answer.hold.start == NOW
    assert first_answer.hold is not None
    assert answer.earliest_finish is not None and answer.earliest_finish <= first_answer.hold.start
    # With a window too short to fit before it, it cannot.
    third = deadline_job("third", hours_left=6)
    both = [held, third.with_changes(deadline_answer=answer)]
    late = answer_deadline(
        deadline_job("late", hours_left=6), runtime(2), cluster([OD8, SPOT]), both, NOW, POLICY
    )
    assert late.kind is AnswerKind.CANNOT


def test_on_demand_only_jobs_of_higher_classes_ahead_go_first_lower_ones_do_not():
    critical = job("c").critical().gpus(16).nodes(2).expected_runtime(3 * HOUR).build()
    low = job("l").low().gpus(16).nodes(2).spot("never").expected_runtime(3 * HOUR).build()
    target = deadline_job("d", hours_left=4, priority="normal")
    behind_critical = answer_deadline(target, runtime(2), cluster([OD, SPOT]), [critical], NOW, POLICY)
    assert behind_critical.kind is AnswerKind.CANNOT
    before_low = answer_deadline(target, runtime(2), cluster([OD, SPOT]), [low], NOW, POLICY)
    assert before_low.kind is AnswerKind.MEETS


def test_no_known_run_time_and_spot_required_cannot_be_promised():
    bare = job("b").gpus(8).deadline(NOW + 6 * HOUR).build()
    assert declared_runtime(bare) is None
    assert answer_deadline(bare, None, cluster([OD, SPOT]), [], NOW, POLICY).kind is AnswerKind.UNKNOWN
    spot_only = deadline_job("s", hours_left=6, spot="required")
    answer = answer_deadline(spot_only, runtime(2), cluster([OD, SPOT]), [], NOW, POLICY)
    assert answer.kind is AnswerKind.CANNOT and not answer.feasible


def test_declared_runtime_prefers_the_cap():
    capped = job("c").expected_runtime(HOUR).build().spec.model_copy(update={"max_runtime_s": 3 * HOUR})
    built = job("c").build().model_copy(update={"spec": capped})
    found = declared_runtime(built)
    assert found is not None and found.planned_s == 3 * HOUR and found.low_s == HOUR


def test_held_gpus_are_the_peak_over_the_span():
    holds = [
        OnDemandHold(pool="od", gpus=8, start=NOW + HOUR, end=NOW + 3 * HOUR),
        OnDemandHold(pool="od", gpus=4, start=NOW + 2 * HOUR, end=NOW + 4 * HOUR),
    ]
    assert held_on_demand_gpus(holds, NOW, NOW + HOUR) == 0
    assert held_on_demand_gpus(holds, NOW, NOW + 1.5 * HOUR) == 8
    assert held_on_demand_gpus(holds, NOW, NOW + 5 * HOUR) == 12
    assert held_on_demand_gpus(holds, NOW + 3 * HOUR, NOW + 5 * HOUR) == 4


def _held(job_id: str, gpus: int, start: float, end: float) -> object:
    built = job(job_id).low().gpus(gpus).deadline(end).expected_runtime(HOUR).build()
    answer = answer_deadline(built, runtime(1), cluster([OD, SPOT]), [], NOW, POLICY)
    hold = OnDemandHold(pool="od", gpus=gpus, start=start, end=end)
    return built.with_changes(deadline_answer=answer.model_copy(update={"hold": hold}))


def test_the_planner_admits_no_other_job_into_held_on_demand_gpus():
    holder = _held("holder", 8, NOW + HOUR, NOW + 3 * HOUR)
    # A critical job (On-Demand only) running 2 h would overlap the hold: it waits.
    critical = job("c").critical().gpus(8).expected_runtime(2 * HOUR).build()
    decisions = run_plan(cluster([OD8, SPOT]), [critical, holder])
    by_id = {d.job.id: d for d in decisions}
    assert isinstance(by_id["c"], Wait)
    assert "held for deadline jobs" in wait_text(by_id["c"].why)
    # One that ends before the hold begins is admitted.
    short = job("s").critical().gpus(8).expected_runtime(0.5 * HOUR).build()
    decisions = run_plan(cluster([OD8, SPOT]), [short, holder])
    assert any(isinstance(d, Admit) and d.job.id == "s" and d.pool == "od" for d in decisions)


def test_the_holder_itself_uses_its_held_gpus_before_a_higher_class():
    holder = _held("holder", 8, NOW, NOW + 2 * HOUR)
    never = holder.spec.model_copy(update={"spot": SpotPreference.NEVER})
    on_demand = holder.model_copy(update={"spec": never})
    critical = job("c").critical().gpus(8).expected_runtime(2 * HOUR).build()
    decisions = {d.job.id: d for d in run_plan(cluster([OD8, SPOT]), [critical, on_demand])}
    assert isinstance(decisions["holder"], Admit) and decisions["holder"].pool == "od"
    assert isinstance(decisions["c"], Wait)


def test_a_hold_whose_job_runs_in_its_pool_is_spent():
    holder = _held("holder", 8, NOW, NOW + 3 * HOUR)
    running = holder.with_changes(state="RUNNING", started_at=NOW - 60, pool="od")
    snapshot = cluster([OD, SPOT], [running_allocation(running)])
    assert PassHolds.of([], snapshot).by_pool == {}


def running_allocation(running: object) -> object:
    from spotline.domain.models import Allocation

    return Allocation(job=running, pool="od", gpus=8)


def test_the_profile_agrees_with_counting_instant_by_instant():
    # Spans on a whole-second grid: the naive count at every second is the reference.
    import random

    from spotline.domain.admission import Profile

    rng = random.Random(7)
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 6)):
            start = rng.randint(0, 20)
            spans.append((float(start), float(start + rng.randint(1, 10)), rng.randint(1, 8)))
        profile = Profile(capacity=16, spans=list(spans))

        def used(t: int, spans: list[tuple[float, float, int]] = spans) -> int:
            return sum(g for s, e, g in spans if s <= t < e)

        start, end = rng.randint(0, 25), rng.randint(1, 8)
        assert profile.peak(start, start + end) == max(used(t) for t in range(start, start + end))
        gpus, duration = rng.randint(1, 16), rng.randint(1, 8)
        naive = next(s for s in range(0, 60) if all(used(t) + gpus <= 16 for t in range(s, s + duration)))
        assert profile.earliest(0.0, float(duration), gpus) == naive


def test_a_job_answered_on_demand_only_is_not_placed_on_spot():
    # The pool's GPUs are held at the end of the window for a first job: the second, with hours
    # of slack, is promised its deadline only On-Demand, now.
    first = deadline_job("first", hours_left=6)
    held = first.with_changes(
        deadline_answer=answer_deadline(first, runtime(2), cluster([OD8, SPOT]), [], NOW, POLICY)
    )
    second = deadline_job("second", hours_left=6)
    answer = answer_deadline(second, runtime(2), cluster([OD8, SPOT]), [held], NOW, POLICY)
    assert answer.kind is AnswerKind.ON_DEMAND_ONLY
    answered = second.with_changes(deadline_answer=answer)
    admitted = [d for d in run_plan(cluster([OD8, SPOT]), [answered]) if isinstance(d, Admit)]
    assert [d.pool for d in admitted] == ["od"]
    # Without the answer, Spot comes first.
    admitted = [d for d in run_plan(cluster([OD8, SPOT]), [second]) if isinstance(d, Admit)]
    assert [d.pool for d in admitted] == ["spot"]


def test_a_holder_in_its_window_is_not_kept_out_by_later_holds():
    # Its own hold is in force now; another's starts within its run: the answers fitted both.
    own = _held("own", 8, NOW, NOW + 3 * HOUR)
    never = own.spec.model_copy(update={"spot": SpotPreference.NEVER})
    own = own.model_copy(update={"spec": never})
    later = _held("later", 8, NOW + HOUR, NOW + 4 * HOUR)
    decisions = {d.job.id: d for d in run_plan(cluster([OD, SPOT]), [own, later])}
    assert isinstance(decisions["own"], Admit) and decisions["own"].pool == "od"


def test_a_job_running_in_its_held_gpus_is_no_victim():
    from spotline.domain.preemption import HELD_FOR_DEADLINE, shielded

    holder = _held("holder", 8, NOW - HOUR, NOW + 2 * HOUR)
    running = holder.with_changes(state="RUNNING", started_at=NOW - HOUR, pool="od")
    from spotline.domain.models import Allocation

    assert shielded(Allocation(job=running, pool="od", gpus=8), NOW, POLICY) == HELD_FOR_DEADLINE
    assert shielded(Allocation(job=running, pool="od", gpus=8), NOW + 3 * HOUR, POLICY) is None
    assert shielded(Allocation(job=running, pool="spot", gpus=8), NOW, POLICY) is None
    # A critical job that needs the pool waits rather than preempting it.
    critical = job("c").critical().gpus(8).expected_runtime(HOUR).build()
    decisions = run_plan(cluster([OD8, SPOT], [Allocation(job=running, pool="od", gpus=8)]), [critical])
    assert isinstance(decisions[0], Wait)
