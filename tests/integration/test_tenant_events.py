"""Tenant isolation in the handlers (docs/security.md): an agent event counts only for
a job of the team its source names (`spotline.agent.<team>`, the only source that team's job
role may put), and the agent's signals reach it through its job's own signal item."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

import functions.checkpoint_completed
import functions.heartbeat
from spotline import resources as r
from spotline.control.records import Disruption, JobRecord
from spotline.control.workflow_tasks import request_checkpoint, start_disruption_without_workflow
from spotline.domain import JobState

from .helpers import Deployment, context, eventbridge, heartbeat_recorded, start, submit


class RecordingTokens:
    """Task tokens answered (the preempt workflow's wait), instead of Step Functions."""

    def __init__(self) -> None:
        self.answered: list[tuple[str, Mapping[str, Any]]] = []

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        self.answered.append((token, output))
        return True

    def fail(self, token: str, error: str, cause: str) -> bool:
        return True


def from_team(event: dict[str, Any], team: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(event)
    changed["source"] = r.agent_source(team) if team else r.SOURCE_AGENT
    return changed


def snapshot(dep: Deployment, job_id: str) -> dict[str, Any]:
    """The job's item as stored (every attribute), to show that nothing changed."""
    item = dep.dynamodb.get_item(
        TableName=dep.tables[r.JOBS.logical_id], Key={"job_id": {"S": job_id}}, ConsistentRead=True
    )["Item"]
    return dict(item)


def preempting(dep: Deployment, tokens: RecordingTokens) -> JobRecord:
    """A running vision job asked to checkpoint by a preemption whose workflow waits (a token)."""
    running = start(dep, submit(dep, "vision"))
    dep.plane.tokens = tokens
    start_disruption_without_workflow(dep.plane, running, Disruption.PREEMPT, now=dep.clock(), timeout_s=60)
    request_checkpoint(dep.plane, running.id, task_token="token-of-the-preemption")
    record = dep.plane.jobs.get(running.id)
    assert record.state is JobState.CHECKPOINTING and record.checkpoint_task_token
    return record


@pytest.mark.parametrize("source_team", ["nlp", None], ids=["another-team", "no-team"])
def test_a_heartbeat_from_another_teams_source_changes_nothing(
    deployment: Deployment, source_team: str | None
) -> None:
    # Given a running vision job
    running = start(deployment, submit(deployment, "vision"))
    before = snapshot(deployment, running.id)

    # When a heartbeat for it comes from nlp's source (or the bare agent source)
    beat = from_team(eventbridge("job_heartbeat", detail={"job_id": running.id, "step": 10_000}), source_team)
    recorded = heartbeat_recorded(beat)

    # Then it is dropped: no progress, no step, no instance, no liveness
    assert recorded is False
    assert snapshot(deployment, running.id) == before
    assert deployment.plane.instances.jobs_on("i-1234567890abcdef0") == []

    # And the same heartbeat from vision's own source counts
    own = from_team(beat, "vision")
    assert heartbeat_recorded(own) is True
    assert deployment.plane.jobs.get(running.id).step == 10_000


@pytest.mark.parametrize("source_team", ["nlp", None], ids=["another-team", "no-team"])
def test_a_checkpoint_from_another_teams_source_changes_nothing(
    deployment: Deployment, source_team: str | None
) -> None:
    running = start(deployment, submit(deployment, "vision"))
    before = snapshot(deployment, running.id)
    forged = from_team(
        eventbridge(
            "checkpoint_completed",
            detail={"job_id": running.id, "step": 10_000, "checkpoint_uri": "s3://elsewhere/forged/"},
        ),
        source_team,
    )

    assert functions.checkpoint_completed.handler(forged, context())["recorded"] is False
    assert snapshot(deployment, running.id) == before
    assert deployment.plane.jobs.get(running.id).job.last_checkpoint_uri is None


def test_a_forged_checkpoint_cannot_answer_a_preemptions_checkpoint_request(deployment: Deployment) -> None:
    # Given a vision job being preempted: its preempt workflow waits for its checkpoint
    tokens = RecordingTokens()
    record = preempting(deployment, tokens)
    before = snapshot(deployment, record.id)

    # When nlp's code puts a Checkpoint Completed for it that answers the request exactly
    forged = from_team(
        eventbridge(
            "checkpoint_completed",
            detail={
                "job_id": record.id,
                "step": 500,
                "checkpoint_uri": "s3://bucket/checkpoints/nlp/forged/manifest.json",
                "requested_at": record.checkpoint_requested_at,
                "created_at": deployment.clock(),
            },
        ),
        "nlp",
    )
    assert functions.checkpoint_completed.handler(forged, context())["recorded"] is False

    # Then the workflow still waits (no token answered), and the job would not resume from it
    assert tokens.answered == []
    assert snapshot(deployment, record.id) == before

    # And the job's own agent answers it
    genuine = from_team(forged, "vision")
    genuine["id"] = "another-event-id"
    genuine["detail"]["checkpoint_uri"] = f"s3://bucket/checkpoints/vision/{record.id}/manifest.json"
    assert functions.checkpoint_completed.handler(genuine, context())["recorded"] is True
    assert [token for token, _ in tokens.answered] == ["token-of-the-preemption"]
    assert deployment.plane.jobs.get(record.id).job.last_checkpoint_uri == genuine["detail"]["checkpoint_uri"]


def test_the_signal_item_follows_the_request_and_the_run(deployment: Deployment) -> None:
    """What the agent polls is its job's signal item, written in the same transactions as the
    job's item: the current run once recorded, a checkpoint request, and nothing after a requeue."""
    jobs = deployment.plane.jobs
    running = start(deployment, submit(deployment, "vision"))
    signals = jobs.read_signals("vision", running.id)
    assert signals is not None and signals["batch_job_id"] == running.batch_job_id
    assert signals["job_id"] == f"signal#vision#{running.id}" and signals["job"] == running.id
    assert "checkpoint_requested_at" not in signals
    assert jobs.read_signals("nlp", running.id) is None  # keyed by the owning team

    # A rebalance recommendation asks for a checkpoint with a field write (no transition)
    import functions.rebalance

    functions.rebalance.handler(
        eventbridge("rebalance_recommendation", detail={"instance-id": running.instance_ids[0]}),
        context("rebalance"),
    )
    requested = jobs.get(running.id).checkpoint_requested_at
    assert requested is not None
    assert jobs.read_signals("vision", running.id)["checkpoint_requested_at"] == requested  # type: ignore[index]

    # A preemption asks with a transition; the requeue clears both
    tokens = RecordingTokens()
    deployment.plane.tokens = tokens
    marked = start_disruption_without_workflow(
        deployment.plane, jobs.get(running.id), Disruption.PREEMPT, now=deployment.clock() + 1, timeout_s=30
    )
    assert (
        jobs.read_signals("vision", running.id)["checkpoint_requested_at"] == marked.checkpoint_requested_at
    )  # type: ignore[index]
    from spotline.control.workflow_tasks import finish_preemption

    finish_preemption(deployment.plane, running.id)
    assert jobs.get(running.id).state is JobState.PENDING
    cleared = jobs.read_signals("vision", running.id)
    assert cleared is not None and set(cleared) == {"job_id", "job"}


def test_signal_items_are_in_no_index(deployment: Deployment) -> None:
    """A signal item carries no index attribute: no queue, team, deadline or active query sees it."""
    running = start(deployment, submit(deployment, "vision"))
    signals = deployment.plane.jobs.read_signals("vision", running.id)
    assert signals is not None
    index_keys = {k for index in r.JOBS.indexes for k in (index.partition_key, index.sort_key) if k}
    assert not index_keys - {"job_id"} & set(signals)
    listed, _ = deployment.plane.jobs.list_team("vision")
    assert [record.id for record in listed] == [running.id]


def test_the_local_fleet_runs_each_teams_jobs_with_that_teams_credentials() -> None:
    """Locally, as on AWS, a team's job gets its team's credentials and nobody else's: distinct
    access keys per team, never the control plane's."""
    from spotline.control.ports import BatchJobRequest
    from spotline.local.runtime import FleetLauncher, TeamCredentials

    class Fleet:
        def __init__(self) -> None:
            self.environments: list[dict[str, str]] = []

        def submit_job(self, *, environment: Mapping[str, str], **_: Any) -> str:
            self.environments.append(dict(environment))
            return f"b-{len(self.environments)}"

    fleet = Fleet()
    credentials = {team: TeamCredentials.new(team) for team in ("vision", "nlp")}
    launcher = FleetLauncher(fleet, credentials)  # type: ignore[arg-type]
    for team in ("vision", "nlp", "vision"):
        launcher.submit(
            BatchJobRequest(
                job_id=f"job-{team}",
                run=1,
                team=team,
                job_queue="q",
                image="i",
                command=("true",),
                gpus_per_node=1,
                nodes=1,
                environment={r.AGENT_ENV_TEAM: team, "AWS_ACCESS_KEY_ID": "control-plane"},
            )
        )
    keys = [env["AWS_ACCESS_KEY_ID"] for env in fleet.environments]
    assert keys == [credentials["vision"].access_key_id, credentials["nlp"].access_key_id, keys[0]]
    assert keys[0] != keys[1] and "control-plane" not in keys
    assert all(env["AWS_SECRET_ACCESS_KEY"] for env in fleet.environments)
