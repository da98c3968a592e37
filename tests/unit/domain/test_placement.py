"""Placement: which pools a job may use, cheapest acceptable Spot first."""

from __future__ import annotations

import pytest

from spotline.domain import Job, Pool, Priority, SchedulerConfig, candidate_pools, spot_refusal
from spotline.domain.placement import expected_interruption_delay_s, spot_cost_ratio

from .builders import HOUR, NOW, config, job, pool

SPOT = pool("spot-a100", purchase="spot", capacity=64, rate=0.5)
OD = pool("od-a100", capacity=64)
SPOT_H100 = pool("spot-h100", purchase="spot", capacity=64, gpu_type="h100", rate=0.5)
OD_H100 = pool("od-h100", capacity=64, gpu_type="h100")
A100 = [OD, SPOT]

# The deadline cases: remaining 1h, checkpoint every 1800s, restart 120s, 0.5 reclaims/hour on
# one node -> 0.5 expected interruptions x (900 + 120) s = 510 s of delay; x2 (spot_slack_factor)
# = 1020 s of slack needed, for an agent that does not checkpoint inside the notice (`NO_NOTICE`).
# With the notice's checkpoint (the default), one interruption costs 60 + 120 s: 0.5 x 180 x 2 =
# 180 s of slack needed.
DEADLINE_JOB = job("d").gpus(8).expected_runtime(HOUR).checkpoint_interval(1800)
NO_NOTICE = config(checkpoint_on_notice=False)
COUNT_ONLY = config(spot_cost_aware=False)


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
        (job("j").interruptions(2).build(), A100, COUNT_ONLY, ["od-a100"]),
        # Cost-aware (the default): 2 interruptions in 1 h of run time on a 0.5/h pool at price
        # 0.35 -> 0.35 x (1 + 2 x 180 / 3600) = 0.39 of On-Demand: it stays on Spot.
        (job("j").interruptions(2).build(), A100, config(), ["spot-a100", "od-a100"]),
        # 20 interruptions in its first hour, no checkpoint in the notice, price 0.9: 0.9 x (1 +
        # 20 x 1020 / 3600) = 6.0 x On-Demand -> On-Demand.
        (
            job("j").interruptions(20).build(),
            [OD, pool("spot-dear", purchase="spot", price=0.9, rate=0.5)],
            NO_NOTICE,
            ["od-a100"],
        ),
        (job("j").interruptions(5).spot("required").build(), A100, COUNT_ONLY, ["spot-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR + 1000).build(), A100, NO_NOTICE, ["od-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR + 1100).build(), A100, NO_NOTICE, ["spot-a100", "od-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR + 1100).nodes(2).build(), A100, NO_NOTICE, ["od-a100"]),
        (
            DEADLINE_JOB.deadline(NOW + HOUR + 1100).build(),
            A100,
            config(spot_slack_factor=0.0, checkpoint_on_notice=False),
            ["spot-a100", "od-a100"],
        ),
        (DEADLINE_JOB.deadline(NOW + HOUR + 170).build(), A100, config(), ["od-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR + 190).build(), A100, config(), ["spot-a100", "od-a100"]),
        # Slack already negative: On-Demand cannot save the deadline, the job stays on Spot
        # (cost-aware), or goes On-Demand by the slack rule alone.
        (DEADLINE_JOB.deadline(NOW + HOUR - 600).build(), A100, config(), ["spot-a100", "od-a100"]),
        (DEADLINE_JOB.deadline(NOW + HOUR - 600).build(), A100, COUNT_ONLY, ["od-a100"]),
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
        "interruptions-at-cap-go-on-demand",
        "cost-aware-interrupted-job-stays-on-cheap-spot",
        "cost-aware-interrupted-job-leaves-dear-spot",
        "required-ignores-interruption-cap",
        "deadline-slack-below-expected-interruptions",
        "deadline-slack-covers-expected-interruptions",
        "gang-doubles-expected-interruptions",
        "slack-factor-zero",
        "notice-checkpoint-slack-below",
        "notice-checkpoint-slack-covers",
        "cost-aware-deadline-out-of-reach-stays-on-spot",
        "count-only-deadline-out-of-reach-on-demand",
        "price-then-rate-then-name",
        "gpu-type",
        "pool-too-small",
    ],
)
def test_candidate_pools(
    subject: Job, pools: list[Pool], policy: SchedulerConfig, expected: list[str]
) -> None:
    remaining = subject.remaining_s(NOW) or policy.default_runtime_s
    assert [p.name for p in candidate_pools(subject, pools, NOW, remaining, policy)] == expected


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        (job("j").build(), None),
        (job("j").spot("never").build(), "job asks for On-Demand only"),
        (job("j").critical().build(), "critical jobs run On-Demand"),
        (job("j").interruptions(3).build(), "interrupted 3 times on Spot"),
        (
            DEADLINE_JOB.deadline(NOW + HOUR + 1000).build(),
            "deadline slack 1000s below the 1020s that Spot interruptions may cost",
        ),
    ],
    ids=["allowed", "never", "on-demand-class", "interrupted-too-often", "deadline-slack"],
)
def test_spot_refusal_reason(subject: Job, reason: str | None) -> None:
    policy = config(spot_cost_aware=False, checkpoint_on_notice=False)
    assert spot_refusal(subject, SPOT, NOW, HOUR, policy) == reason


def test_spot_refusal_reason_cost_aware() -> None:
    dear = pool("spot-dear", purchase="spot", price=0.9, rate=0.5)
    subject = job("j").interruptions(20).build()
    assert spot_refusal(subject, dear, NOW, HOUR, NO_NOTICE) == (
        "interrupted 20 times on Spot: expected to cost 6.00x On-Demand there"
    )


def test_spot_cost_ratio_hand_computed() -> None:
    # Pool rate 0.5/h x 2 nodes = 1/h; its own record, 3 interruptions in 2 h, is worse: 1.5/h.
    # 1.5/h x 2 h = 3 interruptions x (60 + 120) s = 540 s; 0.35 x (7200 + 540) / 7200.
    subject = job("j").gpus(16).nodes(2).interruptions(3).runtime(2 * HOUR).build()
    assert spot_cost_ratio(subject, SPOT, 2 * HOUR, config()) == pytest.approx(0.35 * 7740 / 7200)


def test_expected_interruption_delay_hand_computed() -> None:
    gang = DEADLINE_JOB.nodes(2).build()
    # 0.5/h x 2h x 2 nodes = 2 interruptions x (1800/2 + 120) s, or x (60 + 120) s with the
    # notice's checkpoint
    assert expected_interruption_delay_s(gang, SPOT, 2 * HOUR, NO_NOTICE) == pytest.approx(2040.0)
    assert expected_interruption_delay_s(gang, SPOT, 2 * HOUR, config()) == pytest.approx(360.0)
