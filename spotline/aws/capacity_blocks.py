"""EC2 Capacity Block offerings, read for `spotline reservations advise` (never purchased here):
`DescribeCapacityBlockOfferings` for a new block, `DescribeCapacityBlockExtensionOfferings` for an
extension. The client is passed in (tests give it a botocore Stubber; moto does not emulate
Capacity Blocks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Offering:
    """One offering as EC2 lists it: what, where, when, and its upfront fee."""

    offering_id: str
    instance_type: str
    instance_count: int
    availability_zone: str
    start: float
    end: float
    duration_hours: int
    upfront_fee: float
    currency: str


def block_offerings(
    ec2: Any,
    instance_type: str,
    instance_count: int,
    duration_hours: int,
    start_after: float,
    end_before: float,
) -> list[Offering]:
    """The Capacity Block offerings for `instance_count` x `instance_type` over `duration_hours`,
    starting after `start_after` and ending before `end_before` (epoch s), cheapest first (every
    page read)."""
    offerings: list[Offering] = []
    request: dict[str, Any] = {
        "InstanceType": instance_type,
        "InstanceCount": instance_count,
        "CapacityDurationHours": duration_hours,
        "StartDateRange": datetime.fromtimestamp(start_after, tz=UTC),
        "EndDateRange": datetime.fromtimestamp(end_before, tz=UTC),
    }
    while True:
        page = ec2.describe_capacity_block_offerings(**request)
        offerings += [_offering(o) for o in page.get("CapacityBlockOfferings", [])]
        token = page.get("NextToken")
        if not token:
            break
        request["NextToken"] = token
    return sorted(offerings, key=lambda o: (o.upfront_fee, o.start, o.offering_id))


def extension_offerings(ec2: Any, reservation_id: str, duration_hours: int) -> list[Offering]:
    """The extension offerings of Capacity Block `reservation_id` for `duration_hours`, cheapest first."""
    page = ec2.describe_capacity_block_extension_offerings(
        CapacityReservationId=reservation_id, CapacityBlockExtensionDurationHours=duration_hours
    )
    found = [
        Offering(
            offering_id=str(o["CapacityBlockExtensionOfferingId"]),
            instance_type=str(o.get("InstanceType", "")),
            instance_count=int(o.get("InstanceCount", 0)),
            availability_zone=str(o.get("AvailabilityZone", "")),
            start=_epoch(o.get("CapacityBlockExtensionStartDate")),
            end=_epoch(o.get("CapacityBlockExtensionEndDate")),
            duration_hours=int(o.get("CapacityBlockExtensionDurationHours", duration_hours)),
            upfront_fee=float(o.get("UpfrontFee", "nan")),
            currency=str(o.get("CurrencyCode", "USD")),
        )
        for o in page.get("CapacityBlockExtensionOfferings", [])
    ]
    return sorted(found, key=lambda o: (o.upfront_fee, o.offering_id))


def _offering(raw: dict[str, Any]) -> Offering:
    return Offering(
        offering_id=str(raw["CapacityBlockOfferingId"]),
        instance_type=str(raw["InstanceType"]),
        instance_count=int(raw["InstanceCount"]),
        availability_zone=str(raw.get("AvailabilityZone", "")),
        start=_epoch(raw.get("StartDate")),
        end=_epoch(raw.get("EndDate")),
        duration_hours=int(raw.get("CapacityBlockDurationHours", 0)),
        upfront_fee=float(raw.get("UpfrontFee", "nan")),
        currency=str(raw.get("CurrencyCode", "USD")),
    )


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float("nan")
