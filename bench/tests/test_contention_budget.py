"""The loss account's budget line (`bench.contention.loss_budget`): what Spot leaves of the
lost-work goal in a sample, printed under each contended sample's loss account."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from bench import contention
from bench.policy_bench import runs as pb
from bench.policy_bench.setup import EVAL_POLICIES
from spotline.sim import accounts

SPOT = accounts.LOSS_CAUSES[accounts.SPOT]
SPOT_RESTART = accounts.RESTART_LABELS[accounts.SPOT]
CHECKPOINT = accounts.LOSS_CAUSES[accounts.CHECKPOINT]
CHECKPOINT_RESTART = accounts.RESTART_LABELS[accounts.CHECKPOINT]


def _run(spot: float, spot_restart: float, preempted: float, preempted_restart: float) -> dict[str, Any]:
    causes = {
        SPOT: spot,
        SPOT_RESTART: spot_restart,
        CHECKPOINT: preempted,
        CHECKPOINT_RESTART: preempted_restart,
    }
    return {"lost_gpu_hours": sum(causes.values()), "loss_account": {"lost_gpu_hours_by_cause": causes}}


def test_the_budget_is_the_goal_less_the_least_spot_loss_of_any_policy() -> None:
    runs = {
        "fifo": _run(50.0, 100.0, 0.0, 0.0),  # never preempts: not the preempting peer, yet counted for Spot
        "slurm": _run(60.0, 140.0, 25.0, 75.0),  # 300 in all: the preempting peer that lost least
        "kueue-classic": _run(55.0, 110.0, 60.0, 200.0),
        "spotline": _run(62.0, 143.0, 36.0, 88.0),
    }
    budget = contention.loss_budget(runs)
    assert budget.peer == "slurm"
    assert budget.budget == pytest.approx(0.7 * 300.0)
    assert (budget.least_spot_policy, budget.least_spot) == ("fifo", pytest.approx(150.0))
    assert budget.left_for_preemptions == pytest.approx(210.0 - 150.0)
    assert budget.peer_preemption_loss == pytest.approx(100.0)
    assert contention.spot_loss(runs["spotline"]) == pytest.approx(205.0)


def test_the_earlier_variant_beside_spotline_is_not_the_spot_floor() -> None:
    runs = {
        "slurm": _run(60.0, 140.0, 25.0, 75.0),
        "spotline": _run(62.0, 143.0, 36.0, 88.0),
        "spotline, before issue 29": _run(10.0, 20.0, 100.0, 300.0),
    }
    assert contention.loss_budget(runs).least_spot_policy == "slurm"


def test_a_sample_where_spot_alone_is_over_the_goal_leaves_a_negative_budget() -> None:
    runs = {"fifo": _run(90.0, 200.0, 0.0, 0.0), "slurm": _run(90.0, 210.0, 20.0, 60.0)}
    assert contention.loss_budget(runs).left_for_preemptions == pytest.approx(0.7 * 380.0 - 290.0)


def test_the_loss_account_prints_the_split_and_the_budget() -> None:
    sample = pb.Sample("synth", 7, jobs=150, load=1.2, gpus=32)
    runs = pb.run_sample(sample, EVAL_POLICIES, workers=1)
    console = Console(record=True, width=400)
    contention.print_accounts(sample.label, runs, console)
    text = " ".join(console.export_text().split())  # the caption wraps to the table's width
    budget = contention.loss_budget(runs)
    assert "of which Spot / preemptions" in text
    assert f"Lost-work goal (0.7x {budget.peer}'s loss): {budget.budget:.1f} GPU-h" in text
    assert f"left for preemptions at that Spot loss: {budget.left_for_preemptions:.1f}" in text
