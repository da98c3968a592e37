"""Deploy time only: the one AZ of a gang pool (a cluster placement group lives in one), where EC2
offers the pool's instance types, and the VPC's subnet there.

A CloudFormation custom resource (CDK's provider framework calls this `on_event`) per gang pool
without an `availability_zone` of its own: its properties name the pool, its instance types and
the VPC's private subnets with their AZs; its data, the chosen `AvailabilityZone` and `SubnetId`
(the compute environment's one subnet). The choice is `spotline.aws.zones.gang_zone`, the one
`spotline doctor` reports before the deploy. A pool offered in none of the VPC's AZs fails the
deploy with a message saying where its types are offered.
"""

from __future__ import annotations

from typing import Any

import boto3

from functions.runtime import loaded, logger
from spotline.aws.zones import gang_zone, offerings, where_offered


class NoZoneOffersThePool(RuntimeError):
    """None of the VPC's AZs offers any of the pool's instance types."""


def choose(ec2: Any, properties: dict[str, Any]) -> dict[str, str]:
    """{"AvailabilityZone", "SubnetId"} for the pool the custom resource's `properties` name."""
    pool = str(properties["Pool"])
    types = [str(t) for t in properties["InstanceTypes"]]
    subnets = [(str(s["SubnetId"]), str(s["AvailabilityZone"])) for s in properties["Subnets"]]
    zones = list(dict.fromkeys(zone for _, zone in subnets))
    offered = offerings(ec2, types)
    zone = gang_zone(zones, offered)
    if zone is None:
        raise NoZoneOffersThePool(
            f"pool {pool}: none of {', '.join(types)} is offered in the VPC's AZs {', '.join(zones)} "
            f"({where_offered(offered)}); set `availability_zones` (a created VPC) or the pool's "
            "`availability_zone` in cdk.json to an AZ that offers them (`spotline doctor --check azs`)"
        )
    subnet = next(subnet for subnet, in_zone in subnets if in_zone == zone)
    return {"AvailabilityZone": zone, "SubnetId": subnet}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event["RequestType"] == "Delete":  # nothing was made
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    chosen = choose(boto3.client("ec2"), event["ResourceProperties"])
    logger.info("gang pool zone", extra={"pool": event["ResourceProperties"]["Pool"], **chosen})
    return {
        "PhysicalResourceId": f"{event['ResourceProperties']['Pool']}@{chosen['AvailabilityZone']}",
        "Data": chosen,
    }


loaded()
