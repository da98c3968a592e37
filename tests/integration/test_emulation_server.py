"""The emulation helper behind moto's ThreadedMotoServer, as the local runtime uses it: the
handlers and the ASL run in this process, every SDK call goes over HTTP to the server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer

import functions.checkpoint_completed
import functions.workflow_tasks
from spotline.aws.clients import AwsClients
from spotline.aws.emulation import (
    create_state_machines,
    create_tables,
    dispatch_lambda_tasks,
    enable_state_machine_execution,
    environment,
)
from spotline.aws.jobs import Disruption
from spotline.aws.lambda_runtime import use_control_plane
from spotline.aws.settings import Settings
from spotline.control.lifecycle import start_disruption
from spotline.control.plane import build_control_plane
from spotline.domain import JobState

from .conftest import (
    CONFIG,
    REGION,
    Deployment,
    RecordingLauncher,
    StaticInstanceResolver,
    TestClock,
    context,
    eventbridge,
    start,
    submit,
)


@pytest.fixture
def server_deployment() -> Iterator[Deployment]:
    from moto.core.config import default_user_config

    executing = default_user_config["stepfunctions"]["execute_state_machine"]
    enable_state_machine_execution()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        clients = AwsClients(region=REGION, endpoint_url=f"http://{host}:{port}")
        tables = create_tables(clients.client("dynamodb"), prefix="server")
        clients.client("events").create_event_bus(Name="server-bus")
        machines = create_state_machines(clients.client("stepfunctions"), prefix="server")
        settings = Settings.from_env(
            environment(tables, event_bus="server-bus", state_machines=machines, config=CONFIG)
        )
        launcher, resolver, clock = RecordingLauncher(), StaticInstanceResolver(), TestClock()
        plane = build_control_plane(
            settings, clients, launcher=launcher, instance_resolver=resolver, clock=clock
        )
        use_control_plane(plane)
        yield Deployment(plane, clients, tables, "server-bus", machines, launcher, clock, resolver)
    finally:
        use_control_plane(None)
        server.stop()
        default_user_config["stepfunctions"]["execute_state_machine"] = executing


def test_a_preemption_round_trip_over_the_server(server_deployment: Deployment) -> None:
    dep = server_deployment
    plane = dep.plane
    with dispatch_lambda_tasks({"workflow_tasks": functions.workflow_tasks.handler}):
        # Given a running job asked to checkpoint
        running = start(dep, submit(dep), launch_workflow_runs=True)
        now = time.time()
        start_disruption(
            plane,
            running,
            Disruption.PREEMPT,
            now=now,
            deadline_at=now + 20,
            draining_for="job-x",
            reason="preempted",
        )
        deadline = time.time() + 10
        while not plane.jobs.get(running.id).checkpoint_task_token:
            assert time.time() < deadline, "no task token stored"
            time.sleep(0.05)

        # When the agent's checkpoint arrives
        event = eventbridge("checkpoint_completed", detail={"job_id": running.id, "step": 3})
        functions.checkpoint_completed.handler(event, context())

        # Then the workflow finishes over HTTP and the job is requeued
        while plane.jobs.get(running.id).state is not JobState.PENDING:
            assert time.time() < deadline, f"job still {plane.jobs.get(running.id).state}"
            time.sleep(0.05)
        assert plane.jobs.get(running.id).job.preemptions == 1
