"""Containers sized from the node's GPUs, through the launcher and the job definitions it
registers on moto's Batch."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.aws.batch import AwsBatchLauncher
from spotline.control.lifecycle import launch_request
from spotline.control.scheduling import admit
from spotline.control.sizing import INSTANCE_SHAPES, node_shape

from .helpers import Deployment, submit

P4D = INSTANCE_SHAPES["p4d.24xlarge"]  # 8 GPUs, 96 vCPUs, 1152 GiB
BASE = "spotline-training"


class RecordingBatch:
    """moto's Batch client, with each SubmitJob's arguments kept, and each registered definition
    (moto keeps no nodeProperties of a multi-node one)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.submitted: list[dict[str, Any]] = []
        self.registered: dict[str, dict[str, Any]] = {}

    def register_job_definition(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = self.client.register_job_definition(**kwargs)
        self.registered[response["jobDefinitionArn"]] = kwargs
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def submit_job(self, **kwargs: Any) -> dict[str, Any]:
        self.submitted.append(kwargs)
        return {"jobId": f"b-{len(self.submitted)}", "jobName": kwargs["jobName"]}


@pytest.fixture
def batch(deployment: Deployment) -> RecordingBatch:
    client = deployment.clients.client("batch")
    # The stack's training definition: small defaults, 1 GPU, Docker's /dev/shm.
    client.register_job_definition(
        jobDefinitionName=BASE,
        type="container",
        containerProperties={
            "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/spotline-train:latest",
            "command": ["true"],
            "resourceRequirements": [
                {"type": "VCPU", "value": "4"},
                {"type": "MEMORY", "value": "16384"},
                {"type": "GPU", "value": "1"},
            ],
            "linuxParameters": {"sharedMemorySize": 8192},
        },
    )
    plane = deployment.plane
    # p4d nodes, and On-Demand room for a gang of two
    pools = tuple(
        p.model_copy(update={"instance_types": ("p4d.24xlarge",), "capacity_gpus": max(16, p.capacity_gpus)})
        for p in plane.config.pools
    )
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"pools": pools})}
    )
    return RecordingBatch(client)


def _launch(deployment: Deployment, batch: RecordingBatch, pool: str, **spec: Any) -> dict[str, Any]:
    record = submit(deployment, **spec)
    admitted = admit(deployment.plane, record, pool, "test", now=deployment.clock())
    AwsBatchLauncher(batch, BASE).submit(launch_request(deployment.plane, admitted))
    return batch.submitted[-1]


def _requirements(container: dict[str, Any]) -> dict[str, int]:
    return {r["type"]: int(r["value"]) for r in container["resourceRequirements"]}


def _shared_memory(batch: RecordingBatch, definition: str) -> int:
    registered = batch.registered[definition]
    if registered["type"] == "multinode":
        [node_range] = registered["nodeProperties"]["nodeRangeProperties"]
        properties = node_range["container"]
    else:
        properties = registered["containerProperties"]
    return int(properties["linuxParameters"]["sharedMemorySize"])


def test_an_8_gpu_job_on_an_8_gpu_node_gets_nearly_all_of_it(
    deployment: Deployment, batch: RecordingBatch
) -> None:
    submitted = _launch(deployment, batch, "a100-spot", gpus=8)
    wanted = _requirements(submitted["containerOverrides"])
    assert wanted["GPU"] == 8
    # At least 90% of the node's vCPUs and memory, and less than all (headroom for the ECS agent).
    assert 0.9 * P4D.vcpus <= wanted["VCPU"] < P4D.vcpus
    assert 0.9 * P4D.memory_gib * 1024 <= wanted["MEMORY"] < P4D.memory_gib * 1024
    node = node_shape("p4d.24xlarge")
    assert wanted["VCPU"] == node.usable_vcpus and wanted["MEMORY"] == node.usable_memory_mib
    # /dev/shm is set in a job definition derived for it (not overridable at SubmitJob).
    assert _shared_memory(batch, submitted["jobDefinition"]) == wanted["MEMORY"] // 2


def test_a_1_gpu_job_gets_an_eighth(deployment: Deployment, batch: RecordingBatch) -> None:
    submitted = _launch(deployment, batch, "a100-spot", gpus=1)
    wanted = _requirements(submitted["containerOverrides"])
    node = node_shape("p4d.24xlarge")
    assert wanted["GPU"] == 1
    assert wanted["VCPU"] == node.usable_vcpus // 8 == 11
    assert wanted["MEMORY"] == node.usable_memory_mib // 8
    assert _shared_memory(batch, submitted["jobDefinition"]) == wanted["MEMORY"] // 2
    # Eight of them fit on one node together.
    assert 8 * wanted["VCPU"] <= P4D.vcpus and 8 * wanted["MEMORY"] <= P4D.memory_gib * 1024


def test_a_gang_job_gets_whole_nodes(deployment: Deployment, batch: RecordingBatch) -> None:
    pool = next(p.name for p in deployment.plane.config.pools if not p.is_spot)
    submitted = _launch(deployment, batch, pool, gpus=16, nodes=2, spot="never")
    overrides = submitted["nodeOverrides"]
    assert overrides["numNodes"] == 2
    [node_override] = overrides["nodePropertyOverrides"]
    wanted = _requirements(node_override["containerOverrides"])
    node = node_shape("p4d.24xlarge")
    assert wanted == {"GPU": 8, "VCPU": node.usable_vcpus, "MEMORY": node.usable_memory_mib}
    assert _shared_memory(batch, submitted["jobDefinition"]) == node.usable_memory_mib // 2


def test_a_gang_job_in_an_efa_pool_keeps_the_efa_device_on_every_node(
    deployment: Deployment, batch: RecordingBatch
) -> None:
    # Given the team's plain definition and its EFA variant (what the stack makes for EFA pools)
    efa_device = {
        "hostPath": "/dev/infiniband/uverbs0",
        "containerPath": "/dev/infiniband/uverbs0",
        "permissions": ["READ", "WRITE", "MKNOD"],
    }
    base = batch.client.describe_job_definitions(jobDefinitionName=BASE)["jobDefinitions"][0]
    properties = base["containerProperties"]
    batch.client.register_job_definition(
        jobDefinitionName=f"{BASE}-efa",
        type="container",
        containerProperties={
            **properties,
            "environment": [{"name": "FI_PROVIDER", "value": "efa"}],
            "linuxParameters": {**properties["linuxParameters"], "devices": [efa_device]},
        },
    )
    plane = deployment.plane
    on_demand = next(p.name for p in plane.config.pools if not p.is_spot)
    pools = tuple(p.model_copy(update={"efa": p.name == on_demand}) for p in plane.config.pools)
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"pools": pools})}
    )
    teams = {t.team for t in plane.config.teams}
    launcher = AwsBatchLauncher(
        batch,
        None,
        team_definitions=dict.fromkeys(teams, BASE),
        efa_team_definitions=dict.fromkeys(teams, f"{BASE}-efa"),
    )

    # When a gang job is launched into the EFA pool, and a job into the other pool
    gang_job = submit(deployment, gpus=16, nodes=2, spot="never")
    gang = admit(plane, gang_job, on_demand, "t", now=deployment.clock())
    launcher.submit(launch_request(plane, gang))
    into_efa = batch.submitted[-1]
    spot = next(p.name for p in plane.config.pools if p.is_spot)
    single = admit(plane, submit(deployment, gpus=8), spot, "t", now=deployment.clock())
    launcher.submit(launch_request(plane, single))
    elsewhere = batch.submitted[-1]

    # Then every node of the gang maps the EFA device and uses the EFA provider (the multi-node
    # definition derived from the EFA one keeps both), and the other pool's job maps no device
    registered = batch.registered[into_efa["jobDefinition"]]
    assert registered["type"] == "multinode"
    [node_range] = registered["nodeProperties"]["nodeRangeProperties"]
    assert node_range["container"]["linuxParameters"]["devices"] == [efa_device]
    assert {"name": "FI_PROVIDER", "value": "efa"} in node_range["container"]["environment"]
    other = registered_or_described(batch, elsewhere["jobDefinition"])
    assert "devices" not in (other.get("linuxParameters") or {})


def registered_or_described(batch: RecordingBatch, arn: str) -> dict[str, Any]:
    if arn in batch.registered:
        properties: dict[str, Any] = batch.registered[arn]["containerProperties"]
        return properties
    [described] = batch.client.describe_job_definitions(jobDefinitions=[arn])["jobDefinitions"]
    found: dict[str, Any] = described["containerProperties"]
    return found
