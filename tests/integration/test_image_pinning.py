"""A job's image is pinned to the digest its tag names at submission (spotline.aws.images), so a
push to the tag while the job trains does not change what its requeued runs pull: on moto's ECR
end to end, and on botocore's Stubber for ECR's answers moto does not give (throttling, access
denied)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import functions.batch_state_change
from spotline.aws.images import EcrImageResolver, ecr_reference
from spotline.control.errors import ImageLookupUnavailable, ImageNotFound, InvalidRequest
from spotline.domain import JobState

from .helpers import ACCOUNT, REGION, Deployment, batch_event, context, start, submit

REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
HOST_LOST = "Host EC2 (instance i-0aaaaaaaaaaaaaaa1) terminated."


def _push(ecr: Any, repository: str, tag: str, layer: str) -> str:
    """Push an image manifest under `tag`; returns its digest."""
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": 7,
                "digest": "sha256:" + "0" * 64,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": 1,
                    "digest": "sha256:" + hashlib.sha256(layer.encode()).hexdigest(),
                }
            ],
        }
    )
    pushed = ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag)
    return str(pushed["image"]["imageId"]["imageDigest"])


def _lose_host(dep: Deployment, job_id: str) -> None:
    record = dep.plane.jobs.get(job_id)
    assert record.batch_job_id is not None
    event = batch_event(record.id, record.batch_job_id, "FAILED", reason=HOST_LOST, run=record.run)
    assert functions.batch_state_change.handler(event, context("batch_state_change"))["outcome"] == (
        "interrupted: requeued"
    )


def test_a_requeued_job_pulls_the_image_its_tag_named_at_submission(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    ecr = dep.clients.client("ecr")
    ecr.create_repository(repositoryName="vision/llm")
    first = _push(ecr, "vision/llm", "latest", "v1")
    # Given a job submitted by tag
    record = submit(dep, image=f"{REGISTRY}/vision/llm:latest")
    pinned = f"{REGISTRY}/vision/llm@{first}"
    assert record.job.spec.image == pinned
    start(dep, record)
    # When `latest` moves on while it trains, and its host is lost
    second = _push(ecr, "vision/llm", "latest", "v2")
    assert second != first
    _lose_host(dep, record.id)
    assert dep.plane.jobs.get(record.id).state is JobState.PENDING
    start(dep, dep.plane.jobs.get(record.id))
    # Then both runs pulled the image of the submission
    assert [request.image for request in dep.launcher.submitted] == [pinned, pinned]
    assert dep.plane.jobs.get(record.id).job.spec.image == pinned


def test_images_by_digest_and_of_other_registries_run_as_given(deployment: Deployment) -> None:
    by_digest = f"{REGISTRY}/vision/llm@sha256:{'a' * 64}"
    for image in (by_digest, "nvcr.io/nvidia/pytorch:24.01-py3", "spotline/train:latest"):
        assert submit(deployment, image=image).job.spec.image == image


def test_a_tag_ecr_does_not_have_is_refused_at_submission(deployment: Deployment) -> None:
    ecr = deployment.clients.client("ecr")
    ecr.create_repository(repositoryName="vision/llm")
    _push(ecr, "vision/llm", "v1", "v1")
    for image in (f"{REGISTRY}/vision/llm:v2", f"{REGISTRY}/vision/nothing:v1"):
        with pytest.raises(InvalidRequest) as refused:
            submit(deployment, image=image)
        [error] = refused.value.errors
        assert error["loc"] == ["body", "image"] and "ECR has no image tagged" in error["msg"]
    assert deployment.plane.jobs.list_team("vision", state=None, limit=10, next_token=None)[0] == []


def test_an_array_pins_its_image_once_for_every_element(deployment: Deployment) -> None:
    from spotline.control.jobs import submit_array_request

    ecr = deployment.clients.client("ecr")
    ecr.create_repository(repositoryName="vision/llm")
    digest = _push(ecr, "vision/llm", "latest", "v1")
    body = {
        "name": "sweep",
        "gpus": 1,
        "image": f"{REGISTRY}/vision/llm",
        "command": ["python", "train.py"],
        "array": "0-2",
    }
    _, elements, _ = submit_array_request(deployment.plane, "vision", body)
    assert {e.job.spec.image for e in elements} == {f"{REGISTRY}/vision/llm@{digest}"}


# --- ECR's other answers, on botocore's Stubber ---------------------------------------------------


def _stubbed() -> tuple[EcrImageResolver, Stubber]:
    client = boto3.client("ecr", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    return EcrImageResolver(lambda region: client), Stubber(client)


def test_the_resolver_asks_ecr_for_the_tags_digest_in_the_images_account_and_region() -> None:
    resolver, stub = _stubbed()
    digest = "sha256:" + "b" * 64
    stub.add_response(
        "describe_images",
        {"imageDetails": [{"imageDigest": digest, "imageTags": ["v3"]}]},
        {"registryId": ACCOUNT, "repositoryName": "research/llm", "imageIds": [{"imageTag": "v3"}]},
    )
    with stub:
        assert resolver.pin(f"{REGISTRY}/research/llm:v3") == f"{REGISTRY}/research/llm@{digest}"
        # No call for these (the stub has no more answers: a call would fail the test)
        for image in (f"{REGISTRY}/research/llm@{digest}", "ghcr.io/org/img:v1", "ubuntu"):
            assert resolver.pin(image) == image
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("ImageNotFoundException", ImageNotFound),
        ("RepositoryNotFoundException", ImageNotFound),
        ("ThrottlingException", ImageLookupUnavailable),
        ("ServerException", ImageLookupUnavailable),
        ("AccessDeniedException", None),
    ],
)
def test_ecrs_refusals(code: str, outcome: type[Exception] | None) -> None:
    resolver, stub = _stubbed()
    stub.add_client_error("describe_images", service_error_code=code, http_status_code=400)
    image = f"{REGISTRY}/shared/base:latest"
    with stub:
        if outcome is None:
            # A repository the control plane may not describe (another account's): run by tag
            assert resolver.pin(image) == image
        else:
            with pytest.raises(outcome):
                resolver.pin(image)


def test_ecr_references_are_parsed() -> None:
    assert ecr_reference(f"{REGISTRY}/a/b/c:tag-1") == {
        "registry": REGISTRY,
        "account": ACCOUNT,
        "region": REGION,
        "repository": "a/b/c",
        "tag": "tag-1",
    }
    assert ecr_reference(f"{REGISTRY}/repo")["repository"] == "repo"  # type: ignore[index]
    assert ecr_reference("docker.io/library/ubuntu:22.04") is None
