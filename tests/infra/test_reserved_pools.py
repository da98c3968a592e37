"""Reserved pools on the template: a Capacity Block and an ODCR group, each with its own launch
template, compute environment and job queue; the rule that brings EC2's reserved-capacity events
to their function; synthesized with the AwsSolutions checks and linted by cfn-lint the way `make
synth` does (app.build_app). The context's checks of a pool's `reservation`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from cfnlint.api import ManualArgs, lint

import app as cdk_app
from spotline import resources as r
from stacks.config import ConfigError, parse_context
from tests.infra.support import cdk_context, source_dirs

BLOCK_ID = "cr-0123456789abcdef0"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/spotline-odcrs"
WINDOW = {"start": "2026-12-01T11:30:00Z", "end": "2026-12-08T11:30:00Z"}


def reserved_context() -> dict[str, Any]:
    context = cdk_context()
    context["pools"] = [
        *context["pools"],
        {
            "name": "p5-block",
            "gpu_type": "h100",
            "instance_types": ["p5.48xlarge"],
            "purchase": "on-demand",
            "max_gpus": 16,
            "reservation": {"capacity_reservation_id": BLOCK_ID, "instances": 2, **WINDOW},
        },
        {
            "name": "a100-odcr",
            "gpu_type": "a100",
            "instance_types": ["p4d.24xlarge"],
            "purchase": "on-demand",
            "max_gpus": 8,
            "reservation": {"resource_group_arn": GROUP_ARN, "instances": 1, **WINDOW},
        },
    ]
    return context


@pytest.fixture(scope="module")
def reserved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Exception | None]:
    tmp = tmp_path_factory.mktemp("reserved")
    functions_dir, statemachines_dir, _ = source_dirs(tmp / "sources")
    outdir = tmp / "cdk.out"
    application = App(context=reserved_context(), outdir=str(outdir))
    stack = cdk_app.build_app(
        application, functions_dir=functions_dir, statemachines_dir=statemachines_dir, build_dir=tmp / "build"
    )
    error: Exception | None = None
    try:
        application.synth()
    except RuntimeError as raised:  # cdk-nag's ValidationFailed comes back through jsii
        error = raised
    template: dict[str, Any] = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return template, error


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_each_reserved_pool_launches_into_its_reservation(
    reserved: tuple[dict[str, Any], Exception | None],
) -> None:
    template, _ = reserved
    data = [
        t["Properties"]["LaunchTemplateData"] for t in of_type(template, "AWS::EC2::LaunchTemplate").values()
    ]
    block = [d for d in data if d.get("InstanceMarketOptions") == {"MarketType": "capacity-block"}]
    assert len(block) == 1
    assert block[0]["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": BLOCK_ID}
    }
    group = [
        d
        for d in data
        if d.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget")
        == {"CapacityReservationResourceGroupArn": GROUP_ARN}
    ]
    assert len(group) == 1 and "InstanceMarketOptions" not in group[0]
    # the IMDS settings of the shared template stay
    assert block[0]["MetadataOptions"]["HttpTokens"] == "required"


def test_each_reserved_pool_has_its_own_compute_environment_and_queue(
    reserved: tuple[dict[str, Any], Exception | None],
) -> None:
    template, _ = reserved
    environments = of_type(template, "AWS::Batch::ComputeEnvironment")
    pinned = {
        tuple(e["Properties"]["ComputeResources"]["InstanceTypes"]): e["Properties"]["ComputeResources"]
        for e in environments.values()
    }
    assert ("p5.48xlarge",) in pinned
    assert pinned[("p5.48xlarge",)]["Type"] == "EC2" and "PlacementGroup" not in pinned[("p5.48xlarge",)]
    queues = [q["Properties"]["JobQueueName"] for q in of_type(template, "AWS::Batch::JobQueue").values()]
    assert any("p5-block" in str(q) for q in queues) and any("a100-odcr" in str(q) for q in queues)


def test_the_reserved_capacity_events_reach_their_function(
    reserved: tuple[dict[str, Any], Exception | None],
) -> None:
    template, _ = reserved
    rules = [rule["Properties"] for rule in of_type(template, "AWS::Events::Rule").values()]
    patterns = [p.get("EventPattern", {}) for p in rules]
    matching = [p for p in patterns if "Capacity Block Delivered" in p.get("detail-type", [])]
    assert len(matching) == 1
    assert set(matching[0]["detail-type"]) == set(r.DETAILS_CAPACITY_RESERVATION)
    assert matching[0]["source"] == ["aws.ec2"]


def test_the_reserved_stack_passes_cdk_nag_and_cfn_lint(
    reserved: tuple[dict[str, Any], Exception | None],
) -> None:
    template, error = reserved
    assert error is None, f"cdk-nag: {error}"
    matches = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
    errors = [
        f"{m.rule.id} {'/'.join(map(str, m.path))}: {m.message}" for m in matches if m.rule.id.startswith("E")
    ]
    assert errors == []


def test_the_scheduler_reads_the_window(reserved: tuple[dict[str, Any], Exception | None]) -> None:
    template, _ = reserved
    functions = of_type(template, "AWS::Lambda::Function").values()
    configs = [
        f["Properties"]["Environment"]["Variables"].get(r.ENV_CONFIG)
        for f in functions
        if "Environment" in f["Properties"]
    ]
    text = json.dumps([c for c in configs if c is not None])
    assert BLOCK_ID in text and GROUP_ARN in text


@pytest.mark.parametrize(
    "change, message",
    [
        ({"purchase": "spot"}, "not Spot"),
        ({"reservation": {"instances": 2, **WINDOW}}, "give one of"),
        (
            {"reservation": {"capacity_reservation_id": "nope", "instances": 2, **WINDOW}},
            "not a reservation id",
        ),
        ({"reservation": {"capacity_reservation_id": BLOCK_ID, "instances": 3, **WINDOW}}, "max_gpus 16"),
        (
            {
                "reservation": {
                    "capacity_reservation_id": BLOCK_ID,
                    "instances": 2,
                    "start": "2026-12-01",
                    "end": "x",
                }
            },
            "needs a zone",
        ),
        (
            {
                "reservation": {
                    "capacity_reservation_id": BLOCK_ID,
                    "instances": 2,
                    "start": WINDOW["end"],
                    "end": WINDOW["start"],
                }
            },
            "after 'start'",
        ),
        ({"instance_types": ["p5.48xlarge", "p4d.24xlarge"]}, "one instance type"),
    ],
)
def test_a_bad_reservation_is_refused_naming_the_field(
    change: dict[str, Any], message: str, tmp_path: Path
) -> None:
    context = reserved_context()
    context["pools"][2] = {**context["pools"][2], **change}
    with pytest.raises(ConfigError, match=message):
        parse_context(context)
