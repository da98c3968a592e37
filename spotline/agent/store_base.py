"""`CheckpointStore`: the durability protocol (data first, manifest last; restore newest-first,
checked against the manifest; prune manifests before data), on four object operations that each
backend supplies (store_local, store_s3). See spotline.agent.store for the whole protocol."""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spotline.agent.manifest import (
    DATA_KEY_PATTERN,
    DATA_PREFIX,
    FILES_ENCODING,
    MANIFEST_FORMAT,
    MANIFEST_KEY_PATTERN,
    MANIFEST_PREFIX,
    CheckpointError,
    CheckpointFile,
    CheckpointRecord,
    check_file_name,
    files_digest,
    hash_file,
    local_files,
    manifest_key,
)

log = logging.getLogger(__name__)


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
            items.append((prefix + check_file_name(name), path))
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
            target = (root / check_file_name(f.name)).resolve()
            if not target.is_relative_to(root):
                raise CheckpointError(f"checkpoint file {f.name!r} escapes {root}")
            target.parent.mkdir(parents=True, exist_ok=True)
            items.append((record.data_key + f.name, target))
        self._get_files(items)
        for f, (_, target) in zip(record.files, items, strict=True):
            size, sha = hash_file(target)
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
                    if (m := MANIFEST_KEY_PATTERN.fullmatch(key))
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
                match = DATA_KEY_PATTERN.fullmatch(key)
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
                    name=check_file_name(str(f["name"])), sha256=str(f["sha256"]), size=int(f["size"])
                )
                for f in body.pop("files", [])
            )
            return CheckpointRecord(uri=self.uri + key, files=files, **body)
        except (ValueError, TypeError, KeyError, CheckpointError) as exc:
            log.warning("ignoring unreadable manifest %s%s: %s", self.uri, key, exc)
            return None
