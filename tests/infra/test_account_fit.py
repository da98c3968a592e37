"""What makes the stack fit a new account: AZs taken in the deploying account (none committed for
a made-up one), a gang pool's AZ looked up where its types are offered (or pinned), and the
Spot-warning handler's reserved concurrency where cdk.json asks for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment
from aws_cdk.assertions import Template

from spotline import resources as r
from spotline.aws.published import PublishedConfig
from stacks.config import parse_context
from stacks.spotline_stack import SpotlineStack
from tests.infra.support import Synthesized, cdk_context, source_dirs


def test_the_committed_stack_takes_its_azs_in_the_deploying_account(synthesized: Synthesized) -> None:
    # No account in cdk.json and no cached lookup: each subnet's AZ is Fn::GetAZs' answer at deploy
    # time, so no made-up account's AZ names are baked into the template
    assert "account" not in cdk_context()
    subnets = synthesized.resources("AWS::EC2::Subnet").values()
    zones = [s["Properties"]["AvailabilityZone"] for s in subnets]
    assert zones and all(z["Fn::Select"][1] == {"Fn::GetAZs": ""} for z in zones)
    assert {z["Fn::Select"][0] for z in zones} == {0, 1}


def _stack(tmp: Path, **context: Any) -> tuple[SpotlineStack, dict[str, Any]]:
    functions_dir, statemachines_dir, _ = source_dirs(tmp / "sources")
    raw = {**cdk_context(), **context}
    stack = SpotlineStack(
        App(context=raw),
        "Fit",
        config=parse_context(raw),
        env=Environment(region="us-east-1"),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
        build_dir=tmp / "build",
    )
    return stack, Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def reserved(tmp_path_factory: pytest.TempPathFactory) -> tuple[SpotlineStack, dict[str, Any]]:
    """Reserved concurrency for the scheduler and the Spot-warning handler, the gang pool pinned
    to a named AZ of the VPC."""
    pools = cdk_context()["pools"]
    return _stack(
        tmp_path_factory.mktemp("reserved"),
        scheduler_reserved_concurrency=1,
        spot_warning_reserved_concurrency=2,
        availability_zones=["us-east-1a", "us-east-1c"],
        pools=[pools[0], {**pools[1], "availability_zone": "us-east-1c"}],
    )


def test_the_spot_warning_handler_gets_the_concurrency_cdk_json_reserves(
    reserved: tuple[SpotlineStack, dict[str, Any]],
) -> None:
    stack, template = reserved
    reservations = {
        name: template["Resources"][stack.get_logical_id(function.node.default_child)]["Properties"].get(
            "ReservedConcurrentExecutions"
        )
        for name, function in stack.functions.functions.items()
    }
    assert {name: n for name, n in reservations.items() if n is not None} == {
        "scheduler": 1,
        r.SPOT_WARNING_FUNCTION: 2,
    }
    # and publishes it, for `spotline doctor --stack` to check against the account's limit
    published = PublishedConfig.model_validate(stack.published_config().model_dump())
    assert published.spot_warning_reserved_concurrency == 2
    assert published.scheduler_reserved_concurrency == 1


def test_a_pinned_gang_pool_takes_its_azs_subnet_and_needs_no_lookup(
    reserved: tuple[SpotlineStack, dict[str, Any]],
) -> None:
    stack, template = reserved
    assert stack.gang_zones is None
    assert not [k for k, v in template["Resources"].items() if v["Type"] == "Custom::SpotlineGangZone"]
    [subnet] = [s for s in stack.network.vpc.private_subnets if s.availability_zone == "us-east-1c"]
    environments = [
        e for (pool, _), e in stack.compute.compute_environments.items() if pool == "a100-ondemand"
    ]
    assert environments  # one per team (team_instances), or one shared
    for environment in environments:
        props = template["Resources"][stack.get_logical_id(environment.node.default_child)]["Properties"]
        assert props["ComputeResources"]["Subnets"] == [stack.resolve(subnet.subnet_id)]
    assert stack.compute.pool_zones["a100-ondemand"] == "us-east-1c"


def test_a_pinned_zone_needs_the_vpcs_azs_named(tmp_path: Path) -> None:
    pools = cdk_context()["pools"]
    with pytest.raises(Exception, match=r"needs the VPC's AZs named in cdk\.json"):
        _stack(tmp_path, pools=[pools[0], {**pools[1], "availability_zone": "us-east-1c"}])
