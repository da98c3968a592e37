"""`spotline.aws.nodes.BatchEcsNodes`: a pool's nodes on AWS, from its job queues' compute
environments' ECS clusters, each container instance in the state `spotline pools` shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from spotline.aws.nodes import BatchEcsNodes
from spotline.control.settings import PoolSettings

QUEUE = "arn:aws:batch:us-east-1:123456789012:job-queue/spotline-a100-spot"
ENVIRONMENT = "arn:aws:batch:us-east-1:123456789012:compute-environment/spotline-a100-spot"
CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/AWSBatch-spotline-a100-spot-1234"
JOINED = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)


def gpus(n: int) -> list[dict[str, Any]]:
    return [{"name": "GPU", "type": "STRINGSET", "stringSetValue": [f"GPU-{i}" for i in range(n)]}]


def instance(n: int, status: str, free: int, tasks: int) -> dict[str, Any]:
    return {
        "containerInstanceArn": f"{CLUSTER}/ci-{n}",
        "ec2InstanceId": f"i-{n:017x}",
        "status": status,
        "registeredResources": gpus(4),
        "remainingResources": gpus(free),
        "runningTasksCount": tasks,
        "pendingTasksCount": 0,
        "registeredAt": JOINED,
    }


INSTANCES = [
    instance(1, "ACTIVE", 0, 1),
    instance(2, "ACTIVE", 4, 0),
    instance(3, "DRAINING", 4, 0),
    instance(4, "REGISTERING", 4, 0),
]


class Batch:
    def describe_job_queues(self, jobQueues: list[str]) -> dict[str, Any]:
        assert jobQueues == [QUEUE]
        return {
            "jobQueues": [
                {"jobQueueArn": QUEUE, "computeEnvironmentOrder": [{"computeEnvironment": ENVIRONMENT}]}
            ]
        }

    def describe_compute_environments(self, computeEnvironments: list[str]) -> dict[str, Any]:
        assert computeEnvironments == [ENVIRONMENT]
        return {"computeEnvironments": [{"computeEnvironmentArn": ENVIRONMENT, "ecsClusterArn": CLUSTER}]}


class Ecs:
    def __init__(self) -> None:
        self.pages = 0

    def list_container_instances(self, cluster: str, nextToken: str | None = None) -> dict[str, Any]:
        assert cluster == CLUSTER
        self.pages += 1
        arns = [i["containerInstanceArn"] for i in INSTANCES]
        if nextToken is None:  # two pages: the reader follows the token
            return {"containerInstanceArns": arns[:2], "nextToken": "more"}
        return {"containerInstanceArns": arns[2:]}

    def describe_container_instances(self, cluster: str, containerInstances: list[str]) -> dict[str, Any]:
        return {
            "containerInstances": [i for i in INSTANCES if i["containerInstanceArn"] in containerInstances]
        }


def test_a_pools_container_instances_are_its_nodes_by_state() -> None:
    pool = PoolSettings(
        name="a100-spot", gpu_type="a100", purchase="spot", capacity_gpus=16, gpus_per_node=4, job_queue=QUEUE
    )
    ecs = Ecs()
    nodes = BatchEcsNodes(Batch(), ecs, [pool]).nodes(now=JOINED.timestamp() + 60)
    assert ecs.pages == 2
    assert [(n.instance_id, n.state, n.gpus, n.used_gpus) for n in nodes] == [
        ("i-00000000000000001", "running", 4, 4),
        ("i-00000000000000002", "idle", 4, 0),
        ("i-00000000000000003", "draining", 4, 0),
        ("i-00000000000000004", "joining", 4, 0),
    ]
    assert all(n.pool == "a100-spot" and n.since == JOINED.timestamp() for n in nodes)
