"""The training side of elastic jobs: the run's size from its environment, and the gradient
accumulation that keeps the global batch (`spotline.integrations.elastic`)."""

from __future__ import annotations

import pytest

from spotline.domain.elastic_spec import WORLD_SIZE_ENV
from spotline.integrations import elastic

pytestmark = pytest.mark.frameworks


def test_the_variable_is_the_one_the_control_plane_sets() -> None:
    assert elastic.WORLD_SIZE_ENV == WORLD_SIZE_ENV == "SPOTLINE_WORLD_SIZE"


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, 1),
        ({"SPOTLINE_WORLD_SIZE": "8"}, 8),
        ({"WORLD_SIZE": "4"}, 4),
        ({"SPOTLINE_WORLD_SIZE": "2", "WORLD_SIZE": "4"}, 2),
    ],
)
def test_world_size_from_the_environment(env: dict[str, str], want: int) -> None:
    assert elastic.world_size(env) == want


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_bad_world_size_is_named(raw: str) -> None:
    with pytest.raises(ValueError, match="SPOTLINE_WORLD_SIZE"):
        elastic.world_size({"SPOTLINE_WORLD_SIZE": raw})


@pytest.mark.parametrize(("world", "steps"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_the_global_batch_is_the_same_at_every_size(world: int, steps: int) -> None:
    assert elastic.accumulation_steps(256, 32, world) == steps
    assert steps * world * 32 == 256
    assert elastic.loss_scale(steps) * steps == pytest.approx(1.0)


def test_a_size_that_does_not_divide_the_global_batch_is_refused() -> None:
    with pytest.raises(ValueError, match=r"global batch of 256 .* micro-batches of 32 on 3 ranks"):
        elastic.accumulation_steps(256, 32, 3)
