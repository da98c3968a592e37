"""Container sizes from the instance-type table."""

from __future__ import annotations

import pytest

from spotline.control.sizing import (
    INSTANCE_SHAPES,
    SizingError,
    container_size,
    node_shape,
    pool_shape,
    sized_container,
)


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_SHAPES))
def test_every_gpu_count_fits_a_node_and_a_full_node_keeps_headroom(instance_type: str) -> None:
    node = node_shape(instance_type)
    pool = pool_shape([instance_type])
    full = container_size(pool, node.gpus)
    assert 0.9 * node.vcpus <= full.vcpus < node.vcpus or node.vcpus <= 8
    assert 0.9 * node.memory_mib <= full.memory_mib < node.memory_mib or node.memory_mib <= 64 * 1024
    for gpus in range(1, node.gpus + 1):
        size = container_size(pool, gpus)
        # As many such containers as fit by GPUs also fit by vCPUs and memory.
        per_node = node.gpus // gpus
        assert per_node * size.vcpus <= node.usable_vcpus
        assert per_node * size.memory_mib <= node.usable_memory_mib
        assert 0 < size.shared_memory_mib < size.memory_mib


def test_a_mixed_pool_is_sized_for_its_leanest_type_per_gpu() -> None:
    # p4d: 95 usable vCPUs for 8 GPUs; p5: 191 for 8. A 1-GPU container must fit a p4d.
    assert sized_container(["p5.48xlarge", "p4d.24xlarge"], 1) == sized_container(["p4d.24xlarge"], 1)
    # g5.12xlarge (4 GPUs) and g5.48xlarge (8 GPUs): a node's worth is the 4-GPU one.
    whole = sized_container(["g5.12xlarge", "g5.48xlarge"], 8, whole_node=True)
    assert whole is not None and whole.vcpus <= 47


def test_unknown_types_leave_the_definition_defaults_and_bad_counts_are_refused() -> None:
    assert sized_container(["x9.huge"], 1) is None
    with pytest.raises(SizingError, match="do not fit"):
        container_size(pool_shape(["g5.xlarge"]), 2)
    with pytest.raises(SizingError, match="positive"):
        container_size(pool_shape(["g5.xlarge"]), 0)
