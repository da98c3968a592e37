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

from typing import TYPE_CHECKING, cast
from urllib.parse import unquote, urlparse

from spotline.agent.manifest import (
    DATA_PREFIX,
    FILES_ENCODING,
    MANIFEST_FORMAT,
    MANIFEST_PREFIX,
    CheckpointError,
    CheckpointFile,
    CheckpointRecord,
    files_digest,
    local_files,
    manifest_key,
)
from spotline.agent.store_base import CheckpointStore
from spotline.agent.store_local import LocalCheckpointStore
from spotline.agent.store_s3 import DEFAULT_TRANSFER_CONFIG, HashingReader, S3CheckpointStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "DATA_PREFIX",
    "DEFAULT_TRANSFER_CONFIG",
    "FILES_ENCODING",
    "MANIFEST_FORMAT",
    "MANIFEST_PREFIX",
    "CheckpointError",
    "CheckpointFile",
    "CheckpointRecord",
    "CheckpointStore",
    "HashingReader",
    "LocalCheckpointStore",
    "S3CheckpointStore",
    "files_digest",
    "local_files",
    "manifest_key",
    "open_store",
]


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
