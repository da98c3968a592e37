"""`MemoryImages`, the memory `ImageResolver`: a submission pins a tag the registry holds to its
digest, refuses a tag it does not hold by name, and leaves other registries' images as given."""

from __future__ import annotations

import pytest

from spotline.control.errors import InvalidRequest
from spotline.control.jobs import submit_job
from spotline.control.memory import MemoryImages, memory_control_plane, memory_settings
from tests.integration.helpers import CONFIG, SPEC

REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def images() -> MemoryImages:
    return MemoryImages({f"{REPOSITORY}:v1": DIGEST})


def test_a_submitted_tag_runs_by_the_digest_it_named(images: MemoryImages) -> None:
    plane = memory_control_plane(memory_settings(CONFIG), images=images).plane
    record, _ = submit_job(plane, "vision", {**SPEC, "image": f"{REPOSITORY}:v1"})
    assert record.job.spec.image == f"{REPOSITORY}@{DIGEST}"
    other, _ = submit_job(plane, "vision", {**SPEC, "image": "nvcr.io/nvidia/pytorch:24.01-py3"})
    assert other.job.spec.image == "nvcr.io/nvidia/pytorch:24.01-py3"


def test_a_tag_the_registry_does_not_hold_is_refused_by_name(images: MemoryImages) -> None:
    plane = memory_control_plane(memory_settings(CONFIG), images=images).plane
    with pytest.raises(InvalidRequest, match=r"image: .*no image tagged 'v2'"):
        submit_job(plane, "vision", {**SPEC, "image": f"{REPOSITORY}:v2"})
    assert plane.jobs.list_team("vision")[0] == []
