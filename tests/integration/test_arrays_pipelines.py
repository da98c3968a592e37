"""Arrays (sweeps), dependencies (pipelines) and cost per job through the HTTP API, on moto:
a sweep of 16 with max_running 4, a pipeline of three steps, a failed dependency chain, the
refusals, and a job's cost across a requeue."""

from __future__ import annotations

import json
from typing import Any

import pytest

import functions.api
import functions.batch_state_change
from spotline.control.arrays import release_held
from spotline.control.lifecycle import launch_request
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState, Priority

from .helpers import NLP_ROLE, SPEC, Deployment, api_event, batch_event, context, start

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
NLP = {"userArn": NLP_ROLE, "caller": "AIDANLP", "accessKey": "AKIANLP"}
ONE_GPU = {**SPEC, "gpus": 1}


def call(method: str, path: str, identity: dict[str, Any] = VISION, **kwargs: Any) -> tuple[int, Any]:
    response = functions.api.handler(api_event(method, path, identity=identity, **kwargs), context("api"))
    body = response.get("body")
    return response["statusCode"], json.loads(body) if body else None


def post(identity: dict[str, Any] = VISION, **spec: Any) -> tuple[int, Any]:
    return call("POST", "/jobs", identity, body={**ONE_GPU, **spec})


def end(dep: Deployment, job_id: str, status: str, **kwargs: Any) -> None:
    """Batch reports the job's current run ended (SUCCEEDED / FAILED)."""
    record = dep.plane.jobs.get(job_id)
    assert record.batch_job_id is not None
    functions.batch_state_change.handler(
        batch_event(job_id, record.batch_job_id, status, run=record.run, **kwargs), context("batch")
    )


def state(dep: Deployment, job_id: str) -> JobState:
    return dep.plane.jobs.get(job_id).state


# --- arrays -------------------------------------------------------------------------------------


def test_a_sweep_of_16_runs_at_most_4_at_once(deployment: Deployment) -> None:
    # When an array of 16 one-GPU elements capped at 4 is submitted in one request
    status, array = post(name="sweep", array="0-15", max_running=4)
    assert status == 201
    array_id = array["id"]
    ids = [j["id"] for j in array["jobs"]]
    assert array_id.startswith("arr-") and array["size"] == 16 and array["counts"] == {"PENDING": 16}
    assert ids == [f"{array_id}-{i}" for i in range(16)]

    # Then a pass admits 4 (there is room for 16), and the others wait, saying why
    result = scheduling_pass(deployment.plane)
    assert len(result.admitted) == 4
    status, view = call("GET", f"/arrays/{array_id}")
    assert status == 200 and view["counts"] == {"ADMITTED": 4, "PENDING": 12} and view["holding_gpus"] == 4
    waiting = next(j for j in view["jobs"] if j["state"] == "PENDING")
    assert waiting["wait_reason"] == f"waiting: array {array_id} has max_running=4 elements running"
    status, explained = call("GET", f"/arrays/{array_id}/explain")
    assert status == 200 and "max_running=4" in explained["summary"]

    # And each element gets its index in its environment
    admitted = deployment.plane.jobs.get(result.admitted[0][0])
    env = launch_request(deployment.plane, admitted).environment
    assert env["SPOTLINE_ARRAY_INDEX"] == str(admitted.job.array_index)
    assert env["SPOTLINE_ARRAY_ID"] == array_id

    # When two admitted elements are cancelled (by index), two more start, never more than 4
    running = sorted(deployment.plane.jobs.get(j).job.array_index for j, _ in result.admitted)
    chosen = ",".join(str(i) for i in running[:2])
    status, view = call("DELETE", f"/arrays/{array_id}", query={"elements": chosen})
    assert status == 200 and view["counts"]["CANCELLED"] == 2
    assert len(scheduling_pass(deployment.plane).admitted) == 2
    assert call("GET", f"/arrays/{array_id}")[1]["holding_gpus"] == 4

    # When the whole array is cancelled, every unfinished element ends
    status, view = call("DELETE", f"/arrays/{array_id}")
    assert status == 200 and view["counts"] == {"CANCELLED": 16}


def test_a_sweep_matrix_puts_its_parameters_in_the_environment(deployment: Deployment) -> None:
    status, array = post(name="grid", sweep={"lr": [0.001, 0.0001], "seed": [1, 2]})
    assert status == 201 and array["size"] == 4
    params = [j["array_params"] for j in array["jobs"]]
    assert params[1] == {"lr": "0.001", "seed": "2"}
    scheduling_pass(deployment.plane)
    record = deployment.plane.jobs.get(array["jobs"][1]["id"])
    env = launch_request(deployment.plane, record).environment
    assert env["SPOTLINE_PARAM_LR"] == "0.001" and env["SPOTLINE_PARAM_SEED"] == "2"


def test_an_array_of_200_is_written_whole_in_chunks(deployment: Deployment) -> None:
    # 200 elements: more than one transaction holds (49 elements each), written in 5 chunks
    status, array = post(name="big", array="0-199", max_running=16)
    assert status == 201 and array["size"] == 200 and array["written"] == 200
    assert array["state"] == "READY" and array["counts"] == {"PENDING": 200}
    jobs = deployment.plane.jobs.find_many(f"{array['id']}-{i}" for i in range(200))
    assert len(jobs) == 200 and all(r.staged_for_array is None for r in jobs.values())
    # Each element: its submission, then its release into the queue (nothing written twice)
    timeline = deployment.plane.timeline.list(f"{array['id']}-199")[0]
    assert [(e.source, e.target) for e in timeline] == [("-", "PENDING"), ("PENDING", "PENDING")]
    assert len(scheduling_pass(deployment.plane).admitted) == 16


def _fail_after(monkeypatch: pytest.MonkeyPatch, chunks: int) -> list[int]:
    """Make the array's writes fail (storage unavailable) after `chunks` element chunks."""
    import spotline.aws.array_items as array_items
    from spotline.control.errors import StorageUnavailable

    written = [0]
    real = array_items._put_chunk

    def put_chunk(*args: Any) -> Any:
        if written[0] >= chunks:
            raise StorageUnavailable("injected: the request died here")
        written[0] += 1
        return real(*args)

    monkeypatch.setattr(array_items, "_put_chunk", put_chunk)
    return written


def test_a_retry_completes_an_array_a_failure_cut_short(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {"Idempotency-Key": "sweep-200"}
    body = {**ONE_GPU, "name": "big", "array": "0-199"}
    # Given a request that dies after its first chunk of 49 elements
    written = _fail_after(monkeypatch, 1)
    status, _ = call("POST", "/jobs", body=body, headers=headers)
    assert status == 503 and written == [1]
    staged = deployment.plane.jobs.list_team("vision", limit=300)[0]
    assert len(staged) == 49 and all(r.staged_for_array is not None for r in staged)
    array_id = staged[0].job.array_id
    assert array_id is not None

    # Then the array says it is CREATING, and no pass admits any of its elements
    status, view = call("GET", f"/arrays/{array_id}")
    assert status == 200 and view["state"] == "CREATING" and view["written"] == 49 and view["size"] == 200
    assert scheduling_pass(deployment.plane).admitted == []
    assert deployment.plane.jobs.queue_head(Priority.NORMAL, 300) == []

    # When the same request is sent again, it writes only what is missing and releases them all
    monkeypatch.undo()
    status, array = call("POST", "/jobs", body=body, headers=headers)
    assert status == 200 and array["id"] == array_id and array["state"] == "READY"
    assert array["counts"] == {"PENDING": 200}
    listed = deployment.plane.jobs.list_team("vision", limit=300)[0]
    assert sorted(r.id for r in listed) == sorted(f"{array_id}-{i}" for i in range(200))
    assert all(len(deployment.plane.timeline.list(r.id)[0]) == 2 for r in listed)
    assert len(deployment.plane.jobs.queue_head(Priority.NORMAL, 300)) == 200
    assert len(scheduling_pass(deployment.plane).admitted) > 0


def test_a_cut_short_array_without_a_key_can_be_cancelled(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_after(monkeypatch, 1)
    assert post(name="big", array="0-99")[0] == 503
    monkeypatch.undo()
    array_id = deployment.plane.jobs.list_team("vision")[0][0].job.array_id
    status, view = call("DELETE", f"/arrays/{array_id}")
    assert status == 200 and view["state"] == "CREATING" and view["counts"] == {"CANCELLED": 49}
    assert scheduling_pass(deployment.plane).admitted == []


def test_an_array_over_1000_elements_is_refused_naming_the_field(deployment: Deployment) -> None:
    status, error = post(array="0-1000")
    assert status == 422 and "array" in error["message"] and "1000" in error["message"]
    status, error = post(sweep={"a": list(range(40)), "b": list(range(26))})
    assert status == 422 and "sweep" in error["message"] and "1040" in error["message"]
    assert deployment.plane.jobs.list_team("vision")[0] == []


def test_an_idempotent_retry_returns_the_same_array(deployment: Deployment) -> None:
    headers = {"Idempotency-Key": "sweep-1"}
    first = call("POST", "/jobs", body={**ONE_GPU, "array": "0-3"}, headers=headers)
    again = call("POST", "/jobs", body={**ONE_GPU, "array": "0-3"}, headers=headers)
    assert (first[0], again[0]) == (201, 200) and first[1]["id"] == again[1]["id"]
    other = call("POST", "/jobs", body={**ONE_GPU, "array": "0-4"}, headers=headers)
    assert other[0] == 422


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"array": "0-1000"}, "array"),
        ({"array": "3-1"}, "array"),
        ({"sweep": {"lr": []}}, "sweep"),
        ({"max_running": 4}, "max_running"),
        ({"after": ["job-0000000000000000"]}, "after"),
        ({"after": ["arr-0000000000000000"]}, "after"),
    ],
)
def test_bad_arrays_and_dependencies_get_422_and_write_nothing(
    deployment: Deployment, spec: dict[str, Any], field: str
) -> None:
    status, error = post(**spec)
    assert status == 422
    assert field in error["message"]
    assert deployment.plane.jobs.list_team("vision")[0] == []


def test_another_teams_job_cannot_be_a_dependency(deployment: Deployment) -> None:
    _, theirs = post(NLP)
    status, error = post(after=[theirs["id"]])
    assert status == 422 and f"no job {theirs['id']} of team vision" in error["message"]
    # The same answer as for a job that does not exist: ids cannot be probed across teams.
    assert call("GET", f"/arrays/{theirs['id']}")[0] == 404


def test_a_job_cannot_wait_for_itself(deployment: Deployment) -> None:
    # An Idempotency-Key makes the new job's id known in advance; naming it is a cycle.
    import hashlib

    key = "self"
    own = "job-" + hashlib.sha256(f"vision\0{key}".encode()).hexdigest()[:16]
    status, error = call("POST", "/jobs", body={**ONE_GPU, "after": [own]}, headers={"Idempotency-Key": key})
    assert status == 422 and "cycle" in error["message"]


# --- pipelines --------------------------------------------------------------------------------


def test_a_pipeline_of_three_steps_runs_in_order(deployment: Deployment) -> None:
    plane = deployment.plane
    _, prep = post(name="prep")
    _, train = post(name="train", after=[prep["id"]])
    _, evaluate = post(name="eval", after=[train["id"]], dependency="afterok")
    assert train["spec"]["after"] == [prep["id"]]

    # The first pass admits only the first step; the others are held, explain names the job
    assert scheduling_pass(plane).admitted == [(prep["id"], "a100-spot")]
    status, why = call("GET", f"/jobs/{train['id']}/explain")
    assert status == 200 and why["waiting_for"] == {"job_id": prep["id"], "state": "ADMITTED"}
    assert prep["id"] in why["summary"]
    assert call("GET", f"/jobs/{evaluate['id']}")[1]["wait_reason"] == (
        f"waiting for dependency {train['id']} to end (PENDING)"
    )

    # When the first step succeeds, the second is let in and admitted; the third still waits
    plane.jobs.transition(
        plane.jobs.get(prep["id"]), JobState.PENDING, "requeued by the test", now=plane.clock()
    )
    # (a requeued dependency is not done: the second step stays held)
    assert release_held(plane, plane.clock()).released == []
    assert state(deployment, train["id"]) is JobState.PENDING
    assert plane.jobs.get(train["id"]).held_for_dependencies
    start(deployment, plane.jobs.get(prep["id"]))
    end(deployment, prep["id"], "SUCCEEDED", exit_code=0)
    assert release_held(plane, plane.clock()).released == [train["id"]]
    assert plane.jobs.get(evaluate["id"]).held_for_dependencies

    start(deployment, plane.jobs.get(train["id"]))
    end(deployment, train["id"], "SUCCEEDED", exit_code=0)
    assert scheduling_pass(plane).admitted == [(evaluate["id"], "a100-spot")]
    events = call("GET", f"/jobs/{evaluate['id']}/events")[1]["events"]
    assert any(e["reason"].startswith("dependencies met (afterok") for e in events)


def test_a_step_is_never_let_in_before_its_dependency_ended(deployment: Deployment) -> None:
    plane = deployment.plane
    _, prep = post(name="prep")
    _, train = post(name="train", after=[prep["id"]])
    start(deployment, plane.jobs.get(prep["id"]))
    # Given a pass that read its clock just before the first step's end was written
    read_clock_at = plane.clock()
    end(deployment, prep["id"], "SUCCEEDED", exit_code=0)
    finished_at = plane.jobs.get(prep["id"]).finished_at
    assert finished_at is not None
    # When it lets the second step in with that earlier instant
    assert release_held(plane, read_clock_at - 1.0).released == [train["id"]]
    # Then the second step's timeline says it joined the queue when the first ended, not before
    events = call("GET", f"/jobs/{train['id']}/events")[1]["events"]
    queued = next(e for e in events if e["reason"].startswith("dependencies met"))
    assert queued["t"] >= finished_at


def test_a_failed_dependency_cancels_the_chain_under_afterok(deployment: Deployment) -> None:
    plane = deployment.plane
    _, first = post(name="first")
    _, second = post(name="second", after=[first["id"]])
    _, third = post(name="third", after=[second["id"]])
    _, cleanup = post(name="cleanup", after=[first["id"]], dependency="afterany")
    start(deployment, plane.jobs.get(first["id"]))
    end(deployment, first["id"], "FAILED", exit_code=1)
    assert state(deployment, first["id"]) is JobState.FAILED

    result = scheduling_pass(plane)
    # The chain ends in the same pass, each with its reason; afterany runs anyway
    assert state(deployment, second["id"]) is JobState.CANCELLED
    assert state(deployment, third["id"]) is JobState.CANCELLED
    assert call("GET", f"/jobs/{second['id']}")[1]["state_reason"] == (
        f"cancelled: dependency {first['id']} ended FAILED (afterok needs SUCCEEDED)"
    )
    assert f"dependency {second['id']} ended CANCELLED" in plane.jobs.get(third["id"]).state_reason
    assert (cleanup["id"], "a100-spot") in result.admitted


def test_a_whole_array_can_be_a_dependency(deployment: Deployment) -> None:
    plane = deployment.plane
    _, array = post(name="sweep", array="0-1")
    _, report = post(name="report", after=[array["id"]])
    assert report["spec"]["after"] == [j["id"] for j in array["jobs"]]
    for element in array["jobs"]:
        start(deployment, plane.jobs.get(element["id"]), instance_id="i-0aaaaaaaaaaaaaaa" + element["id"][-1])
        end(deployment, element["id"], "SUCCEEDED", exit_code=0)
    assert (report["id"], "a100-spot") in scheduling_pass(plane).admitted


# --- cost per job ---------------------------------------------------------------------------


def test_a_jobs_cost_follows_it_across_a_requeue(deployment: Deployment) -> None:
    plane = deployment.plane
    t0 = deployment.clock.freeze(1_800_000_000.0)
    _, job = post(name="costed", gpus=8)
    record = start(deployment, plane.jobs.get(job["id"]))
    # One hour on 8 Spot GPUs, then the host is lost: requeued, the run's hour charged to the job
    deployment.clock.advance(3600)
    end(deployment, job["id"], "FAILED", reason="Host EC2 (instance i-0aaaaaaaaaaaaaaa1) terminated.")
    requeued = plane.jobs.get(job["id"])
    assert requeued.state is JobState.PENDING and requeued.job.interruptions == 1
    cost = call("GET", f"/jobs/{job['id']}")[1]["cost"]
    assert cost["spot_gpu_hours"] == pytest.approx(8.0, abs=0.01)
    assert cost["dollars"] == pytest.approx(8 * 0.35, abs=0.01)
    assert cost["lost_gpu_hours"] == pytest.approx(8.0 * requeued.job.lost_work_s / 3600, abs=0.01)
    assert cost["lost_gpu_hours"] > 0

    # Half an hour more on On-Demand: both runs count
    start(deployment, requeued, pool="a100-on-demand")
    deployment.clock.advance(1800)
    cost = call("GET", f"/jobs/{job['id']}")[1]["cost"]
    assert cost["on_demand_gpu_hours"] == pytest.approx(4.0, abs=0.01)
    assert cost["spot_gpu_hours"] == pytest.approx(8.0, abs=0.01)
    status, usage = call("GET", "/usage", query={"by": "job"})
    assert status == 200 and usage["jobs"][0]["id"] == job["id"]
    assert usage["jobs"][0]["on_demand_gpu_hours"] == pytest.approx(4.0, abs=0.01)
    assert t0 > 0 and record.state is JobState.RUNNING
