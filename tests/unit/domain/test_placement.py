"""Placement: which pools a job may use, cheapest acceptable Spot first."""

from __future__ import annotations

import pytest

from spotline.domain import Job, Pool, Priority, SchedulerConfig, candidate_pools, spot_refusal
from spotline.domain.models import ReservedWindow
from spotline.domain.placement import PassPlacement, expected_interruption_delay_s, spot_cost_ratio
from spotline.domain.preemption import DEFAULT_RUNTIME_S

from .builders import HOUR, NOW, config, job, pool

SPOT = pool("spot-a100", purchase="spot", capacity=64, rate=0.5)
OD = pool("od-a100", capacity=64)
SPOT_H100 = pool("spot-h100", purchase="spot", capacity=64, gpu_type="h100", rate=0.5)
OD_H100 = pool("od-h100", capacity=64, gpu_type="h100")
A100 = [OD, SPOT]

# The deadline cases: remaining 1h, checkpoint every 1800s, restart 120s, 0.5 reclaims/hour on
# one node -> 0.5 expected interruptions x (900 + 120) s = 510 s of delay; x2 (spot_slack_factor)
# = 1020 s of slack needed, for a job whose measured write does not fit the Spot notice
# (`SLOW_WRITE`: it loses half an interval). With the notice's checkpoint (a write that fits), one
# interruption costs 60 + 120 s: 0.5 x 180 x 2 = 180 s of slack needed.
DEADLINE_JOB = job("d").gpus(8).expected_runtime(HOUR).checkpoint_interval(1800)
SLOW_WRITE = 200.0
SLOW_DEADLINE_JOB = DEADLINE_JOB.checkpoint_write(SLOW_WRITE)


@pytest.mark.parametrize(
    ("subject", "pools", "policy", "expected"),
    [
        (job("j").build(), A100, config(), ["spot-a100", "od-a100"]),
        (job("j").spot("never").build(), A100, config(), ["od-a100"]),
        (job("j").gpus(16).nodes(2).build(), A100, config(), ["od-a100"]),  # no gang job on Spot
        (job("j").spot("required").build(), A100, config(), ["spot-a100"]),
        (job("j").spot("required").build(), [OD], config(), []),
        (job("j").critical().build(), A100, config(), ["od-a100"]),
        (job("j").critical().spot("required").build(), A100, config(), ["spot-a100"]),
        (job("j").high().build(), A100, config(on_demand_classes=frozenset({Priority.HIGH})), ["od-a100"]),
        (job("j").critical().build(), A100, config(on_demand_classes=frozenset()), ["spot-a100", "od-a100"]),
        (job("j").interruptions(1).build(), A100, config(), ["spot-a100", "od-a100"]),
        # At the cap, 2 interruptions in 1 h of run time on a 0.5/h pool at price 0.35 -> 0.35 x
        # (1 + 2 x 180 / 3600) = 0.39 of On-Demand: it stays on Spot.
        (job("j").interruptions(2).build(), A100, config(), ["spot-a100", "od-a100"]),
        # 20 interruptions in its first hour, a write that does not fit the notice, price 0.9:
        # 0.9 x (1 + 20 x 1020 / 3600) = 6.0 x On-Demand -> On-Demand.
        (
            job("j").interruptions(20).checkpoint_write(SLOW_WRITE).build(),
            [OD, pool("spot-dear", purchase="spot", price=0.9, rate=0.5)],
            config(),
            ["od-a100"],
        ),
        (
            job("j").interruptions(20).checkpoint_write(SLOW_WRITE).spot("required").build(),
            [OD, pool("spot-dear", purchase="spot", price=0.9, rate=0.5)],
            config(),
            ["spot-dear"],
        ),
        (SLOW_DEADLINE_JOB.deadline(NOW + HOUR + 1000).build(), A100, config(), ["od-a100"]),
        (SLOW_DEADLINE_JOB.deadline(NOW + HOUR + 1100).build(), A100, config(), ["spot-a100", "od-a100"]),
        (SLOW_DEADLINE_JOB.deadline(NOW + HOUR + 1100).nodes(2).build(), A100, config(), ["od-a100"]),
        (
            SLOW_DEADLINE_JOB.deadline(NOW + HOUR + 1100).build(),
            A100,
            config(spot_slack_factor=0.0),
            ["spot-a100", "od-a100"],
        ),
        (DEADLINE_JOB.deadline(NOW + HOUR + 170).build(), A100, config(), ["od-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR + 190).build(), A100, config(), ["spot-a100", "od-a100"]),
        # Slack already negative: On-Demand cannot save the deadline, the job stays on Spot.
        (DEADLINE_JOB.deadline(NOW + HOUR - 600).build(), A100, config(), ["spot-a100", "od-a100"]),
        (
            job("j").build(),
            [
                pool("od-b", price=0.9),
                pool("od-a", price=1.0),
                pool("spot-dear", purchase="spot", price=0.4),
                pool("spot-cheap-risky", purchase="spot", price=0.3, rate=0.2),
                pool("spot-cheap-calm", purchase="spot", price=0.3, rate=0.1),
                pool("spot-cheap-calm-2", purchase="spot", price=0.3, rate=0.1),
            ],
            config(),
            ["spot-cheap-calm", "spot-cheap-calm-2", "spot-cheap-risky", "spot-dear", "od-b", "od-a"],
        ),
        (
            job("j").gpu_type("h100").build(),
            [OD, SPOT, OD_H100, SPOT_H100],
            config(),
            ["spot-h100", "od-h100"],
        ),
        (job("j").gpus(8).build(), [pool("tiny", capacity=4, per_node=4), OD], config(), ["od-a100"]),
    ],
    ids=[
        "auto-prefers-spot",
        "never-on-demand-only",
        "gang-job-on-demand-only",
        "required-spot-only",
        "required-without-spot-pool",
        "on-demand-class",
        "required-beats-on-demand-class",
        "configured-on-demand-class",
        "no-on-demand-classes",
        "interruptions-below-cap",
        "interrupted-job-at-cap-stays-on-cheap-spot",
        "interrupted-job-leaves-dear-spot",
        "required-ignores-interruption-cap",
        "deadline-slack-below-expected-interruptions",
        "deadline-slack-covers-expected-interruptions",
        "gang-doubles-expected-interruptions",
        "slack-factor-zero",
        "notice-checkpoint-slack-below",
        "notice-checkpoint-slack-covers",
        "deadline-out-of-reach-stays-on-spot",
        "price-then-rate-then-name",
        "gpu-type",
        "pool-too-small",
    ],
)
def test_candidate_pools(
    subject: Job, pools: list[Pool], policy: SchedulerConfig, expected: list[str]
) -> None:
    remaining = subject.remaining_s(NOW) or DEFAULT_RUNTIME_S
    assert [p.name for p in candidate_pools(subject, pools, NOW, remaining, policy)] == expected


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        (job("j").build(), None),
        (job("j").spot("never").build(), "job asks for On-Demand only"),
        (job("j").critical().build(), "critical jobs run On-Demand"),
        (
            SLOW_DEADLINE_JOB.deadline(NOW + HOUR + 1000).build(),
            "deadline slack 1000s below the 1020s that Spot interruptions may cost",
        ),
    ],
    ids=["allowed", "never", "on-demand-class", "deadline-slack"],
)
def test_spot_refusal_reason(subject: Job, reason: str | None) -> None:
    assert spot_refusal(subject, SPOT, NOW, HOUR, config()) == reason


def test_spot_refusal_reason_of_an_interrupted_job() -> None:
    dear = pool("spot-dear", purchase="spot", price=0.9, rate=0.5)
    subject = job("j").interruptions(20).checkpoint_write(SLOW_WRITE).build()
    assert spot_refusal(subject, dear, NOW, HOUR, config()) == (
        "interrupted 20 times on Spot: expected to cost 6.00x On-Demand there"
    )


def test_spot_cost_ratio_hand_computed() -> None:
    # Pool rate 0.5/h x 2 nodes = 1/h; its own record, 3 interruptions in 2 h, is worse: 1.5/h.
    # 1.5/h x 2 h = 3 interruptions x (60 + 120) s = 540 s; 0.35 x (7200 + 540) / 7200.
    subject = job("j").gpus(16).nodes(2).interruptions(3).runtime(2 * HOUR).build()
    assert spot_cost_ratio(subject, SPOT, 2 * HOUR, config()) == pytest.approx(0.35 * 7740 / 7200)


def test_expected_interruption_delay_hand_computed() -> None:
    # 0.5/h x 2h x 2 nodes = 2 interruptions x (1800/2 + 120) s when the write does not fit the
    # notice, or x (60 + 120) s with the notice's checkpoint
    slow = SLOW_DEADLINE_JOB.nodes(2).build()
    assert expected_interruption_delay_s(slow, SPOT, 2 * HOUR, config()) == pytest.approx(2040.0)
    gang = DEADLINE_JOB.nodes(2).build()
    assert expected_interruption_delay_s(gang, SPOT, 2 * HOUR, config()) == pytest.approx(360.0)


def test_a_pass_places_jobs_without_a_deadline_as_candidate_pools_does() -> None:
    pools = [
        pool("od-b", capacity=64),
        pool("spot-z", purchase="spot", capacity=64, rate=0.5),
        pool("spot-a", purchase="spot", capacity=64, rate=0.5),  # (ties with spot-z but the name)
        pool("spot-cheap", purchase="spot", capacity=64, price=0.2, rate=2.0),
        pool("od-a", capacity=64),
        pool("od-small", capacity=8, per_node=4),
        pool("spot-h100", purchase="spot", capacity=64, gpu_type="h100"),
        pool("od-h100", capacity=64, gpu_type="h100"),
        pool("od-reserved", capacity=64, price=0.1).model_copy(
            update={"reservation": ReservedWindow(start=0.0, end=NOW + 10 * HOUR)}
        ),
    ]
    placement = PassPlacement(pools)
    policy = config(max_interruptions_on_spot=1)
    jobs = [
        job("one").gpus(1),
        job("eight").gpus(8),
        job("gang").gpus(16).nodes(2),
        job("h100").gpus(4).gpu_type("h100"),
        job("never").gpus(2).spot("never"),
        job("required").gpus(2).spot("required"),
        job("critical").critical().gpus(2),
        job("hit").gpus(2).interruptions(3).runtime(HOUR),
        job("wide").gpus(128),
    ]
    for subject in jobs:
        built = subject.build()
        expected = candidate_pools(built, pools, NOW, 4 * HOUR, policy)
        assert placement.candidate_pools(built, NOW, 4 * HOUR, policy) == expected, built.id
    with pytest.raises(ValueError, match="has a deadline"):
        placement.candidate_pools(DEADLINE_JOB.deadline(2 * HOUR).build(), NOW, HOUR, policy)
