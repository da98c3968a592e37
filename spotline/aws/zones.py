"""Where EC2 offers a pool's instance types, and the one AZ a gang pool lives in.

P and G instance types are offered in some AZs of a region only (and AZ names map to different
physical zones in each account), so nothing here is fixed at synth time: `spotline doctor` asks
before a deploy, and the stack's zone lookup (`functions/zone_lookup.py`, a custom resource) asks
at deploy time, both with `offerings` and `gang_zone`, so they agree on the zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def offerings(ec2: Any, instance_types: Iterable[str], zones: Sequence[str] = ()) -> dict[str, set[str]]:
    """Instance type -> the AZs (names) that offer it, among `zones` (all of the region's when
    empty): EC2 DescribeInstanceTypeOfferings by AZ, every page."""
    filters = [{"Name": "instance-type", "Values": sorted(set(instance_types))}]
    if zones:
        filters.append({"Name": "location", "Values": list(zones)})
    offered: dict[str, set[str]] = {t: set() for t in filters[0]["Values"]}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=filters
    )
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            offered.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return offered


def gang_zone(zones: Sequence[str], offered: Mapping[str, set[str]]) -> str | None:
    """The AZ of a pool that lives in one (a cluster placement group): of `zones`, in their order,
    the first that offers the most of the pool's instance types; None if none offers any."""
    best: str | None = None
    best_count = 0
    for zone in zones:
        count = sum(zone in where for where in offered.values())
        if count > best_count:
            best, best_count = zone, count
    return best


def where_offered(offered: Mapping[str, set[str]]) -> str:
    """`p4d.24xlarge: us-east-1c, us-east-1d; p4de.24xlarge: none in this region`."""
    return "; ".join(
        f"{instance_type}: {', '.join(sorted(where)) or 'none in this region'}"
        for instance_type, where in sorted(offered.items())
    )
