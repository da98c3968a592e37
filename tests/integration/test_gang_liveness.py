"""Every node of a gang heartbeats, the reconciler stops and requeues
a gang with a silent node (the path of a lost host), and the reconciler's run emits the metrics
the capacity alarms watch (stalled gangs, a Spot pool's oldest job waiting to start, INVALID
compute environments). Handlers called as Lambda would, on moto."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import functions.heartbeat
import functions.reconciler
from functions.runtime import use_control_plane
from spotline.aws.batch import AwsBatchLauncher
from spotline.aws.environments import invalid_compute_environments
from spotline.control.records import JobRecord, run_id_for, silent_gang_node
from spotline.control.scheduling import admit
from spotline.control.workflow_tasks import record_batch_job, submit_batch_job
from spotline.domain import JobState

from . import helpers
from .helpers import (
    REGION,
    Deployment,
    context,
    eventbridge,
    heartbeat_recorded,
    load_event,
    make_deployment,
    start,
    submit,
)

NODE1_INSTANCE = "i-0bbbbbbbbbbbbbbb2"


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """The integration deployment with an On-Demand pool of two nodes (gangs run On-Demand)."""
    config = copy.deepcopy(helpers.CONFIG)
    config["pools"][1]["capacity_gpus"] = 16
    config["teams"][0]["nominal_gpus"] = 24
    monkeypatch.setattr(helpers, "CONFIG", config)
    with make_deployment(real_workflows=False) as deployed:
        yield deployed


def gang(dep: Deployment) -> JobRecord:
    """A running two-node gang (16 GPUs, two whole nodes of the On-Demand pool)."""
    return start(dep, submit(dep, gpus=16, nodes=2), pool="a100-on-demand")


def beat(job: JobRecord, node: int | None, step: int, *, source: str = "spotline.agent.vision") -> bool:
    detail: dict[str, Any] = {"job_id": job.id, "run_id": run_id_for(job.id, job.run), "step": step}
    if node is not None:
        detail["node_index"] = node
        detail["instance_id"] = NODE1_INSTANCE if node == 1 else "i-0aaaaaaaaaaaaaaa1"
    event = eventbridge("job_heartbeat", detail=detail, source=source)
    return heartbeat_recorded(event)


def reconcile() -> dict[str, Any]:
    result: dict[str, Any] = functions.reconciler.handler(
        load_event("scheduled_event"), context("reconciler")
    )
    return result


def emitted(out: str) -> list[tuple[str, dict[str, str], float]]:
    """(metric, dimensions, value) of every EMF document Powertools printed."""
    found = []
    for line in out.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            dimensions = {name: document[name] for group in directive["Dimensions"] for name in group}
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                found.append(
                    (metric["Name"], dimensions, float(value[0] if isinstance(value, list) else value))
                )
    return found


def test_every_node_is_heard_and_a_child_trailing_by_a_step_is_not_dropped(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    running = gang(dep)
    assert beat(running, 0, 100)
    # A child node's heartbeat may trail the main node's step: it still says the node is alive
    assert beat(running, 1, 99)
    stored = dep.plane.jobs.get(running.id)
    assert set(stored.node_heartbeats) == {0, 1}
    assert stored.step == 100  # the main node's, not moved back by the child
    assert NODE1_INSTANCE in stored.instance_ids
    # Another team's source cannot keep a node alive
    assert not beat(running, 1, 101, source="spotline.agent.nlp")


def test_a_gang_whose_nodes_all_heartbeat_is_left_alone(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    running = gang(dep)
    timeout = dep.plane.config.heartbeat_timeout_s
    for step in range(1, 4):
        dep.clock.advance(timeout / 2)
        assert beat(running, 0, step) and beat(running, 1, step)
        assert reconcile()["requeued"] == []
    assert dep.plane.jobs.get(running.id).state is JobState.RUNNING


@pytest.mark.parametrize("child_ever_heard", [True, False], ids=["child-went-silent", "child-never-heard"])
def test_a_silent_child_node_stops_the_gang_and_requeues_it_from_its_checkpoint(
    deployment: Deployment, capsys: pytest.CaptureFixture[str], child_ever_heard: bool
) -> None:
    dep = deployment
    dep.clock.freeze()
    running = gang(dep)
    timeout = dep.plane.config.heartbeat_timeout_s
    if child_ever_heard:
        assert beat(running, 1, 1)
    # Given the main node keeps heartbeating (the job-level heartbeat stays fresh) while node 1
    # is silent past the timeout (hung: NCCL waits on it, Batch sees nothing)
    for step in range(2, 5):
        dep.clock.advance(timeout / 3 + 1)
        assert beat(running, 0, step)
    capsys.readouterr()

    # When the reconciler runs
    result = reconcile()

    # Then the gang is stopped and requeued as a lost host would be (INTERRUPTED -> PENDING)
    assert result["requeued"] == [[running.id, "gang node silent 1"]]
    stored = dep.plane.jobs.get(running.id)
    assert stored.state is JobState.PENDING
    assert stored.job.interruptions == 1
    assert (running.batch_job_id, "Spotline: gang node 1 silent") in dep.launcher.terminated
    entries, _ = dep.plane.timeline.list(running.id)
    assert entries[-2].target == "INTERRUPTED" and "node 1 of the gang" in entries[-2].reason
    # And the StalledGangs metric counts it
    assert ("StalledGangs", {"service": "spotline"}, 1.0) in emitted(capsys.readouterr().out)


def test_a_nodes_heartbeat_of_an_earlier_run_does_not_count_for_the_current_one(
    deployment: Deployment,
) -> None:
    dep = deployment
    now = dep.clock.freeze()
    running = gang(dep)
    timeout = dep.plane.config.heartbeat_timeout_s
    assert running.job.started_at is not None
    # Node 1 was heard long ago (an earlier run's entry stays on the item)
    started = running.job.started_at
    earlier = running.model_copy(update={"node_heartbeats": {0: started + 100, 1: started - 10}})
    # It is judged from the run's start, not from the earlier run's heartbeat
    assert silent_gang_node(earlier, started + timeout, timeout) is None
    assert silent_gang_node(earlier, started + timeout + 1, timeout) == (1, pytest.approx(timeout + 1))
    # A run whose heartbeats never named a node (an older agent) is judged by the job's alone
    older_agent = running.model_copy(update={"node_heartbeats": {1: started - 10}})
    assert silent_gang_node(older_agent, started + 10 * timeout, timeout) is None
    # A single-node job is never judged by nodes
    assert silent_gang_node(start(dep, submit(dep), pool="a100-spot"), now + 10 * timeout, timeout) is None


def test_the_reconciler_reports_a_spot_pools_oldest_job_waiting_to_start(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = deployment
    dep.clock.freeze()
    # Given a job submitted to Batch in the Spot pool that has not started (RUNNABLE: no capacity)
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    batch_job_id = submit_batch_job(
        dep.plane, record.id, version=admitted.version, run=admitted.run, pool="a100-spot"
    )["batch_job_id"]
    record_batch_job(
        dep.plane, record.id, version=admitted.version, run=admitted.run, batch_job_id=batch_job_id
    )
    dep.clock.advance(700)
    capsys.readouterr()

    reconcile()

    # Then each pool's oldest waiting job is a metric of its own (the SpotCapacity alarms' metric)
    ages = {
        dims["Pool"]: value
        for name, dims, value in emitted(capsys.readouterr().out)
        if name == "OldestUnstartedAge"
    }
    assert ages == {"a100-spot": 700.0, "a100-on-demand": 0.0}
    # Past the start timeout it is requeued (and no longer counted)
    dep.clock.advance(dep.plane.config.start_timeout_s)
    assert reconcile()["requeued"] == [[record.id, "start timed out"]]
    ages = {
        dims["Pool"]: value
        for name, dims, value in emitted(capsys.readouterr().out)
        if name == "OldestUnstartedAge"
    }
    assert ages["a100-spot"] == 700.0 + dep.plane.config.start_timeout_s


def _stubbed_batch(invalid: bool) -> tuple[Any, Stubber]:
    client = boto3.client("batch", region_name=REGION)
    stub = Stubber(client)
    queue = "arn:aws:batch:us-east-1:123456789012:job-queue/spotline-a100-spot"
    environment = "arn:aws:batch:us-east-1:123456789012:compute-environment/spotline-a100-spot"
    stub.add_response(
        "describe_job_queues",
        {
            "jobQueues": [
                {
                    "jobQueueName": "spotline-a100-spot",
                    "jobQueueArn": queue,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": environment}],
                }
            ]
        },
    )
    stub.add_response(
        "describe_compute_environments",
        {
            "computeEnvironments": [
                {
                    "computeEnvironmentName": "spotline-a100-spot",
                    "computeEnvironmentArn": environment,
                    "ecsClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/spotline-a100-spot",
                    "status": "INVALID" if invalid else "VALID",
                    "statusReason": "CLIENT_ERROR - subnet not found" if invalid else "ok",
                }
            ]
        },
        {"computeEnvironments": [environment]},
    )
    return client, stub


@pytest.mark.parametrize("invalid", [True, False])
def test_invalid_compute_environments_are_named_with_batchs_reason(invalid: bool) -> None:
    client, stub = _stubbed_batch(invalid)
    with stub:
        found = invalid_compute_environments(client, ["spotline-a100-spot", "spotline-a100-spot"])
    assert found == (["spotline-a100-spot: CLIENT_ERROR - subnet not found"] if invalid else [])
    stub.assert_no_pending_responses()


def test_the_reconciler_counts_invalid_compute_environments(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    client, stub = _stubbed_batch(True)
    plane = dataclasses.replace(deployment.plane, launcher=AwsBatchLauncher(client, None))
    use_control_plane(plane)
    capsys.readouterr()
    with stub:
        reconcile()
    metrics = emitted(capsys.readouterr().out)
    assert ("ComputeEnvironmentsInvalid", {"service": "spotline"}, 1.0) in metrics
    # Where no AWS Batch answers (the tests' and the local runtime's launchers), no data point
    use_control_plane(deployment.plane)
    reconcile()
    assert not [m for m in emitted(capsys.readouterr().out) if m[0] == "ComputeEnvironmentsInvalid"]
