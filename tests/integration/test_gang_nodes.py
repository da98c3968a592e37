"""A gang's nodes have Batch job ids `<parent>#<n>` and events of their own.
They are mapped to their parent: a node is never stopped as an orphan, a node event never becomes
the run, and a running node adds its instance to the job. Handlers called as Lambda would, on moto."""

from __future__ import annotations

from typing import Any

import functions.batch_state_change
from spotline.aws.event_models import BatchJobStateChangeEvent
from spotline.control.records import split_node_id
from spotline.control.scheduling import admit
from spotline.domain import JobState

from .helpers import Deployment, batch_event, context, start, submit

NODE_INSTANCE = "i-0bbbbbbbbbbbbbbb2"


def node_event(job_id: str, parent: str, node: int, status: str, **kwargs: Any) -> dict[str, Any]:
    """AWS's Batch Job State Change for node `node` of multi-node job `parent`."""
    event = batch_event(job_id, f"{parent}#{node}", status, **kwargs)
    event["detail"]["nodeDetails"] = {"nodeIndex": node, "isMainNode": node == 0}
    return event


def handle(event: dict[str, Any]) -> str:
    return str(functions.batch_state_change.handler(event, context("batch_state_change"))["outcome"])


def test_a_node_id_maps_to_its_parent() -> None:
    assert split_node_id("4c1e-parent#3") == ("4c1e-parent", 3)
    assert split_node_id("4c1e-parent") == ("4c1e-parent", None)
    assert split_node_id("#3") == ("#3", None)
    assert split_node_id("a#b") == ("a#b", None)
    event = node_event("job-1", "parent-1", 2, "RUNNING")
    assert BatchJobStateChangeEvent.model_validate(event).detail.node() == ("parent-1", 2)


def test_a_running_node_of_the_run_adds_its_instance_and_stops_nothing(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep), pool="a100-on-demand")
    assert running.batch_job_id is not None
    # Given a gang run: node 1 starts on its own instance
    outcome = handle(
        node_event(
            running.id,
            running.batch_job_id,
            1,
            "RUNNING",
            container_instance=NODE_INSTANCE,
        )
    )
    # Then the node is not an orphan, and a warning for its instance now finds the job
    assert outcome.startswith(f"node 1 of Batch job {running.batch_job_id} running")
    assert dep.launcher.terminated == []
    stored = dep.plane.jobs.get(running.id)
    assert stored.state is JobState.RUNNING and stored.batch_job_id == running.batch_job_id
    assert NODE_INSTANCE in stored.instance_ids
    assert running.id in dep.plane.instances.jobs_on(NODE_INSTANCE)


def test_an_unknown_node_id_is_never_stopped_as_an_orphan(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep), pool="a100-on-demand")
    # A node of a Batch job the record does not own (another parent, same run name)
    outcome = handle(node_event(running.id, "some-other-parent", 1, "RUNNING"))
    assert "ignored" in outcome
    # Nothing is terminated (a node cannot be stopped alone; the parent's own event decides)
    assert dep.launcher.terminated == []
    stored = dep.plane.jobs.get(running.id)
    assert (stored.state, stored.batch_job_id) == (JobState.RUNNING, running.batch_job_id)
    # And a node of an earlier run is ignored the same way
    assert "ignored" in handle(node_event(running.id, running.batch_job_id or "", 2, "RUNNING", run=7))
    assert dep.launcher.terminated == []


def test_node_zero_arriving_before_the_run_is_recorded_does_not_become_the_run(
    deployment: Deployment,
) -> None:
    dep = deployment
    record = submit(dep)
    admitted = admit(dep.plane, record, "a100-on-demand", "fits", now=dep.clock())
    assert admitted.batch_job_id is None
    # Node 0's RUNNING arrives before RecordBatchJob (and before the parent's own event)
    outcome = handle(node_event(record.id, "gang-parent", 0, "RUNNING", job_queue=None))
    assert outcome.endswith("its run is not recorded yet: ignored")
    stored = dep.plane.jobs.get(record.id)
    assert (stored.state, stored.batch_job_id) == (JobState.ADMITTED, None)
    assert dep.launcher.terminated == []
    # The parent's own RUNNING event then makes the run, under the parent's id
    assert handle(batch_event(record.id, "gang-parent", "RUNNING")) == "running"
    stored = dep.plane.jobs.get(record.id)
    assert (stored.state, stored.batch_job_id) == (JobState.RUNNING, "gang-parent")


def test_a_nodes_end_leaves_the_job_to_its_parents_events(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep), pool="a100-on-demand")
    assert running.batch_job_id is not None
    outcome = handle(node_event(running.id, running.batch_job_id, 1, "FAILED"))
    assert outcome.endswith("the parent's events decide")
    assert dep.plane.jobs.get(running.id).state is JobState.RUNNING
    assert dep.launcher.terminated == []
