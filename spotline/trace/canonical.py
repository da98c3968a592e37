"""The canonical trace format that `spotline simulate` replays (architecture.md, a contract).

CSV with the header `job_id,submit_s,duration_s,gpus,team,priority`, optional columns
`deadline_s,gpu_type,spot_ok`, and three Spotline extensions, `checkpoint_interval_s` and
`checkpoint_write_s` (a job's own checkpoint cadence; the simulator's defaults apply where they are
absent or empty) and `expected_runtime_s` (the run time the job declared, as its spec's field; where
absent, the simulator draws the declaration from its estimate model). Columns may come in any
order; other columns are ignored.

Bad input is an error that names the line and the field (`TraceError`); rows out of `submit_s`
order are sorted (stable), with a warning that names the first line out of order.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spotline.domain.models import Priority

REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "submit_s", "duration_s", "gpus", "team", "priority")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "deadline_s",
    "gpu_type",
    "spot_ok",
    "checkpoint_interval_s",
    "checkpoint_write_s",
    "expected_runtime_s",
)
_PRIORITY_NAMES = ", ".join(p.value for p in Priority)
_TRUE = frozenset({"1", "true", "yes", "y", "t"})
_FALSE = frozenset({"0", "false", "no", "n", "f"})


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file, the line and the field."""

    def __init__(self, source: str, line: int, field_name: str | None, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field_name
        where = f"{source} line {line}" + (f", field {field_name!r}" if field_name else "")
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. Times are seconds from the trace start."""

    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    team: str
    priority: Priority
    deadline_s: float | None = None
    gpu_type: str | None = None
    spot_ok: bool = True
    checkpoint_interval_s: float | None = None
    checkpoint_write_s: float | None = None
    expected_runtime_s: float | None = None
    # Line of the job in its source file (1 = header), for messages.
    line: int = 0


@dataclass
class Trace:
    """The jobs of a trace in submission order, and what reading it warned about."""

    jobs: list[TraceJob]
    source: str = "<trace>"
    warnings: list[str] = field(default_factory=list)

    @property
    def teams(self) -> list[str]:
        return sorted({j.team for j in self.jobs})


def read_trace(path: Path | str) -> Trace:
    """Read and validate a canonical trace file."""
    path = Path(path)
    with path.open(newline="") as handle:
        return parse_trace(handle, source=str(path))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Read and validate a canonical trace from an iterable of CSV lines."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(
            source, 1, None, "empty file: expected the header " + ",".join(REQUIRED_COLUMNS)
        ) from None
    except csv.Error as error:
        raise TraceError(source, 1, None, f"not CSV: {error}") from None
    names = [h.strip() for h in header]
    for column in REQUIRED_COLUMNS:
        if column not in names:
            raise TraceError(
                source, 1, column, f"missing column (the header needs {', '.join(REQUIRED_COLUMNS)})"
            )
    index = {name: i for i, name in enumerate(names)}
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            job = _parse_row(row, index, line, source)
            if job.job_id in seen:
                raise TraceError(
                    source, line, "job_id", f"duplicate id {job.job_id!r} (first on line {seen[job.job_id]})"
                )
            seen[job.job_id] = line
            jobs.append(job)
    except csv.Error as error:
        raise TraceError(source, reader.line_num, None, f"not CSV: {error}") from None
    warnings: list[str] = []
    for previous, job in itertools.pairwise(jobs):
        if job.submit_s < previous.submit_s:
            warnings.append(
                f"{source} line {job.line}: submit_s {job.submit_s:g} is earlier than line {previous.line}'s"
                f" {previous.submit_s:g}; the trace was sorted by submit_s"
            )
            jobs.sort(key=lambda j: j.submit_s)
            break
    return Trace(jobs=jobs, source=source, warnings=warnings)


def _parse_row(row: Sequence[str], index: dict[str, int], line: int, source: str) -> TraceJob:
    def cell(name: str) -> str:
        i = index.get(name)
        if i is None or i >= len(row):
            return ""
        return row[i].strip()

    def required(name: str) -> str:
        value = cell(name)
        if not value:
            raise TraceError(source, line, name, "missing value")
        return value

    def number(name: str, value: str) -> float:
        try:
            parsed = float(value)
        except ValueError:
            raise TraceError(source, line, name, f"not a number: {value!r}") from None
        if not math.isfinite(parsed):
            raise TraceError(source, line, name, f"not a finite number: {value!r}")
        return parsed

    def optional_positive(name: str) -> float | None:
        value = cell(name)
        if not value:
            return None
        parsed = number(name, value)
        if parsed <= 0:
            raise TraceError(source, line, name, f"must be positive, got {value}")
        return parsed

    job_id = required("job_id")
    submit_s = number("submit_s", required("submit_s"))
    if submit_s < 0:
        raise TraceError(source, line, "submit_s", f"must not be negative, got {cell('submit_s')}")
    duration_s = number("duration_s", required("duration_s"))
    if duration_s <= 0:
        raise TraceError(source, line, "duration_s", f"must be positive, got {cell('duration_s')}")
    gpus_text = required("gpus")
    try:
        gpus = int(gpus_text)
    except ValueError:
        raise TraceError(source, line, "gpus", f"not a whole number: {gpus_text!r}") from None
    if gpus <= 0:
        raise TraceError(source, line, "gpus", f"must be positive, got {gpus_text}")
    team = required("team")
    priority_text = required("priority").lower()
    try:
        priority = Priority(priority_text)
    except ValueError:
        raise TraceError(
            source, line, "priority", f"unknown priority {cell('priority')!r} (one of {_PRIORITY_NAMES})"
        ) from None
    deadline_s: float | None = None
    if cell("deadline_s"):
        deadline_s = number("deadline_s", cell("deadline_s"))
        if deadline_s <= submit_s:
            raise TraceError(
                source, line, "deadline_s", f"must be after submit_s ({submit_s:g}), got {deadline_s:g}"
            )
    spot_text = cell("spot_ok").lower()
    if not spot_text or spot_text in _TRUE:
        spot_ok = True
    elif spot_text in _FALSE:
        spot_ok = False
    else:
        raise TraceError(source, line, "spot_ok", f"not a boolean: {cell('spot_ok')!r} (true/false)")
    return TraceJob(
        job_id=job_id,
        submit_s=submit_s,
        duration_s=duration_s,
        gpus=gpus,
        team=team,
        priority=priority,
        deadline_s=deadline_s,
        gpu_type=cell("gpu_type") or None,
        spot_ok=spot_ok,
        checkpoint_interval_s=optional_positive("checkpoint_interval_s"),
        checkpoint_write_s=optional_positive("checkpoint_write_s"),
        expected_runtime_s=optional_positive("expected_runtime_s"),
        line=line,
    )


def write_trace(jobs: Iterable[TraceJob], path: Path | str) -> int:
    """Write jobs in the canonical format (optional columns only when some job uses them);
    returns the number of jobs written."""
    text, count = format_trace(jobs)
    Path(path).write_text(text)
    return count


def format_trace(jobs: Iterable[TraceJob]) -> tuple[str, int]:
    rows = list(jobs)
    optional = [
        column for column in OPTIONAL_COLUMNS if any(_optional_value(job, column) != "" for job in rows)
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*REQUIRED_COLUMNS, *optional])
    for job in rows:
        writer.writerow(
            [
                job.job_id,
                _number(job.submit_s),
                _number(job.duration_s),
                job.gpus,
                job.team,
                job.priority.value,
                *(_optional_value(job, column) for column in optional),
            ]
        )
    return out.getvalue(), len(rows)


def _optional_value(job: TraceJob, column: str) -> str:
    if column == "spot_ok":
        return "" if job.spot_ok else "false"
    value = getattr(job, column)
    if value is None:
        return ""
    return _number(value) if isinstance(value, float) else str(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
