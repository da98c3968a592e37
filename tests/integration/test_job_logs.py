"""`GET /jobs/{id}/logs`: a team reads its own runs' logs through the API; the
CloudWatch reader (DescribeJobs + GetLogEvents, the two calls the API's role may make) and the
local file reader page the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import functions.api
from spotline.aws.logs import CloudWatchRunLogs
from spotline.control.logs import FileRunLogs
from spotline.control.ports import LogLine, LogPage

from .helpers import NLP_ROLE, Deployment, api_event, context, start, submit

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
NLP = {"userArn": NLP_ROLE, "caller": "AIDANLP", "accessKey": "AKIANLP"}


class FakeRunLogs:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, int, bool]] = []

    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        self.calls.append((batch_job_id, next_token, limit, tail))
        return LogPage(lines=[LogLine(f"line of {batch_job_id}", 1.5)], next_token="t-2")

    def numbers(self, batch_job_ids: list[str]) -> dict[str, int]:
        return {}


def call(path: str, identity: dict[str, Any], **query: str) -> tuple[int, Any]:
    event = api_event("GET", path, identity=identity, query=query or None)
    response = functions.api.handler(event, context("api"))
    return response["statusCode"], json.loads(response["body"])


def test_a_team_reads_its_own_jobs_logs_and_not_another_teams(deployment: Deployment) -> None:
    reader = FakeRunLogs()
    deployment.plane.run_logs = reader
    running = start(deployment, submit(deployment, "vision"))

    status, body = call(f"/jobs/{running.id}/logs", VISION, tail="true", limit="20")
    assert status == 200
    assert body["run"] == running.batch_job_id and body["runs"] == [running.batch_job_id]
    assert body["lines"] == [{"message": f"line of {running.batch_job_id}", "timestamp": 1.5}]
    assert body["next_token"] == "t-2"
    assert reader.calls == [(running.batch_job_id, None, 20, True)]

    # Another team's caller does not learn the job exists, and nothing is read for it
    status, body = call(f"/jobs/{running.id}/logs", NLP)
    assert status == 404
    assert len(reader.calls) == 1


def test_a_run_that_is_not_the_jobs_is_refused_by_name(deployment: Deployment) -> None:
    deployment.plane.run_logs = FakeRunLogs()
    theirs = start(deployment, submit(deployment, "nlp"))
    mine = start(deployment, submit(deployment, "vision"))
    status, body = call(f"/jobs/{mine.id}/logs", VISION, run=str(theirs.batch_job_id))
    assert status == 422 and "run" in body["message"]
    status, body = call(f"/jobs/{mine.id}/logs", VISION, limit="5000")
    assert status == 422 and "limit" in body["message"]


def test_a_job_that_never_ran_has_no_lines(deployment: Deployment) -> None:
    deployment.plane.run_logs = FakeRunLogs()
    pending = submit(deployment, "vision")
    status, body = call(f"/jobs/{pending.id}/logs", VISION)
    assert status == 200 and body == {
        "job_id": pending.id,
        "run": None,
        "runs": [],
        "run_numbers": {},
        "lines": [],
        "next_token": None,
    }


def test_cloudwatch_reader_finds_the_runs_stream_and_pages_forward() -> None:
    batch = boto3.client("batch", region_name="us-east-1")
    logs = boto3.client("logs", region_name="us-east-1")
    reader = CloudWatchRunLogs(batch, logs, "spotline-training")
    with Stubber(batch) as batch_stub, Stubber(logs) as logs_stub:
        batch_stub.add_response(
            "describe_jobs",
            {
                "jobs": [
                    {
                        "jobName": "spotline-job-1",
                        "jobId": "b-1",
                        "jobQueue": "q",
                        "status": "RUNNING",
                        "startedAt": 1,
                        "jobDefinition": "d",
                        "container": {"logStreamName": "training/default/abc"},
                    }
                ]
            },
            {"jobs": ["b-1"]},
        )
        logs_stub.add_response(
            "get_log_events",
            {
                "events": [{"timestamp": 1_700_000_000_000, "message": "step 1\n"}],
                "nextForwardToken": "f/2",
                "nextBackwardToken": "b/1",
            },
            {
                "logGroupName": "spotline-training",
                "logStreamName": "training/default/abc",
                "limit": 50,
                "startFromHead": False,
            },
        )
        page = reader.read("b-1", next_token=None, limit=50, tail=True)
        assert page == LogPage(lines=[LogLine("step 1", 1_700_000_000.0)], next_token="f/2")

        # Following on from the token reads forward
        batch_stub.add_response(
            "describe_jobs",
            {
                "jobs": [
                    {
                        "jobName": "n",
                        "jobId": "b-1",
                        "jobQueue": "q",
                        "status": "RUNNING",
                        "startedAt": 1,
                        "jobDefinition": "d",
                        "container": {"logStreamName": "training/default/abc"},
                    }
                ]
            },
            {"jobs": ["b-1"]},
        )
        logs_stub.add_response(
            "get_log_events",
            {"events": [], "nextForwardToken": "f/2", "nextBackwardToken": "b/2"},
            {
                "logGroupName": "spotline-training",
                "logStreamName": "training/default/abc",
                "limit": 50,
                "startFromHead": True,
                "nextToken": "f/2",
            },
        )
        assert reader.read("b-1", next_token="f/2", limit=50, tail=True) == LogPage([], "f/2")

        # A run not started yet has no stream: no lines, no token
        batch_stub.add_response("describe_jobs", {"jobs": []}, {"jobs": ["b-2"]})
        assert reader.read("b-2", next_token=None, limit=50, tail=False) == LogPage()


def test_file_reader_pages_whole_lines_and_tails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_bytes(b"one\ntwo\nthree\nfour\npartial")
    reader = FileRunLogs(lambda run: log if run == "b-1" else None)

    first = reader.read("b-1", next_token=None, limit=2, tail=False)
    assert [line.message for line in first.lines] == ["one", "two"]
    assert first.next_token is not None
    second = reader.read("b-1", next_token=first.next_token, limit=10, tail=False)
    assert [line.message for line in second.lines] == ["three", "four"]  # not the partial line
    assert reader.read("b-1", next_token=second.next_token, limit=10, tail=False).lines == []

    tail = reader.read("b-1", next_token=None, limit=1, tail=True)
    assert [line.message for line in tail.lines] == ["four"] and tail.next_token == second.next_token
    assert reader.read("b-2", next_token=None, limit=1, tail=True) == LogPage()
    with pytest.raises(Exception, match="next_token"):
        reader.read("b-1", next_token="not-a-number", limit=1, tail=False)


def test_the_file_reader_numbers_runs_from_their_batch_job_names(tmp_path: Path) -> None:
    paths = {
        "b-1": tmp_path / "spotline-job-0123-r1-aaaaaaaa.log",
        "b-2": tmp_path / "spotline-job-0123-r2-bbbbbbbb.log",
        "b-3": None,
    }
    reader = FileRunLogs(paths.get)
    assert reader.numbers(["b-2", "b-1", "b-3"]) == {"b-2": 2, "b-1": 1}
