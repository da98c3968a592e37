"""`spotline history export`: the API's pages made into the canonical trace and its cluster file,
which `spotline tune --history` reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spotline.cli.history_export import availability, build
from spotline.sim.history import cluster_path, read_history

T0 = 1_700_000_000.0


def _row(job_id: str, submitted: float, state: str = "SUCCEEDED", **fields: Any) -> dict[str, Any]:
    row = {
        "job_id": job_id,
        "name": "sha256:0123456789abcdef",
        "command": "sha256:fedcba9876543210",
        "team": "vision",
        "priority": "high",
        "gpus": 8,
        "nodes": 1,
        "gpu_type": "a100",
        "spot": "auto",
        "submitted_at": T0 + submitted,
        "deadline_at": None,
        "expected_runtime_s": 3600.0,
        "checkpoint_interval_s": 600.0,
        "checkpoint_write_s": 12.5,
        "state": state,
        "finished_at": T0 + submitted + 4000.0 if state != "PENDING" else None,
        "run_s": 3700.0 if state != "PENDING" else 0.0,
        "preemptions": 1,
        "interruptions": 2,
        "lost_gpu_s": 7200.0,
    }
    row.update(fields)
    return row


CLUSTER = {
    "now": T0 + 3 * 3600.0,
    "pools": [
        {
            "name": "spot",
            "gpu_type": "a100",
            "purchase": "spot",
            "capacity_gpus": 16,
            "gpus_per_node": 8,
            "price": 0.35,
        },
        {
            "name": "od",
            "gpu_type": "a100",
            "purchase": "on-demand",
            "capacity_gpus": 8,
            "gpus_per_node": 8,
            "price": 1.0,
        },
    ],
    "teams": [{"team": "vision", "nominal_gpus": 12, "weight": 1.0}],
    "scheduler": {"preemption_delay_s": 0.0},
    # One outage from 2 h to 1 h before `now`, and none now.
    "spot": {"spot": {"available": True, "outage_s": 0.0, "spans_s": [[7200.0, 3600.0]]}},
}


def test_the_trace_has_the_ended_jobs_from_the_first_submission(tmp_path: Path) -> None:
    jobs = [
        _row("b", 600.0, deadline_at=T0 + 600.0 + 9000.0, spot="never"),
        _row("a", 0.0),
        _row("c", 900.0, state="PENDING"),
        _row("d", 1200.0, state="CANCELLED", run_s=0.0),  # cancelled before it ran
    ]
    result = build(jobs, CLUSTER)
    assert result.written == 2 and result.unfinished == 2
    path = tmp_path / "history.csv"
    path.write_text(result.text)
    cluster_path(path).write_text(json.dumps(result.cluster))

    history = read_history(path)

    first, second = history.trace.jobs
    assert (first.job_id, first.submit_s, first.duration_s) == ("a", 0.0, 3700.0)
    assert (second.job_id, second.submit_s, second.deadline_s, second.spot_ok) == ("b", 600.0, 9600.0, False)
    assert first.expected_runtime_s == 3600.0 and first.checkpoint_write_s == 12.5
    assert first.checkpoint_interval_s == 600.0
    header = path.read_text().splitlines()[0].split(",")
    assert header[-6:] == ["name", "command", "state", "preemptions", "interruptions", "lost_gpu_s"]
    assert "sha256:0123456789abcdef" in path.read_text()
    assert [p.name for p in history.pools] == ["spot", "od"]
    assert history.config().preemption_delay_s == 0.0
    assert history.observed == {
        "jobs": 2,
        "completed": 2,
        "avg_jct_s": 4000.0,
        "lost_gpu_hours": 4.0,
        "lost_gpu_hours_since_checkpoint": 4.0,
        "preemptions": 2,
        "interruptions": 4,
    }
    counts = history.availability["spot"].counts
    # The trace starts at the first submission (3 h before `now`): up, down from hour 1 to 2, up
    per_hour = 3600 // history.availability["spot"].gap_seconds
    assert counts[: per_hour - 1] == (2,) * (per_hour - 1)
    assert set(counts[per_hour + 1 : 2 * per_hour - 1]) == {0}
    assert set(counts[2 * per_hour + 1 :]) == {2}


def test_a_current_outage_runs_to_now() -> None:
    signal = {"available": False, "outage_s": 120.0, "spans_s": []}
    data = availability(signal, T0, T0 + 600.0, instances=3)["data"]  # 1-second ticks
    assert data[:470] == [3] * 470 and data[-110:] == [0] * 110
