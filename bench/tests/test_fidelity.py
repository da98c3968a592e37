"""`python -m bench.fidelity`'s comparison: an exported history's observed figures against its
replays, lost GPU-hours by the control plane's definition on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.fidelity import compare
from spotline.domain.models import Pool, Purchase
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.history import cluster_document, cluster_path

GPU_S_PER_H = 3600.0


def _history(tmp_path: Path, observed: dict[str, float]) -> Path:
    # One job on a one-node Spot pool that is reclaimed at 35 s and back at 60 s: it writes a
    # checkpoint inside the notice (1 s on 4 GPUs) and restarts (5 s on 4 GPUs) when Spot is back.
    path = tmp_path / "history.csv"
    path.write_text(
        "job_id,submit_s,duration_s,gpus,team,priority,checkpoint_interval_s,checkpoint_write_s\n"
        "j1,0,100,4,a,low,10,1\n"
    )
    spot = Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=4, gpus_per_node=4)
    counts = (1,) * 35 + (0,) * 25 + (1,) * 100
    document = cluster_document(
        [spot],
        availability={"spot": AvailabilityTrace("spot", 1, counts)},
        scheduler={"restart_cost_s": 5.0},
        observed=observed,
    )
    document["deployment"] = {"spot_notice_s": 12.0}
    cluster_path(path).write_text(json.dumps(document))
    return path


def test_lost_gpu_hours_are_compared_without_the_restarts_the_control_plane_counts_as_run_time(
    tmp_path: Path,
) -> None:
    lost_h = 4 * 1.0 / GPU_S_PER_H  # the write after the last checkpoint, as the plane charges it
    observed = {
        "avg_jct_s": 131.0,
        "lost_gpu_hours": lost_h,
        "lost_gpu_hours_since_checkpoint": lost_h,
        "preemptions": 0,
        "interruptions": 1,
    }

    result = compare(_history(tmp_path, observed), seeds=(1,))

    lost = result["lost_gpu_hours_since_checkpoint"]
    assert lost["replayed"] == pytest.approx(lost_h)
    assert lost["relative_error"] == pytest.approx(0.0, abs=1e-9)
    assert result["replayed_lost_gpu_hours_with_restarts"] == pytest.approx(4 * (1.0 + 5.0) / GPU_S_PER_H)
    assert result["interruptions"]["replayed"] == 1.0
    # 35 s of work kept, back at 60 s, 5 s restart, 65 s left: it ends at 130 s.
    assert result["avg_jct_s"]["replayed"] == pytest.approx(130.0)


def test_a_history_exported_without_the_key_compares_its_lost_gpu_hours(tmp_path: Path) -> None:
    observed = {"avg_jct_s": 130.0, "lost_gpu_hours": 4 / GPU_S_PER_H, "interruptions": 1}

    result = compare(_history(tmp_path, observed), seeds=(1,))

    assert result["lost_gpu_hours_since_checkpoint"]["observed"] == pytest.approx(4 / GPU_S_PER_H)
