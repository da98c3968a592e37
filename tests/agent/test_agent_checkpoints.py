"""When the agent checkpoints: periodically, on request from the jobs table, on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotline.agent import (
    Agent,
    AgentSettings,
    CheckpointReason,
    JobRecordPoller,
    JobSignals,
    LocalCheckpointStore,
    RecordingPublisher,
)
from spotline.resources import DETAIL_CHECKPOINT_COMPLETED, DETAIL_JOB_HEARTBEAT

from .fakes import FakeClock

JOB = "job-7"
TABLE = "spotline-jobs"


def make_agent(
    tmp_path: Path,
    clock: FakeClock,
    publisher: RecordingPublisher,
    *,
    inject: dict[str, Any] | None = None,
    **settings: Any,
) -> Agent:
    defaults: dict[str, Any] = {
        "job_id": JOB,
        "instance_id": "local-0",
        "checkpoint_interval_s": 60.0,
        "heartbeat_s": 0.0,
    }
    return Agent(
        AgentSettings(**{**defaults, **settings}),
        store=LocalCheckpointStore(tmp_path / "ckpt"),
        publisher=publisher,
        clock=clock,
        sleep=clock.sleep,
        **(inject or {}),
    )


def completed(publisher: RecordingPublisher) -> list[dict[str, Any]]:
    return [detail for kind, detail in publisher.events if kind == DETAIL_CHECKPOINT_COMPLETED]


def test_periodic_checkpoint_after_the_interval(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = make_agent(tmp_path, clock, publisher, checkpoint_interval_s=60.0)
    calls: list[int] = []

    def state() -> dict[str, int]:
        calls.append(1)
        return {"w": 1}

    clock.advance(59)
    assert agent.step(1, 0.1, state) is True
    assert calls == [] and completed(publisher) == []  # no state is built when nothing is due

    clock.advance(1)
    assert agent.step(2, 0.2, state) is True
    clock.advance(30)
    agent.step(3, 0.3, state)

    [event] = completed(publisher)
    assert event["reason"] == "periodic" and event["step"] == 2 and event["progress"] == 0.2
    assert event["job_id"] == JOB and event["checkpoint_uri"].endswith("manifest-000000000002.json")
    assert event["requested_at"] is None
    restored = make_agent(tmp_path, clock, RecordingPublisher()).restore()
    assert restored is not None and restored.step == 2 and restored.state == {"w": 1}


def test_interval_zero_disables_periodic_checkpoints(tmp_path: Path, clock: FakeClock) -> None:
    agent = make_agent(tmp_path, clock, RecordingPublisher(), checkpoint_interval_s=0)
    clock.advance(10_000)
    assert agent.checkpoint_reason() is None


@pytest.fixture
def jobs_table() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
        )
        client.put_item(
            TableName=TABLE,
            Item={"job_id": {"S": JOB}, "state": {"S": "RUNNING"}, "spec": {"S": "x" * 10_000}},
        )
        yield client


def request_checkpoint(client: Any, at: float) -> None:
    """What the control plane's checkpoint-then-preempt workflow does."""
    client.update_item(
        TableName=TABLE,
        Key={"job_id": {"S": JOB}},
        UpdateExpression="SET checkpoint_requested_at = :t",
        ExpressionAttributeValues={":t": {"N": repr(at)}},
    )


def test_checkpoint_on_request_from_the_jobs_table(tmp_path: Path, clock: FakeClock, jobs_table: Any) -> None:
    calls: list[dict[str, Any]] = []

    class SpyClient:  # records what the agent asks DynamoDB for
        def get_item(self, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return jobs_table.get_item(**kwargs)

    publisher = RecordingPublisher()
    poller = JobRecordPoller(SpyClient(), TABLE, JOB)  # type: ignore[arg-type]
    agent = make_agent(
        tmp_path, clock, publisher, poll_s=5.0, checkpoint_interval_s=0, inject={"job_poller": poller}
    )

    # A request left over from an earlier run of the job (before this process started) is stale.
    request_checkpoint(jobs_table, clock.now - 30)
    clock.advance(5)
    agent.poll_once()
    assert agent.checkpoint_reason() is None

    requested_at = clock.now + 1
    request_checkpoint(jobs_table, requested_at)
    clock.advance(2)
    agent.poll_once()  # within the poll interval: not read yet
    assert agent.checkpoint_reason() is None
    clock.advance(3)
    assert agent.poll_once() == pytest.approx(5.0)  # next poll due in poll_s
    assert agent.checkpoint_reason() is CheckpointReason.REQUESTED

    assert agent.step(40, 0.4, lambda: {"w": 2}) is True

    [event] = completed(publisher)
    assert event["reason"] == "requested" and event["step"] == 40
    assert event["requested_at"] == requested_at
    # Answered: the same request does not trigger a second checkpoint.
    clock.advance(5)
    agent.poll_once()
    assert agent.checkpoint_reason() is None
    # One cheap read: two attributes, consistently, by key.
    assert calls[0]["Key"] == {"job_id": {"S": JOB}}
    assert calls[0]["ConsistentRead"] is True
    assert calls[0]["ProjectionExpression"] == "#requested, #run"
    assert calls[0]["ExpressionAttributeNames"] == {
        "#requested": "checkpoint_requested_at",
        "#run": "batch_job_id",
    }


def test_a_stray_run_stops_without_writing_a_checkpoint(
    tmp_path: Path, clock: FakeClock, jobs_table: Any
) -> None:
    # Given a container of Batch job b-1 while the control plane recorded b-2 as the job's run
    publisher = RecordingPublisher()
    poller = JobRecordPoller(jobs_table, TABLE, JOB)
    agent = make_agent(
        tmp_path,
        clock,
        publisher,
        poll_s=5.0,
        batch_job_id="b-1",
        inject={"job_poller": poller},
    )
    assert agent.step(1, 0.1, lambda: {"w": 1}) is True  # nothing recorded yet: keep going
    set_run(jobs_table, "b-1")
    clock.advance(5)
    agent.poll_once()
    assert agent.step(2, 0.2, lambda: {"w": 2}) is True and agent.stray_of is None  # our own run

    # When the job's item names the other run
    set_run(jobs_table, "b-2")
    clock.advance(5)
    agent.poll_once()

    # Then the loop is told to stop, and no checkpoint is written even if one is asked for
    assert agent.stray_of == "b-2" and agent.stop_requested
    assert agent.step(3, 0.3, lambda: {"w": 3}) is False
    assert agent.checkpoint(3, {"w": 3}) is None
    assert completed(publisher) == [] and LocalCheckpointStore(tmp_path / "ckpt").manifests() == []


def test_a_gang_node_is_not_a_stray_of_its_own_gang(
    tmp_path: Path, clock: FakeClock, jobs_table: Any
) -> None:
    # A node of a multi-node parallel job runs as the child job `<gang id>#<node index>`
    settings = AgentSettings.from_env({"AWS_BATCH_JOB_ID": "b-1#3", "AWS_BATCH_JOB_NODE_INDEX": "3"})
    assert settings.batch_job_id == "b-1"
    agent = make_agent(
        tmp_path,
        clock,
        RecordingPublisher(),
        poll_s=5.0,
        batch_job_id=settings.batch_job_id,
        inject={"job_poller": JobRecordPoller(jobs_table, TABLE, JOB)},
    )
    set_run(jobs_table, "b-1")
    clock.advance(5)
    agent.poll_once()
    assert agent.stray_of is None and agent.step(1, 0.1, lambda: {"w": 1}) is True


def test_only_the_main_node_of_a_gang_writes_checkpoints_and_sends_events(
    tmp_path: Path, clock: FakeClock, jobs_table: Any
) -> None:
    # Given the main node and a worker node of one gang, both asked for a checkpoint
    nodes = {}
    for index in (0, 1):
        publisher = RecordingPublisher()
        agent = make_agent(
            tmp_path / f"node-{index}",
            clock,
            publisher,
            poll_s=5.0,
            heartbeat_s=30.0,
            node_index=index,
            main_node_index=0,
            inject={"job_poller": JobRecordPoller(jobs_table, TABLE, JOB)},
        )
        nodes[index] = (agent, publisher)
    request_checkpoint(jobs_table, clock() + 1)
    clock.advance(5)
    for agent, _ in nodes.values():
        agent.poll_once()
        assert agent.checkpoint_reason() is CheckpointReason.REQUESTED

    # When each reaches its next step, then receives SIGTERM
    for agent, _ in nodes.values():
        assert agent.step(10, 0.5, lambda: {"w": 10}) is True
        assert agent.checkpoint_reason() is None  # answered on both: no checkpoint at every step
        agent.request_stop()
        assert agent.step(11, 0.55, lambda: {"w": 11}) is False  # both stop at the same step

    # Then the main node wrote both checkpoints and sent their events; the worker wrote and
    # completed nothing; both sent heartbeats (each node's instance and liveness count)
    main, main_events = nodes[0]
    worker, worker_events = nodes[1]
    assert sorted(m.step for m in LocalCheckpointStore(tmp_path / "node-0" / "ckpt").manifests()) == [10, 11]
    assert [d["step"] for d in completed(main_events)] == [10, 11]
    assert LocalCheckpointStore(tmp_path / "node-1" / "ckpt").manifests() == []
    assert completed(worker_events) == []
    assert any(kind == DETAIL_JOB_HEARTBEAT for kind, _ in main_events.events)
    worker_beats = [d for kind, d in worker_events.events if kind == DETAIL_JOB_HEARTBEAT]
    assert worker_beats and all(d["node_index"] == 1 for d in worker_beats)
    assert not worker.settings.is_main_node and main.settings.is_main_node


def test_the_run_attribute_is_the_one_the_control_plane_writes() -> None:
    from spotline.agent.signals import RUN_ATTRIBUTE
    from spotline.aws.job_items import _RECORD_FIELDS

    assert RUN_ATTRIBUTE in _RECORD_FIELDS


def set_run(client: Any, batch_job_id: str) -> None:
    client.update_item(
        TableName=TABLE,
        Key={"job_id": {"S": JOB}},
        UpdateExpression="SET batch_job_id = :b",
        ExpressionAttributeValues={":b": {"S": batch_job_id}},
    )


def test_a_request_made_while_writing_is_answered_by_the_next_checkpoint(
    tmp_path: Path, clock: FakeClock
) -> None:
    class Poller:
        requested_at: float | None = None

        def read(self) -> JobSignals:
            return JobSignals(checkpoint_requested_at=self.requested_at)

    poller = Poller()
    publisher = RecordingPublisher()
    agent = make_agent(
        tmp_path, clock, publisher, poll_s=1.0, checkpoint_interval_s=0, inject={"job_poller": poller}
    )
    clock.advance(1)
    poller.requested_at = clock.now
    agent.poll_once()

    def state_that_sees_a_new_request() -> dict[str, int]:
        poller.requested_at = clock.now + 0.5  # arrives after the state was captured
        clock.advance(1)
        agent.poll_once()
        return {"w": 3}

    agent.step(1, None, state_that_sees_a_new_request)

    assert agent.checkpoint_reason() is CheckpointReason.REQUESTED
    agent.step(2, None, lambda: {"w": 4})
    assert [e["step"] for e in completed(publisher)] == [1, 2]
    assert agent.checkpoint_reason() is None


def test_sigterm_checkpoints_at_the_next_step_then_stops(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = make_agent(tmp_path, clock, publisher, checkpoint_interval_s=0)
    previous = signal.getsignal(signal.SIGTERM)
    with agent:
        # Never send SIGTERM to the test runner unless the agent's handler is the one installed.
        assert signal.getsignal(signal.SIGTERM) == agent._on_sigterm
        os.kill(os.getpid(), signal.SIGTERM)
        assert agent.stop_requested
        assert agent.step(17, 0.17, lambda: {"w": 17}) is False
    assert signal.getsignal(signal.SIGTERM) == previous

    [event] = completed(publisher)
    assert event["reason"] == "sigterm" and event["step"] == 17
    assert agent.checkpoint_reason() is None  # one checkpoint for one SIGTERM


def test_a_sigterm_during_another_checkpoint_gets_its_own_before_the_run_stops(
    tmp_path: Path, clock: FakeClock
) -> None:
    agent: Any = None

    class SigtermWhilePublishing(RecordingPublisher):
        def publish(self, detail_type: str, detail: dict[str, Any]) -> bool:
            if detail.get("reason") == "periodic":
                agent._on_sigterm(signal.SIGTERM, None)  # after that checkpoint's state was taken
            return super().publish(detail_type, detail)

    publisher = SigtermWhilePublishing()
    agent = make_agent(tmp_path, clock, publisher, checkpoint_interval_s=1.0)
    clock.advance(2)
    assert agent.step(5, 0.5, lambda: {"w": 5}) is False

    assert [(e["reason"], e["step"]) for e in completed(publisher)] == [("periodic", 5), ("sigterm", 5)]
    assert agent.checkpoint_reason() is None


def test_pause_wakes_early_for_a_request_but_not_for_a_periodic_checkpoint(
    tmp_path: Path, clock: FakeClock
) -> None:
    agent = make_agent(tmp_path, clock, RecordingPublisher(), checkpoint_interval_s=1.0)
    start = clock.now
    assert agent.pause(5.0) is True and clock.now - start == pytest.approx(5.0)

    agent.request_stop()
    start = clock.now
    assert agent.pause(5.0) is False and clock.now == start


def test_failed_periodic_checkpoint_is_retried_an_interval_later(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = make_agent(tmp_path, clock, publisher, checkpoint_interval_s=10.0)

    def broken() -> object:
        raise OSError("disk full")

    clock.advance(10)
    assert agent.step(1, None, broken) is True  # training goes on
    assert agent.checkpoint_reason() is None
    clock.advance(10)
    assert agent.checkpoint_reason() is CheckpointReason.PERIODIC
    assert completed(publisher) == []


def test_without_a_store_nothing_is_restored_or_written(clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = Agent(AgentSettings(job_id=JOB, heartbeat_s=0), publisher=publisher, clock=clock)

    assert agent.restore() is None
    assert agent.checkpoint(3, {"w": 1}) is None
    assert publisher.events == []


def test_heartbeats_carry_the_last_reported_step(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = make_agent(
        tmp_path, clock, publisher, heartbeat_s=30.0, checkpoint_interval_s=0, run_id=f"spotline-{JOB}-r2"
    )

    agent.poll_once()  # one at start: the job is alive
    agent.report(12, 0.12, utilization=0.9)
    clock.advance(29)
    agent.poll_once()
    clock.advance(1)
    agent.poll_once()

    beats = [d for kind, d in publisher.events if kind == DETAIL_JOB_HEARTBEAT]
    assert len(beats) == 2
    assert beats[1] == {
        "job_id": JOB,
        "run_id": f"spotline-{JOB}-r2",
        "instance_id": "local-0",
        "step": 12,
        "progress": 0.12,
        "utilization": 0.9,
        "last_checkpoint_step": None,
        "restored_step": None,
        "restored_checkpoint_uri": None,
    }


def test_a_restore_is_announced_by_a_heartbeat_at_once_naming_the_checkpoint(
    tmp_path: Path, clock: FakeClock
) -> None:
    # Given a durable checkpoint at step 9
    first = make_agent(tmp_path, clock, RecordingPublisher(), heartbeat_s=0, checkpoint_interval_s=0)
    record = first.checkpoint(9, {"w": 1})
    assert record is not None
    # When a new run restores it
    publisher = RecordingPublisher()
    agent = make_agent(tmp_path, clock, publisher, heartbeat_s=30.0, checkpoint_interval_s=0)
    restored = agent.restore()
    # Then a heartbeat names it at once (not at the next beat), and every later one too
    assert restored is not None and restored.step == 9
    beats = [d for kind, d in publisher.events if kind == DETAIL_JOB_HEARTBEAT]
    assert [(b["restored_step"], b["restored_checkpoint_uri"]) for b in beats] == [(9, record.uri)]


def test_under_the_wrapper_heartbeats_go_to_the_status_file(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    status = tmp_path / "status.json"
    agent = make_agent(tmp_path, clock, publisher, heartbeat_s=1.0, status_file=str(status))
    agent.report(5, 0.5)

    agent.poll_once()

    assert publisher.events == []
    assert json.loads(status.read_text())["step"] == 5


def test_older_checkpoints_are_pruned_after_each_checkpoint(tmp_path: Path, clock: FakeClock) -> None:
    publisher = RecordingPublisher()
    agent = make_agent(tmp_path, clock, publisher, keep_checkpoints=2)
    for step in range(1, 6):
        agent.checkpoint(step, {"w": step})

    store = LocalCheckpointStore(tmp_path / "ckpt")
    assert [r.step for r in store.manifests()] == [5, 4]
    assert len(completed(publisher)) == 5  # every checkpoint was still reported
    restored = make_agent(tmp_path, clock, RecordingPublisher()).restore()
    assert restored is not None and restored.step == 5


def test_keep_zero_keeps_every_checkpoint(tmp_path: Path, clock: FakeClock) -> None:
    agent = make_agent(tmp_path, clock, RecordingPublisher(), keep_checkpoints=0)
    for step in range(1, 6):
        agent.checkpoint(step, {"w": step})
    assert len(LocalCheckpointStore(tmp_path / "ckpt").manifests()) == 5


def test_settings_from_env() -> None:
    env = {
        "SPOTLINE_JOB_ID": "j1",
        "SPOTLINE_RUN_ID": "spotline-j1-r4",
        "SPOTLINE_CHECKPOINT_URI": "s3://b/p/",
        "SPOTLINE_JOBS_TABLE": "t",
        "SPOTLINE_EVENT_BUS": "bus",
        "SPOTLINE_INSTANCE_ID": "local-3",
        "SPOTLINE_CHECKPOINT_INTERVAL_S": "2.5",
        "SPOTLINE_AGENT_POLL_S": "0.5",
    }
    settings = AgentSettings.from_env(env)
    assert (settings.job_id, settings.checkpoint_uri, settings.jobs_table, settings.event_bus) == (
        "j1",
        "s3://b/p/",
        "t",
        "bus",
    )
    assert (settings.instance_id, settings.checkpoint_interval_s, settings.poll_s) == ("local-3", 2.5, 0.5)
    assert settings.run_id == "spotline-j1-r4"
    assert settings.imds_endpoint is None  # not on AWS: no instance metadata probing
    assert AgentSettings.from_env({}).job_id == "local"
    assert AgentSettings.from_env({}).run_id is None
    with pytest.raises(ValueError, match="SPOTLINE_AGENT_POLL_S"):
        AgentSettings.from_env({"SPOTLINE_AGENT_POLL_S": "soon"})
    assert AgentSettings.from_env({}).keep_checkpoints == 3
    assert AgentSettings.from_env({"AWS_BATCH_JOB_ID": "b-9"}).batch_job_id == "b-9"
    gang = AgentSettings.from_env(
        {"AWS_BATCH_JOB_ID": "b-9#2", "AWS_BATCH_JOB_NODE_INDEX": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}
    )
    assert (gang.batch_job_id, gang.node_index, gang.main_node_index, gang.is_main_node) == (
        "b-9",
        2,
        0,
        False,
    )
    assert AgentSettings.from_env({}).is_main_node
    with pytest.raises(ValueError, match="AWS_BATCH_JOB_NODE_INDEX"):
        AgentSettings.from_env({"AWS_BATCH_JOB_NODE_INDEX": "main"})
    assert AgentSettings.from_env({"SPOTLINE_KEEP_CHECKPOINTS": "0"}).keep_checkpoints == 0
    for bad in ("-1", "two"):
        with pytest.raises(ValueError, match="SPOTLINE_KEEP_CHECKPOINTS"):
            AgentSettings.from_env({"SPOTLINE_KEEP_CHECKPOINTS": bad})
