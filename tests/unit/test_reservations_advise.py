"""`spotline reservations advise`: the advice from the queue and its deadlines (pure), EC2's
offerings read through a botocore Stubber (moto does not emulate Capacity Blocks), and the
advice from what the API shows of a deployment in memory."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from spotline.aws.capacity_blocks import block_offerings, extension_offerings
from spotline.cli.reservations import advice_json, job_of, pool_of
from spotline.control.jobs import job_view
from spotline.control.pools import pools_view
from spotline.domain.models import ClusterSnapshot, Pool, Purchase, ReservedWindow
from spotline.domain.reserved_advice import Prices, advise, block_days
from tests.unit.domain.builders import NOW, config, job, pool

H = 3600.0
PRICES = Prices(on_demand_usd_per_gpu_hour=4.0, block_usd_per_gpu_hour=2.0)
SPOT = pool("spot", purchase="spot", capacity=16, rate=0.5)
ON_DEMAND = pool("od", capacity=16)


def block(end: float) -> Pool:
    return Pool(
        name="block",
        gpu_type="a100",
        purchase=Purchase.ON_DEMAND,
        capacity_gpus=16,
        price=0.0,
        reservation=ReservedWindow(start=NOW - 24 * H, end=end, reservation_id="cr-0123456789abcdef0"),
    )


@pytest.mark.parametrize(
    ("hours", "days"), [(1, 1), (24, 1), (25, 2), (14 * 24, 14), (15 * 24, 21), (10_000, 182)]
)
def test_block_durations_are_whole_days_then_weeks(hours: float, days: int) -> None:
    assert block_days(hours) == days


def test_deadline_jobs_that_would_spill_to_on_demand_get_an_offerings_query() -> None:
    # Given two deadline jobs too tight for Spot (slack below what interruptions may cost) and one loose
    tight = [job(f"t{i}").gpus(8).expected_runtime(30 * H).deadline(NOW + 31 * H).build() for i in range(2)]
    loose = job("loose").gpus(8).expected_runtime(2 * H).deadline(NOW + 100 * H).build()
    snapshot = ClusterSnapshot.build([SPOT, ON_DEMAND])
    advice = advise([*tight, loose], snapshot, NOW, config(), PRICES)
    # Then the query asks for 2 instances for 2 days, and shows both costs
    (query,) = advice.offerings
    assert (query.instance_count, query.duration_hours, query.jobs) == (2, 48, ("t0", "t1"))
    assert query.on_demand_usd == pytest.approx(2 * 8 * 30 * 4.0)
    assert query.block_usd == pytest.approx(2 * 8 * 48 * 2.0)
    assert "Spot cannot keep their deadlines" in query.why


def test_nothing_to_buy_without_deadline_pressure() -> None:
    advice = advise(
        [job("j").gpus(8).expected_runtime(H).build()],
        ClusterSnapshot.build([SPOT, ON_DEMAND]),
        NOW,
        config(),
        PRICES,
    )
    assert advice.offerings == () and any("no deadline job" in n for n in advice.notes)


def test_a_block_ending_with_work_that_fits_gets_an_extension() -> None:
    # Given a block ending in 10 hours, a job in it with 30 hours left and one that finishes in time
    b = block(NOW + 10 * H)
    long = (
        job("long")
        .gpus(8)
        .expected_runtime(40 * H)
        .running_since(NOW - 10 * H)
        .build()
        .with_changes(pool="block")
    )
    short = (
        job("short")
        .gpus(8)
        .expected_runtime(12 * H)
        .running_since(NOW - 10 * H)
        .build()
        .with_changes(pool="block")
    )
    advice = advise([long, short], ClusterSnapshot.build([b, ON_DEMAND]), NOW, config(), PRICES)
    (extension,) = advice.extensions
    # Then: extend by the whole days its work past the end needs, with both costs
    assert extension.jobs == ("long",) and extension.hours == 24
    assert extension.on_demand_usd == pytest.approx(8 * (30 * H - 9.5 * H) / H * 4.0)
    assert extension.extension_usd == pytest.approx(16 * 24 * 2.0)


def test_no_extension_outside_ec2s_window() -> None:
    far = block(NOW + 60 * 24 * H)
    running = (
        job("j").gpus(8).expected_runtime(90 * 24 * H).running_since(NOW).build().with_changes(pool="block")
    )
    assert advise([running], ClusterSnapshot.build([far]), NOW, config(), PRICES).extensions == ()


def test_offerings_are_read_cheapest_first_across_pages() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    start, end = datetime(2026, 12, 6, 11, 30, tzinfo=UTC), datetime(2026, 12, 8, 11, 30, tzinfo=UTC)

    def offering(offering_id: str, fee: str) -> dict[str, object]:
        return {
            "CapacityBlockOfferingId": offering_id,
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": "us-east-1a",
            "InstanceCount": 2,
            "StartDate": start,
            "EndDate": end,
            "CapacityBlockDurationHours": 48,
            "UpfrontFee": fee,
            "CurrencyCode": "USD",
            "Tenancy": "default",
        }

    expected = {
        "InstanceType": "p5.48xlarge",
        "InstanceCount": 2,
        "CapacityDurationHours": 48,
        "StartDateRange": datetime.fromtimestamp(NOW, tz=UTC),
        "EndDateRange": datetime.fromtimestamp(NOW + 96 * H, tz=UTC),
    }
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_block_offerings",
            {"CapacityBlockOfferings": [offering("cbr-b", "9000.00")], "NextToken": "t"},
            expected,
        )
        stub.add_response(
            "describe_capacity_block_offerings",
            {"CapacityBlockOfferings": [offering("cbr-a", "7000.00")]},
            {**expected, "NextToken": "t"},
        )
        found = block_offerings(ec2, "p5.48xlarge", 2, 48, NOW, NOW + 96 * H)
        stub.assert_no_pending_responses()
    assert [(o.offering_id, o.upfront_fee) for o in found] == [("cbr-a", 7000.0), ("cbr-b", 9000.0)]
    assert found[0].start == start.timestamp()


def test_extension_offerings_are_read_for_the_block() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_block_extension_offerings",
            {
                "CapacityBlockExtensionOfferings": [
                    {
                        "CapacityBlockExtensionOfferingId": "cbe-1",
                        "InstanceType": "p5.48xlarge",
                        "InstanceCount": 2,
                        "AvailabilityZone": "us-east-1a",
                        "CapacityBlockExtensionDurationHours": 24,
                        "UpfrontFee": "3100.00",
                        "CurrencyCode": "USD",
                    }
                ]
            },
            {"CapacityReservationId": "cr-0123456789abcdef0", "CapacityBlockExtensionDurationHours": 24},
        )
        (found,) = extension_offerings(ec2, "cr-0123456789abcdef0", 24)
    assert (found.offering_id, found.upfront_fee, found.duration_hours) == ("cbe-1", 3100.0, 24)


def test_the_advice_reads_what_the_api_shows(tmp_path: object) -> None:
    # Given a deployment (in memory) with a block ending in 10 hours, and a long job running in it
    from functions.runtime import use_control_plane
    from spotline.control.memory import memory_control_plane, memory_settings
    from tests.integration.helpers import TestClock, start, submit
    from tests.unit.control.test_reserved_events import BLOCK, END, MemoryDeployment, config_with_block

    clock = TestClock()
    settings = memory_settings(config_with_block())
    memory = memory_control_plane(settings, clock=clock)
    use_control_plane(memory.plane)
    try:
        dep = MemoryDeployment(
            memory.plane, memory, memory.launcher, clock, memory.resolver, memory.starter, {}
        )
        now = clock.freeze(END - 10 * H)
        running = start(
            dep, submit(dep, expected_runtime_s=40 * H), pool=BLOCK, instance_id="i-0aaaaaaaaaaaaaaa1"
        )
        pools = pools_view(memory.plane, "vision")["pools"]
        view = job_view(memory.plane, memory.plane.jobs.get(running.id), now).model_dump(mode="json")
    finally:
        use_control_plane(None)
    # When the advice is made from those views
    domain_pools = [pool_of(p) for p in pools]
    advice = advise([job_of(view)], ClusterSnapshot.build(domain_pools), now, config(), PRICES)
    data = advice_json(advice, domain_pools, {p["name"]: p["instance_types"] for p in pools})
    # Then the block is advised to be extended, for the job, and nothing is bought
    (extension,) = data["extensions"]
    assert extension["pool"] == BLOCK and extension["jobs"] == [running.id]
    assert extension["reservation_id"] == "cr-0123456789abcdef0"
    assert data["purchases"].startswith("none")


@pytest.mark.parametrize("text", ["1x4", "0x4:100", "1x4:0", "ax4:10"])
def test_local_up_refuses_a_bad_reservation_naming_the_flag(text: str) -> None:
    import typer

    from spotline.cli.local import reservation_options

    with pytest.raises(typer.BadParameter) as caught:
        reservation_options(text, 0.0)
    assert caught.value.param_hint == "--reservation"


def test_local_up_adds_the_block_beside_the_default_pools() -> None:
    from spotline.cli.local import reservation_options
    from spotline.local.runtime import LocalConfig

    pools = reservation_options("2x4:3600", 100.0)["pools"]
    assert pools[: len(LocalConfig().pools)] == LocalConfig().pools
    block = pools[-1]
    assert (block.nodes, block.gpus_per_node) == (2, 4)
    assert (block.reserved_from, block.reserved_until) == (100.0, 3700.0)
    config = LocalConfig(pools=pools).spotline_config({})
    assert config["pools"][-1]["reservation"]["end"] == 3700.0 and config["pools"][-1]["price"] == 0.0
