"""The shipped Spot availability traces and their loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotline.sim.availability import (
    AvailabilityError,
    load_availability,
    load_shipped,
    parse_availability,
    shipped_traces,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "spot" / "availability"


def test_every_shipped_trace_loads_with_its_documented_shape() -> None:
    names = shipped_traces()
    assert len(names) == 11
    for name in names:
        trace = load_shipped(name)
        assert trace.gap_seconds == (300 if name.startswith("16-node") else 600)
        assert max(trace.counts) == (16 if name.startswith("16-node") else 1)
    assert load_shipped("1-node__aws-10-26-2022__us-west-2b_k80_1").available_share() == pytest.approx(
        0.12, abs=0.005
    )


def test_capacity_is_piecewise_constant_over_each_gap() -> None:
    trace = parse_availability('{"metadata": {"gap_seconds": 600}, "data": [0, 3, 1]}', "t")
    assert trace.capacity_at(0.0) == 0
    assert trace.capacity_at(10 / 60) == 3  # tick 1 starts at 600 s
    assert trace.capacity_at(19.9 / 60) == 3
    assert trace.capacity_at(20 / 60) == 1
    with pytest.raises(AvailabilityError, match="outside the trace"):
        trace.capacity_at(0.5)


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"metadata": {"gap_seconds": 600}, "data": [1], "extra": 1}', "unknown key"),
        ('{"data": [1]}', "'metadata' missing"),
        ('{"metadata": {}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": -5}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 1.5}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": true}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 600}, "data": []}', "empty"),
        ('{"metadata": {"gap_seconds": 600}, "data": [1, -1]}', r"data\[1\]"),
        ('{"metadata": {"gap_seconds": 600}, "data": [1, 0.5]}', r"data\[1\]"),
        ('{"metadata": {"gap_seconds": 600}, "data": [1, "2"]}', r"data\[1\]"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_fault(text: str, fault: str) -> None:
    with pytest.raises(AvailabilityError, match=fault) as caught:
        parse_availability(text, "bad.json")
    assert "bad.json" in str(caught.value)


def test_missing_file_and_unknown_name_are_named(tmp_path: Path) -> None:
    with pytest.raises(AvailabilityError, match="no such availability trace"):
        load_availability(tmp_path / "nope.json")
    with pytest.raises(AvailabilityError, match="no shipped availability trace"):
        load_shipped("us-east-9z")


def test_shipped_copies_match_the_shared_data_when_present() -> None:
    if not SHARED.is_dir():
        pytest.skip("the shared data is not mounted here")
    for name in shipped_traces():
        source = json.loads((SHARED / f"{name}.json").read_text())
        assert load_shipped(name).counts == tuple(source["data"])
