"""Real frameworks on the CPU, driven through the agent against moto: fake AWS credentials, an S3
bucket and a jobs table, and an agent wired to them as `Agent.from_env` would wire it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotline.agent import (
    Agent,
    AgentSettings,
    JobRecordPoller,
    RecordingPublisher,
    S3CheckpointStore,
)
from spotline.resources import DETAIL_CHECKPOINT_COMPLETED

REGION = "us-east-1"
BUCKET = "spotline-checkpoints"
TABLE = "spotline-jobs"
JOB = "job-fw"
PREFIX = f"checkpoints/team-a/{JOB}/"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto needs credentials and a region; no test here may reach real AWS or the hub."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


class Clock:
    """Epoch seconds that move only when told to (requests compare with capture times)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    """One job's AWS side: its bucket, its jobs table item, and the agents of its runs."""

    s3: Any
    dynamodb: Any
    clock: Clock
    tmp: Path

    def agent(self) -> tuple[Agent, RecordingPublisher]:
        """A run's agent (no background threads: the test polls at the step it chooses)."""
        publisher = RecordingPublisher()
        settings = AgentSettings(
            job_id=JOB,
            run_id=f"spotline-{JOB}-r1",
            team="team-a",
            instance_id="i-0test",
            checkpoint_interval_s=0,
            heartbeat_s=0,
            poll_s=0,
        )
        agent = Agent(
            settings,
            store=S3CheckpointStore(BUCKET, PREFIX, self.s3),
            publisher=publisher,
            job_poller=JobRecordPoller(self.dynamodb, TABLE, JOB),
            clock=self.clock,
        )
        return agent, publisher

    def request_checkpoint(self) -> float:
        """What the control plane's checkpoint-then-preempt workflow writes."""
        self.clock.now += 1
        at = self.clock.now
        self.dynamodb.update_item(
            TableName=TABLE,
            Key={"job_id": {"S": JOB}},
            UpdateExpression="SET checkpoint_requested_at = :t",
            ExpressionAttributeValues={":t": {"N": repr(at)}},
        )
        self.clock.now += 1
        return at


def completed(publisher: RecordingPublisher) -> list[dict[str, Any]]:
    return [detail for kind, detail in publisher.events if kind == DETAIL_CHECKPOINT_COMPLETED]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        dynamodb.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
        )
        dynamodb.put_item(TableName=TABLE, Item={"job_id": {"S": JOB}, "state": {"S": "RUNNING"}})
        yield Harness(s3=s3, dynamodb=dynamodb, clock=Clock(), tmp=tmp_path)
