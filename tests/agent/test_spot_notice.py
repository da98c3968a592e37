"""Spot interruption notices from instance metadata (IMDSv2), against a local emulator."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from spotline.agent import (
    Agent,
    AgentSettings,
    CheckpointReason,
    InstanceMetadata,
    JobSignals,
    LocalCheckpointStore,
    RecordingPublisher,
    SpotInstanceAction,
)
from spotline.agent.settings import IMDS_DEFAULT_ENDPOINT, imds_endpoint_from_env
from spotline.resources import DETAIL_CHECKPOINT_COMPLETED, DETAIL_JOB_HEARTBEAT

from .fakes import FakeClock, ImdsState

NOTICE = {"action": "terminate", "time": "2026-11-29T12:02:00Z"}


def test_imdsv2_client_uses_a_token_and_reads_404_as_no_notice(imds: tuple[str, ImdsState]) -> None:
    endpoint, state = imds
    client = InstanceMetadata(endpoint)

    assert client.spot_instance_action() is None
    assert client.instance_id() == state.instance_id
    state.instance_action = NOTICE
    assert client.spot_instance_action() == SpotInstanceAction("terminate", NOTICE["time"])
    assert state.token_puts == 1  # one token, reused
    assert state.unauthorized == 0


def test_imdsv2_client_renews_a_rejected_token(imds: tuple[str, ImdsState]) -> None:
    endpoint, state = imds
    client = InstanceMetadata(endpoint)
    assert client.instance_id() == state.instance_id

    state.token = "token-2"  # e.g. the instance was stopped and started

    assert client.region() == state.region
    assert (state.token_puts, state.unauthorized) == (2, 1)


def test_a_spot_notice_means_checkpoint_now_once(
    imds: tuple[str, ImdsState], tmp_path: Path, clock: FakeClock
) -> None:
    endpoint, state = imds
    publisher = RecordingPublisher()
    agent = Agent(
        AgentSettings(job_id="job-s", checkpoint_interval_s=3600, heartbeat_s=0, spot_poll_s=5.0),
        store=LocalCheckpointStore(tmp_path),
        publisher=publisher,
        imds=InstanceMetadata(endpoint),
        clock=clock,
    )
    assert agent.instance_id == state.instance_id  # no SPOTLINE_INSTANCE_ID: from metadata

    agent.poll_once()
    assert agent.checkpoint_reason() is None

    state.instance_action = NOTICE
    clock.advance(4)
    agent.poll_once()  # not due yet: polled every 5 s
    assert agent.checkpoint_reason() is None
    clock.advance(1)
    agent.poll_once()
    assert agent.checkpoint_reason() is CheckpointReason.SPOT_INTERRUPTION
    assert agent.pause(10) is False  # a simulated step is cut short
    assert agent.step(99, 0.5, lambda: {"w": 99}) is True  # keep running: the control plane requeues

    clock.advance(5)
    agent.poll_once()  # the notice is still there until the instance goes
    assert agent.checkpoint_reason() is None
    events = [d for kind, d in publisher.events if kind == DETAIL_CHECKPOINT_COMPLETED]
    assert [(e["reason"], e["step"], e["instance_id"]) for e in events] == [
        ("spot-interruption", 99, state.instance_id)
    ]


def test_metadata_outage_does_not_stop_training(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = Agent(
        AgentSettings(job_id="job-s", heartbeat_s=1.0),
        store=LocalCheckpointStore(tmp_path),
        publisher=publisher,
        # Nothing listens on port 9 (discard): connection refused, at once.
        imds=InstanceMetadata("http://127.0.0.1:9", timeout_s=0.5),
        clock=clock,
    )

    agent.poll_once()

    assert agent.instance_id is None
    assert agent.checkpoint_reason() is None
    assert [kind for kind, _ in publisher.events] == [DETAIL_JOB_HEARTBEAT]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),  # a laptop: never probe 169.254.169.254
        ({"AWS_BATCH_JOB_ID": "abc"}, IMDS_DEFAULT_ENDPOINT),
        ({"ECS_CONTAINER_METADATA_URI_V4": "http://x"}, IMDS_DEFAULT_ENDPOINT),
        ({"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:8111/"}, "http://127.0.0.1:8111"),
        ({"AWS_BATCH_JOB_ID": "abc", "AWS_EC2_METADATA_DISABLED": "true"}, None),
        # The local runtime sets AWS_BATCH_JOB_ID like Batch, and names the instance itself.
        ({"AWS_BATCH_JOB_ID": "abc", "SPOTLINE_INSTANCE_ID": "local-1"}, None),
        (
            {"SPOTLINE_INSTANCE_ID": "local-1", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://h:1"},
            "http://h:1",
        ),
    ],
)
def test_where_the_agent_looks_for_instance_metadata(env: dict[str, str], expected: str | None) -> None:
    assert imds_endpoint_from_env(env) == expected


def test_from_env_wires_metadata_from_the_sdk_variable(imds: tuple[str, ImdsState]) -> None:
    endpoint, state = imds
    agent = Agent.from_env({"AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint, "SPOTLINE_JOB_ID": "j"})

    assert agent.imds is not None and agent.instance_id == state.instance_id
    assert agent.store is None and agent.job_poller is None


def test_background_polling_sees_a_notice_even_while_the_control_plane_hangs(
    imds: tuple[str, ImdsState], tmp_path: Path
) -> None:
    release = threading.Event()

    class HangingPoller:  # a DynamoDB call stuck in its timeouts
        def read(self) -> JobSignals:
            release.wait(10)
            return JobSignals()

    endpoint, state = imds
    agent = Agent(
        AgentSettings(job_id="job-s", heartbeat_s=0, poll_s=0.05, spot_poll_s=0.05),
        store=LocalCheckpointStore(tmp_path),
        publisher=RecordingPublisher(),
        job_poller=HangingPoller(),
        imds=InstanceMetadata(endpoint),  # type: ignore[arg-type]
    )
    with agent:
        time.sleep(0.2)  # the control thread is now stuck
        state.instance_action = NOTICE
        deadline = time.monotonic() + 2.0
        while agent.checkpoint_reason() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert agent.checkpoint_reason() is CheckpointReason.SPOT_INTERRUPTION
        release.set()
