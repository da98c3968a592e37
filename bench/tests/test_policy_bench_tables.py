"""The bench's tables over several samples: means, and ratios paired sample by sample."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import policy_bench as pb


def _metrics(jct_h: float, lost: float) -> dict[str, Any]:
    return {
        "avg_jct_s": jct_h * 3600.0,
        "avg_jct_s_by_priority": {"low": jct_h * 3600.0},
        "wait_p99_s_by_priority": {"high": 60.0},
        "lost_gpu_hours": lost,
        "cost_per_useful_gpu_hour": 0.5,
        "ftf_max": 1.0,
        "jain_fairness": 0.9,
    }


def test_ratios_are_paired_by_sample_and_the_reference_row_has_none() -> None:
    # Sample 2 is twice as long for every variant: its variant is 10% slower in both samples.
    samples = [
        {"base": _metrics(1.0, 10.0), "variant": _metrics(1.1, 0.0)},
        {"base": _metrics(2.0, 20.0), "variant": _metrics(2.2, 0.0)},
    ]
    rows = pb.over_samples(samples, lambda _: "base")
    jct = rows["variant"]["avg JCT (h)"]
    assert jct["mean"] == pytest.approx(1.65 * 3600.0)
    assert jct["ratio"] == pytest.approx(1.1)
    assert jct["ratio_ci"] == pytest.approx(0.0, abs=1e-9)  # the pairing removes the samples' spread
    assert rows["variant"]["lost GPU-hours"]["ratio"] == 0.0
    assert math.isnan(rows["base"]["avg JCT (h)"]["ratio"])


def test_a_zero_reference_gives_no_ratio() -> None:
    samples = [{"base": _metrics(1.0, 0.0), "variant": _metrics(1.0, 5.0)}] * 2
    rows = pb.over_samples(samples, lambda _: "base")
    assert math.isnan(rows["variant"]["lost GPU-hours"]["ratio"])  # (only its mean is shown)
