"""`LocalCheckpointStore`: checkpoints in a local directory, each object written atomically
(write-temp + fsync + os.replace, then the directory fsynced)."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spotline.agent.manifest import COPY_CHUNK, CheckpointError
from spotline.agent.store_base import CheckpointStore


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
                while chunk := src.read(COPY_CHUNK):
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
