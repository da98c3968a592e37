"""The elastic spec: its sizes, the refusals that name the field, and a resize of a spec."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spotline.domain.elastic import size_refusal
from spotline.domain.elastic_spec import DEFAULT_COOLDOWN_S
from spotline.domain.models import JobSpec, Pool, Purchase

BASE: dict[str, Any] = {"name": "e", "gpus": 8, "image": "img", "command": ["python", "train.py"]}


@pytest.mark.parametrize(
    ("elastic", "gpus", "nodes", "sizes"),
    [
        ({"min_gpus": 4, "max_gpus": 8}, 8, 1, (4, 5, 6, 7, 8)),
        ({"min_gpus": 2, "max_gpus": 8, "step": 2}, 8, 1, (2, 4, 6, 8)),
        ({"min_gpus": 2, "max_gpus": 8, "sizes": [8, 2, 4]}, 4, 1, (2, 4, 8)),
        # A multi-node job grows and shrinks by whole nodes of its shape.
        ({"min_gpus": 16, "max_gpus": 32}, 16, 2, (16, 24, 32)),
    ],
)
def test_the_sizes_a_job_may_run_at(
    elastic: dict[str, Any], gpus: int, nodes: int, sizes: tuple[int, ...]
) -> None:
    spec = JobSpec.model_validate({**BASE, "gpus": gpus, "nodes": nodes, "elastic": elastic})
    assert spec.elastic is not None and spec.elastic.cooldown_s == DEFAULT_COOLDOWN_S
    assert spec.elastic_sizes() == sizes


def test_a_multi_node_spec_resized_changes_its_node_count() -> None:
    spec = JobSpec.model_validate(
        {**BASE, "gpus": 16, "nodes": 2, "elastic": {"min_gpus": 16, "max_gpus": 32}}
    )
    assert (spec.at_size(24).gpus, spec.at_size(24).nodes) == (24, 3)
    assert (spec.at_size(32).gpus, spec.at_size(32).nodes) == (32, 4)
    assert JobSpec.model_validate(BASE).elastic_sizes() == (8,)


@pytest.mark.parametrize(
    ("elastic", "extra", "loc", "fault"),
    [
        ({"min_gpus": 8, "max_gpus": 4}, {}, ("elastic",), "max_gpus: 4 is below min_gpus 8"),
        ({"min_gpus": 2, "max_gpus": 8, "sizes": [2, 8], "step": 2}, {}, ("elastic",), "not both"),
        (
            {"min_gpus": 2, "max_gpus": 8, "sizes": [2, 4]},
            {},
            ("elastic",),
            "must list min_gpus and max_gpus",
        ),
        ({"min_gpus": 2, "max_gpus": 8, "sizes": [2, 9, 8]}, {}, ("elastic",), "9 is outside"),
        ({"min_gpus": 2, "max_gpus": 8, "sizes": [2, 2, 8]}, {}, ("elastic",), "lists a size twice"),
        ({"min_gpus": 2, "max_gpus": 9, "step": 2}, {}, ("elastic",), "step: 2 does not lead"),
        ({"min_gpus": 0, "max_gpus": 8}, {}, ("elastic", "min_gpus"), "greater than 0"),
        (
            {"min_gpus": 2, "max_gpus": 8, "cooldown_s": -1},
            {},
            ("elastic", "cooldown_s"),
            "greater than or equal",
        ),
        ({"min_gpus": 2, "max_gpus": 8, "spare": 1}, {}, ("elastic", "spare"), "Extra inputs"),
        ({"min_gpus": "2", "max_gpus": 8}, {}, ("elastic", "min_gpus"), "valid integer"),
        ({"min_gpus": 2, "max_gpus": 4}, {}, (), "elastic: gpus=8 is not one of its sizes"),
        ({"min_gpus": 8, "max_gpus": 10}, {"gpus": 8, "nodes": 2}, (), "size 10 is not 2 or more whole"),
        ({"min_gpus": 4, "max_gpus": 8}, {"gpus": 8, "nodes": 2}, (), "size 4 is not 2 or more whole"),
    ],
)
def test_a_bad_elastic_spec_is_refused_naming_the_field(
    elastic: dict[str, Any], extra: dict[str, Any], loc: tuple[str, ...], fault: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({**BASE, **extra, "elastic": elastic})
    (error,) = caught.value.errors()
    assert tuple(error["loc"]) == loc and fault in error["msg"]
    assert loc or "elastic" in error["msg"]


POOLS = [
    Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=32, gpus_per_node=8),
    Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=64, gpus_per_node=8),
]


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"gpus": 4, "elastic": {"min_gpus": 2, "max_gpus": 8}}, None),
        ({"gpus": 16, "nodes": 2, "elastic": {"min_gpus": 16, "max_gpus": 32}}, None),
        # One node has 8 GPUs: a single-node job cannot grow to 16.
        ({"gpus": 4, "elastic": {"min_gpus": 2, "max_gpus": 16}}, "elastic.max_gpus"),
        ({"gpus": 4, "elastic": {"min_gpus": 2, "max_gpus": 16, "sizes": [2, 4, 12, 16]}}, "elastic.sizes"),
        # The On-Demand pool has 32 GPUs: no gang of 40.
        ({"gpus": 16, "nodes": 2, "elastic": {"min_gpus": 16, "max_gpus": 40}}, "elastic.max_gpus"),
    ],
)
def test_sizes_that_fit_no_pool_are_refused_naming_the_field(body: dict[str, Any], want: str | None) -> None:
    spec = JobSpec.model_validate({**BASE, **body})
    refused = size_refusal(spec, POOLS)
    assert (refused and refused[0]) == want
    if refused is not None:
        assert "no pool can host its size" in refused[1]
