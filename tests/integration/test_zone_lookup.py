"""The deploy-time lookup of a gang pool's AZ (`functions/zone_lookup.py`), against EC2's answers as
botocore's Stubber gives them (the real call shapes): the first of the VPC's AZs that offers the
pool's instance types, not the VPC's first AZ, and a clear failure where none offers them."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import functions.zone_lookup
from functions.zone_lookup import NoZoneOffersThePool, choose

from .helpers import REGION, context

PROPERTIES = {
    "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
    "Pool": "a100-ondemand",
    "InstanceTypes": ["p4d.24xlarge"],
    "Subnets": [
        {"SubnetId": "subnet-0aaaaaaaaaaaaaaaa", "AvailabilityZone": "us-east-1a"},
        {"SubnetId": "subnet-0bbbbbbbbbbbbbbbb", "AvailabilityZone": "us-east-1b"},
    ],
}


def _ec2(*zones: str) -> Any:
    """EC2 offering p4d.24xlarge in `zones` (the lookup asks about the whole region)."""
    client = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(client)
    stubber.add_response(
        "describe_instance_type_offerings",
        {
            "InstanceTypeOfferings": [
                {"InstanceType": "p4d.24xlarge", "LocationType": "availability-zone", "Location": zone}
                for zone in zones
            ]
        },
        {
            "LocationType": "availability-zone",
            "Filters": [{"Name": "instance-type", "Values": ["p4d.24xlarge"]}],
        },
    )
    stubber.activate()
    return client


def test_the_pool_gets_the_subnet_of_the_first_vpc_zone_offering_its_types() -> None:
    # p4d is offered in 1b and 1c of the region, not in the VPC's first AZ (1a)
    assert choose(_ec2("us-east-1c", "us-east-1b"), PROPERTIES) == {
        "AvailabilityZone": "us-east-1b",
        "SubnetId": "subnet-0bbbbbbbbbbbbbbbb",
    }


def test_a_pool_offered_in_none_of_the_vpcs_zones_fails_the_deploy_saying_where_it_is() -> None:
    with pytest.raises(NoZoneOffersThePool) as failed:
        choose(_ec2("us-east-1d"), PROPERTIES)
    assert str(failed.value) == (
        "pool a100-ondemand: none of p4d.24xlarge is offered in the VPC's AZs us-east-1a, us-east-1b "
        "(p4d.24xlarge: us-east-1d); set `availability_zones` (a created VPC) or the pool's "
        "`availability_zone` in cdk.json to an AZ that offers them (`spotline doctor --check azs`)"
    )


def test_the_custom_resource_answers_the_provider_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    ec2 = _ec2("us-east-1b")
    monkeypatch.setattr(functions.zone_lookup.boto3, "client", lambda service: ec2)
    created = functions.zone_lookup.handler(
        {"RequestType": "Create", "ResourceProperties": PROPERTIES}, context("zone_lookup")
    )
    assert created == {
        "PhysicalResourceId": "a100-ondemand@us-east-1b",
        "Data": {"AvailabilityZone": "us-east-1b", "SubnetId": "subnet-0bbbbbbbbbbbbbbbb"},
    }
    # Deleting makes no call (nothing was made)
    deleted = functions.zone_lookup.handler(
        {"RequestType": "Delete", "PhysicalResourceId": "a100-ondemand@us-east-1b", "ResourceProperties": {}},
        context("zone_lookup"),
    )
    assert deleted == {"PhysicalResourceId": "a100-ondemand@us-east-1b"}
