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
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from spotline.aws.errors import SpotlineError, StorageUnavailable, is_throttling
from spotline.control.errors import InvalidRequest

if TYPE_CHECKING:
    from spotline.control.plane import ControlPlane

logger = logging.getLogger(__name__)

MAX_LINES = 1000


class LogsUnavailable(StorageUnavailable):
    """The deployment has no log reader, or the log service failed (retry later)."""


@dataclass(frozen=True)
class LogLine:
    message: str
    # Epoch seconds (CloudWatch's ingestion of the line); None where the source has none (locally).
    timestamp: float | None = None


@dataclass(frozen=True)
class LogPage:
    lines: list[LogLine] = field(default_factory=list)
    # Continue forward from the end of this page (None: the run has no log yet).
    next_token: str | None = None


class RunLogs(Protocol):
    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        """One page of a run's log: from `next_token` (or the start), or with `tail` its last
        `limit` lines."""
        ...


@dataclass(frozen=True)
class JobLogs:
    job_id: str
    # The run read (a Batch job id), and every run of the job the caller may name instead.
    run: str | None
    runs: list[str]
    page: LogPage


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
    from spotline.control.jobs import get_job  # (jobs imports the plane, which imports this module)

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
    return JobLogs(job_id=job_id, run=chosen, runs=runs, page=page)


class CloudWatchRunLogs:
    """A Batch run's log stream (`container.logStreamName`, from DescribeJobs) in the training
    log group, read with GetLogEvents: the two calls the control plane's role is granted."""

    def __init__(self, batch: Any, logs: Any, log_group: str) -> None:
        self.batch = batch
        self.logs = logs
        self.log_group = log_group

    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        try:
            stream = self._stream(batch_job_id)
            if stream is None:
                return LogPage()
            request: dict[str, Any] = {
                "logGroupName": self.log_group,
                "logStreamName": stream,
                "limit": limit,
                "startFromHead": not tail or next_token is not None,
            }
            if next_token:
                request["nextToken"] = next_token
            response = self.logs.get_log_events(**request)
        except ClientError as error:
            if is_throttling(error):
                raise LogsUnavailable(str(error)) from error
            code = error.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":  # the stream is created with the first line
                return LogPage()
            if code == "InvalidParameterException":
                raise InvalidRequest(
                    [
                        {
                            "loc": ["query", "next_token"],
                            "msg": "not a token of this log",
                            "type": "value_error",
                        }
                    ]
                ) from error
            raise SpotlineError(f"reading the log of {batch_job_id}: {error}") from error
        lines = [
            LogLine(message=str(e.get("message", "")).rstrip("\n"), timestamp=e["timestamp"] / 1000)
            for e in response.get("events", [])
        ]
        return LogPage(lines=lines, next_token=response.get("nextForwardToken"))

    def _stream(self, batch_job_id: str) -> str | None:
        jobs = self.batch.describe_jobs(jobs=[batch_job_id]).get("jobs", [])
        if not jobs:
            return None
        job = jobs[0]
        stream = (job.get("container") or {}).get("logStreamName")
        if not stream:
            attempts: Sequence[dict[str, Any]] = job.get("attempts") or []
            stream = (attempts[-1].get("container") or {}).get("logStreamName") if attempts else None
        return str(stream) if stream else None


class FileRunLogs:
    """Locally: a run's process log (the fleet writes one file per run). The token is a byte
    offset in the file."""

    def __init__(self, path_of: Any) -> None:
        # path_of(batch_job_id) -> Path | None
        self.path_of = path_of

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
