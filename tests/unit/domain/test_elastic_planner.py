"""Elastic jobs in a pass: shrunk instead of preempted, grown into GPUs no queued job can use,
giving those back first, and at most one resize per cooldown (tables, fixed NOW)."""

from __future__ import annotations

from spotline.domain.decisions import Preempt, Resize
from spotline.domain.models import Allocation
from tests.unit.domain.builders import HOUR, NOW, cluster, config, job, pool, run_plan, summary

OD = pool("od", capacity=16)
# An elastic low job on 8 GPUs (it may run on 2 to 16), and a plain low one on 8.
ELASTIC = job("e1").low().gpus(8).elastic(2, 16, step=2).expected_runtime(10 * HOUR).running_since(NOW - HOUR)
PLAIN = job("p1").low().gpus(8).expected_runtime(10 * HOUR)


def test_a_preemptor_shrinks_an_elastic_victim_instead_of_preempting_a_whole_job() -> None:
    # Given a full pool: an elastic low job and a plain low one, 8 GPUs each
    snapshot = cluster([OD], [ELASTIC.on("od"), PLAIN.on("od")])
    # When a high job asks for 4 GPUs
    decisions = run_plan(snapshot, [job("h1").high().gpus(4).build()])
    # Then the elastic job shrinks by just those 4, and nothing is preempted whole
    (decision,) = decisions
    assert isinstance(decision, Preempt) and decision.victims == ("e1",)
    (resize,) = decision.resizes
    assert (resize.from_gpus, resize.to_gpus, resize.for_job) == (8, 4, "h1")
    assert resize.reason == "shrunk from 8 to 4 GPUs for job h1"
    assert "instead of preempting" in decision.reason


def test_shrinking_stops_at_the_minimum_and_then_a_whole_preemption_is_made() -> None:
    snapshot = cluster([OD], [ELASTIC.on("od"), PLAIN.on("od")])
    # 8 GPUs are more than the elastic job can give (8 - 2 = 6): the plain job is preempted
    (decision,) = run_plan(snapshot, [job("h1").high().gpus(8).build()])
    assert isinstance(decision, Preempt) and not decision.resizes
    assert len(decision.victims) == 1


def test_a_job_resized_within_its_cooldown_is_not_shrunk_below_its_size() -> None:
    recent = ELASTIC.resized(NOW - 60)
    snapshot = cluster([OD], [recent.on("od"), PLAIN.on("od")])
    (decision,) = run_plan(snapshot, [job("h1").high().gpus(4).build()])
    assert isinstance(decision, Preempt) and not decision.resizes


def test_an_elastic_job_of_the_same_class_is_not_shrunk_for_priority() -> None:
    snapshot = cluster([OD], [ELASTIC.on("od"), PLAIN.on("od")])
    (decision,) = run_plan(snapshot, [job("n1").low().gpus(4).build()])
    assert summary([decision]) == [("wait", "n1")]


def test_an_idle_pool_grows_an_elastic_job_up_to_its_maximum() -> None:
    snapshot = cluster([pool("od", capacity=32, per_node=16)], [ELASTIC.on("od")])
    decisions = run_plan(snapshot, [])
    assert summary(decisions) == [("resize", "e1", "od", "8", "16")]
    (resize,) = decisions
    assert isinstance(resize, Resize) and resize.for_job is None
    assert resize.reason == "grown from 8 to 16 GPUs: 24 GPUs idle in od that no queued job can use"


def test_no_growth_into_gpus_a_queued_job_waits_for() -> None:
    # A normal job of another team waits for 16 GPUs (only 8 free): the free 8 stay free
    snapshot = cluster([pool("od", capacity=24)], [ELASTIC.on("od"), PLAIN.on("od")])
    waiting = job("w1").normal().gpus(16).team("b").build()
    decisions = run_plan(snapshot, [waiting], config(preemption_delay_s=3600.0))
    assert [d.action for d in decisions] == ["wait"]


def test_no_growth_within_the_cooldown_nor_when_the_gain_is_below_the_cost() -> None:
    recent = ELASTIC.resized(NOW - 60)
    assert run_plan(cluster([pool("od", capacity=32, per_node=16)], [recent.on("od")]), []) == []
    # Ten minutes left: doubling saves 5 minutes, less than twice a resize (write + restart)
    short = job("e2").low().gpus(8).elastic(2, 16).expected_runtime(HOUR).running_since(NOW - 50 * 60)
    assert run_plan(cluster([pool("od", capacity=32, per_node=16)], [short.on("od")]), []) == []


GROWN = job("e1").high().gpus(16).elastic(2, 16).expected_runtime(HOUR)


def test_gpus_an_elastic_job_grew_into_are_given_back_first_to_any_arriving_job() -> None:
    # The elastic job grew from 8 to 16 eleven minutes ago (of a higher class than the
    # newcomer); a plain low job holds the rest
    grown = GROWN.resized(NOW - 660, base_gpus=8)
    snapshot = cluster([pool("od", capacity=24, per_node=16)], [grown.on("od"), PLAIN.on("od")])
    (decision,) = run_plan(snapshot, [job("n1").low().gpus(8).build()])
    assert isinstance(decision, Preempt) and decision.victims == ("e1",)
    (resize,) = decision.resizes
    assert (resize.from_gpus, resize.to_gpus) == (16, 8)
    assert resize.reason.startswith("gives back GPUs it grew into")


def test_the_cooldown_holds_for_a_give_back_too() -> None:
    # Grown a minute ago: it keeps its GPUs until its cooldown is over; the newcomer waits
    grown = GROWN.resized(NOW - 60, base_gpus=8)
    snapshot = cluster([pool("od", capacity=24, per_node=16)], [grown.on("od"), PLAIN.on("od")])
    (decision,) = run_plan(snapshot, [job("n1").low().gpus(8).build()])
    assert summary([decision]) == [("wait", "n1")]


def test_a_shrinking_job_keeps_its_smaller_size_reserved_while_it_checkpoints() -> None:
    # e1 restarts on 4 of its 8 GPUs for h1: the next pass holds h1's 4, and nothing else fits
    leaving = ELASTIC.on("od", draining_for="h1")
    shrinking = Allocation(job=leaving.job, pool="od", gpus=8, draining_for="h1", resize_to=4)
    snapshot = cluster([OD], [shrinking, PLAIN.on("od")])
    preemptor = job("h1").high().gpus(4).build()
    other = job("n2").high().gpus(4).build()
    decisions = run_plan(snapshot, [preemptor, other])
    assert summary(decisions)[0] == ("wait", "h1")
    assert all(not isinstance(d, Resize) for d in decisions)


def test_a_critical_job_shrinks_a_victim_unless_it_would_stop_it_at_once() -> None:
    # The elastic job wrote no checkpoint for an hour: a critical job waits for its write anyway,
    # so it shrinks it
    snapshot = cluster([OD], [ELASTIC.on("od"), PLAIN.on("od")])
    (decision,) = run_plan(snapshot, [job("c1").critical().gpus(4).build()])
    assert isinstance(decision, Preempt) and decision.resizes and decision.checkpoint
    # Checkpointed 10 s ago (less unsaved work than a write): the critical job stops a victim at
    # once instead of waiting for a shrink's write
    fresh = ELASTIC.checkpointed(NOW - 10)
    snapshot = cluster([OD], [fresh.on("od"), PLAIN.checkpointed(NOW - 10).on("od")])
    (decision,) = run_plan(snapshot, [job("c1").critical().gpus(4).build()])
    assert isinstance(decision, Preempt) and not decision.resizes and not decision.checkpoint
