"""Checkpoints made of the framework's own files: upload (multipart, parallel, hashed while read),
manifest last, restore into a directory with every hash checked; the agent's async save."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from moto import mock_aws

from spotline.agent import (
    Agent,
    AgentSettings,
    CheckpointError,
    CheckpointReason,
    CheckpointStore,
    LocalCheckpointStore,
    RecordingPublisher,
    S3CheckpointStore,
)
from spotline.agent.events import DETAIL_CHECKPOINT_COMPLETED
from spotline.agent.store import HashingReader

from .fakes import FakeClock

BUCKET = "spotline-checkpoints"
PREFIX = "checkpoints/team-a/job-1/"
# Small parts, so that a test-sized file is a real multipart upload and a ranged download.
SMALL_PARTS = TransferConfig(
    multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024, max_concurrency=4
)


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStore:
    if request.param == "local":
        return LocalCheckpointStore(tmp_path / "ckpt")
    client = request.getfixturevalue("s3")
    return S3CheckpointStore(BUCKET, PREFIX, client, transfer_config=SMALL_PARTS)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return root


def big(n: int, seed: int = 1) -> bytes:
    return (hashlib.sha256(str(seed).encode()).digest() * (n // 32 + 1))[:n]


def test_a_directory_round_trips_with_each_file_hashed(store: CheckpointStore, tmp_path: Path) -> None:
    # Given a framework's checkpoint directory: nested files, one larger than a multipart part
    files = {"model.safetensors": big(12 * 1024 * 1024), "trainer_state.json": b"{}", "sub/rng.pth": b"\0r"}
    source = write_tree(tmp_path / "out" / "checkpoint-7", files)

    record = store.save_files(7, source, job_id="job-1", created_at=10.0, progress=0.5, reason="requested")

    # Then the manifest lists each file with its own hash and size, and the total
    assert record.encoding == "files" and record.step == 7
    assert {f.name: (f.sha256, f.size) for f in record.files} == {
        name: (hashlib.sha256(body).hexdigest(), len(body)) for name, body in files.items()
    }
    assert record.size == sum(len(b) for b in files.values())
    # And a restore brings back the same tree, byte for byte
    found = store.latest_files(tmp_path / "restore")
    assert found is not None
    restored_record, path = found
    assert restored_record.step == 7
    assert {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()} == files
    # A bytes checkpoint reader does not mistake it for one of its own
    assert store.latest() is None


def test_a_single_file_keeps_its_name(store: CheckpointStore, tmp_path: Path) -> None:
    ckpt = tmp_path / "epoch=0-step=3.ckpt"
    ckpt.write_bytes(b"lightning")
    store.save_files(3, ckpt, job_id="job-1", created_at=1.0)
    found = store.latest_files(tmp_path / "r")
    assert found is not None and (found[1] / "epoch=0-step=3.ckpt").read_bytes() == b"lightning"


def test_files_without_a_manifest_are_never_restored(store: CheckpointStore, tmp_path: Path) -> None:
    # Given a complete checkpoint at step 1, and the files of step 2 uploaded but never committed
    store.save_files(1, write_tree(tmp_path / "a", {"w": b"one"}), job_id="job-1", created_at=1.0)
    prefix = store.new_files_prefix(2)
    store.upload_files(prefix, {"w": write_tree(tmp_path / "b", {"w": b"two"}) / "w"})

    found = store.latest_files(tmp_path / "r")

    assert found is not None and found[0].step == 1 and (found[1] / "w").read_bytes() == b"one"


def test_a_corrupt_or_missing_file_falls_back_to_the_older_checkpoint(
    store: CheckpointStore, tmp_path: Path
) -> None:
    store.save_files(1, write_tree(tmp_path / "a", {"w": b"one", "x": b"1"}), job_id="job-1", created_at=1.0)
    newer = store.save_files(
        2, write_tree(tmp_path / "b", {"w": b"two", "x": b"2"}), job_id="job-1", created_at=2
    )
    # When one file of the newer checkpoint is overwritten with other bytes of the same size
    store._put(newer.data_key + "w", b"TWO")

    found = store.latest_files(tmp_path / "r")
    assert found is not None and found[0].step == 1
    assert (found[1] / "w").read_bytes() == b"one" and (found[1] / "x").read_bytes() == b"1"

    # And when it is missing altogether
    store._delete(newer.data_key + "w")
    found = store.latest_files(tmp_path / "r2")
    assert found is not None and found[0].step == 1


def test_a_manifest_whose_file_list_was_edited_is_refused(store: CheckpointStore, tmp_path: Path) -> None:
    record = store.save_files(4, write_tree(tmp_path / "a", {"w": b"x"}), job_id="job-1", created_at=1.0)
    body = record.manifest()
    body["files"].append({"name": "extra", "sha256": "0" * 64, "size": 0})
    store._put("manifest-000000000004.json", json.dumps(body).encode())

    assert store.latest_files(tmp_path / "r") is None


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/../../b", "", "a//b"])
def test_a_file_name_that_escapes_the_checkpoint_is_refused(
    store: CheckpointStore, tmp_path: Path, name: str
) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="relative path"):
        store.upload_files(store.new_files_prefix(1), {name: source})


def test_a_manifest_naming_an_escaping_file_is_ignored(store: CheckpointStore, tmp_path: Path) -> None:
    record = store.save_files(5, write_tree(tmp_path / "a", {"w": b"x"}), job_id="job-1", created_at=1.0)
    body = record.manifest()
    body["files"] = [{"name": "../../outside", "sha256": record.files[0].sha256, "size": 1}]
    store._put("manifest-000000000005.json", json.dumps(body).encode())

    assert store.manifests() == []
    assert not (tmp_path / "outside").exists()


def test_missing_or_empty_paths_are_refused(store: CheckpointStore, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        store.save_files(1, tmp_path / "nope", job_id="job-1", created_at=1.0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no files"):
        store.save_files(1, tmp_path / "empty", job_id="job-1", created_at=1.0)
    assert store.manifests() == []


def test_sharded_checkpoint_ranks_upload_then_one_commits(store: CheckpointStore, tmp_path: Path) -> None:
    # Given two ranks that each wrote their shard (and rank 0 the metadata), concurrently
    prefix = store.new_files_prefix(9)
    shards = {0: {".metadata": b"meta", "__0_0.distcp": big(6 * 1024 * 1024, 0)}, 1: {"__1_0.distcp": b"s1"}}
    uploaded: dict[int, list[Any]] = {}

    def rank(r: int) -> None:
        root = write_tree(tmp_path / f"rank{r}", shards[r])
        uploaded[r] = store.upload_files(prefix, {name: root / name for name in shards[r]})

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.manifests() == []  # nothing exists before the commit

    record = store.commit_files(9, prefix, uploaded[0] + uploaded[1], job_id="job-1", created_at=3.0)

    found = store.latest_files(tmp_path / "restore")
    assert found is not None and found[0] == record
    assert sorted(p.name for p in found[1].iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    with pytest.raises(CheckpointError, match="twice"):
        store.commit_files(10, prefix, uploaded[1] + uploaded[1], job_id="job-1", created_at=3.0)


def test_pruning_removes_old_files_checkpoints_whole(store: CheckpointStore, tmp_path: Path) -> None:
    records = [
        store.save_files(s, write_tree(tmp_path / str(s), {"a": b"x", "d/b": b"y"}), job_id="j", created_at=s)
        for s in (1, 2, 3)
    ]
    assert store.prune(2, newest=records[-1]) == [1]
    keys = store._keys("data/step-")
    assert keys and not any(k.startswith(records[0].data_key) for k in keys)
    assert {k for k in keys if k.startswith(records[2].data_key)} == {
        records[2].data_key + "a",
        records[2].data_key + "d/b",
    }
    if isinstance(store, LocalCheckpointStore):
        assert not (store.root / records[0].data_key).exists()  # its directory went too


def test_s3_upload_is_multipart_under_the_prefix_with_the_teams_key(s3: Any, tmp_path: Path) -> None:
    store = S3CheckpointStore(BUCKET, PREFIX, s3, transfer_config=SMALL_PARTS, kms_key=None)
    body = big(11 * 1024 * 1024)
    record = store.save_files(1, write_tree(tmp_path / "c", {"shard": body}), job_id="j", created_at=1.0)
    head = s3.head_object(Bucket=BUCKET, Key=PREFIX + record.data_key + "shard")
    # A multipart upload's ETag is "<md5 of the parts' md5s>-<number of parts>": three 5 MiB parts
    assert head["ETag"].strip('"').endswith("-3")
    assert all(o["Key"].startswith(PREFIX) for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert record.files[0].sha256 == hashlib.sha256(body).hexdigest()


def test_s3_uploads_name_the_teams_kms_key(s3: Any, tmp_path: Path) -> None:
    key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
    store = S3CheckpointStore(BUCKET, PREFIX, s3, transfer_config=SMALL_PARTS, kms_key=key_id)
    record = store.save_files(
        1, write_tree(tmp_path / "c", {"a": big(6 * 1024 * 1024), "b": b"s"}), job_id="j", created_at=1
    )
    for f in record.files:
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + record.data_key + f.name)
        assert head["ServerSideEncryption"] == "aws:kms" and key_id in head["SSEKMSKeyId"]


def test_hashing_reader_hashes_each_byte_once_and_recovers_from_skips(tmp_path: Path) -> None:
    path = tmp_path / "f"
    body = big(1000)
    path.write_bytes(body)
    expected = (hashlib.sha256(body).hexdigest(), 1000)

    reader = HashingReader(path)
    reader.read(300)
    reader.seek(100)  # a retried part reads again: not hashed twice
    reader.read(400)
    reader.read()
    assert reader.result() == expected
    reader.close()

    skipping = HashingReader(path)
    skipping.seek(500)  # a read that skips ahead: the result hashes the file afresh
    skipping.read()
    assert skipping.result() == expected
    skipping.close()


# -- the agent --------------------------------------------------------------------------------


def make_agent(store: CheckpointStore, clock: FakeClock, **settings: Any) -> tuple[Agent, RecordingPublisher]:
    publisher = RecordingPublisher()
    agent = Agent(
        AgentSettings(job_id="job-1", run_id="spotline-job-1-r1", checkpoint_interval_s=0, **settings),
        store=store,
        publisher=publisher,
        clock=clock,
        sleep=clock.sleep,
    )
    return agent, publisher


class GatedStore(LocalCheckpointStore):
    """A local store whose uploads wait for the test to open a gate."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.started = threading.Event()
        self.uploads = 0

    def _put_files(self, items: list[tuple[str, Path]]) -> list[tuple[str, int]]:
        self.uploads += 1
        self.started.set()
        assert self.gate.wait(10)
        return super()._put_files(items)


def test_agent_saves_files_in_the_background_and_reports_size_and_times(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = GatedStore(tmp_path / "ckpt")
    agent, publisher = make_agent(store, clock)
    source = write_tree(tmp_path / "step-5", {"model.pt": b"m" * 1000, "opt.pt": b"o" * 24})

    # When the framework reports its files, the call returns while the upload is held
    future = agent.save_files(5, source, progress=0.5, reason=CheckpointReason.REQUESTED, remove_after=True)
    assert store.started.wait(5)
    assert not future.done() and store.manifests() == []
    # And a second checkpoint waits for the one in flight
    second_source = write_tree(tmp_path / "step-6", {"model.pt": b"n"})
    second: list[Any] = []
    waiter = threading.Thread(target=lambda: second.append(agent.save_files(6, second_source, wait=True)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and store.uploads == 1

    store.gate.set()
    record = future.result(timeout=10)
    waiter.join(10)
    assert record is not None and record.step == 5 and second[0].result().step == 6
    assert not source.exists()  # remove_after
    assert second_source.exists()
    events = [d for kind, d in publisher.events if kind == DETAIL_CHECKPOINT_COMPLETED]
    assert [e["step"] for e in events] == [5, 6]
    assert events[0]["size_bytes"] == 1024 and events[0]["write_s"] >= 0
    assert "restore_s" not in events[0]  # a fresh start restored nothing
    agent.close()

    # And a new run restores the newest into a directory, and reports how long that took
    agent2, publisher2 = make_agent(LocalCheckpointStore(tmp_path / "ckpt"), clock)
    restored = agent2.restore_files(tmp_path / "restore")
    assert restored is not None and restored.step == 6
    assert (restored.path / "model.pt").read_bytes() == b"n"
    assert agent2.last_restore_s is not None
    agent2.save_files(7, restored.path, wait=True)
    assert publisher2.events[-1][1]["restore_s"] == round(agent2.last_restore_s, 3)


class FailingStore(LocalCheckpointStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fail = True

    def _put_files(self, items: list[tuple[str, Path]]) -> list[tuple[str, int]]:
        if self.fail:
            raise OSError("network down")
        return super()._put_files(items)


def test_a_failed_background_upload_asks_for_the_checkpoint_again(tmp_path: Path, clock: FakeClock) -> None:
    store = FailingStore(tmp_path / "ckpt")
    agent, publisher = make_agent(store, clock)
    agent._pending_request = clock() - 1  # a control-plane request, as the poller records it
    assert agent.checkpoint_reason() is CheckpointReason.REQUESTED
    source = write_tree(tmp_path / "s", {"w": b"x"})

    future = agent.save_files(3, source)
    with pytest.raises(OSError, match="network down"):
        future.result(timeout=10)
    # Then the request is still open, nothing was announced, and the next try succeeds
    assert agent.checkpoint_reason() is CheckpointReason.REQUESTED
    assert publisher.events == []
    store.fail = False
    record = agent.save_files(4, source, wait=True).result()
    assert record is not None and agent.checkpoint_reason() is None
    assert publisher.events[0][1]["requested_at"] == clock() - 1


def test_only_the_writer_rank_uploads(tmp_path: Path, clock: FakeClock) -> None:
    store = LocalCheckpointStore(tmp_path / "ckpt")
    agent, publisher = make_agent(store, clock, rank=1, local_rank=1)
    source = write_tree(tmp_path / "s", {"w": b"x"})
    assert agent.save_files(1, source, wait=True).result() is None
    assert store.manifests() == [] and publisher.events == []
    assert not agent.settings.is_node_leader and not agent.settings.is_writer


def test_settings_read_torchruns_ranks() -> None:
    settings = AgentSettings.from_env({"RANK": "3", "LOCAL_RANK": "1"})
    assert (settings.rank, settings.local_rank, settings.is_writer, settings.is_node_leader) == (
        3,
        1,
        False,
        False,
    )
    leader = AgentSettings.from_env({"RANK": "2", "LOCAL_RANK": "0"})
    assert leader.is_node_leader and not leader.is_writer
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        AgentSettings.from_env({"LOCAL_RANK": "x"})
