"""Hostile input on the newest flags: `local up --spot-availability/--spot-tick-seconds`,
`simulate --spot-availability/--spot-model/--deadline-share`, `simulate deadline` and
`demo --scenario`. Each exits 2 with one message naming the flag or file and what is wrong, no
traceback, and writes no output file (a bad output path is refused before the work)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from spotline.cli import app
from spotline.cli.outfile import OutputError, write_text
from spotline.sim.availability import AvailabilityError, parse_availability

DATA = Path(__file__).resolve().parents[2] / "spotline" / "sim" / "data" / "availability"
V100 = DATA / "1-node__aws-10-26-2022__us-west-2a_v100_1.json"
ZONE = DATA / "16-node__aws-08-27-2023__us-east-2b_v100_1.json"
GOOD = '{"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}'


def _run(args: list[str]) -> Result:
    result = CliRunner().invoke(app, args)
    # typer exits through SystemExit; anything else escaped as a traceback
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _words(result: Result) -> str:
    """The output without rich's box and line breaks."""
    return " ".join(w for w in result.output.replace("│", " ").split() if w.strip("─╭╮╰╯"))


WHOLE = "must be a whole number"
POSITIVE = "gap_seconds must be a positive whole"
BAD_TRACES = {
    "empty.json": ("", "not JSON"),
    "rows.json": ("job,count\n1,2\n", "not JSON"),
    "columns.json": ('{"meta": {"gap_seconds": 600}, "data": [1]}', "unknown key(s) meta"),
    "no-data.json": ('{"metadata": {"gap_seconds": 600}}', "'data' missing"),
    "negative.json": ('{"metadata": {"gap_seconds": 600}, "data": [1, -1]}', f"data[1] {WHOLE}"),
    "text.json": ('{"metadata": {"gap_seconds": 600}, "data": [1, "x"]}', f"data[1] {WHOLE}"),
    "nan-count.json": ('{"metadata": {"gap_seconds": 600}, "data": [1, NaN]}', "NaN is not a number"),
    "inf-count.json": ('{"metadata": {"gap_seconds": 600}, "data": [Infinity]}', "Infinity is not a number"),
    "nan-gap.json": ('{"metadata": {"gap_seconds": NaN}, "data": [1]}', "NaN is not a number"),
    "huge-gap.json": ('{"metadata": {"gap_seconds": 1e400}, "data": [1]}', POSITIVE),
    "zero-gap.json": ('{"metadata": {"gap_seconds": 0}, "data": [1]}', POSITIVE),
}


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_a_bad_availability_trace_is_one_error_naming_the_file(name: str) -> None:
    text, message = BAD_TRACES[name]
    with pytest.raises(AvailabilityError) as caught:
        parse_availability(text, name)
    assert str(caught.value).startswith(f"{name}: ") and message in str(caught.value)


def _trace_file(tmp_path: Path, name: str) -> Path:
    if name == "missing.json":
        return tmp_path / name
    if name == "a-directory":
        (tmp_path / name).mkdir()
        return tmp_path / name
    path = tmp_path / name
    path.write_text(BAD_TRACES[name][0] if name in BAD_TRACES else GOOD)
    return path


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.json", "no such availability trace"),
        ("a-directory", "Is a directory"),
        ("empty.json", "not JSON"),
        ("rows.json", "not JSON"),
        ("columns.json", "unknown key(s) meta"),
        ("nan-count.json", "NaN is not a number"),
        ("huge-gap.json", "gap_seconds must be a positive whole number"),
    ],
)
def test_local_up_refuses_a_bad_trace_before_starting(tmp_path: Path, name: str, message: str) -> None:
    result = _run(["local", "up", "--state-dir", str(tmp_path / "s"), "--spot-availability",
                   str(_trace_file(tmp_path, name))])  # fmt: skip
    assert result.exit_code == 2
    assert "--spot-availability" in _words(result) and message in _words(result)
    assert not (tmp_path / "s").exists()  # nothing started, nothing written


@pytest.mark.parametrize("tick", ["0", "-1", "nan", "inf", "-inf", "1e300", "86401", "two"])
def test_local_up_refuses_a_bad_tick(tmp_path: Path, tick: str) -> None:
    good = _trace_file(tmp_path, "good.json")
    result = _run(["local", "up", "--state-dir", str(tmp_path / "s"), "--spot-availability", str(good),
                   "--spot-tick-seconds", tick])  # fmt: skip
    assert result.exit_code == 2
    shown = "a valid number" if tick == "two" else f"got {float(tick):g}"  # ("two": typer's own refusal)
    assert "--spot-tick-seconds" in _words(result) and shown in _words(result)
    assert not (tmp_path / "s").exists()


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    rows = "".join(f"j{i},{i * 60},3600,1,a,normal\n" for i in range(6))
    path.write_text("job_id,submit_s,duration_s,gpus,team,priority\n" + rows)
    return path


def _simulate(tmp_path: Path, *extra: str) -> Result:
    out = tmp_path / "out.json"
    return _run(["simulate", "--trace", str(_csv(tmp_path)), "--gpus", "32", "--policy", "fifo",
                 "--workers", "1", "--json", str(out), *extra])  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--spot-availability", str(ZONE), "--spot-availability", str(ZONE)], "is given twice"),
        (["--spot-availability", str(ZONE), "--spot-availability", "SAME-ZONE"], "are both zone us-east-2b"),
        (["--spot-availability", "MISSING"], "no such availability trace"),
        (["--spot-availability", "NAN"], "NaN is not a number JSON allows"),
        (["--spot-model", "bursty"], "'bursty' is not one of"),
        (["--deadline-share", "-0.1"], "--deadline-share: must be a share in [0, 1], got -0.1"),
        (["--deadline-share", "1.5"], "--deadline-share: must be a share in [0, 1], got 1.5"),
        (["--deadline-share", "nan"], "--deadline-share: must be a share in [0, 1], got nan"),
        (["--spot-fraction", "nan"], "--spot-fraction: must be a share in [0, 1], got nan"),
        (["--decisions", "/no/such/dir/d.jsonl"], "--decisions: cannot write /no/such/dir/d.jsonl"),
        (["--plot", "FILE"], "--plot: cannot make the directory"),
    ],
)
def test_simulate_refuses_bad_flags_before_simulating(tmp_path: Path, extra: list[str], message: str) -> None:
    same_zone = tmp_path / "us-east-2b_other.json"
    same_zone.write_text(GOOD)
    nan = tmp_path / "nan.json"
    nan.write_text(BAD_TRACES["nan-count.json"][0])
    names = {"SAME-ZONE": str(same_zone), "MISSING": str(tmp_path / "missing.json"), "NAN": str(nan),
             "FILE": str(same_zone)}  # fmt: skip
    result = _simulate(tmp_path, *(names.get(e, e) for e in extra))
    assert result.exit_code == 2
    assert message in _words(result)
    assert "events in" not in result.output  # refused before the simulation ran
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("out", ["/no/such/dir/out.json", "DIRECTORY"])
def test_simulate_refuses_an_unwritable_json_before_simulating(tmp_path: Path, out: str) -> None:
    if out == "DIRECTORY":
        out = str(tmp_path)
    result = _run(["simulate", "--trace", str(_csv(tmp_path)), "--gpus", "32", "--policy", "fifo",
                   "--workers", "1", "--json", out])  # fmt: skip
    assert result.exit_code == 2
    assert f"--json: {out} is a directory" in result.output or f"--json: cannot write {out}" in result.output
    assert "events in" not in result.output


def _deadline(tmp_path: Path, **change: str) -> Result:
    flags = {"--availability": str(V100), "--job-hours": "48", "--deadline-hours": "60",
             "--changeover-hours": "0.2", "--price-ratio": "3", "--start-hour": "0",
             "--policy": "greedy", "--json": str(tmp_path / "o.json")}  # fmt: skip
    flags.update(change)
    return _run(["simulate", "deadline", *itertools.chain(*flags.items())])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--job-hours": "0"}, "--job-hours must be > 0, got 0"),
        ({"--job-hours": "-2"}, "--job-hours must be > 0, got -2"),
        ({"--job-hours": "nan"}, "--job-hours must be a finite number, got nan"),
        ({"--job-hours": "inf", "--deadline-hours": "inf"}, "--job-hours must be a finite number, got inf"),
        ({"--deadline-hours": "47"}, "infeasible job: --job-hours 48 + --changeover-hours 0.2 exceed"),
        ({"--deadline-hours": "nan"}, "--deadline-hours must be a finite number, got nan"),
        ({"--changeover-hours": "-0.1"}, "--changeover-hours must be >= 0, got -0.1"),
        ({"--changeover-hours": "nan"}, "--changeover-hours must be a finite number, got nan"),
        ({"--price-ratio": "0.9"}, "--price-ratio must be >= 1"),
        ({"--price-ratio": "inf"}, "--price-ratio must be a finite number, got inf"),
        ({"--price-ratio": "nan"}, "--price-ratio must be a finite number, got nan"),
        ({"--start-hour": "600"}, "--start-hour 600 + --deadline-hours 60 run past the end of"),
        ({"--start-hour": "1e9"}, "run past the end of"),
        ({"--start-hour": "-1"}, "--start-hour must be a finite number >= 0, got -1"),
        ({"--start-hour": "nan"}, "--start-hour must be a finite number >= 0, got nan"),
        ({"--start-hour": "inf"}, "--start-hour must be a finite number >= 0, got inf"),
        ({"--policy": "cheapest"}, "--policy: unknown policy 'cheapest'"),
        ({"--json": "/no/such/dir/o.json"}, "--json: cannot write /no/such/dir/o.json"),
        ({"--availability": "NAN"}, "NaN is not a number JSON allows"),
    ],
)
def test_simulate_deadline_refuses_bad_flags_and_writes_nothing(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    if change.get("--availability") == "NAN":
        change["--availability"] = str(_trace_file(tmp_path, "nan-count.json"))
    result = _deadline(tmp_path, **change)
    assert result.exit_code == 2
    assert message in _words(result)
    assert list(tmp_path.glob("o.json*")) == [] and list(tmp_path.glob(".o.json*")) == []


def test_simulate_deadline_refuses_a_directory_as_json(tmp_path: Path) -> None:
    result = _deadline(tmp_path, **{"--json": str(tmp_path)})
    assert result.exit_code == 2
    assert f"--json: {tmp_path} is a directory" in result.output


def test_demo_refuses_an_unknown_scenario() -> None:
    result = _run(["demo", "--scenario", "chaos"])
    assert result.exit_code == 2
    assert "--scenario" in _words(result) and "'chaos' is not one of" in _words(result)


def test_an_output_file_is_written_whole_or_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text('{"old": true}')
    write_text(out, '{"new": true}', "--json")
    assert json.loads(out.read_text()) == {"new": True}
    gone = tmp_path / "gone"
    with pytest.raises(OutputError, match="--json: cannot write"):
        write_text(gone / "out.json", "{}", "--json")
    target = tmp_path / "target"
    target.mkdir()  # a rename onto a directory fails after the temporary file is written
    with pytest.raises(OutputError, match="--json: cannot write"):
        write_text(target, "{}", "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "target"]  # no temporary left
