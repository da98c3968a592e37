"""Checkpoint durability: data first, manifest last; readers go by manifests only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest
from moto import mock_aws

from spotline.agent import (
    CheckpointStore,
    LocalCheckpointStore,
    S3CheckpointStore,
    decode_state,
    encode_state,
    open_store,
)

BUCKET = "spotline-checkpoints"


@pytest.fixture
def s3_store() -> Iterator[S3CheckpointStore]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield S3CheckpointStore(BUCKET, "checkpoints/team-a/job-1/", client)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStore:
    if request.param == "local":
        return LocalCheckpointStore(tmp_path / "ckpt")
    s3: S3CheckpointStore = request.getfixturevalue("s3_store")
    return s3


def save(store: CheckpointStore, step: int, payload: bytes) -> str:
    return store.save(step, payload, encoding="bytes", job_id="job-1", created_at=100.0 + step).uri


def test_state_tree_round_trips_arrays_big_ints_and_nesting() -> None:
    rng = np.random.default_rng(7)
    state = {
        "step": 12,
        "params": {"W": rng.standard_normal((3, 4)), "b": np.arange(4, dtype=np.int32)},
        "history": [1.5, None, "x", np.float64(2.5)],
        "rng": rng.bit_generator.state,  # PCG64: 128-bit integers
    }
    data, encoding = encode_state(state)
    back = decode_state(data, encoding)

    assert back["step"] == 12
    assert np.array_equal(back["params"]["W"], state["params"]["W"])
    assert back["params"]["b"].dtype == np.int32
    assert back["history"] == [1.5, None, "x", 2.5]
    restored = np.random.default_rng()
    restored.bit_generator.state = back["rng"]
    assert restored.integers(0, 2**62) == rng.integers(0, 2**62)


def test_raw_bytes_are_stored_as_they_are() -> None:
    data, encoding = encode_state(b"\x00opaque")
    assert (data, encoding) == (b"\x00opaque", "bytes")
    assert decode_state(data, encoding) == b"\x00opaque"


def test_state_with_an_unsupported_type_is_refused() -> None:
    with pytest.raises(TypeError, match="set"):
        encode_state({"bad": {1, 2}})


def test_empty_store_has_no_checkpoint(store: CheckpointStore) -> None:
    assert store.latest() is None


def test_latest_is_the_highest_step_with_a_manifest(store: CheckpointStore) -> None:
    save(store, 5, b"five")
    uri = save(store, 12, b"twelve")
    save(store, 9, b"nine")

    found = store.latest()

    assert found is not None
    record, data = found
    assert (record.step, data, record.uri) == (12, b"twelve", uri)
    assert uri == store.uri + "manifest-000000000012.json"
    assert [r.step for r in store.manifests()] == [12, 9, 5]


def test_data_without_a_manifest_is_ignored(store: CheckpointStore) -> None:
    save(store, 5, b"five")
    # A writer killed between its data and its manifest leaves exactly this behind.
    store._put("data/step-000000000099-deadbeef0000.bin", b"torn")

    found = store.latest()

    assert found is not None and found[0].step == 5 and found[1] == b"five"


def test_a_manifest_whose_data_is_missing_or_corrupt_is_skipped(store: CheckpointStore) -> None:
    save(store, 5, b"five")
    save(store, 8, b"eight")
    save(store, 12, b"twelve")
    records = {r.step: r for r in store.manifests()}
    store._put(records[12].data_key, b"tampered")  # the hash no longer matches
    missing = json.loads(store._get("manifest-000000000012.json") or b"")
    missing.update(step=15, data_key="data/step-000000000015-gone00000000.bin")
    store._put("manifest-000000000015.json", json.dumps(missing).encode())  # its data never arrived
    store._put("manifest-000000000020.json", b"{not json")

    found = store.latest()

    assert found is not None and (found[0].step, found[1]) == (8, b"eight")


def test_manifest_is_written_after_its_data(tmp_path: Path) -> None:
    order: list[str] = []

    class Recording(LocalCheckpointStore):
        def _put(self, key: str, data: bytes) -> None:
            order.append(key.split("/")[0].split("-")[0])
            super()._put(key, data)

    Recording(tmp_path).save(3, b"x", encoding="bytes", job_id="j", created_at=1.0)

    assert order == ["data", "manifest"]


def test_local_store_leaves_no_temp_files_and_ignores_stray_ones(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    save(store, 1, b"one")
    assert not [p for p in tmp_path.rglob(".tmp-*")]
    (tmp_path / ".tmp-123-manifest-000000000050.json").write_text("{}")  # a writer died mid-write

    found = store.latest()

    assert found is not None and found[0].step == 1


def test_manifest_records_what_the_control_plane_needs(store: CheckpointStore) -> None:
    store.save(
        7,
        b"x",
        encoding="bytes",
        job_id="job-1",
        created_at=123.5,
        progress=0.25,
        reason="requested",
        meta={"instance_id": "i-1"},
    )
    raw = store._get("manifest-000000000007.json")
    assert raw is not None
    body = json.loads(raw)

    assert body["format"] == "spotline-checkpoint/1"
    assert {k: body[k] for k in ("job_id", "step", "progress", "reason", "created_at", "final")} == {
        "job_id": "job-1",
        "step": 7,
        "progress": 0.25,
        "reason": "requested",
        "created_at": 123.5,
        "final": False,
    }
    assert body["meta"] == {"instance_id": "i-1"}


def test_s3_store_keys_live_under_the_prefix(s3_store: S3CheckpointStore) -> None:
    save(s3_store, 4, b"four")
    keys = sorted(o["Key"] for o in s3_store.client.list_objects_v2(Bucket=BUCKET)["Contents"])

    assert keys[1] == "checkpoints/team-a/job-1/manifest-000000000004.json"
    assert keys[0].startswith("checkpoints/team-a/job-1/data/step-000000000004-")
    assert s3_store.uri == f"s3://{BUCKET}/checkpoints/team-a/job-1/"


def test_open_store_understands_s3_file_and_plain_paths(tmp_path: Path) -> None:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        s3 = open_store(f"s3://{BUCKET}/a/b", s3_client=client)
        assert isinstance(s3, S3CheckpointStore) and (s3.bucket, s3.prefix) == (BUCKET, "a/b/")

    local = open_store((tmp_path / "x").as_uri() + "/")
    assert isinstance(local, LocalCheckpointStore) and local.root == tmp_path / "x"
    assert isinstance(open_store(str(tmp_path / "y")), LocalCheckpointStore)
    with pytest.raises(ValueError, match="bucket"):
        open_store("s3:///nobucket")
    with pytest.raises(ValueError, match="unsupported"):
        open_store("gs://bucket/x")


def keys(store: CheckpointStore) -> list[str]:
    return sorted(store._keys("manifest-") + store._keys("data/"))


def test_prune_keeps_the_newest_checkpoints_and_deletes_older_data(store: CheckpointStore) -> None:
    for step in (1, 2, 3, 4):
        save(store, step, f"state {step}".encode())
    store._put("data/step-000000000002-deadbeef0000.bin", b"torn")  # data a killed writer left
    store._put("data/step-000000000009-deadbeef0000.bin", b"torn, newer")  # a writer still writing?
    newest = store.manifests()[0]

    pruned = store.prune(2, newest=newest)

    assert pruned == [2, 1]
    assert [r.step for r in store.manifests()] == [4, 3]
    data_steps = sorted(int(k.split("-")[1]) for k in store._keys("data/"))
    assert data_steps == [3, 4, 9]  # older data goes; data newer than the kept ones stays
    found = store.latest()
    assert found is not None and (found[0].step, found[1]) == (4, b"state 4")


def test_prune_deletes_a_manifest_before_its_data(tmp_path: Path) -> None:
    deleted: list[str] = []

    class Recording(LocalCheckpointStore):
        def _delete(self, key: str) -> None:
            deleted.append(key.split("/")[0].split("-")[0])
            super()._delete(key)

    store = Recording(tmp_path)
    save(store, 1, b"one")
    save(store, 2, b"two")
    store.prune(1, newest=store.manifests()[0])

    assert deleted == ["manifest", "data"]


def test_prune_leaves_everything_when_the_new_checkpoint_is_not_among_the_newest(
    store: CheckpointStore,
) -> None:
    mine = store.save(3, b"mine", encoding="bytes", job_id="job-1", created_at=1.0)
    for step in (7, 8):  # higher steps written by someone else since
        save(store, step, b"other")
    before = keys(store)

    assert store.prune(2, newest=mine) == []
    assert keys(store) == before


def test_prune_zero_keeps_all_and_a_failing_delete_does_not_raise(tmp_path: Path) -> None:
    class Failing(LocalCheckpointStore):
        def _delete(self, key: str) -> None:
            raise OSError("read-only file system")

    store = Failing(tmp_path)
    for step in (1, 2, 3):
        save(store, step, b"x")
    newest = store.manifests()[0]

    assert store.prune(0, newest=newest) == []
    assert store.prune(1, newest=newest) == []  # logged, not raised
    assert [r.step for r in store.manifests()] == [3, 2, 1]
