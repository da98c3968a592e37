"""A job's training logs (`GET /jobs/{id}/logs`), scoped to the caller's team like every route.

A team reads its own runs' logs through the API, never with CloudWatch access of its own: on AWS
the control plane reads the Batch job's log stream in the training log group (its role may read
that log group only, docs/security.md); locally, the fleet's process log of the run.

Pages: from the start of the run's log (`next_token` continues where a page ended), or its last
`tail` lines. The `next_token` of a page always continues forward, so a client that polls with it
follows the log (an empty page: nothing new yet).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotline.control.errors import InvalidRequest, LogsUnavailable
from spotline.control.jobs import get_job
from spotline.control.ports import LogLine, LogPage
from spotline.control.records import parse_run_id

if TYPE_CHECKING:
    from spotline.control.plane import ControlPlane

logger = logging.getLogger(__name__)

MAX_LINES = 1000


@dataclass(frozen=True)
class JobLogs:
    job_id: str
    # The run read (a Batch job id), and every run of the job the caller may name instead.
    run: str | None
    runs: list[str]
    page: LogPage
    # Each run's number (1: the first admission) where the log reader can tell.
    numbers: dict[str, int] = field(default_factory=dict)


def job_logs(
    cp: ControlPlane,
    team: str,
    job_id: str,
    *,
    run: str | None = None,
    next_token: str | None = None,
    limit: int = 100,
    tail: bool = False,
) -> JobLogs:
    """A page of one of `team`'s jobs' logs: the current (or last) run's, or `run`, which must be
    one of the job's runs. Another team's job is not found, as everywhere in the API."""
    if not 1 <= limit <= MAX_LINES:
        raise InvalidRequest(
            [{"loc": ["query", "limit"], "msg": f"must be 1 to {MAX_LINES}", "type": "value_error"}]
        )
    record = get_job(cp, team, job_id)
    runs = ([record.batch_job_id] if record.batch_job_id else []) + [
        r for r in record.retired_batch_job_ids if r != record.batch_job_id
    ]
    if run is not None and run not in runs:
        raise InvalidRequest(
            [{"loc": ["query", "run"], "msg": f"not a run of job {job_id}: {runs}", "type": "value_error"}]
        )
    chosen = run or record.batch_job_id
    if chosen is None:
        return JobLogs(job_id=job_id, run=None, runs=runs, page=LogPage())
    if cp.run_logs is None:
        raise LogsUnavailable("this deployment has no training log reader")
    page = cp.run_logs.read(chosen, next_token=next_token, limit=limit, tail=tail)
    numbers = cp.run_logs.numbers(runs) if len(runs) > 1 else {chosen: record.run} if record.run else {}
    return JobLogs(job_id=job_id, run=chosen, runs=runs, page=page, numbers=numbers)


class FileRunLogs:
    """Locally: a run's process log (the fleet writes one file per run). The token is a byte
    offset in the file."""

    def __init__(self, path_of: Any) -> None:
        # path_of(batch_job_id) -> Path | None
        self.path_of = path_of

    def numbers(self, batch_job_ids: Sequence[str]) -> dict[str, int]:
        """From each run's log file name (`<Batch job name>-<id prefix>.log`)."""
        found: dict[str, int] = {}
        for batch_job_id in batch_job_ids:
            path: Path | None = self.path_of(batch_job_id)
            parsed = None if path is None else parse_run_id(path.stem.rsplit("-", 1)[0])
            if parsed is not None:
                found[batch_job_id] = parsed[1]
        return found

    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        path: Path | None = self.path_of(batch_job_id)
        if path is None or not path.is_file():
            return LogPage()
        data = path.read_bytes()
        # Only whole lines: a line being written is returned once complete.
        end = data.rfind(b"\n") + 1
        if next_token is not None:
            if not next_token.isdigit() or int(next_token) > len(data):
                raise InvalidRequest(
                    [
                        {
                            "loc": ["query", "next_token"],
                            "msg": "not a token of this log",
                            "type": "value_error",
                        }
                    ]
                )
            start = int(next_token)
            chunk = data[start:end]
            raw = chunk.splitlines(keepends=True)[:limit]
            offset = start + sum(len(line) for line in raw)
        else:
            raw = data[:end].splitlines(keepends=True)
            raw = raw[-limit:] if tail else raw[:limit]
            offset = end if tail else sum(len(line) for line in raw)
        lines = [LogLine(message=line.decode(errors="replace").rstrip("\r\n")) for line in raw]
        return LogPage(lines=lines, next_token=str(offset))
