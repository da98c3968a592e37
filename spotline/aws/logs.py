"""Training logs on AWS: a Batch run's log stream in the training log group (the `RunLogs` port,
`spotline.control.ports`). The API reads them for the caller's team (`spotline.control.logs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from spotline.aws.errors import is_throttling
from spotline.control.errors import InvalidRequest, LogsUnavailable, SpotlineError
from spotline.control.ports import LogLine, LogPage


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
