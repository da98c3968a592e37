"""End to end, locally: a small workload through the local plane with a Spot availability trace,
its history exported (`spotline history export`), replayed with the settings that ran, and tuned
(`spotline tune --history`). AWS is emulated (moto and the local fleet); the replay's fidelity
figures on a larger run are in design-notes/tune-fidelity.md (`python -m bench.fidelity`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.fidelity import Workload, run
from spotline.cli import app
from spotline.sim.history import read_history
from spotline.sim.tune import GOALS_BY_KEY

pytestmark = pytest.mark.slow


def test_export_replay_and_tune_a_local_history(tmp_path: Path) -> None:
    # Given four jobs of two teams on the local plane, its Spot pool halving then vanishing
    workload = Workload(jobs=4, steps=(60, 120), gap_s=3.0, timeout_s=240.0)
    out = tmp_path / "history.csv"

    result = run(tmp_path / "state", out, workload)

    # The export: every job, in the canonical format, names as digests, the cluster beside it
    history = read_history(out)
    assert len(history.trace.jobs) == 4 and result["jobs"] == 4
    text = out.read_text()
    assert not re.search(r"(^|,)job-[0-3](,|$)", text, re.M) and "sha256:" in text  # (names, not ids)
    assert [p.name for p in history.pools] == ["a100-spot", "a100-on-demand"]
    assert set(history.availability) == {"a100-spot"}
    assert history.config().protection_period_s == 5.0  # the local plane's settings ran
    assert history.observed["completed"] == 4
    # The replay with those settings finishes every job, in the same range of time
    observed, replayed = result["avg_jct_s"]["observed"], result["avg_jct_s"]["replayed"]
    assert observed > 0 and replayed > 0
    assert 0.5 < replayed / observed < 2.0, result
    # And the tune runs on it, writing its contract
    span_days = history.span_s / 86400.0
    report = tmp_path / "tune.json"
    answer = CliRunner().invoke(
        app,
        [
            "tune",
            "--history",
            str(out),
            "--holdout-days",
            f"{span_days / 2:.8f}",
            "--candidates",
            "3",
            "--seeds",
            "2",
            "--workers",
            "1",
            "--json",
            str(report),
            "--cdk-json",
            str(tmp_path / "none.json"),
        ],
    )
    assert answer.exit_code == 0, answer.output
    data = json.loads(report.read_text())
    assert set(data["holdout"]) == set(GOALS_BY_KEY)
    assert data["pareto"] and isinstance(data["recommended"], dict)
