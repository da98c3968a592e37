"""The loss and wait accounts (`spotline.sim.accounts`): hand-computed scenarios, and invariants
on a synthetic trace checked against the decision log."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.sim import simulate
from spotline.sim.accounts import (
    CHECKPOINT_WAIT,
    LOSS_CAUSES,
    NO_CAPACITY,
    PROTECTION,
    REPEAT_WINDOW_S,
    WAIT_CAUSES,
)
from spotline.sim.pools import build_pools, spot_advice
from spotline.trace import Trace
from spotline.trace.synth import synth_trace

from .helpers import HARD_KILL, by_id, run
from .test_policies import AT_ONCE, CONTENTION

STOP_CRITICAL = "preempted, stopped at once by a critical job"
CHECKPOINTED = "preempted with checkpoint"


def _lost(result: Any) -> dict[str, float]:
    """Lost GPU-seconds by cause, the zero ones left out."""
    by_cause = result.metrics["loss_account"]["lost_gpu_hours_by_cause"]
    return {k: pytest.approx(v * 3600) for k, v in by_cause.items() if v}


def _waited(result: Any, cls: str) -> dict[str, float]:
    hours = result.metrics["wait_account"][cls]["wait_hours_by_cause"]
    return {k: pytest.approx(v * 3600) for k, v in hours.items() if v}


def test_a_critical_preemptor_that_stops_its_victim_at_once_is_charged_its_lost_work() -> None:
    result = run(AT_ONCE, "spotline")
    # (test_policies: j1 loses the 60 s since its checkpoint on 8 GPUs, and restarts in 100 s.)
    assert _lost(result) == {STOP_CRITICAL: 8 * 60, f"restart after: {STOP_CRITICAL}": 8 * 100}
    account = result.metrics["loss_account"]
    assert account["preemptions_by_class"] == {"critical>low": 1}
    assert account["preemptions_per_job"] == {"0": 1, "1": 1, "2": 0, "3-5": 0, "6-10": 0, ">10": 0}
    assert account["repeat_preemptions"] == 0
    assert _waited(result, "critical") == {}


def test_a_critical_preemptor_waits_out_the_protection_period_and_the_victim_s_write() -> None:
    result = run(CONTENTION, "spotline")
    # j1 has more unsaved work than its write: it checkpoints (50 s on 8 GPUs), restarts in 100 s.
    assert _lost(result) == {CHECKPOINTED: 8 * 50, f"restart after: {CHECKPOINTED}": 8 * 100}
    # j2 (critical) waits 10 -> 610 for j1's protection period, then 50 s for its write; j3 (high)
    # too, then for j2 (critical: nothing below high to preempt) until it ends at 1160.
    assert _waited(result, "critical") == {PROTECTION: 600, CHECKPOINT_WAIT: 50}
    assert _waited(result, "high") == {PROTECTION: 590, CHECKPOINT_WAIT: 50, NO_CAPACITY: 500}
    critical = result.metrics["wait_account"]["critical"]
    assert critical["tail_jobs"] == 1
    assert critical["tail_wait_share_by_cause"][PROTECTION] == pytest.approx(600 / 650)


@pytest.mark.parametrize("policy", ["priority-random", "kueue", "slurm"])
def test_a_checkpointed_victim_is_charged_its_write_and_restart(policy: str) -> None:
    result = run(CONTENTION, policy)
    # j1 writes 50 s on 8 GPUs for j2 (which waits for the write), restarts in 100 s.
    assert _lost(result) == {CHECKPOINTED: 8 * 50, f"restart after: {CHECKPOINTED}": 8 * 100}
    assert result.metrics["loss_account"]["preemptions_by_class"] == {"critical>low": 1}
    assert _waited(result, "critical") == {CHECKPOINT_WAIT: 50}


def _since_checkpoint_s(result: Any) -> float:
    return float(result.metrics["lost_gpu_hours_since_checkpoint"]) * 3600


def test_the_control_plane_s_loss_counts_the_work_since_the_checkpoint_not_the_restarts() -> None:
    # j1 loses 60 s since its checkpoint on 8 GPUs and restarts in 100 s: the restart of a run
    # that then finishes is run time to the control plane, not lost work.
    assert _since_checkpoint_s(run(AT_ONCE, "spotline")) == pytest.approx(8 * 60)
    # A checkpoint-then-stop: the 50 s write after the checkpoint's capture is lost.
    assert _since_checkpoint_s(run(CONTENTION, "spotline")) == pytest.approx(8 * 50)


def test_a_restarted_run_stopped_before_it_saved_anything_loses_all_of_it() -> None:
    # j2 stops j1 at 10 (no checkpoint yet: 10 s lost); j1 restarts at 110 and j3 stops it at
    # 150, 40 s into its 100 s restart: the control plane charges that whole run (40 s) as lost.
    rows = [
        ("j1", 0.0, 1000.0, 8, "a", "low"),
        ("j2", 10.0, 100.0, 8, "a", "critical"),
        ("j3", 150.0, 100.0, 8, "a", "critical"),
    ]
    result = run(rows, "kueue", settings=HARD_KILL)
    assert result.metrics["preemptions"] == 2
    assert _since_checkpoint_s(result) == pytest.approx(8 * (10 + 40))
    # The simulator's own count adds the restart of the run that finished (100 s).
    assert result.metrics["lost_gpu_hours"] * 3600 == pytest.approx(8 * (10 + 40 + 100))


def test_a_run_that_checkpoints_as_it_leaves_saved_its_restart() -> None:
    # j2 has j1 write a checkpoint at 10 (50 s); j1 restarts at 160 and j3 has it write another
    # at 200, 40 s into its 100 s restart: that run saved its state, so the control plane counts
    # its restart as run time; only the first write is lost after a checkpoint's capture.
    rows = [
        ("j1", 0.0, 1000.0, 8, "a", "low"),
        ("j2", 10.0, 100.0, 8, "a", "critical"),
        ("j3", 200.0, 100.0, 8, "a", "critical"),
    ]
    result = run(rows, "kueue")
    assert result.metrics["preemptions"] == 2
    assert _since_checkpoint_s(result) == pytest.approx(8 * 50)
    # The simulator's own count: both writes' runs, the 90 s run cut in its restart, the last restart.
    assert result.metrics["lost_gpu_hours"] * 3600 == pytest.approx(8 * (50 + 90 + 100))


@pytest.fixture(scope="module")
def churned() -> tuple[dict[str, Any], list[dict[str, Any]], Trace]:
    """A contended synthetic trace on a small cluster with frequent Spot reclaims, every policy,
    with its decision log."""
    trace = Trace(jobs=synth_trace(500, 1.2, 64, 11), source="test")
    pools = [
        p.model_copy(update={"interruption_rate_per_hour": 0.05}) if p.is_spot else p
        for p in build_pools(64, 0.75, spot_advice())
    ]
    log: list[dict[str, Any]] = []
    report = simulate(
        trace, ["priority-random", "kueue", "slurm", "spotline"], seed=3, pools=pools, sink=log.append
    )
    return report.to_json()["policies"], log, trace


def test_the_causes_add_up_to_the_lost_gpu_hours(churned: tuple[dict[str, Any], list[Any], Trace]) -> None:
    runs, _, trace = churned
    for name, metrics in runs.items():
        account = metrics["loss_account"]
        assert sum(account["lost_gpu_hours_by_cause"].values()) == pytest.approx(metrics["lost_gpu_hours"]), (
            name
        )
        assert set(account["lost_gpu_hours_by_cause"]) >= set(LOSS_CAUSES.values())
        assert sum(account["preemptions_per_job"].values()) == len(trace.jobs)
        assert account["lost_gpu_hours_by_cause"]["Spot interruption"] > 0, name
        restarts = sum(v for k, v in account["lost_gpu_hours_by_cause"].items() if k.startswith("restart"))
        since = metrics["lost_gpu_hours_since_checkpoint"]
        assert metrics["lost_gpu_hours"] - restarts - 1e-9 <= since <= metrics["lost_gpu_hours"] + 1e-9, name
    # With the defaults a critical preemptor stops a victim at once only within its checkpoint
    # write: here every victim checkpointed (the first test charges a stop at once).
    spotline = runs["spotline"]["loss_account"]["lost_gpu_hours_by_cause"]
    assert spotline[CHECKPOINTED] > 0
    assert spotline[STOP_CRITICAL] < spotline[CHECKPOINTED]


def test_class_pairs_and_repeats_match_the_decision_log(
    churned: tuple[dict[str, Any], list[Any], Trace],
) -> None:
    runs, log, trace = churned
    cls = {job.job_id: job.priority.value for job in trace.jobs}
    for name, metrics in runs.items():
        pairs: dict[str, int] = {}
        last: dict[str, float] = {}
        repeats = moves = 0
        for d in log:
            if d["policy"] != name or d["action"] != "preempt":
                continue
            for victim in d["victims"]:
                # A move to Spot is logged as a preemption of the job by itself: it names no
                # preemptor and is counted apart (`moves`), neither a preemption nor a repeat.
                if victim == d["job_id"]:
                    moves += 1
                    continue
                key = f"{cls[d['job_id']]}>{cls[victim]}"
                pairs[key] = pairs.get(key, 0) + 1
                if victim in last and d["t"] - last[victim] <= REPEAT_WINDOW_S:
                    repeats += 1
                last[victim] = d["t"]
        account = metrics["loss_account"]
        assert account["preemptions_by_class"] == dict(sorted(pairs.items())), name
        assert account["repeat_preemptions"] == repeats, name
        assert sum(pairs.values()) == metrics["preemptions"], name
        assert moves == metrics["moves"], name


def test_every_wait_of_the_urgent_classes_is_accounted(
    churned: tuple[dict[str, Any], list[Any], Trace],
) -> None:
    runs, _, _ = churned
    for name, metrics in runs.items():
        for cls in ("critical", "high"):
            account = metrics["wait_account"][cls]
            assert set(account["wait_hours_by_cause"]) == set(WAIT_CAUSES)
            shares = account["tail_wait_share_by_cause"]
            if account["tail_jobs"]:
                assert sum(shares.values()) == pytest.approx(1.0), (name, cls)


def test_single_node_starts_on_demand_while_a_gang_waits_are_counted() -> None:
    rows = [
        ("a", 0.0, 1000.0, 8, "t", "low"),
        # A 2-node gang job: 8 GPUs are free, it needs 16 and waits (a is protected until 600).
        ("g", 10.0, 100.0, 16, "t", "normal"),
        # A 1-GPU job takes one of the free On-Demand GPUs meanwhile.
        ("s", 20.0, 100.0, 1, "t", "high"),
    ]
    result = run(rows, "spotline", gpus=16)
    gang = result.metrics["gang_account"]
    assert gang["multi_node_jobs"] == 1
    assert gang["single_node_on_demand_starts_while_a_gang_waits"] == 1
    assert gang["their_gpus"] == 1
    assert gang["multi_node_wait_max_s"] == by_id(result)["g"].queued_s > 0
