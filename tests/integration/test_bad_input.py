"""Bad input gets a 4xx that names the field, never a 5xx, and nothing is half-written; a record
that cannot be read (as an older version could have stored it) stops nobody's scheduling.

Each test here failed before its fix.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

import functions.api
import functions.checkpoint_completed
import functions.scheduler
from spotline.aws.dynamo import serialize_item
from spotline.aws.job_items import record_to_item
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState

from .helpers import SPEC, Deployment, api_event, context, eventbridge, start, submit
from .test_api import NLP, VISION, call, post_job


def stored_jobs(dep: Deployment, team: str = "vision") -> list[Any]:
    return dep.plane.jobs.list_team(team)[0]


def names_field(error: dict[str, Any], field: str) -> bool:
    return field in error["message"] and any(
        field in [str(p) for p in d["loc"]] or field in d["msg"] for d in error["detail"]
    )


# --- numbers, strings and coercions -------------------------------------------------------


# (Cases are looped inside one test rather than parametrized: each moto deployment costs
# seconds to set up, the requests milliseconds.)

NON_FINITE = [
    # A JSON number too large for a float parses as inf (it was stored, read back as null, and
    # stopped every scheduling pass).
    ('"checkpoint_interval_s": 1e400', "checkpoint_interval_s"),
    ('"expected_runtime_s": 1e999', "expected_runtime_s"),
    ('"max_runtime_s": -1e400', "max_runtime_s"),
    ('"checkpoint_interval_s": NaN', "checkpoint_interval_s"),  # Python's json takes NaN
    ('"expected_runtime_s": Infinity', "expected_runtime_s"),
]


def test_a_non_finite_number_is_refused_at_submission(deployment: Deployment) -> None:
    for raw, field in NON_FINITE:
        spec = {k: v for k, v in SPEC.items() if k != "checkpoint_interval_s"}
        body = json.dumps(spec)[:-1] + ", " + raw + "}"

        status, error = call("POST", "/jobs", body=body)

        assert status == 422 and names_field(error, field), raw
    assert stored_jobs(deployment) == []


COERCIONS_AND_STRINGS: list[tuple[dict[str, Any], str]] = [
    ({"gpus": True}, "gpus"),
    ({"gpus": "8"}, "gpus"),
    ({"gpus": 1.5}, "gpus"),
    ({"nodes": True}, "nodes"),
    ({"checkpoint_interval_s": "60"}, "checkpoint_interval_s"),
    ({"checkpoint_interval_s": False}, "checkpoint_interval_s"),
    ({"name": "   "}, "name"),
    ({"name": "\t\n"}, "name"),
    ({"name": "\x01\x02"}, "name"),
    ({"name": "train\x00"}, "name"),
    ({"name": 7}, "name"),
    ({"image": "spotline/train\x00:latest"}, "image"),
    ({"image": "   "}, "image"),
    ({"command": [""]}, "command"),
    ({"command": ["python", ""]}, "command"),
    ({"command": ["python", "-c", "print(1)\x00"]}, "command"),
    ({"command": [" "]}, "command"),
    ({"command": ["python", 3]}, "command"),
    ({"deadline": 1900000000}, "deadline"),
    ({"deadline": "2031-01-01"}, "deadline"),
    ({"deadline": "1900000000"}, "deadline"),
]


def test_unexpected_coercions_and_blank_or_nul_strings_are_refused(deployment: Deployment) -> None:
    for spec, field in COERCIONS_AND_STRINGS:
        status, error = post_job(**spec)
        assert status == 422 and names_field(error, field), (spec, error)
    assert stored_jobs(deployment) == []


def test_a_patch_deadline_must_be_an_iso_date_time(deployment: Deployment) -> None:
    _, job = post_job()
    status, error = call("PATCH", f"/jobs/{job['id']}", body={"deadline": 4102444800})
    assert status == 422 and names_field(error, "deadline")
    assert deployment.plane.jobs.get(job["id"]).version == 0


UNPARSABLE_BODIES = [
    "{not json",
    '{"name": "x",',
    "\x00",
    "1" * 5000,  # Python's json refuses an integer of more than 4300 digits (a ValueError)
    '{"gpus": ' + "9" * 5000 + "}",
    "[" * 100_000,  # deeper than the parser's recursion limit
]


def call_raw(method: str, path: str, body: str, *, base64_encoded: bool = False) -> tuple[int, Any]:
    event = api_event(method, path, identity=VISION, body=body)
    event["isBase64Encoded"] = base64_encoded
    response = functions.api.handler(event, context("api"))
    return response["statusCode"], json.loads(response["body"])


def test_invalid_json_gets_400(deployment: Deployment) -> None:
    for body in UNPARSABLE_BODIES:
        status, error = call("POST", "/jobs", body=body)
        assert status == 400 and error["message"], body[:20]
    # Bytes that are not UTF-8 (API Gateway passes a binary body base64-encoded)
    status, error = call_raw("POST", "/jobs", base64.b64encode(b"\x8c\xff{").decode(), base64_encoded=True)
    assert status == 400 and "body" in error["message"]
    _, job = post_job()
    assert call("PATCH", f"/jobs/{job['id']}", body="{priority: high}")[0] == 400
    assert len(stored_jobs(deployment)) == 1


def test_a_command_aws_batch_cannot_carry_is_refused_before_any_write(deployment: Deployment) -> None:
    # AWS Batch takes 8 KiB of container overrides (the command and the
    # agent's environment), so a command the schema allows (256 x 4,096 characters) could be
    # stored and then fail at every launch. It is refused at submission, naming the limit.
    for command in (["python", *["x" * 4000] * 110], ["python", "x" * 4000, "y" * 2200]):
        status, error = post_job(command=command)
        assert status == 422 and "command" in json.dumps(error["detail"]), len(command)
        assert "8 KiB" in error["message"]
    assert stored_jobs(deployment) == []
    assert post_job(command=["python", "x" * 4000, "y" * 2000])[0] == 201  # 6 KB of arguments fits


# --- Idempotency-Key ----------------------------------------------------------------------


def test_reusing_an_idempotency_key_with_another_body_is_refused(deployment: Deployment) -> None:
    key = {"Idempotency-Key": "order-1"}
    first = call("POST", "/jobs", body=SPEC, headers=key)
    other = call("POST", "/jobs", body={**SPEC, "gpus": 4}, headers=key)
    again = call("POST", "/jobs", body=SPEC, headers=key)
    # The same request with a default spelled out is the same request.
    spelled = call("POST", "/jobs", body={**SPEC, "priority": "normal", "nodes": 1}, headers=key)

    assert first[0] == 201
    assert other[0] == 422 and names_field(other[1], "Idempotency-Key")
    assert again[0] == 200 and again[1]["id"] == first[1]["id"]
    assert spelled[0] == 200 and spelled[1]["id"] == first[1]["id"]
    assert [j.job.gpus for j in stored_jobs(deployment)] == [8]


# --- pagination tokens --------------------------------------------------------------------


def three_jobs() -> list[str]:
    return [post_job(name=f"j{i}")[1]["id"] for i in range(3)]


def test_a_forged_token_gets_422_naming_next_token(deployment: Deployment) -> None:
    job_id = three_jobs()[0]
    for token in ("e30=", "x", "e30=.e30=", "a.b.c", "%%%", "eyJwIjoie30ifQ.AAAA", "." * 2000):
        status, error = call("GET", "/jobs", query={"next_token": token})
        assert status == 422 and names_field(error, "next_token"), token
        status, error = call("GET", f"/jobs/{job_id}/events", query={"next_token": token})
        assert status == 422 and names_field(error, "next_token"), token


def test_a_token_works_only_for_its_team_and_query(deployment: Deployment) -> None:
    ids = three_jobs()
    _, page = call("GET", "/jobs", query={"limit": "1"})
    token = page["next_token"]

    # Its own query continues; any other query, team or an altered token is refused
    status, second = call("GET", "/jobs", query={"limit": "1", "next_token": token})
    assert status == 200 and [j["id"] for j in second["jobs"]] == [ids[1]]
    assert call("GET", "/jobs", NLP, query={"limit": "1", "next_token": token})[0] == 422
    assert call("GET", "/jobs", query={"limit": "2", "next_token": token})[0] == 422
    assert call("GET", "/jobs", query={"limit": "1", "state": "PENDING", "next_token": token})[0] == 422
    payload, mac = token.split(".")
    assert call("GET", "/jobs", query={"limit": "1", "next_token": payload[:-1] + "A." + mac})[0] == 422
    assert call("GET", f"/jobs/{ids[0]}/events", query={"next_token": token})[0] == 422


def test_a_stale_token_gets_422(deployment: Deployment) -> None:
    deployment.clock.freeze()
    three_jobs()
    _, page = call("GET", "/jobs", query={"limit": "1"})
    deployment.clock.advance(25 * 3600)
    status, error = call("GET", "/jobs", query={"limit": "1", "next_token": page["next_token"]})
    assert status == 422 and "expired" in error["message"]


def test_a_timeline_token_is_bound_to_its_job(deployment: Deployment) -> None:
    first, second = three_jobs()[:2]
    for job_id in (first, second):
        call("PATCH", f"/jobs/{job_id}", body={"priority": "high"})
    _, page = call("GET", f"/jobs/{first}/events", query={"limit": "1"})
    assert page["next_token"]
    ok = call("GET", f"/jobs/{first}/events", query={"limit": "1", "next_token": page["next_token"]})
    assert ok[0] == 200 and [e["seq"] for e in ok[1]["events"]] == [1]
    other = call("GET", f"/jobs/{second}/events", query={"limit": "1", "next_token": page["next_token"]})
    assert other[0] == 422


# --- events from EventBridge --------------------------------------------------------------


def test_a_checkpoint_event_with_a_non_finite_time_is_refused(deployment: Deployment) -> None:
    running = start(deployment, submit(deployment))
    for field in ("created_at", "requested_at"):
        for value in (math.inf, -math.inf, math.nan):
            bad = eventbridge("checkpoint_completed", detail={"job_id": running.id, field: value})
            with pytest.raises(ValidationError, match="finite number"):
                functions.checkpoint_completed.handler(bad, context())
    assert deployment.plane.jobs.get(running.id).job.last_checkpoint_step is None


# --- a record that cannot be read ---------------------------------------------------------


def write_raw(dep: Deployment, item: dict[str, Any]) -> None:
    dep.dynamodb.put_item(TableName=dep.tables["Jobs"], Item=serialize_item(item))


def unreadable_pending_item(dep: Deployment, job_id: str, team: str = "vision") -> dict[str, Any]:
    """A PENDING job as an older version stored a submission with checkpoint_interval_s=1e400:
    the spec's JSON carries null for it."""
    record = submit(dep, team, name="old")
    dep.dynamodb.delete_item(TableName=dep.tables["Jobs"], Key=serialize_item({"job_id": record.id}))
    item = record_to_item(record.with_changes(job={"id": job_id}))
    spec = json.loads(item["spec"])
    spec["checkpoint_interval_s"] = None
    item["spec"] = json.dumps(spec)
    item["priority"] = "high"
    item["queue_pk"] = "Q#high"  # at the head of the highest class any team uses
    item["queue_sk"] = "0000000000000.000#" + job_id
    return item


def test_an_unreadable_record_is_quarantined_and_every_other_job_is_scheduled(
    deployment: Deployment,
) -> None:
    # Given an unreadable pending job at the head of the queue, and good jobs of two teams
    deployment.clock.freeze()
    write_raw(deployment, unreadable_pending_item(deployment, "job-0ldrec0rd0000001"))
    good = [submit(deployment, "vision"), submit(deployment, "nlp")]

    # When the scheduler runs
    out = functions.scheduler.handler({}, context("scheduler"))

    # Then both good jobs are admitted and the bad one is quarantined out of the queue index
    assert sorted(job for job, _ in out["admitted"]) == sorted(r.id for r in good)
    assert out["quarantined"] == ["job-0ldrec0rd0000001"]
    raw = deployment.dynamodb.get_item(
        TableName=deployment.tables["Jobs"], Key=serialize_item({"job_id": "job-0ldrec0rd0000001"})
    )["Item"]
    assert "queue_pk" not in raw and "checkpoint_interval_s" in raw["quarantine_reason"]["S"]
    # and the next pass does not meet it again
    assert scheduling_pass(deployment.plane).quarantined == []


def test_an_unreadable_record_still_answers_on_every_route_and_can_be_cancelled(
    deployment: Deployment,
) -> None:
    write_raw(deployment, unreadable_pending_item(deployment, "job-0ldrec0rd0000002"))
    scheduling_pass(deployment.plane)

    status, shown = call("GET", "/jobs/job-0ldrec0rd0000002", VISION)
    assert status == 200 and shown["state"] == "PENDING" and "quarantined" in shown["wait_reason"]
    status, listed = call("GET", "/jobs", VISION)
    assert status == 200 and [j["id"] for j in listed["jobs"]] == ["job-0ldrec0rd0000002"]
    assert call("GET", "/jobs/job-0ldrec0rd0000002/events", VISION)[0] == 200

    status, cancelled = call("DELETE", "/jobs/job-0ldrec0rd0000002", VISION)
    assert status == 200 and cancelled["state"] == "CANCELLED"
    assert deployment.plane.jobs.get("job-0ldrec0rd0000002").state is JobState.CANCELLED


def test_an_unreadable_running_record_is_left_out_of_the_pass_without_freeing_its_gpus(
    deployment: Deployment,
) -> None:
    # Given a running job whose stored spec became unreadable, holding 8 of the 16 Spot GPUs
    running = start(deployment, submit(deployment))
    item = record_to_item(deployment.plane.jobs.get(running.id))
    item["spec"] = item["spec"].replace('"gpus":8', '"gpus":"8"')
    write_raw(deployment, item)
    waiting = [submit(deployment, "nlp"), submit(deployment, "nlp")]

    # When a pass runs
    result = scheduling_pass(deployment.plane)

    # Then it reports the record, and admits no more than the ledger's free GPUs allow
    assert [job for job, _ in result.quarantined] == [running.id]
    admitted = {job for job, _ in result.admitted}
    spot = deployment.plane.ledger.usage(["a100-spot"], [])[0]["a100-spot"]
    assert spot <= 16 and admitted and admitted <= {r.id for r in waiting}
    assert call("GET", f"/jobs/{running.id}")[0] == 200


# --- the count: no bad input gets a 5xx ---------------------------------------------------


def test_no_bad_input_gets_a_5xx(deployment: Deployment) -> None:
    """Every bad request above, on every route, plus bad paths and queries: all refused with a
    4xx, none with a 5xx (the count is printed; run with -s)."""
    _, job = post_job()
    job_path = f"/jobs/{job['id']}"
    requests: list[tuple[str, str, dict[str, Any]]] = []
    for raw, _ in NON_FINITE:
        requests.append(("POST", "/jobs", {"body": json.dumps(SPEC)[:-1] + ", " + raw + "}"}))
    for spec, _ in COERCIONS_AND_STRINGS:
        requests.append(("POST", "/jobs", {"body": {**SPEC, **spec}}))
        requests.append(("PATCH", job_path, {"body": {k: v for k, v in spec.items() if k == "deadline"}}))
    for body in UNPARSABLE_BODIES:
        requests += [("POST", "/jobs", {"body": body}), ("PATCH", job_path, {"body": body})]
    for token in ("e30=", "x", "a.b", "." * 2000, "\x00", "%00"):
        requests.append(("GET", "/jobs", {"query": {"next_token": token}}))
        requests.append(("GET", f"{job_path}/events", {"query": {"next_token": token}}))
    for query in ({"limit": "0"}, {"limit": "1e400"}, {"limit": "true"}, {"limit": "-1"}, {"limit": "1.5"}):
        requests += [("GET", "/jobs", {"query": query}), ("GET", f"{job_path}/events", {"query": query})]
    requests += [("GET", "/jobs", {"query": {"state": "\x00"}}), ("GET", "/jobs", {"query": {"state": ""}})]
    for bad_id in ("x" * 65, "job-\x00", "%00", "job-does-not-exist"):
        for method in ("GET", "DELETE"):
            requests.append((method, f"/jobs/{bad_id}", {}))
        requests.append(("PATCH", f"/jobs/{bad_id}", {"body": {"priority": "low"}}))
        requests.append(("GET", f"/jobs/{bad_id}/events", {}))
    requests.append(("POST", "/jobs", {"body": SPEC, "headers": {"Idempotency-Key": "k" * 129}}))
    requests.append(("POST", "/jobs", {"body": {**SPEC, "command": ["python", *["x" * 4000] * 110]}}))

    statuses = [call(method, path, **kwargs)[0] for method, path, kwargs in requests]
    server_errors = [r for r, s in zip(requests, statuses, strict=True) if s >= 500]
    print(f"bad requests: {len(statuses)}, 5xx: {len(server_errors)}, statuses: {sorted(set(statuses))}")
    accepted = [r for r, s in zip(requests, statuses, strict=True) if s < 400]
    assert server_errors == [] and accepted == []


def test_the_openapi_document_lists_every_status_of_each_route() -> None:
    document = json.loads(functions.api.app.get_openapi_json_schema(title="Spotline", version="1"))
    listed = {
        (method.upper(), path): set(map(int, operation["responses"]))
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    common = {403, 405, 415, 422, 500, 503}
    assert listed[("POST", "/jobs")] == {200, 201, 400, 402, 413} | common
    assert listed[("GET", "/jobs")] == {200} | common
    assert listed[("GET", "/jobs/{job_id}")] == {200, 404} | common
    assert listed[("DELETE", "/jobs/{job_id}")] == {200, 404, 409} | common
    assert listed[("PATCH", "/jobs/{job_id}")] == {200, 400, 404, 409} | common
    assert listed[("GET", "/jobs/{job_id}/events")] == {200, 404} | common
    error = document["paths"]["/jobs"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorBody"}


def test_a_bad_or_secret_env_is_refused_naming_it_and_nothing_is_written(deployment: Deployment) -> None:
    for env in ({"HF_TOKEN": "hf_" + "x" * 34}, {"AWS_REGION": "eu-west-1"}, {"lr": "1"}):
        status, error = post_job(env=env)
        assert status == 422 and error["detail"][0]["loc"][:2] == ["body", "env"], env
        assert "hf_xxx" not in json.dumps(error)  # the refused value is not echoed back
    # Together with the command, it must fit AWS Batch's container overrides
    status, error = post_job(command=["python", "x" * 3000], env={"BIG": "y" * 3500})
    assert status == 422 and error["detail"][0]["loc"] == ["body", "env"] and "8 KiB" in error["message"]
    assert stored_jobs(deployment) == []
    status, job = post_job(env={"LR": "3e-4"})
    assert status == 201 and job["spec"]["env"] == {"LR": "3e-4"}
