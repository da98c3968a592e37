"""The canonical trace format and the Philly adapter: good input, and bad input that names the
line and the field."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from spotline.domain.models import Priority
from spotline.trace import (
    TraceError,
    format_trace,
    parse_trace,
    parse_when,
    read_philly,
    read_trace,
    write_trace,
)

HEADER = "job_id,submit_s,duration_s,gpus,team,priority"


def lines(*rows: str, header: str = HEADER) -> list[str]:
    return [header + "\n", *(r + "\n" for r in rows)]


def test_reads_required_and_optional_columns() -> None:
    trace = parse_trace(
        lines(
            "a,0,60,1,vision,high,,,",
            "b,5,120.5,16,nlp,LOW,7200,a100,false",
            header=HEADER + ",deadline_s,gpu_type,spot_ok",
        )
    )
    a, b = trace.jobs
    assert (a.job_id, a.submit_s, a.duration_s, a.gpus, a.team, a.priority) == (
        "a",
        0.0,
        60.0,
        1,
        "vision",
        Priority.HIGH,
    )
    assert (a.deadline_s, a.gpu_type, a.spot_ok) == (None, None, True)
    assert (b.deadline_s, b.gpu_type, b.spot_ok, b.priority) == (7200.0, "a100", False, Priority.LOW)
    assert trace.warnings == []
    assert trace.teams == ["nlp", "vision"]


def test_columns_may_come_in_any_order() -> None:
    trace = parse_trace(lines("high,t,2,a,0,30", header="priority,team,gpus,job_id,submit_s,duration_s"))
    assert trace.jobs[0].job_id == "a" and trace.jobs[0].gpus == 2


@pytest.mark.parametrize(
    ("header", "missing"),
    [
        ("job_id,submit_s,gpus,team,priority", "duration_s"),
        ("job_id,duration_s,gpus,team,priority", "submit_s"),
        ("submit_s,duration_s,gpus,team,priority", "job_id"),
    ],
)
def test_a_missing_column_names_the_header_line_and_the_column(header: str, missing: str) -> None:
    with pytest.raises(TraceError) as error:
        parse_trace(lines("a,0,60,1,t", header=header), source="t.csv")
    assert (error.value.line, error.value.field) == (1, missing)
    assert str(error.value).startswith(f"t.csv line 1, field {missing!r}: missing column")


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("b,10,-5,1,t,high", "duration_s", "must be positive, got -5"),
        ("b,10,0,1,t,high", "duration_s", "must be positive"),
        ("b,10,60,1,t,urgent", "priority", "unknown priority 'urgent'"),
        ("b,10,60,0,t,high", "gpus", "must be positive"),
        ("b,10,60,1.5,t,high", "gpus", "not a whole number"),
        ("b,-1,60,1,t,high", "submit_s", "must not be negative"),
        ("b,soon,60,1,t,high", "submit_s", "not a number"),
        ("b,10,60,1,,high", "team", "missing value"),
        ("b,10,nan,1,t,high", "duration_s", "not a finite number"),
        ("a,10,60,1,t,high", "job_id", "duplicate id 'a' (first on line 2)"),
    ],
)
def test_bad_rows_name_the_line_and_the_field(row: str, field: str, message: str) -> None:
    with pytest.raises(TraceError) as error:
        parse_trace(lines("a,0,60,1,t,high", row), source="t.csv")
    assert (error.value.line, error.value.field) == (3, field)
    assert f"t.csv line 3, field {field!r}: {message}" in str(error.value)


def test_bad_optional_values_name_the_field() -> None:
    header = HEADER + ",deadline_s,spot_ok"
    with pytest.raises(TraceError, match=r"line 2, field 'spot_ok': not a boolean"):
        parse_trace(lines("a,0,60,1,t,high,,maybe", header=header))
    with pytest.raises(TraceError, match=r"line 2, field 'deadline_s': must be after submit_s"):
        parse_trace(lines("a,100,60,1,t,high,50,", header=header))


def test_unsorted_times_are_sorted_with_a_warning_naming_the_line() -> None:
    trace = parse_trace(
        lines("a,0,60,1,t,high", "b,30,60,1,t,low", "c,10,60,1,t,low", "d,20,60,1,t,low"), source="t.csv"
    )
    assert [j.job_id for j in trace.jobs] == ["a", "c", "d", "b"]
    assert trace.warnings == [
        "t.csv line 4: submit_s 10 is earlier than line 3's 30; the trace was sorted by submit_s"
    ]


def test_write_then_read_gives_the_same_jobs(tmp_path: Path) -> None:
    header = HEADER + ",deadline_s,gpu_type,spot_ok,checkpoint_interval_s,checkpoint_write_s"
    original = parse_trace(
        lines("a,0,60,1,t,high,,,,,", "b,5.5,120,8,u,critical,900,a100,false,600,30", header=header)
    )
    write_trace(original.jobs, tmp_path / "t.csv")
    again = read_trace(tmp_path / "t.csv")
    assert [
        (
            j.job_id,
            j.submit_s,
            j.duration_s,
            j.gpus,
            j.team,
            j.priority,
            j.deadline_s,
            j.gpu_type,
            j.spot_ok,
            j.checkpoint_interval_s,
            j.checkpoint_write_s,
        )
        for j in again.jobs
    ] == [
        (
            j.job_id,
            j.submit_s,
            j.duration_s,
            j.gpus,
            j.team,
            j.priority,
            j.deadline_s,
            j.gpu_type,
            j.spot_ok,
            j.checkpoint_interval_s,
            j.checkpoint_write_s,
        )
        for j in original.jobs
    ]
    # Optional columns are written only when some job uses them.
    assert format_trace(parse_trace(lines("a,0,60,1,t,high")).jobs)[0].splitlines()[0] == HEADER


PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-02 00:10:00,60.0,1,60.0,vc1
2017-10-01 23:59:59,30.0,1,30.0,vc1
2017-10-03 12:00:00,600.0,16,9600.0,vc2
2017-10-02 00:00:05,120.0,4,480.0,vc2
2017-10-04 00:00:00,10.0,1,10.0,vc1
"""


def test_philly_window_teams_ids_and_order(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY)
    trace = read_philly(path, parse_when("2017-10-02"), parse_when("2017-10-03", end=True), seed=1)
    # The bare end date includes its whole day; rows out of the window are dropped; sorted.
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus, j.team) for j in trace.jobs] == [
        ("philly-00003", 5.0, 120.0, 4, "vc2"),
        ("philly-00000", 600.0, 60.0, 1, "vc1"),
        ("philly-00002", 36 * 3600.0, 600.0, 16, "vc2"),
    ]


def test_philly_priorities_are_seeded_per_row_whatever_the_window(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY)
    wide = read_philly(path, parse_when("2017-09-01"), parse_when("2017-11-01"), seed=7)
    narrow = read_philly(path, parse_when("2017-10-03"), parse_when("2017-10-04"), seed=7)
    classes = {j.job_id: j.priority for j in wide.jobs}
    assert all(classes[j.job_id] == j.priority for j in narrow.jobs)
    assert [
        j.priority for j in read_philly(path, parse_when("2017-09-01"), parse_when("2017-11-01"), seed=7).jobs
    ] == [j.priority for j in wide.jobs]


def test_philly_bad_rows_name_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY.replace("2017-10-03 12:00:00", "yesterday"))
    with pytest.raises(TraceError, match=r"line 4, field 'timestamp'"):
        read_philly(path, parse_when("2017-10-02"), parse_when("2017-10-03"), seed=1)
    path.write_text("timestamp,duration,cluster\n")
    with pytest.raises(TraceError, match=r"line 1, field 'num_gpus': missing column"):
        read_philly(path, parse_when("2017-10-02"), parse_when("2017-10-03"), seed=1)


def test_window_bounds() -> None:
    assert parse_when("2017-10-02") == datetime(2017, 10, 2, tzinfo=UTC)
    assert parse_when("2017-10-29", end=True) == datetime(2017, 10, 30, tzinfo=UTC)
    assert parse_when("2017-10-29T12:00:00", end=True) == datetime(2017, 10, 29, 12, tzinfo=UTC)
    with pytest.raises(ValueError, match="not a date"):
        parse_when("last week")


@pytest.mark.parametrize("duration", ["nan", "inf", "-inf", "1e400"])
def test_philly_non_finite_durations_are_refused_naming_the_field(tmp_path: Path, duration: str) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY.replace("2017-10-02 00:10:00,60.0", f"2017-10-02 00:10:00,{duration}"))
    with pytest.raises(TraceError, match=r"line 2, field 'duration': not a finite number"):
        read_philly(path, parse_when("2017-10-02"), parse_when("2017-10-03"), seed=1)


@pytest.mark.parametrize("cell", ["inf", "1e400", "nan"])
def test_non_finite_optional_numbers_are_refused_naming_the_field(cell: str) -> None:
    header = HEADER + ",deadline_s,spot_ok,checkpoint_interval_s"
    with pytest.raises(TraceError, match=r"line 2, field 'checkpoint_interval_s': not a finite number"):
        parse_trace(lines(f"a,0,60,1,t,high,,,{cell}", header=header))
