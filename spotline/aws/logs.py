"""Training logs on AWS: a Batch run's log stream in the training log group (the `RunLogs` port,
`spotline.control.ports`). The API reads them for the caller's team (`spotline.control.logs`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from spotline.aws.errors import is_throttling
from spotline.control.errors import InvalidRequest, LogsUnavailable, SpotlineError
from spotline.control.ports import LogLine, LogPage
from spotline.control.records import parse_run_id

logger = logging.getLogger(__name__)


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

    def numbers(self, batch_job_ids: Sequence[str]) -> dict[str, int]:
        """From each Batch job's name (its run id), 100 a DescribeJobs call."""
        found: dict[str, int] = {}
        ids = list(dict.fromkeys(batch_job_ids))
        try:
            for start in range(0, len(ids), 100):
                for job in self.batch.describe_jobs(jobs=ids[start : start + 100]).get("jobs", []):
                    parsed = parse_run_id(str(job.get("jobName", "")))
                    if parsed is not None:
                        found[str(job["jobId"])] = parsed[1]
        except ClientError as error:  # the numbers are a nicety: the log itself still reads
            logger.warning("runs not numbered", extra={"why": str(error)})
        return found

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
