"""How large a training container is: vCPUs, memory and /dev/shm in proportion to the job's share
of a node's GPUs, from a table of GPU instance types.

AWS Batch places a container by its vCPU, memory and GPU requirements. Overriding only the GPUs
leaves every job with the job definition's small defaults, so an 8-GPU job on a p4d.24xlarge
would get 4 vCPUs and 16 GiB. Here a job that asks for `g` of a node's `G` GPUs gets `g/G` of
the node's vCPUs and memory, less a headroom kept for the ECS agent, Docker and the OS (ECS
registers less memory than the instance has, and a container asking for all of it would stay
RUNNABLE forever). A gang job (nodes > 1) takes whole nodes.

A pool may list several instance types (Spot wants diversity); a container is sized by the least
vCPUs and memory per GPU among them, so it fits on whichever one Batch launches.

Figures are AWS's published instance specifications (checked 2026-11); `efa` says whether the
type supports an Elastic Fabric Adapter and `efa_interfaces` how many it takes (one per network
card: 4 on a p4d, 32 on a p5). `spotline doctor` compares them with the account's
DescribeInstanceTypes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceShape:
    gpus: int
    vcpus: int
    memory_gib: int
    efa: bool = False
    # EFA interfaces the type takes (its network cards); 0 without EFA.
    efa_interfaces: int = 0


INSTANCE_SHAPES: Mapping[str, InstanceShape] = {
    "p5.48xlarge": InstanceShape(8, 192, 2048, efa=True, efa_interfaces=32),
    "p5e.48xlarge": InstanceShape(8, 192, 2048, efa=True, efa_interfaces=32),
    "p5en.48xlarge": InstanceShape(8, 192, 2048, efa=True, efa_interfaces=16),
    "p4d.24xlarge": InstanceShape(8, 96, 1152, efa=True, efa_interfaces=4),
    "p4de.24xlarge": InstanceShape(8, 96, 1152, efa=True, efa_interfaces=4),
    "p3.2xlarge": InstanceShape(1, 8, 61),
    "p3.8xlarge": InstanceShape(4, 32, 244),
    "p3.16xlarge": InstanceShape(8, 64, 488),
    "p3dn.24xlarge": InstanceShape(8, 96, 768, efa=True, efa_interfaces=1),
    "g6e.xlarge": InstanceShape(1, 4, 32),
    "g6e.12xlarge": InstanceShape(4, 48, 384, efa=True, efa_interfaces=1),
    "g6e.48xlarge": InstanceShape(8, 192, 1536, efa=True, efa_interfaces=4),
    "g6.xlarge": InstanceShape(1, 4, 16),
    "g6.12xlarge": InstanceShape(4, 48, 192),
    "g6.48xlarge": InstanceShape(8, 192, 768),
    "g5.xlarge": InstanceShape(1, 4, 16),
    "g5.2xlarge": InstanceShape(1, 8, 32),
    "g5.12xlarge": InstanceShape(4, 48, 192),
    "g5.24xlarge": InstanceShape(4, 96, 384),
    "g5.48xlarge": InstanceShape(8, 192, 768, efa=True, efa_interfaces=1),
    "g4dn.xlarge": InstanceShape(1, 4, 16),
    "g4dn.12xlarge": InstanceShape(4, 48, 192, efa=True, efa_interfaces=1),
    "g4dn.metal": InstanceShape(8, 96, 384, efa=True, efa_interfaces=1),
}

# Kept back on every node for the ECS agent, Docker and the OS.
HEADROOM_VCPUS = 1
HEADROOM_MEMORY_MIN_MIB = 2048
HEADROOM_MEMORY_FRACTION = 0.05
# /dev/shm gets this share of the container's memory (PyTorch data loaders pass batches through
# it; Docker's default is 64 MiB). Pages written there count against the container's memory.
SHARED_MEMORY_FRACTION = 0.5


class SizingError(ValueError):
    """The instance types cannot size a container (unknown type, or unequal GPU counts)."""


@dataclass(frozen=True)
class NodeShape:
    """One instance type as containers see it: its GPUs, and the vCPUs and memory left to them."""

    gpus: int
    vcpus: int
    memory_mib: int

    @property
    def usable_vcpus(self) -> int:
        return max(1, self.vcpus - HEADROOM_VCPUS)

    @property
    def usable_memory_mib(self) -> int:
        headroom = max(HEADROOM_MEMORY_MIN_MIB, math.ceil(self.memory_mib * HEADROOM_MEMORY_FRACTION))
        return max(1024, self.memory_mib - headroom)


@dataclass(frozen=True)
class PoolShape:
    """What a pool's nodes guarantee, whichever of its instance types Batch launches: the fewest
    GPUs of a node, and the least usable vCPUs and memory per GPU."""

    gpus: int
    vcpus_per_gpu: float
    memory_mib_per_gpu: float


@dataclass(frozen=True)
class ContainerSize:
    vcpus: int
    memory_mib: int
    shared_memory_mib: int


def node_shape(instance_type: str) -> NodeShape:
    shape = INSTANCE_SHAPES.get(instance_type)
    if shape is None:
        raise SizingError(f"unknown GPU instance type {instance_type} (known: {sorted(INSTANCE_SHAPES)})")
    return NodeShape(gpus=shape.gpus, vcpus=shape.vcpus, memory_mib=shape.memory_gib * 1024)


def pool_shape(instance_types: Iterable[str]) -> PoolShape:
    """SizingError for no type or an unknown one."""
    nodes = [node_shape(t) for t in instance_types]
    if not nodes:
        raise SizingError("no instance types")
    return PoolShape(
        gpus=min(n.gpus for n in nodes),
        vcpus_per_gpu=min(n.usable_vcpus / n.gpus for n in nodes),
        memory_mib_per_gpu=min(n.usable_memory_mib / n.gpus for n in nodes),
    )


def container_size(pool: PoolShape, gpus: int, *, whole_node: bool = False) -> ContainerSize:
    """The container of a job using `gpus` GPUs of a node (a node's worth when `whole_node`, as
    for a gang job's nodes): that many GPUs' share of the usable vCPUs and memory, at least
    1 vCPU and 1 GiB."""
    if gpus <= 0:
        raise SizingError(f"gpus must be positive, got {gpus}")
    if gpus > pool.gpus:
        raise SizingError(f"{gpus} GPUs do not fit a node of {pool.gpus}")
    count = pool.gpus if whole_node else gpus
    vcpus = max(1, math.floor(count * pool.vcpus_per_gpu + 1e-9))
    memory = max(1024, math.floor(count * pool.memory_mib_per_gpu + 1e-9))
    return ContainerSize(
        vcpus=vcpus, memory_mib=memory, shared_memory_mib=max(64, math.floor(memory * SHARED_MEMORY_FRACTION))
    )


def supports_efa(instance_types: Iterable[str]) -> bool:
    """Every one of the types supports EFA (per the table)."""
    types = list(instance_types)
    return bool(types) and all(t in INSTANCE_SHAPES and INSTANCE_SHAPES[t].efa for t in types)


def efa_interfaces(instance_types: Iterable[str]) -> int:
    """The EFA interfaces every one of the types takes (one launch template serves them all),
    0 if they do not all support EFA or do not agree."""
    counts = {INSTANCE_SHAPES[t].efa_interfaces for t in instance_types if t in INSTANCE_SHAPES}
    return counts.pop() if supports_efa(instance_types) and len(counts) == 1 else 0


def sized_container(
    instance_types: Iterable[str], gpus: int, *, whole_node: bool = False
) -> ContainerSize | None:
    """`container_size` for a pool's instance types; None when they are not all in the table (the
    job definition's defaults then apply)."""
    try:
        pool = pool_shape(instance_types)
    except SizingError:
        return None
    return container_size(pool, min(gpus, pool.gpus), whole_node=whole_node)
