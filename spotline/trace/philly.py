"""Adapter: the Philly per-job table (shared/traces/philly.csv) -> the canonical trace format.

Philly's columns are `timestamp,duration,num_gpus,gpu_time,cluster` (see shared/traces/README.md):
the arrival is a wall-clock string, rows are not sorted, and there is no priority. The adapter

1. keeps the jobs that arrive in [start, end) (an `end` given as a bare date includes that day);
2. uses the virtual cluster (`cluster`) as the team;
3. assigns every job a priority class drawn from a seeded generator, in the proportions of
   `PRIORITY_MIX`: one draw per row of the whole file in file order, so a job keeps its class
   whatever window is cut, and the same seed always gives the same classes;
4. names each job `philly-<row>` (its data row in the source file), and sorts by arrival.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from spotline.domain.models import Priority
from spotline.trace.canonical import Trace, TraceError, TraceJob

PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "cluster")

# Shares of the priority classes: the QoS mix of a production GPU cluster (Alibaba GPU trace 2023:
# latency-sensitive 57%, burstable 1.4%, best-effort 42%) with a small critical share carved out of
# the latency-sensitive one (shared/traces/README.md).
PRIORITY_MIX: tuple[tuple[Priority, float], ...] = (
    (Priority.CRITICAL, 0.01),
    (Priority.HIGH, 0.56),
    (Priority.NORMAL, 0.015),
    (Priority.LOW, 0.415),
)


def parse_when(text: str, *, end: bool = False) -> datetime:
    """A window bound: `YYYY-MM-DD` or an ISO-8601 date-time (UTC when it has no zone). A bare
    date as the end of a window means the end of that day."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD or ISO-8601): {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if end and _is_bare_date(text):
        parsed += timedelta(days=1)
    return parsed


def _is_bare_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def read_philly(
    path: Path | str,
    start: datetime,
    end: datetime,
    seed: int,
    mix: Sequence[tuple[Priority, float]] = PRIORITY_MIX,
) -> Trace:
    """The jobs of `path` that arrive in [start, end), in the canonical form (see module doc)."""
    source = str(path)
    if end <= start:
        raise ValueError(f"the window is empty: end {end.isoformat()} is not after start {start.isoformat()}")
    classes = [p for p, _ in mix]
    weights = [w for _, w in mix]
    rng = random.Random(seed)
    jobs: list[tuple[float, int, TraceJob]] = []
    with Path(path).open(newline="") as handle:
        for row_number, line, fields in _rows(handle, source):
            priority = rng.choices(classes, weights)[0]
            arrival = _field_time(fields["timestamp"], source, line)
            if not start <= arrival < end:
                continue
            duration = _field_number(fields["duration"], "duration", source, line)
            if duration <= 0:
                raise TraceError(source, line, "duration", f"must be positive, got {fields['duration']}")
            gpus = _field_gpus(fields["num_gpus"], source, line)
            team = fields["cluster"].strip()
            if not team:
                raise TraceError(source, line, "cluster", "missing value")
            submit_s = (arrival - start).total_seconds()
            job = TraceJob(
                job_id=f"philly-{row_number:05d}",
                submit_s=submit_s,
                duration_s=duration,
                gpus=gpus,
                team=team,
                priority=priority,
                line=line,
            )
            jobs.append((submit_s, row_number, job))
    jobs.sort(key=lambda e: (e[0], e[1]))
    return Trace(jobs=[j for _, _, j in jobs], source=source)


def _rows(handle: Iterator[str], source: str) -> Iterator[tuple[int, int, dict[str, str]]]:
    reader = csv.reader(handle)
    header = [h.strip() for h in next(reader, [])]
    for column in PHILLY_COLUMNS:
        if column not in header:
            raise TraceError(
                source, 1, column, f"missing column (a Philly table has {', '.join(PHILLY_COLUMNS)})"
            )
    index = {name: i for i, name in enumerate(header)}
    for row_number, row in enumerate(reader):
        if not row:
            continue
        fields = {name: (row[i] if i < len(row) else "") for name, i in index.items()}
        yield row_number, reader.line_num, fields


def _field_time(text: str, source: str, line: int) -> datetime:
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TraceError(source, line, "timestamp", f"not a date-time: {text!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _field_number(text: str, name: str, source: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(source, line, name, f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TraceError(source, line, name, f"not a finite number: {text!r}")
    return value


def _field_gpus(text: str, source: str, line: int) -> int:
    value = _field_number(text, "num_gpus", source, line)
    if value <= 0 or not value.is_integer():
        raise TraceError(source, line, "num_gpus", f"must be a positive whole number, got {text}")
    return int(value)
