"""`SchedulerConfig` is a contract: what a deployment may set, refused with its name when it is
not a setting (a typo, or one that no longer exists), never silently dropped. Its defaults are the
tuner's recorded output on the tuning set (`python -m bench.tune`), and the Slurm peer's knobs
the recorded choice of its own search (`python -m bench.tune_slurm`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.policy_bench.setup import EVALUATION, TUNING, TUNING_REDUCED
from bench.tune import TUNER
from spotline.domain import Priority, SchedulerConfig
from spotline.domain.config import CLASS_GAP, PriorityWeights
from spotline.sim.model import SlurmKnobs
from spotline.sim.tune import apply_diff

DATA = Path(__file__).resolve().parents[3] / "bench" / "data"


def test_the_defaults_are_the_tuners_recorded_output() -> None:
    record = json.loads((DATA / "tuning_spotline.json").read_text())
    assert record["tuner"] == TUNER
    in_effect = SchedulerConfig.model_validate(record["settings_in_effect"])
    assert apply_diff(in_effect, record["result"]["recommended"]) == SchedulerConfig()
    tuning = {s.label for s in (*TUNING, *TUNING_REDUCED)}
    assert record["history"] in tuning and record["history"] not in {s.label for s in EVALUATION}


def test_the_slurm_peers_knobs_are_its_searchs_recorded_choice() -> None:
    record = json.loads((DATA / "tuning.json").read_text())
    assert SlurmKnobs(**record["slurm"][record["slurm_best"]]["knobs"]) == SlurmKnobs()
    assert set(record["samples"]) <= {s.label for s in TUNING_REDUCED}


# Settings that earlier versions had: a deployment that still sets one is told so.
REMOVED = [
    ({"fresh_checkpoint_s": 60}, "fresh_checkpoint_s"),
    ({"preempt_below_blocked_class": True}, "preempt_below_blocked_class"),
    ({"no_preemption_delay_for": ["high"]}, "no_preemption_delay_for"),
    ({"strict_class_order": True}, "strict_class_order"),
    ({"preemption_margin": 500}, "preemption_margin"),
    ({"window_per_class": 64}, "window_per_class"),
    ({"weights": {"attained": 400}}, "weights.attained"),
    ({"weights": {"strict_class_order": False}}, "weights.strict_class_order"),
    ({"weights": {"class_step": 1000}}, "weights.class_step"),
    ({"protection_period": 600}, "protection_period"),  # a typo of protection_period_s
]


@pytest.mark.parametrize(("given", "name"), REMOVED, ids=[name for _, name in REMOVED])
def test_a_setting_that_does_not_exist_is_refused_by_name(given: dict[str, object], name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SchedulerConfig.model_validate(given)
    assert f"not a setting of this version: {name}" in str(refused.value)
    assert "docs/concepts/scheduling-policy.md" in str(refused.value)


def test_every_unknown_setting_is_named_in_one_error() -> None:
    with pytest.raises(ValidationError) as refused:
        SchedulerConfig.model_validate(
            {"attained": 1, "protection_period": 600, "preemption_delay_s": 30, "weights": {"margin": 5}}
        )
    assert "not a setting of this version: attained, protection_period, weights.margin (" in str(
        refused.value
    )


@pytest.mark.parametrize(
    "strategy", ["lowest-class-least-lost-work", "lowest-class-least-cost", "least-cost"]
)
def test_a_victim_strategy_that_does_not_exist_is_refused_with_the_ones_that_do(strategy: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SchedulerConfig.model_validate({"strategy": strategy})
    assert "least-lost-work" in str(refused.value) and "random" in str(refused.value)


@pytest.mark.parametrize("weight", ["age", "deadline", "size", "fairshare", "history", "shortest"])
def test_a_negative_weight_is_refused(weight: str) -> None:
    with pytest.raises(ValidationError, match=weight):
        PriorityWeights.model_validate({weight: -1})


def test_the_class_step_is_the_within_class_span_and_the_gap() -> None:
    weights = PriorityWeights(age=100, deadline=0, size=10, fairshare=20, history=5, shortest=0)
    assert weights.within_class_span == 135
    assert weights.class_step == 135 + CLASS_GAP
    assert weights.class_term(Priority.HIGH) == 2 * (135 + CLASS_GAP)


def test_every_setting_round_trips_through_json() -> None:
    config = SchedulerConfig.model_validate(
        {
            "strategy": "random",
            "stop_at_once_for": ["critical", "high"],
            "weights": {"age": 10, "shortest": 0},
            "deadline_plans_per_pass": None,
        }
    )
    assert SchedulerConfig.model_validate_json(config.model_dump_json()) == config
