"""The scheduler's FIFO queue (as the stack configures it) with Spotline's own trigger code, and
the agent's S3 checkpoint store, on LocalStack, and the same checks on moto's server: a
behaviour the two emulators disagree on would fail one side here."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from spotline import resources
from spotline.agent.store import MANIFEST_PREFIX, S3CheckpointStore
from spotline.aws.workflows import SqsPassTrigger
from stacks.messaging import SCHEDULER_MAX_RECEIVES
from tests.integration.helpers import REGION

from .harness import LocalStack


@pytest.fixture(params=["localstack", "moto"])
def backend(request: pytest.FixtureRequest, moto_dynamodb: str) -> Iterator[Any]:
    """A client factory for LocalStack, or for moto's server (the one standing in for DynamoDB)."""
    if request.param == "localstack":
        stack: LocalStack = request.getfixturevalue("localstack")
        yield stack.client
    else:
        yield lambda service: boto3.client(  # type: ignore[call-overload]
            service, endpoint_url=moto_dynamodb, region_name=REGION
        )


def scheduler_queue(sqs: Any, name: str, visibility_s: int = 90) -> str:
    """The scheduler's queue with its dead-letter queue, configured as stacks/messaging.py does."""
    dead = sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = {"deadLetterTargetArn": dead_arn, "maxReceiveCount": SCHEDULER_MAX_RECEIVES}
    return str(
        sqs.create_queue(
            QueueName=f"{name}.fifo",
            Attributes={
                "FifoQueue": "true",
                "ContentBasedDeduplication": "true",
                "VisibilityTimeout": str(visibility_s),
                "RedrivePolicy": json.dumps(redrive),
            },
        )["QueueUrl"]
    )


def receive(sqs: Any, url: str, wait_s: int = 1) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s, AttributeNames=["All"]
    ).get("Messages", [])
    return messages


def test_pass_triggers_are_deduplicated_by_their_key_and_by_content(backend: Any, unique: str) -> None:
    sqs = backend("sqs")
    url = scheduler_queue(sqs, f"triggers-{unique}")
    trigger = SqsPassTrigger(sqs, url)
    trigger.request("job submitted", "submitted#job-1")
    trigger.request("job submitted", "submitted#job-1")  # a retried publish: same key
    trigger.request("job submitted", "submitted#job-2")
    # EventBridge's redelivery of one event: the same body, no deduplication id (content-based).
    for _ in range(2):
        sqs.send_message(
            QueueUrl=url, MessageBody='{"id": "event-1"}', MessageGroupId=resources.SCHEDULER_MESSAGE_GROUP
        )

    bodies = [m["Body"] for m in receive(sqs, url)]

    assert sorted(bodies) == sorted(['{"reason": "job submitted"}'] * 2 + ['{"id": "event-1"}'])


def test_a_failed_pass_makes_its_triggers_visible_again_soon_then_dead_letters_them(
    backend: Any, unique: str
) -> None:
    sqs = backend("sqs")
    url = scheduler_queue(sqs, f"retry-{unique}")
    trigger = SqsPassTrigger(sqs, url)
    trigger.request("tick", "tick#1")
    for receive_count in range(1, SCHEDULER_MAX_RECEIVES + 1):
        [message] = receive(sqs, url, wait_s=5)
        assert int(message["Attributes"]["ApproximateReceiveCount"]) == receive_count
        # The scheduler's answer to a failed pass: visible again in a second, not in 90 s.
        trigger.retry_soon([message["ReceiptHandle"]], 1)
    time.sleep(1.5)
    assert receive(sqs, url) == []  # the sixth receive moved it to the dead-letter queue
    dead = sqs.get_queue_url(QueueName=f"retry-{unique}-dlq.fifo")["QueueUrl"]
    assert [m["Body"] for m in receive(sqs, dead)] == ['{"reason": "tick"}']


class WriterKilled(Exception):
    """The writer dies between its data and its manifest."""


def checkpoint_bucket(s3: Any, name: str) -> str:
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def record_writes(s3: Any) -> list[str]:
    """The keys of the object writes the client sends, in order (a multipart upload when it completes)."""
    keys: list[str] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        keys.append(params["Key"])

    s3.meta.events.register("before-parameter-build.s3.PutObject", seen)
    s3.meta.events.register("before-parameter-build.s3.CompleteMultipartUpload", seen)
    return keys


def test_checkpoints_land_under_the_teams_prefix_manifest_last(
    backend: Any, unique: str, tmp_path: Path
) -> None:
    s3 = backend("s3")
    bucket = checkpoint_bucket(s3, f"checkpoints-{unique}")
    prefix = resources.checkpoint_prefix("vision") + "job-1/"
    store = S3CheckpointStore(bucket, prefix, s3)
    writes = record_writes(s3)

    store.save(1, b"state-1", encoding="bytes", job_id="job-1", created_at=1.0)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.bin").write_bytes(b"m" * (6 * 1024 * 1024))
    (tmp_path / "ckpt" / "optimizer.bin").write_bytes(b"o" * 1024)
    files = store.save_files(2, tmp_path / "ckpt", job_id="job-1", created_at=2.0)

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert all(k.startswith(prefix) for k in keys)
    assert f"{prefix}{MANIFEST_PREFIX}000000000001.json" in keys
    assert f"{prefix}{MANIFEST_PREFIX}000000000002.json" in keys
    # Each checkpoint's manifest is its last write.
    assert writes[1].endswith("manifest-000000000001.json") and writes[-1].endswith(
        "manifest-000000000002.json"
    )
    assert len(writes) == 5 and all("/data/" in k for k in writes[2:4])
    latest = store.latest_files(tmp_path / "restored")
    assert latest is not None and latest[0].step == 2 == files.step
    assert (latest[1] / "model.bin").read_bytes() == b"m" * (6 * 1024 * 1024)


def test_a_writer_killed_before_its_manifest_leaves_the_last_checkpoint_in_place(
    backend: Any, unique: str
) -> None:
    s3 = backend("s3")
    bucket = checkpoint_bucket(s3, f"torn-{unique}")
    store = S3CheckpointStore(bucket, "checkpoints/vision/job-2/", s3)
    store.save(1, b"good", encoding="bytes", job_id="job-2", created_at=1.0)

    def killed(params: dict[str, Any], **_: Any) -> None:
        if MANIFEST_PREFIX in params["Key"]:
            raise WriterKilled("the writer died")

    s3.meta.events.register("before-parameter-build.s3.PutObject", killed)
    with pytest.raises(WriterKilled):
        store.save(2, b"torn", encoding="bytes", job_id="job-2", created_at=2.0)
    s3.meta.events.unregister("before-parameter-build.s3.PutObject", killed)

    latest = store.latest()
    assert latest is not None and latest[0].step == 1 and latest[1] == b"good"
    assert any("step-000000000002" in o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
