"""Checkpoint storage: durable checkpoints behind one small interface, in S3 or in local files.

Durability protocol (the same for every backend, implemented once in `CheckpointStore`):

1. the state goes to a data object with a unique name, `data/step-<step:012d>-<token>.<ext>`;
2. only then is the manifest `manifest-<step:012d>.json` written, naming that data object and
   its SHA-256.

Each object write is atomic (an S3 PUT; write-temp + fsync + os.replace locally), so a reader
that goes by manifests never sees a torn checkpoint: data without a manifest (a writer killed
between steps 1 and 2) is ignored, and a manifest whose data is missing or does not match its
hash is skipped in favour of the next older one. Zero-padded steps make the manifests' lexical
order their step order.

Pruning (`prune`) runs the protocol backwards: a checkpoint's manifest is deleted before its
data, so a reader never finds a manifest whose data was pruned.
"""

from __future__ import annotations

import abc
import hashlib
import io
import json
import logging
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "spotline-checkpoint/1"
MANIFEST_PREFIX = "manifest-"
DATA_PREFIX = "data/"
_MANIFEST_KEY = re.compile(r"manifest-(\d{12})\.json")
_DATA_KEY = re.compile(r"data/step-(\d{12})-[^/]+")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read."""


@dataclass(frozen=True)
class CheckpointRecord:
    """A durable checkpoint, as its manifest describes it."""

    job_id: str
    step: int
    uri: str  # the manifest's URI: what `Checkpoint Completed` reports and a job records
    data_key: str  # relative to the store's prefix
    sha256: str
    size: int
    encoding: str
    created_at: float  # when the state was captured (epoch seconds)
    progress: float | None = None
    reason: str = "manual"
    final: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        body = asdict(self)
        del body["uri"]  # derived from where the manifest lives
        return {"format": MANIFEST_FORMAT, **body}


class CheckpointStore(abc.ABC):
    """Durable checkpoints under one URI prefix. Subclasses supply four object operations."""

    def __init__(self, uri: str) -> None:
        self.uri = uri if uri.endswith("/") else uri + "/"

    # -- the backend: single-object operations, each atomic ----------------------------------

    @abc.abstractmethod
    def _put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""

    @abc.abstractmethod
    def _keys(self, prefix: str) -> list[str]:
        """Keys (relative to the store) that start with `prefix`."""

    @abc.abstractmethod
    def _delete(self, key: str) -> None:
        """Remove the object; nothing happens if it does not exist."""

    # -- the protocol -----------------------------------------------------------------------

    def save(
        self,
        step: int,
        data: bytes,
        *,
        encoding: str,
        job_id: str,
        created_at: float,
        progress: float | None = None,
        reason: str = "manual",
        final: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> CheckpointRecord:
        """Write a checkpoint and return it once it is durable (its manifest is written)."""
        if step < 0:
            raise ValueError("step must be >= 0")
        extension = "npz" if encoding != "bytes" else "bin"
        # A unique data name: a second writer of the same step (a zombie attempt, a retry) can
        # never overwrite data that a manifest already names.
        data_key = f"{DATA_PREFIX}step-{step:012d}-{uuid.uuid4().hex[:12]}.{extension}"
        record = CheckpointRecord(
            job_id=job_id,
            step=step,
            uri=self.uri + manifest_key(step),
            data_key=data_key,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            encoding=encoding,
            created_at=created_at,
            progress=progress,
            reason=reason,
            final=final,
            meta=dict(meta or {}),
        )
        self._put(data_key, data)
        # The manifest goes last: this write is what makes the checkpoint exist.
        self._put(manifest_key(step), json.dumps(record.manifest(), sort_keys=True).encode())
        return record

    def manifests(self) -> list[CheckpointRecord]:
        """Readable manifests, newest step first (their data is not checked here)."""
        records: list[CheckpointRecord] = []
        for key in sorted(self._keys(MANIFEST_PREFIX), reverse=True):
            if not key.endswith(".json") or "/" in key:
                continue
            raw = self._get(key)
            record = None if raw is None else self._parse_manifest(key, raw)
            if record is not None:
                records.append(record)
        return records

    def latest(self) -> tuple[CheckpointRecord, bytes] | None:
        """The newest durable checkpoint whose data is intact, with its data; None if none."""
        for record in self.manifests():
            data = self.read(record)
            if data is not None:
                return record, data
        return None

    def read(self, record: CheckpointRecord) -> bytes | None:
        """The checkpoint's data, or None (logged) if it is missing or does not match its hash."""
        data = self._get(record.data_key)
        if data is None:
            log.warning("checkpoint %s: data %s is missing; skipping it", record.uri, record.data_key)
            return None
        if len(data) != record.size or hashlib.sha256(data).hexdigest() != record.sha256:
            log.warning(
                "checkpoint %s: data %s does not match its manifest; skipping it", record.uri, record.data_key
            )
            return None
        return data

    def prune(self, keep: int, *, newest: CheckpointRecord) -> list[int]:
        """Delete the checkpoints older than the `keep` newest ones, and data older than those
        that no manifest names; the steps pruned.

        `newest` is the checkpoint this writer just made durable: nothing is pruned unless it is
        among the `keep` newest manifests (so pruning never removes the checkpoint a restart
        would resume from in favour of newer ones it has not checked). Manifests go before their
        data. A failure is logged and stops the pruning: it never fails the checkpoint.
        """
        if keep <= 0:
            return []
        pruned: list[int] = []
        try:
            steps = sorted(
                {
                    int(m.group(1))
                    for key in self._keys(MANIFEST_PREFIX)
                    if (m := _MANIFEST_KEY.fullmatch(key))
                },
                reverse=True,
            )
            kept = steps[:keep]
            if newest.step not in kept:
                return []
            for step in steps[keep:]:
                self._delete(manifest_key(step))
                pruned.append(step)
            oldest_kept = min(kept)
            for key in self._keys(f"{DATA_PREFIX}step-"):
                match = _DATA_KEY.fullmatch(key)
                if match and int(match.group(1)) < oldest_kept:
                    self._delete(key)
        except Exception as exc:  # pruning is housekeeping: the checkpoint itself is durable
            log.warning("pruning old checkpoints under %s failed: %s", self.uri, exc)
        return pruned

    def _parse_manifest(self, key: str, raw: bytes) -> CheckpointRecord | None:
        try:
            body = json.loads(raw)
            if body.pop("format") != MANIFEST_FORMAT:
                raise ValueError("unknown manifest format")
            return CheckpointRecord(uri=self.uri + key, **body)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring unreadable manifest %s%s: %s", self.uri, key, exc)
            return None


def manifest_key(step: int) -> str:
    return f"{MANIFEST_PREFIX}{step:012d}.json"


class LocalCheckpointStore(CheckpointStore):
    """Checkpoints in a local directory (file:///dir/). Used by the local runtime and tests."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        super().__init__(self.root.as_uri())

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise CheckpointError(f"key {key!r} escapes the checkpoint directory")
        return path

    def _put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Temp file in the same directory, so os.replace is a rename within one filesystem;
        # a leading dot keeps it out of the manifest listing if we die before the rename.
        tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)  # the rename itself must survive a power loss

    def _get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def _keys(self, prefix: str) -> list[str]:
        directory, _, name_prefix = prefix.rpartition("/")
        base = self._path(directory) if directory else self.root
        if not base.is_dir():
            return []
        return [
            f"{directory}/{entry.name}" if directory else entry.name
            for entry in base.iterdir()
            if entry.is_file() and entry.name.startswith(name_prefix)
        ]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class S3CheckpointStore(CheckpointStore):
    """Checkpoints in S3 (s3://bucket/prefix/). The client honours AWS_ENDPOINT_URL, so a local
    moto server works the same way as S3."""

    def __init__(self, bucket: str, prefix: str, client: S3Client, *, kms_key: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client
        # The team's KMS key (checkpoint_kms_per_team): every upload is encrypted with it.
        self.extra_args = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key} if kms_key else None
        super().__init__(f"s3://{bucket}/{self.prefix}")

    def _put(self, key: str, data: bytes) -> None:
        # upload_fileobj switches to a multipart upload for large checkpoints; either way the
        # object appears whole or not at all.
        self.client.upload_fileobj(
            io.BytesIO(data), self.bucket, self.prefix + key, ExtraArgs=self.extra_args
        )

    def _get(self, key: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except self.client.exceptions.NoSuchKey:
            return None
        return response["Body"].read()

    def _delete(self, key: str) -> None:
        # In the versioned bucket this adds a delete marker; the lifecycle rule expires the
        # superseded version.
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            keys.extend(obj["Key"][len(self.prefix) :] for obj in page.get("Contents", []))
        return keys


def open_store(uri: str, *, s3_client: S3Client | None = None, kms_key: str | None = None) -> CheckpointStore:
    """The store for `s3://bucket/prefix/`, `file:///dir/` or a plain directory path."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"checkpoint URI {uri!r} names no bucket")
        if s3_client is None:
            from spotline.aws.clients import default_clients

            s3_client = cast("S3Client", default_clients().client("s3"))
        return S3CheckpointStore(parsed.netloc, unquote(parsed.path), s3_client, kms_key=kms_key)
    if parsed.scheme == "file":
        # file:///abs/dir -> /abs/dir; file://./rel -> ./rel (netloc holds the '.')
        return LocalCheckpointStore(unquote(parsed.netloc + parsed.path))
    if parsed.scheme == "":
        return LocalCheckpointStore(uri)
    raise ValueError(f"unsupported checkpoint URI {uri!r} (expected s3://, file:// or a path)")
