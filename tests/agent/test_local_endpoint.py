"""The agent as the local runtime runs it: a real training process whose AWS calls go to a moto
server through AWS_ENDPOINT_URL (S3 checkpoints, the jobs table, the project bus)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from spotline.agent import EXIT_STOPPED, S3CheckpointStore
from spotline.resources import (
    DETAIL_CHECKPOINT_COMPLETED,
    DETAIL_JOB_HEARTBEAT,
    RULES,
    SOURCE_AGENT_PREFIX,
    signal_key,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
JOB = "job-local-1"
TABLE, BUS, BUCKET = "spotline-jobs", "spotline-local", "spotline-checkpoints"
POLL_S = 0.3


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


def wait_for(check: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"nothing after {timeout_s} s")


def test_checkpoint_request_via_the_jobs_table_reaches_a_running_job(endpoint: str, tmp_path: Path) -> None:
    dynamodb, events, sqs, s3 = (client(endpoint, s) for s in ("dynamodb", "events", "sqs", "s3"))
    dynamodb.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
    )
    dynamodb.put_item(TableName=TABLE, Item={"job_id": {"S": JOB}, "state": {"S": "RUNNING"}})
    s3.create_bucket(Bucket=BUCKET)
    events.create_event_bus(Name=BUS)
    queue_url = sqs.create_queue(QueueName="agent-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    for rule in RULES:
        if rule.pattern["source"] == [{"prefix": SOURCE_AGENT_PREFIX}]:
            events.put_rule(Name=rule.name, EventBusName=BUS, EventPattern=json.dumps(rule.pattern))
            events.put_targets(Rule=rule.name, EventBusName=BUS, Targets=[{"Id": "q", "Arn": queue_arn}])
    received: list[dict[str, Any]] = []

    def agent_events(detail_type: str, **match: Any) -> list[dict[str, Any]]:
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        received.extend(json.loads(m["Body"]) for m in reply.get("Messages", []))
        return [
            e["detail"]
            for e in received
            if e["detail-type"] == detail_type and all(e["detail"].get(k) == v for k, v in match.items())
        ]

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTLINE_")}
    env.update(
        PYTHONPATH=str(REPO),
        AWS_ENDPOINT_URL=endpoint,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        SPOTLINE_JOB_ID=JOB,
        SPOTLINE_TEAM="team-a",
        SPOTLINE_INSTANCE_ID="local-i-1",
        SPOTLINE_JOBS_TABLE=TABLE,
        SPOTLINE_EVENT_BUS=BUS,
        SPOTLINE_CHECKPOINT_URI=f"s3://{BUCKET}/checkpoints/team-a/{JOB}/",
        SPOTLINE_CHECKPOINT_INTERVAL_S="3600",
        SPOTLINE_AGENT_POLL_S=str(POLL_S),
        SPOTLINE_HEARTBEAT_S="0.5",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.examples.train", "--steps", "3000", "--step-time-s", "0.01"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Given a running job (it sends heartbeats)
        beat = wait_for(lambda: [b for b in agent_events(DETAIL_JOB_HEARTBEAT) if b["step"] > 0], 15)[0]
        assert beat["instance_id"] == "local-i-1" and 0 < beat["progress"] < 1

        assert all(e["source"] == "spotline.agent.team-a" for e in received)

        # When the control plane asks for a checkpoint on the job's signal item (the one item
        # of the table the team's role may read)
        requested_at = time.time()
        dynamodb.update_item(
            TableName=TABLE,
            Key={"job_id": {"S": signal_key("team-a", JOB)}},
            UpdateExpression="SET checkpoint_requested_at = :t",
            ExpressionAttributeValues={":t": {"N": repr(requested_at)}},
        )

        # Then a Checkpoint Completed answering it arrives within about one poll interval
        [done] = wait_for(lambda: agent_events(DETAIL_CHECKPOINT_COMPLETED, reason="requested"), 10)
        latency = time.time() - requested_at
        print(f"checkpoint request answered in {latency:.2f} s (poll every {POLL_S} s)")
        assert done["requested_at"] == requested_at and done["job_id"] == JOB
        assert latency < POLL_S + 2.0, latency
        store = S3CheckpointStore(BUCKET, f"checkpoints/team-a/{JOB}/", s3)
        found = store.latest()
        assert found is not None and found[0].uri == done["checkpoint_uri"] and found[0].step == done["step"]

        # And SIGTERM still ends the run with a checkpoint
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
        assert process.returncode == EXIT_STOPPED, stderr
        assert [r.reason for r in store.manifests()] == ["sigterm", "requested"]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
