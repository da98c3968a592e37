"""bench.checkpoint_throughput: the write and restore of a checkpoint through the agent's local
store, timed and written as JSON (a tiny size: the machinery, not the figures)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import checkpoint_throughput


def test_a_tiny_run_measures_write_and_restore_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert (
        checkpoint_throughput.main(
            ["--sizes-mb", "1", "--stores", "local", "--cpu-mb", "1", "--json", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["store"] == "local" and row["size_mb"] == 1
    assert row["write_s"] >= row["serialise_s"] > 0 and row["restore_s"] >= row["download_s"] > 0
    assert set(result["cpu_costs_mb_s"]) == {"sha256 (one core)", "torch.save", "dcp.save (1 process)"}
    assert any("fits 115 s" in line for line in result["notice_budget_estimate"])
