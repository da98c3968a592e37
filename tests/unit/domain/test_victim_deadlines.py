"""Victims' deadlines (`deadline_victim_reserve_s`): the candidates whose deadline a preemption
would put at risk come last in the victim order (after the class rank), and a preemptor prefers
the pool where it takes the fewest of them. Who may be a victim is unchanged."""

from __future__ import annotations

import random

import pytest

from spotline.domain import Ledger, Preempt, SchedulerConfig, SortedQueue, VictimStrategy, plan
from spotline.domain.preemption import deadline_at_risk, select_victims, select_victims_sparing

from .builders import HOUR, NOW, JobBuilder, candidate, cluster, config, job, pool

RESERVE = 3600.0
P = pool("p", capacity=16, per_node=8)


def low(job_id: str, *, checkpoint_ago: float = 3 * HOUR) -> JobBuilder:
    """A low 8-GPU job of team b, running for 4 h of a declared 8 h, last checkpointed
    `checkpoint_ago` seconds ago."""
    return (
        job(job_id)
        .low()
        .team("b")
        .gpus(8)
        .expected_runtime(8 * HOUR)
        .running_since(NOW - 4 * HOUR)
        .checkpointed(NOW - checkpoint_ago)
    )


def with_slack(builder: JobBuilder, slack: float) -> JobBuilder:
    """`builder` with a deadline `slack` seconds after its estimated end (4 h from NOW)."""
    return builder.deadline(NOW + 4 * HOUR + slack)


def policy(reserve: float | None = RESERVE, **overrides: object) -> SchedulerConfig:
    overrides.setdefault("strategy", VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK)
    overrides.setdefault("preempt_lower_class_only", True)
    return config(deadline_victim_reserve_s=reserve, **overrides)


# --- which jobs a preemption puts at risk ---------------------------------------------------

# A preemption costs the write (60 s), the restart (120 s) and the restore (none measured): 180 s.
COST = 180.0


@pytest.mark.parametrize(
    ("builder", "reserve", "at_risk"),
    [
        (with_slack(low("j"), COST + RESERVE - 1.0), RESERVE, True),
        (with_slack(low("j"), COST + RESERVE + 1.0), RESERVE, False),
        (with_slack(low("j"), 0.0), RESERVE, True),
        (with_slack(low("j"), 10.0), 0.0, True),  # the preemption's own cost alone breaks it
        (with_slack(low("j"), COST + 1.0), 0.0, False),
        (with_slack(low("j"), -1.0), RESERVE, False),  # out of reach already: nothing to put at risk
        (with_slack(low("j"), 60.0), None, False),  # off
        (low("j"), RESERVE, False),  # no deadline
        (
            job("j").low().gpus(8).running_since(NOW - HOUR).deadline(NOW + 600.0),
            RESERVE,
            False,
        ),  # no run time
    ],
    ids=[
        "inside-the-reserve",
        "just-outside-the-reserve",
        "no-slack-left",
        "zero-reserve-cost-alone",
        "zero-reserve-safe",
        "already-out-of-reach",
        "off",
        "no-deadline",
        "no-run-time-known",
    ],
)
def test_deadline_at_risk(builder: JobBuilder, reserve: float | None, at_risk: bool) -> None:
    assert deadline_at_risk(builder.build(), NOW, policy(reserve)) is at_risk


def test_progress_tells_the_remaining_time() -> None:
    # Declared 8 h, but half done after 1 h of run: 1 h left, so a deadline in 4 h is safe.
    subject = job("j").low().gpus(8).expected_runtime(8 * HOUR).running_since(NOW - HOUR).progress(0.5)
    assert not deadline_at_risk(subject.deadline(NOW + 4 * HOUR).build(), NOW, policy())
    assert deadline_at_risk(subject.deadline(NOW + HOUR + 600.0).build(), NOW, policy())


# --- the victim order ------------------------------------------------------------------------


def choose(
    builders: list[JobBuilder], preemptor_class: str, reserve: float | None, **overrides: object
) -> tuple[list[str] | None, int]:
    allocations = [b.on("p") for b in builders]
    snapshot = cluster([P], allocations)
    ledger = Ledger.of(snapshot)
    chosen_policy = policy(reserve, **overrides)
    cands = [candidate(a, priority=0.0, policy=chosen_policy) for a in allocations]
    preemptor = getattr(job("pre").gpus(8).team("a"), preemptor_class)().build()
    args = (preemptor, 5000.0, P, cands, ledger, NOW, chosen_policy, random.Random(0))
    chosen = select_victims_sparing(*args)
    plain = select_victims(*args)
    assert (None if chosen is None else [v.job_id for v in chosen.victims]) == (
        None if plain is None else [v.job_id for v in plain]
    )
    if chosen is None:
        return None, 0
    return [v.job_id for v in chosen.victims], chosen.spared


def test_an_at_risk_job_goes_after_the_others_of_its_class() -> None:
    # "risky" has less lost work (checkpointed a minute ago) but its deadline is 10 min after its
    # end; "safe" has no deadline.
    risky = with_slack(low("risky", checkpoint_ago=60.0), 600.0)
    safe = low("safe")
    assert choose([risky, safe], "critical", None) == (["risky"], 0)  # least lost work alone
    assert choose([risky, safe], "critical", RESERVE) == (["safe"], 1)


def test_the_class_still_comes_first() -> None:
    risky = with_slack(low("risky"), 600.0)
    normal = job("n").normal().team("b").gpus(8).running_since(NOW - 4 * HOUR)
    assert choose([risky, normal], "high", RESERVE) == (["risky"], 0)


def test_without_a_class_first_strategy_at_risk_jobs_go_after_every_other() -> None:
    risky = with_slack(low("risky", checkpoint_ago=60.0), 600.0)
    normal = job("n").normal().team("b").gpus(8).running_since(NOW - 4 * HOUR)
    rules = {"strategy": VictimStrategy.LEAST_LOST_WORK, "preempt_lower_class_only": False}
    assert choose([risky, normal], "critical", None, **rules) == (["risky"], 0)
    assert choose([risky, normal], "critical", RESERVE, **rules) == (["n"], 1)


def test_an_at_risk_job_is_still_taken_when_needed() -> None:
    # The eligible set is unchanged: a 16-GPU preemptor needs both.
    risky = with_slack(low("risky"), 600.0)
    allocations = [risky.on("p"), low("safe").on("p")]
    snapshot = cluster([P], allocations)
    ledger = Ledger.of(snapshot)
    cands = [candidate(a, priority=0.0, policy=policy()) for a in allocations]
    preemptor = job("pre").critical().gpus(16).nodes(2).team("a").build()
    chosen = select_victims_sparing(preemptor, 5000.0, P, cands, ledger, NOW, policy(), random.Random(0))
    assert chosen is not None
    assert sorted(v.job_id for v in chosen.victims) == ["risky", "safe"]
    assert (chosen.spared, chosen.at_risk, chosen.rank) == (0, 1, (1, 2))


def test_a_lost_cause_is_not_spared() -> None:
    lost = with_slack(low("lost", checkpoint_ago=60.0), -600.0)
    assert choose([lost, low("safe")], "critical", RESERVE) == (["lost"], 0)


# --- the pool a preemptor takes its victims in -------------------------------------------------


def test_a_preemptor_prefers_the_pool_where_it_puts_no_deadline_at_risk() -> None:
    first, second = pool("od1", capacity=8), pool("od2", capacity=8)
    snapshot = cluster(
        [first, second],
        [with_slack(low("risky"), 600.0).on("od1"), low("safe").on("od2")],
    )
    preemptor = job("c").critical().gpus(8).team("a").build()

    def preempted(reserve: float | None) -> Preempt:
        decisions = plan(snapshot, SortedQueue.of([preemptor]), NOW, policy(reserve), random.Random(0))
        (decision,) = [d for d in decisions if isinstance(d, Preempt)]
        return decision

    assert (preempted(None).pool, preempted(None).victims) == ("od1", ("risky",))
    chosen = preempted(RESERVE)
    assert (chosen.pool, chosen.victims) == ("od2", ("safe",))
    assert "put at risk" not in preempted(None).reason
    assert "at risk" not in chosen.reason  # nothing spared in od2, nothing at risk taken


def test_the_reason_says_what_was_spared_and_what_was_taken() -> None:
    snapshot = cluster(
        [P], [with_slack(low("risky", checkpoint_ago=60.0), 600.0).on("p"), low("safe").on("p")]
    )
    preemptor = job("c").critical().gpus(8).team("a").build()
    decisions = plan(snapshot, SortedQueue.of([preemptor]), NOW, policy(), random.Random(0))
    (decision,) = [d for d in decisions if isinstance(d, Preempt)]
    assert decision.victims == ("safe",)
    assert "1 job(s) whose deadline a preemption would put at risk left running" in decision.reason
    gang = job("g").critical().gpus(16).nodes(2).team("a").build()
    decisions = plan(snapshot, SortedQueue.of([gang]), NOW, policy(), random.Random(0))
    (decision,) = [d for d in decisions if isinstance(d, Preempt)]
    assert "1 of the victims with a deadline it puts at risk" in decision.reason
