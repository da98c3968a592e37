"""`S3CheckpointStore`: checkpoints in S3, files through boto3's transfer manager (multipart
uploads hashed as they are read, ranged parallel downloads)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from boto3.s3.transfer import TransferConfig, create_transfer_manager
from botocore.exceptions import ClientError

from spotline.agent.manifest import CheckpointError, hash_file
from spotline.agent.store_base import CheckpointStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


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
            size, sha = hash_file(self._path)
            return sha, size
        return self._digest.hexdigest(), size


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
