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

A checkpoint can also be files a framework wrote itself (a Lightning `.ckpt`, a Hugging Face
checkpoint directory, the shards of `torch.distributed.checkpoint`): `save_files` uploads them
under one prefix `data/step-<step:012d>-<token>/`, many at a time and each in parallel parts,
hashing every file while it is read for the upload (never a whole copy in memory), and then
writes the manifest with each file's name, SHA-256 and size. `download_files` fetches them into a
local directory (parallel ranged GETs on S3) and checks every hash before the directory is used.
Sharded writers call `upload_files` on each rank and one of them `commit_files` once all are up.

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
import shutil
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

from boto3.s3.transfer import TransferConfig, create_transfer_manager
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "spotline-checkpoint/1"
MANIFEST_PREFIX = "manifest-"
DATA_PREFIX = "data/"
_MANIFEST_KEY = re.compile(r"manifest-(\d{12})\.json")
_DATA_KEY = re.compile(r"data/step-(\d{12})-[^/]+(?:/.+)?")
# The encoding of a checkpoint made of files (see save_files); its data_key is a prefix.
FILES_ENCODING = "files"
_COPY_CHUNK = 8 * 1024 * 1024


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read."""


@dataclass(frozen=True)
class CheckpointFile:
    """One file of a checkpoint made of files: its name relative to the checkpoint's directory."""

    name: str
    sha256: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "size": self.size}


def _check_file_name(name: str) -> str:
    """A file name inside a checkpoint: relative, forward slashes, no `..`, no empty part."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise CheckpointError(f"checkpoint file name {name!r} must be a relative path without '..'")
    return name


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
    # A checkpoint made of files (encoding "files"): each file, under the prefix data_key.
    files: tuple[CheckpointFile, ...] = ()

    @property
    def is_files(self) -> bool:
        return self.encoding == FILES_ENCODING

    def manifest(self) -> dict[str, Any]:
        body = asdict(self)
        del body["uri"]  # derived from where the manifest lives
        if self.is_files:
            body["files"] = [f.as_dict() for f in self.files]
        else:
            del body["files"]
        return {"format": MANIFEST_FORMAT, **body}


def files_digest(files: list[CheckpointFile] | tuple[CheckpointFile, ...]) -> str:
    """The SHA-256 a files checkpoint's manifest records for the whole: of each file's name, hash
    and size, in name order."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        digest.update(f"{f.name}\0{f.sha256}\0{f.size}\n".encode())
    return digest.hexdigest()


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

    @abc.abstractmethod
    def _put_files(self, items: list[tuple[str, Path]]) -> list[tuple[str, int]]:
        """Upload each local file to its key; (SHA-256, size) of each, hashed from the bytes
        read for the upload."""

    @abc.abstractmethod
    def _get_files(self, items: list[tuple[str, Path]]) -> None:
        """Download each key to its local path (the parent directories exist). CheckpointError
        if one is missing."""

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

    def new_files_prefix(self, step: int) -> str:
        """A fresh data prefix for a checkpoint of files at `step` (unique, as for save)."""
        if step < 0:
            raise ValueError("step must be >= 0")
        return f"{DATA_PREFIX}step-{step:012d}-{uuid.uuid4().hex[:12]}/"

    def upload_files(self, prefix: str, files: Mapping[str, str | os.PathLike[str]]) -> list[CheckpointFile]:
        """Upload local files (name inside the checkpoint -> local path) under `prefix`, in
        parallel; what each one's manifest entry says. No manifest is written: a sharded
        checkpoint's ranks each upload theirs, then one calls commit_files."""
        if not prefix.startswith(DATA_PREFIX) or not prefix.endswith("/"):
            raise CheckpointError(f"data prefix {prefix!r} was not made by new_files_prefix")
        items = []
        for name, local in sorted(files.items()):
            path = Path(local)
            if not path.is_file():
                raise CheckpointError(f"checkpoint file {path} does not exist or is not a file")
            items.append((prefix + _check_file_name(name), path))
        hashes = self._put_files(items) if items else []
        return [
            CheckpointFile(name=key[len(prefix) :], sha256=sha, size=size)
            for (key, _), (sha, size) in zip(items, hashes, strict=True)
        ]

    def commit_files(
        self,
        step: int,
        prefix: str,
        files: list[CheckpointFile],
        *,
        job_id: str,
        created_at: float,
        progress: float | None = None,
        reason: str = "manual",
        final: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> CheckpointRecord:
        """Write the manifest of a checkpoint whose files are all uploaded under `prefix`: from
        this write on, the checkpoint exists."""
        if not files:
            raise CheckpointError(f"checkpoint at step {step} has no files")
        names = [f.name for f in files]
        if len(set(names)) != len(names):
            raise CheckpointError(f"checkpoint at step {step} names a file twice")
        ordered = tuple(sorted(files, key=lambda f: f.name))
        record = CheckpointRecord(
            job_id=job_id,
            step=step,
            uri=self.uri + manifest_key(step),
            data_key=prefix,
            sha256=files_digest(ordered),
            size=sum(f.size for f in ordered),
            encoding=FILES_ENCODING,
            created_at=created_at,
            progress=progress,
            reason=reason,
            final=final,
            meta=dict(meta or {}),
            files=ordered,
        )
        self._put(manifest_key(step), json.dumps(record.manifest(), sort_keys=True).encode())
        return record

    def save_files(
        self,
        step: int,
        path: str | os.PathLike[str],
        *,
        job_id: str,
        created_at: float,
        progress: float | None = None,
        reason: str = "manual",
        final: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> CheckpointRecord:
        """A checkpoint of the file or directory (every file under it) at `path`: files first,
        manifest last. A directory's files keep their relative names; a file keeps its name."""
        prefix = self.new_files_prefix(step)
        uploaded = self.upload_files(prefix, local_files(path))
        return self.commit_files(
            step,
            prefix,
            uploaded,
            job_id=job_id,
            created_at=created_at,
            progress=progress,
            reason=reason,
            final=final,
            meta=meta,
        )

    def download_files(self, record: CheckpointRecord, dest: str | os.PathLike[str]) -> Path:
        """Download a files checkpoint into the directory `dest` (made if missing) and check
        each file against its manifest; the directory. CheckpointError if a file is missing or
        does not match (the files already there are left for the caller to discard)."""
        if not record.is_files:
            raise CheckpointError(f"checkpoint {record.uri} is not made of files")
        if files_digest(record.files) != record.sha256:
            raise CheckpointError(f"checkpoint {record.uri}: its file list does not match its manifest")
        root = Path(dest).resolve()
        items = []
        for f in record.files:
            target = (root / _check_file_name(f.name)).resolve()
            if not target.is_relative_to(root):
                raise CheckpointError(f"checkpoint file {f.name!r} escapes {root}")
            target.parent.mkdir(parents=True, exist_ok=True)
            items.append((record.data_key + f.name, target))
        self._get_files(items)
        for f, (_, target) in zip(record.files, items, strict=True):
            size, sha = _hash_file(target)
            if size != f.size or sha != f.sha256:
                raise CheckpointError(f"checkpoint {record.uri}: {f.name} does not match its manifest")
        return root

    def latest_files(self, dest: str | os.PathLike[str]) -> tuple[CheckpointRecord, Path] | None:
        """The newest durable files checkpoint, downloaded into `dest` and checked; None if none.
        A checkpoint whose files are missing or corrupt is skipped for the next older one."""
        for record in self.manifests():
            if not record.is_files:
                continue
            target = Path(dest)
            if target.exists():
                shutil.rmtree(target)
            try:
                return record, self.download_files(record, target)
            except CheckpointError as exc:
                log.warning("checkpoint %s cannot be restored (%s); trying an older one", record.uri, exc)
        return None

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
            if record.is_files:
                continue  # files are restored by latest_files, into a directory
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
            files = tuple(
                CheckpointFile(
                    name=_check_file_name(str(f["name"])), sha256=str(f["sha256"]), size=int(f["size"])
                )
                for f in body.pop("files", [])
            )
            return CheckpointRecord(uri=self.uri + key, files=files, **body)
        except (ValueError, TypeError, KeyError, CheckpointError) as exc:
            log.warning("ignoring unreadable manifest %s%s: %s", self.uri, key, exc)
            return None


def manifest_key(step: int) -> str:
    return f"{MANIFEST_PREFIX}{step:012d}.json"


def local_files(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Name inside the checkpoint -> local path, for a file or every file under a directory."""
    root = Path(path)
    if root.is_file():
        return {root.name: root}
    if not root.is_dir():
        raise CheckpointError(f"checkpoint path {root} does not exist")
    found = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
    if not found:
        raise CheckpointError(f"checkpoint directory {root} holds no files")
    return found


def _hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_COPY_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class HashingReader(io.RawIOBase):
    """A seekable read-only view of a file that hashes the bytes as they are read for an upload.

    boto3's transfer manager reads a seekable file object's parts in order (and keeps each part
    in memory until it is sent, at most `max_in_memory_upload_chunks` of them), so one pass over
    the file both uploads and hashes it. Bytes read again (a retried part, a seek back) are not
    hashed twice; if the reads ever skipped ahead, `result()` hashes the file afresh."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._handle = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._path = path
        self._digest = hashlib.sha256()
        self._hashed = 0
        self._gap = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def read(self, size: int = -1) -> bytes:
        start = self._handle.tell()
        data = self._handle.read(size)
        end = start + len(data)
        if start > self._hashed:
            self._gap = True
        elif end > self._hashed:
            self._digest.update(memoryview(data)[self._hashed - start :])
            self._hashed = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._handle.close()
        super().close()

    def result(self) -> tuple[str, int]:
        """(SHA-256, size) of the file, once it has been read to the end."""
        size = (
            os.fstat(self._handle.fileno()).st_size if not self._handle.closed else self._path.stat().st_size
        )
        if self._gap or self._hashed != size:
            size, sha = _hash_file(self._path)
            return sha, size
        return self._digest.hexdigest(), size


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

    def _put_files(self, items: list[tuple[str, Path]]) -> list[tuple[str, int]]:
        with ThreadPoolExecutor(max_workers=min(8, len(items))) as pool:
            return list(pool.map(lambda item: self._copy_in(*item), items))

    def _copy_in(self, key: str, source: Path) -> tuple[str, int]:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
        digest = hashlib.sha256()
        size = 0
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(_COPY_CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return digest.hexdigest(), size

    def _get_files(self, items: list[tuple[str, Path]]) -> None:
        for key, target in items:
            source = self._path(key)
            if not source.is_file():
                raise CheckpointError(f"checkpoint file {key} is missing")
            shutil.copyfile(source, target)

    def _delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        # A files checkpoint's directory goes with its last file.
        parent = path.parent
        while parent != self.root and parent.is_relative_to(self.root):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def _keys(self, prefix: str) -> list[str]:
        directory, _, name_prefix = prefix.rpartition("/")
        base = self._path(directory) if directory else self.root
        if not base.is_dir():
            return []
        keys = []
        for entry in base.iterdir():
            if not entry.name.startswith(name_prefix):
                continue
            name = f"{directory}/{entry.name}" if directory else entry.name
            if entry.is_file():
                keys.append(name)
            elif entry.is_dir() and directory:  # a files checkpoint's directory, under data/
                keys.extend(
                    f"{name}/{p.relative_to(entry).as_posix()}"
                    for p in entry.rglob("*")
                    if p.is_file() and not p.name.startswith(".tmp-")
                )
        return keys


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


# Multipart uploads and ranged downloads: 64 MiB parts (a 10 GB shard is 150 parts, far from
# S3's 10,000), 16 at a time across all the files of a checkpoint. In memory at once: at most
# max_in_memory_upload_chunks parts per upload (boto3's default, 10) and 16 parts in flight.
DEFAULT_TRANSFER_CONFIG = TransferConfig(
    multipart_threshold=64 * 1024 * 1024,
    multipart_chunksize=64 * 1024 * 1024,
    max_concurrency=16,
    use_threads=True,
)


class S3CheckpointStore(CheckpointStore):
    """Checkpoints in S3 (s3://bucket/prefix/). The client honours AWS_ENDPOINT_URL, so a local
    moto server works the same way as S3. Files go through boto3's transfer manager
    (`transfer_config`): multipart uploads and ranged GETs, several parts and files at a time."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        client: S3Client,
        *,
        kms_key: str | None = None,
        transfer_config: TransferConfig | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client
        # The team's KMS key (checkpoint_kms_per_team): every upload is encrypted with it.
        self.extra_args = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key} if kms_key else None
        self.transfer_config = transfer_config or DEFAULT_TRANSFER_CONFIG
        super().__init__(f"s3://{bucket}/{self.prefix}")

    def _put_files(self, items: list[tuple[str, Path]]) -> list[tuple[str, int]]:
        readers = [HashingReader(path) for _, path in items]
        try:
            with create_transfer_manager(self.client, self.transfer_config) as manager:
                futures = [
                    manager.upload(
                        cast("IO[bytes]", reader), self.bucket, self.prefix + key, extra_args=self.extra_args
                    )
                    for (key, _), reader in zip(items, readers, strict=True)
                ]
                for future in futures:
                    future.result()
            return [reader.result() for reader in readers]
        finally:
            for reader in readers:
                reader.close()

    def _get_files(self, items: list[tuple[str, Path]]) -> None:
        with create_transfer_manager(self.client, self.transfer_config) as manager:
            futures = [
                (key, manager.download(self.bucket, self.prefix + key, str(target))) for key, target in items
            ]
            for key, future in futures:
                try:
                    future.result()
                except ClientError as exc:
                    code = exc.response.get("Error", {}).get("Code")
                    if code in ("404", "NoSuchKey", "NotFound"):
                        raise CheckpointError(f"checkpoint file {key} is missing") from exc
                    raise

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
