"""The `active` index's partition key is sharded (`A#<n>` from the job id),
so the heartbeats of running jobs spread over ACTIVE_SHARDS partitions; readers query every shard
(and the unsharded key of items an older version wrote) and merge. On moto."""

from __future__ import annotations

import hashlib

from spotline.aws.job_items import ACTIVE_PK, ACTIVE_SHARDS, active_partitions, active_pk_for
from spotline.control.scheduling import admit

from .helpers import Deployment, start, submit


def raw_item(dep: Deployment, job_id: str) -> dict[str, object]:
    item = dep.dynamodb.get_item(TableName=dep.tables["Jobs"], Key={"job_id": {"S": job_id}})["Item"]
    return {name: next(iter(value.values())) for name, value in item.items()}


def test_a_jobs_shard_is_fixed_by_its_id_and_ids_spread_over_every_shard() -> None:
    # Ids shaped like new_job_id's (64 random bits in hex), drawn deterministically
    ids = [f"job-{hashlib.sha256(str(n).encode()).hexdigest()[:16]}" for n in range(4000)]
    shards = [active_pk_for(job_id) for job_id in ids]
    assert all(active_pk_for(job_id) == shard for job_id, shard in zip(ids, shards, strict=True))
    counts = {shard: shards.count(shard) for shard in set(shards)}
    assert set(counts) == {f"A#{n}" for n in range(ACTIVE_SHARDS)}
    # Spread about evenly: no shard takes twice its share
    assert max(counts.values()) < 2 * len(ids) / ACTIVE_SHARDS
    assert active_partitions() == [*sorted(counts, key=lambda s: int(s[2:])), ACTIVE_PK]


def test_active_jobs_are_read_from_every_shard_and_the_unsharded_key(deployment: Deployment) -> None:
    dep = deployment
    dep.clock.freeze()
    # Given jobs holding GPUs, each in its own shard
    running = [start(dep, submit(dep, gpus=1), instance_id=f"i-0aaaaaaaaaaaaaa{n:02d}") for n in range(4)]
    admitted = admit(dep.plane, submit(dep, gpus=1), "a100-on-demand", "fits", now=dep.clock())
    held = [*running, admitted]
    partitions = {raw_item(dep, r.id)["active_pk"] for r in held}
    assert partitions == {active_pk_for(r.id) for r in held} and len(partitions) > 1
    # and one written by a version before the shards (the unsharded key)
    legacy = held[0]
    dep.dynamodb.update_item(
        TableName=dep.tables["Jobs"],
        Key={"job_id": {"S": legacy.id}},
        UpdateExpression="SET active_pk = :a",
        ExpressionAttributeValues={":a": {"S": ACTIVE_PK}},
    )

    # Then the reader finds every one, once, in job id order
    assert [r.id for r in dep.plane.jobs.active()] == sorted(r.id for r in held)
    # A heartbeat-like write leaves the index key alone; a pending termination keeps its shard
    dep.plane.jobs.mark_terminating(held[1].id, ["batch-old"])
    assert raw_item(dep, held[1].id)["active_pk"] == active_pk_for(held[1].id)
    assert [r.id for r in dep.plane.jobs.terminating()] == [held[1].id]
