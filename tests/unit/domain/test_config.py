"""`SchedulerConfig`'s defaults are the tuning set's choice, as recorded in bench/data."""

from __future__ import annotations

import json
from pathlib import Path

from bench.contention import CONTENDED_EVALUATION, CONTENDED_TUNING, FIRST, SPOT_TRACE_STEPS, STEPS
from spotline.domain import SchedulerConfig
from spotline.sim.model import SlurmKnobs

RECORD = Path(__file__).resolve().parents[3] / "bench" / "data" / "tuning.json"


# Fields added after the recorded tuning, at the value that is the behaviour the tuning measured
# (the lever is off), each switched on and off in a later `bench.tune` lever check (README, "Tuning").
# Issue 29's opt-in mechanisms (off by default: docs/contention.md) likewise.
ADDED_SINCE = {
    # the deadline guard's changeover and step, settings since issue 30 (the constants they were)
    "deadline_changeover_s": 720.0,
    "deadline_step_s": 300.0,
    # the deadline plans a pass may solve (issue 30): no plan is solved in the simulator's passes
    # (its snapshot carries no Spot signals), so the tuning's behaviour at any value
    "deadline_plans_per_pass": 16,
    "no_preemption_delay_for": [],
    "preempt_below_blocked_class": False,
    "protect_backfill": True,
}
# Issue 29's rules, chosen after it on the tuning set's contended counterparts
# (`python -m bench.contention --tuning --steps`, recorded in bench/data/contention_tuning.json
# for the first three, contention_tuning_2.json for the head rule; the moves and the gang hold
# decided again under the trace-driven Spot model by `python -m bench.retune_spot_traces`,
# contention_tuning_3.json, with the moves weighing the pool's history; its thin-history bound, a
# day, is the deadline guard's, not tuned).
ISSUE_29 = {
    "stop_at_once_within_write": True,
    "preempt_lower_class_only": True,
    "strategy": "lowest-class-least-lost-work",
    "move_to_spot_min_remaining_s": 21600.0,
    "move_to_spot_weighs_history": True,
    "move_to_spot_min_history_s": 86400.0,
    "hold_for_blocked_gang": False,
    "preempt_for_class_head_only": ["normal"],
}
WEIGHTS_ISSUE_29 = {"strict_class_order": True}
# Issue 30's deadline lift (docs/spot-and-deadlines.md, "Deadline lift"): off, the behaviour the
# tuning measured.
WEIGHTS_ADDED_SINCE = {"deadline_lift_slack_s": 0.0, "deadline_lift_ceiling": "normal"}
CONTENTION_RECORD = RECORD.parent / "contention_tuning.json"  # the first rules (FIRST)
CONTENTION_RECORD_2 = RECORD.parent / "contention_tuning_2.json"  # the second ones
CONTENTION_RECORD_3 = RECORD.parent / "contention_tuning_3.json"  # moves and gang hold, Spot traces


def test_the_defaults_are_what_bench_tune_chose_on_the_tuning_set() -> None:
    record = json.loads(RECORD.read_text())
    chosen = record["spotline"][record["spotline_best"]]["config"]
    defaults = json.loads(SchedulerConfig().model_dump_json())
    weights = defaults["weights"]
    assert {k: weights.pop(k) for k in WEIGHTS_ISSUE_29} == WEIGHTS_ISSUE_29
    assert {k: weights.pop(k) for k in WEIGHTS_ADDED_SINCE} == WEIGHTS_ADDED_SINCE
    assert {k: defaults.pop(k) for k in ISSUE_29} == ISSUE_29
    assert {k: v for k, v in defaults.items() if k not in chosen} == ADDED_SINCE
    chosen = {k: v for k, v in chosen.items() if k not in ISSUE_29}
    assert {k: v for k, v in defaults.items() if k in chosen} == chosen
    assert record["samples"][0].startswith("philly 2017-10-02")  # the tuning set, not evaluation
    slurm = record["slurm"][record["slurm_best"]]["knobs"]
    assert SlurmKnobs(**slurm) == SlurmKnobs()


def test_issue_29s_rules_are_the_step_chosen_on_the_contended_tuning_set() -> None:
    first = json.loads(CONTENTION_RECORD.read_text())
    assert STEPS[first["defaults"]] == FIRST
    second = json.loads(CONTENTION_RECORD_2.read_text())
    assert (
        STEPS[second["defaults"]].preempt_for_class_head_only == SchedulerConfig().preempt_for_class_head_only
    )
    third = json.loads(CONTENTION_RECORD_3.read_text())
    assert third["complete"] and SPOT_TRACE_STEPS[third["chosen"]] == SchedulerConfig()
    rows_met = {name: goals["rows_met"] for name, goals in third["goals"].items()}
    assert rows_met[third["chosen"]] == max(rows_met.values())
    tuning = {s.label for s in CONTENDED_TUNING}
    for record in (first, second, third):
        assert set(record["samples"]) <= tuning and record["samples"]  # tuning samples only
        assert not {s.label for s in CONTENDED_EVALUATION} & set(record["samples"])
    for record in (first, second):
        for steps in record["samples"].values():
            assert set(steps) <= set(STEPS)
    for sample in third["samples"].values():
        assert set(sample["spotline"]) == set(SPOT_TRACE_STEPS)
