"""A checkpoint's manifest and its integrity: the manifest format and the records it holds, the
key names (zero-padded steps, unique data names), and the SHA-256 hashing every read is checked
against. See spotline.agent.store for the durability protocol."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_FORMAT = "spotline-checkpoint/1"
MANIFEST_PREFIX = "manifest-"
DATA_PREFIX = "data/"
MANIFEST_KEY_PATTERN = re.compile(r"manifest-(\d{12})\.json")
DATA_KEY_PATTERN = re.compile(r"data/step-(\d{12})-[^/]+(?:/.+)?")
# The encoding of a checkpoint made of files (see save_files); its data_key is a prefix.
FILES_ENCODING = "files"
COPY_CHUNK = 8 * 1024 * 1024


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


def check_file_name(name: str) -> str:
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


def hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
