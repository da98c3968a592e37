"""Elastic jobs in the simulator: grown into idle GPUs and given back when a job arrives, shrunk
instead of preempted, with each resize a checkpoint write and a restart (hand-computed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotline.sim.elastic import most_in_window
from spotline.sim.model import elastic_range
from tests.sim.helpers import SETTINGS, run

ELASTIC = replace(SETTINGS, elastic_share=1.0)


def by_id(rows: object) -> dict[str, object]:
    return {j.id: j for j in rows}  # type: ignore[attr-defined]


def test_an_idle_cluster_grows_an_elastic_job_and_takes_the_gpus_back_for_an_arrival() -> None:
    # Given 8 GPUs, a low 4-GPU elastic job (2-8 GPUs) alone, and a high 4-GPU job later
    rows = [("e", 0.0, 40000.0, 4, "t", "low"), ("h", 5000.0, 1000.0, 4, "t", "high")]
    elastic = run(rows, "spotline", settings=ELASTIC)
    fixed = run(rows, "spotline")
    e, h = by_id(elastic.jobs)["e"], by_id(elastic.jobs)["h"]
    # Then e grew into the idle 4 GPUs at the first tick, gave them back when h came (h waited
    # for the 50 s write only), and grew again once h was done and its cooldown was over
    assert e.resize_times[:2] == [300.0, 5000.0]  # type: ignore[attr-defined]
    assert h.queued_s == pytest.approx(50.0)  # type: ignore[attr-defined]
    account = elastic.metrics["elastic_account"]
    assert account["resizes"] == len(e.resize_times) >= 3  # type: ignore[attr-defined]
    assert account["gpu_hours_absorbed_from_idle"] > 0.0
    assert account["max_resizes_per_job_in_10_min"] == 1
    assert elastic.metrics["preemptions"] == 0
    # And on twice the GPUs (linear scaling) it finishes well before the fixed-size run
    assert e.finish < by_id(fixed.jobs)["e"].finish - 10000.0  # type: ignore[attr-defined]


def test_an_elastic_victim_is_shrunk_instead_of_preempted() -> None:
    rows = [("e", 0.0, 40000.0, 8, "t", "low"), ("h", 2000.0, 1000.0, 4, "t", "high")]
    elastic = run(rows, "spotline", settings=ELASTIC)
    fixed = run(rows, "spotline")
    assert fixed.metrics["preemptions"] == 1
    assert elastic.metrics["preemptions"] == 0
    e, h = by_id(elastic.jobs)["e"], by_id(elastic.jobs)["h"]
    assert e.resize_times[0] == 2000.0  # type: ignore[attr-defined]
    assert h.queued_s == pytest.approx(50.0)  # the shrink's write  # type: ignore[attr-defined]
    account = elastic.metrics["elastic_account"]
    # The shrink lost its write on 8 GPUs and a restart on 4; the preemption a restart on 8 too
    assert account["shrink_lost_gpu_hours"] == pytest.approx((50 * 8 + 100 * 4) / 3600)
    assert fixed.metrics["lost_gpu_hours"] == pytest.approx((50 * 8 + 100 * 8) / 3600)
    assert account["churn_per_1k_useful_gpu_h"] < fixed.metrics["preemption_churn_per_1k_useful_gpu_h"]


def test_peers_run_elastic_jobs_at_their_size() -> None:
    rows = [("e", 0.0, 40000.0, 8, "t", "low"), ("h", 2000.0, 1000.0, 4, "t", "high")]
    kueue = run(rows, "kueue", settings=ELASTIC)
    assert kueue.metrics["preemptions"] == 1
    assert kueue.metrics["elastic_account"]["resizes"] == 0


@pytest.mark.parametrize(
    ("gpus", "nodes", "want"),
    [(4, 1, (2, 8)), (8, 1, (4, 8)), (2, 1, (1, 4)), (16, 2, (16, 32)), (32, 4, (16, 64)), (12, 2, (12, 24))],
)
def test_elastic_range_is_half_to_double_within_the_spec_rules(
    gpus: int, nodes: int, want: tuple[int, int]
) -> None:
    assert elastic_range(gpus, nodes, 8) == want


def test_most_resizes_in_a_window() -> None:
    assert most_in_window([0.0, 599.0, 600.0, 1300.0], 600.0) == 2
    assert most_in_window([], 600.0) == 0
