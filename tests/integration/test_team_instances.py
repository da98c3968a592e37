"""Teams on instances of their own (`team_instances`, docs/security.md "Host isolation"): a pool
has a job queue per team, each in front of that team's own compute environment, and the launcher
submits a team's jobs to its own queue only. On moto, through the handlers."""

from __future__ import annotations

import copy

import pytest

import functions.batch_state_change
from spotline.control.scheduling import admit
from spotline.control.settings import SpotlineConfig
from spotline.domain import JobState

from .helpers import CONFIG, Deployment, batch_event, context, start, submit

TEAMS = ("vision", "nlp")


def _queue(pool: str, team: str) -> str:
    return f"spotline-test-{pool}-{team}"


@pytest.fixture
def teams_apart(deployment: Deployment) -> Deployment:
    plane = deployment.plane
    pools = tuple(
        p.model_copy(update={"job_queue": None, "team_job_queues": {t: _queue(p.name, t) for t in TEAMS}})
        for p in plane.config.pools
    )
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"pools": pools})}
    )
    return deployment


def test_each_teams_jobs_launch_in_its_own_queue(teams_apart: Deployment) -> None:
    dep = teams_apart
    dep.clock.freeze()
    start(dep, submit(dep, "vision"))
    start(dep, submit(dep, "nlp"), instance_id="i-0bbbbbbbbbbbbbbb2")
    start(dep, submit(dep, "nlp"), pool="a100-on-demand", instance_id="i-0ccccccccccccccc3")
    assert [(r.team, r.job_queue) for r in dep.launcher.submitted] == [
        ("vision", _queue("a100-spot", "vision")),
        ("nlp", _queue("a100-spot", "nlp")),
        ("nlp", _queue("a100-on-demand", "nlp")),
    ]


def test_a_run_in_another_teams_queue_is_stopped_as_an_orphan(teams_apart: Deployment) -> None:
    dep = teams_apart
    dep.clock.freeze()
    record = submit(dep, "vision")
    admitted = admit(dep.plane, record, "a100-spot", "fits", now=dep.clock())
    # A Batch job of this run, but on nlp's instances of the pool
    event = batch_event(record.id, "batch-elsewhere", "RUNNING", job_queue=_queue("a100-spot", "nlp"))
    outcome = functions.batch_state_change.handler(event, context("batch_state_change"))["outcome"]
    assert outcome.startswith("orphan stopped: queue") and "for team vision" in outcome
    stored = dep.plane.jobs.get(admitted.id)
    assert (stored.state, stored.batch_job_id) == (JobState.ADMITTED, None)
    assert dep.launcher.terminated[-1][0] == "batch-elsewhere"


def test_a_pool_without_a_queue_for_a_team_is_refused() -> None:
    config = copy.deepcopy(CONFIG)
    config["job_definitions"] = {t: f"spotline-training-{t}" for t in TEAMS}
    for pool in config["pools"]:
        del pool["job_queue"]
        pool["team_job_queues"] = {"vision": _queue(pool["name"], "vision")}
    with pytest.raises(ValueError, match=r"pool a100-spot has no job queue for teams \['nlp'\]"):
        SpotlineConfig.model_validate(config)
    del config["pools"][0]["team_job_queues"]
    with pytest.raises(ValueError, match="give job_queue or team_job_queues"):
        SpotlineConfig.model_validate(config)
