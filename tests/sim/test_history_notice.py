"""A deployment's history replays Spot notices as the control plane handles them: every job on the
warned instance checkpoints and is requeued, also one that would have ended before the reclaim."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.history import History, cluster_document, cluster_path, read_history
from spotline.sim.tune import replay


def _history(tmp_path: Path, duration_s: float) -> History:
    # One job on a one-node Spot pool whose instance gets its 12 s notice at 95 s; back at 120 s.
    path = tmp_path / "history.csv"
    path.write_text(
        "job_id,submit_s,duration_s,gpus,team,priority,checkpoint_interval_s,checkpoint_write_s\n"
        f"j1,0,{duration_s},4,a,low,10,1\n"
    )
    spot = Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=4, gpus_per_node=4)
    counts = (1,) * 95 + (0,) * 25 + (1,) * 100
    document = cluster_document(
        [spot],
        availability={"spot": AvailabilityTrace("spot", 1, counts)},
        scheduler={"restart_cost_s": 5.0},
    )
    document["deployment"] = {"spot_notice_s": 12.0}
    cluster_path(path).write_text(json.dumps(document))
    return read_history(path)


def test_a_job_that_would_end_within_the_notice_is_requeued_as_the_control_plane_does(
    tmp_path: Path,
) -> None:
    history = _history(tmp_path, 100.0)

    metrics = replay(history, history.config(), seed=1)

    # It writes its checkpoint (95 -> 96), waits for Spot (120), restarts (5 s), runs its last 5 s.
    assert metrics["interruptions"] == 1
    assert metrics["avg_jct_s"] == pytest.approx(130.0)
    # The simulator's own model lets it finish before the reclaim.
    spared = replay(
        history,
        history.config(),
        seed=1,
        settings=replace(history.sim_settings(), notice_requeues_every_job=False),
    )
    assert spared["interruptions"] == 0
    assert spared["avg_jct_s"] == pytest.approx(100.0)


def test_a_job_that_ends_before_its_checkpoint_is_written_finishes(tmp_path: Path) -> None:
    history = _history(tmp_path, 95.5)  # ends half a second into its 1 s write

    metrics = replay(history, history.config(), seed=1)

    assert metrics["interruptions"] == 0
    assert metrics["avg_jct_s"] == pytest.approx(95.5)
