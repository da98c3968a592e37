"""Each pool's instances on AWS (the `NodeSource` port, for `GET /pools`): a pool's Batch job
queues name its compute environments, each compute environment its ECS cluster, and the cluster's
container instances are the pool's nodes, with ECS's status and the GPUs it has handed out.

Read-only calls, each granted to the API's role alone (resources.FUNCTION_ACTIONS["api"]):
batch:DescribeJobQueues, batch:DescribeComputeEnvironments, ecs:ListContainerInstances,
ecs:DescribeContainerInstances.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from spotline.control.ports import NodeView
from spotline.control.settings import PoolSettings

# ECS's container instance status -> the node's state (ACTIVE: running or idle by its tasks).
_STATES = {
    "REGISTERING": "joining",
    "DRAINING": "draining",
    "DEREGISTERING": "reclaimed",
    "INACTIVE": "reclaimed",
    "REGISTRATION_FAILED": "reclaimed",
}


def _gpus(resources: Sequence[dict[str, Any]]) -> int:
    """The GPUs of ECS's registered or remaining resources (a string set of GPU ids)."""
    for resource in resources:
        if resource.get("name") == "GPU":
            return len(resource.get("stringSetValue") or []) or int(resource.get("integerValue") or 0)
    return 0


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, int | float) else None


class BatchEcsNodes:
    """The container instances of the ECS clusters behind each pool's compute environments."""

    def __init__(self, batch: Any, ecs: Any, pools: Sequence[PoolSettings]) -> None:
        self.batch = batch
        self.ecs = ecs
        self.pools = pools

    def nodes(self, now: float) -> list[NodeView]:
        queue_pool = {queue: pool.name for pool in self.pools for queue in pool.job_queues}
        if not queue_pool:
            return []
        environment_pool: dict[str, str] = {}
        for queue in self.batch.describe_job_queues(jobQueues=list(queue_pool)).get("jobQueues", []):
            pool = queue_pool.get(queue.get("jobQueueArn")) or queue_pool.get(queue.get("jobQueueName"))
            for order in queue.get("computeEnvironmentOrder", []):
                if pool is not None:
                    environment_pool[order["computeEnvironment"]] = pool
        if not environment_pool:
            return []
        found: list[NodeView] = []
        described = self.batch.describe_compute_environments(computeEnvironments=list(environment_pool))
        for environment in described.get("computeEnvironments", []):
            pool = environment_pool.get(environment.get("computeEnvironmentArn")) or environment_pool.get(
                environment.get("computeEnvironmentName")
            )
            cluster = environment.get("ecsClusterArn")
            if pool is not None and cluster:
                found += self._cluster_nodes(pool, cluster)
        return found

    def _cluster_nodes(self, pool: str, cluster: str) -> list[NodeView]:
        arns: list[str] = []
        token: str | None = None
        while True:  # every status but INACTIVE (ECS's default filter)
            page = self.ecs.list_container_instances(
                cluster=cluster, **({"nextToken": token} if token else {})
            )
            arns += page.get("containerInstanceArns", [])
            token = page.get("nextToken")
            if not token:
                break
        nodes = []
        for start in range(0, len(arns), 100):
            answer = self.ecs.describe_container_instances(
                cluster=cluster, containerInstances=arns[start : start + 100]
            )
            for instance in answer.get("containerInstances", []):
                gpus = _gpus(instance.get("registeredResources") or [])
                used = max(0, gpus - _gpus(instance.get("remainingResources") or []))
                status = str(instance.get("status", "ACTIVE"))
                busy = int(instance.get("runningTasksCount") or 0) + int(
                    instance.get("pendingTasksCount") or 0
                )
                state = _STATES.get(status) or ("running" if busy else "idle")
                nodes.append(
                    NodeView(
                        pool,
                        state,
                        gpus,
                        used,
                        instance.get("ec2InstanceId"),
                        since=_epoch(instance.get("registeredAt")),
                    )
                )
        return nodes
