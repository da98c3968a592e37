"""The agent's side of tenant isolation (docs/security.md): it polls its job's signal item under
its team's key, sends events with its team's source, and names its team's KMS key on uploads."""

from __future__ import annotations

from typing import Any

from spotline.agent import AgentSettings, JobRecordPoller, S3CheckpointStore
from spotline.agent.events import EventBridgePublisher
from spotline.resources import AGENT_ENV_CHECKPOINT_KMS_KEY, AGENT_ENV_JOB_ID, AGENT_ENV_TEAM


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_item(self, **request: Any) -> dict[str, Any]:
        self.calls.append(("get_item", request))
        return {"Item": {"checkpoint_requested_at": {"N": "12.5"}, "batch_job_id": {"S": "b-1"}}}

    def put_events(self, **request: Any) -> dict[str, Any]:
        self.calls.append(("put_events", request))
        return {"FailedEntryCount": 0}

    def upload_fileobj(self, fileobj: Any, bucket: str, key: str, ExtraArgs: Any = None) -> None:
        self.calls.append(("upload_fileobj", {"Bucket": bucket, "Key": key, "ExtraArgs": ExtraArgs}))


def test_settings_read_the_team_and_its_key() -> None:
    settings = AgentSettings.from_env(
        {AGENT_ENV_JOB_ID: "job-1", AGENT_ENV_TEAM: "vision", AGENT_ENV_CHECKPOINT_KMS_KEY: "arn:key/v"}
    )
    assert settings.team == "vision" and settings.checkpoint_kms_key == "arn:key/v"
    assert AgentSettings.from_env({}).team is None


def test_the_poller_reads_the_signal_item_of_its_team() -> None:
    client = Recorder()
    signals = JobRecordPoller(client, "jobs", "job-1", "vision").read()  # type: ignore[arg-type]
    assert signals.checkpoint_requested_at == 12.5 and signals.batch_job_id == "b-1"
    [(_, request)] = client.calls
    assert request["Key"] == {"job_id": {"S": "signal#vision#job-1"}}
    # Without a team (a standalone run) the job's own item
    JobRecordPoller(client, "jobs", "job-1").read()  # type: ignore[arg-type]
    assert client.calls[-1][1]["Key"] == {"job_id": {"S": "job-1"}}


def test_events_carry_the_teams_source() -> None:
    client = Recorder()
    assert EventBridgePublisher(client, "bus", team="nlp").publish("Job Heartbeat", {"job_id": "j"})  # type: ignore[arg-type]
    assert client.calls[0][1]["Entries"][0]["Source"] == "spotline.agent.nlp"


def test_uploads_name_the_teams_key_when_there_is_one() -> None:
    client = Recorder()
    S3CheckpointStore("b", "checkpoints/vision/job-1/", client, kms_key="arn:key/v")._put("x", b"1")  # type: ignore[arg-type]
    S3CheckpointStore("b", "checkpoints/vision/job-1/", client)._put("y", b"1")  # type: ignore[arg-type]
    assert [c[1]["ExtraArgs"] for c in client.calls] == [
        {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "arn:key/v"},
        None,
    ]
    assert client.calls[0][1]["Key"] == "checkpoints/vision/job-1/x"
