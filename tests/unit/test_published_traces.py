"""SkyPilot's published traces as they are: a preemption trace's `prices` key is accepted (and
not used by the cost model), and a start hour rounded off the grid is snapped to the nearest tick,
saying so; one exactly halfway between two ticks is refused. The fixtures are the first ticks of
two published files (skypilot-org/spot-traces, commit 221da1a), cut short and otherwise unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from spotline.cli import app
from spotline.sim.availability import AvailabilityError, load_availability, parse_availability
from spotline.sim.deadline import JobSetup, grid_tick, simulate_deadline, snap_note

FIXTURES = Path(__file__).resolve().parent / "data" / "skypilot"
GRID_195 = FIXTURES / "aws-02-15-2023__us-west-2a_v100_1__first-2600.json"
PRICED = FIXTURES / "preemption-aws-04-19-2023__us-east-1b_intel_64__first-600.json"


def _deadline(trace: Path, out: Path, *starts: str, policy: str = "greedy") -> Result:
    args = ["simulate", "deadline", "--availability", str(trace), "--job-hours", "1",
            "--deadline-hours", "2", "--changeover-hours", "0.2", "--price-ratio", "3",
            "--policy", policy, "--json", str(out)]  # fmt: skip
    for start in starts:
        args += ["--start-hour", start]
    result = CliRunner().invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_a_preemption_trace_with_prices_loads_and_keeps_them() -> None:
    trace = load_availability(PRICED)
    raw = json.loads(PRICED.read_text())
    assert set(raw) == {"metadata", "data", "prices"}
    assert trace.gap_seconds == 34 and len(trace.counts) == 600
    assert trace.prices is not None and len(trace.prices) == 600
    assert trace.prices == tuple(raw["prices"])
    assert min(trace.prices) == 1.2754 and max(trace.prices) == 1.3024


@pytest.mark.parametrize(
    ("prices", "fault"),
    [
        ("[1.0]", r"one price per tick of 'data' \(2\), got 1 entries"),
        ('"cheap"', "one price per tick of 'data' (2), got str"),
        ("[1.0, -0.5]", r"prices\[1\] must be a finite price >= 0, got -0.5"),
        ('[1.0, "1"]', r"prices\[1\] must be a finite price >= 0, got '1'"),
        ("[true, 1.0]", r"prices\[0\] must be a finite price >= 0, got True"),
        ("[1.0, null]", r"prices\[1\] must be a finite price >= 0, got None"),
    ],
)
def test_bad_prices_are_refused_naming_the_fault(prices: str, fault: str) -> None:
    text = f'{{"metadata": {{"gap_seconds": 32}}, "data": [1, 0], "prices": {prices}}}'
    with pytest.raises(AvailabilityError, match=fault.replace("(2)", r"\(2\)")) as caught:
        parse_availability(text, "priced.json")
    assert "priced.json" in str(caught.value)


def test_a_priced_trace_runs_and_the_output_says_prices_are_not_used(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    result = _deadline(PRICED, out, "0", "1")
    assert result.exit_code == 0, result.output
    assert "'prices' (Spot per hour, 1.2754 to 1.3024) are not used" in result.output
    document = json.loads(out.read_text())
    assert len(document["results"]) == 2
    assert any("'prices'" in note for note in document["notes"])


def test_grid_tick_snaps_within_half_a_tick_and_refuses_halfway() -> None:
    trace = load_availability(GRID_195)
    assert grid_tick(trace, 134.117) == 2476  # 2476.0062 ticks of 195 s
    assert grid_tick(trace, 2476 * 195 / 3600) == 2476
    assert grid_tick(trace, 2476.49 * 195 / 3600) == 2476
    assert grid_tick(trace, 2476.51 * 195 / 3600) == 2477
    assert snap_note(trace, 2476 * 195 / 3600) is None
    note = snap_note(trace, 134.117)
    assert note is not None and "snapped to 134.117 h (tick 2476, 1.2 s earlier)" in note
    with pytest.raises(ValueError, match="halfway between two ticks"):
        grid_tick(trace, 2476.5 * 195 / 3600)


def test_a_start_off_the_grid_runs_as_the_tick_it_snaps_to(tmp_path: Path) -> None:
    trace = load_availability(GRID_195)
    setup = JobSetup(1.0, 2.0, 0.2, 3.0)
    on_grid = 2476 * 195 / 3600
    for policy in ("greedy", "uniform-progress", "omniscient", "spotline"):
        snapped = simulate_deadline(trace, setup, [134.117], policy)[0]
        exact = simulate_deadline(trace, setup, [on_grid], policy)[0]
        assert snapped.cost_fraction_of_on_demand == exact.cost_fraction_of_on_demand, policy
        assert snapped.start_hour == 134.117
    out = tmp_path / "o.json"
    result = _deadline(GRID_195, out, "134.117")
    assert result.exit_code == 0, result.output
    assert "note: --start-hour 134.117 is not on the trace's 195 s grid: snapped to" in result.output
    document = json.loads(out.read_text())
    assert document["results"][0]["start_hour"] == 134.117
    assert document["results"][0]["grid_start_hour"] == pytest.approx(on_grid)
    assert len(document["notes"]) == 1


def test_a_start_halfway_between_ticks_is_refused_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    result = _deadline(GRID_195, out, f"{2476.5 * 195 / 3600!r}")
    assert result.exit_code == 2
    assert "halfway between two ticks of the trace's 195 s grid" in " ".join(result.output.split())
    assert not out.exists()
