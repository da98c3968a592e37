"""Lambda packaging without Docker.

The code asset is a staged copy of the repository's `spotline/` and `functions/` packages: a plain
directory, so synth needs neither Docker nor pip. The third-party dependencies (Powertools with
its tracer and parser extras, pydantic v2, aws-xray-sdk) come from the public Powertools layer,
which is built with `aws-lambda-powertools[all]`; boto3 is part of the Lambda runtime.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from aws_cdk import Aws

from spotline.aws.resources import POWERTOOLS_LAYER_ACCOUNT, POWERTOOLS_LAYER_NAME

# Bytecode and tool caches never ship; they also must not change the asset hash.
_SKIPPED_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def powertools_layer_arn(version: int) -> str:
    """ARN of the public Powertools v3 layer for Python 3.12 on x86_64 in the stack's region."""
    return (
        f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"{POWERTOOLS_LAYER_NAME}:{version}"
    )


def _package_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if not name.endswith(_SKIPPED_SUFFIXES):
                yield Path(dirpath) / name


def stage_lambda_code(packages: Mapping[str, Path], build_dir: Path) -> Path:
    """Copy each package (name in the bundle -> source directory) into a directory keyed by the
    hash of what it contains, and return that directory.

    Keying by content makes the staging idempotent and safe for concurrent synths (tests and
    `make synth` may run at once): an existing directory is reused, a new one appears atomically.
    """
    digest = hashlib.sha256()
    files: list[tuple[str, Path]] = []
    for arcname, source in sorted(packages.items()):
        if not source.is_dir():
            raise FileNotFoundError(f"Lambda code package '{arcname}' not found at {source}")
        for path in _package_files(source):
            relative = f"{arcname}/{path.relative_to(source).as_posix()}"
            files.append((relative, path))
            digest.update(relative.encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    target = build_dir / "lambda-code" / digest.hexdigest()[:16]
    if target.is_dir():
        os.utime(target)
        return target
    build_dir.joinpath("lambda-code").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=build_dir / "lambda-code"))
    try:
        for relative, path in files:
            destination = staging / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # lost a race to a concurrent synth: theirs is identical
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    _prune(target.parent, keep=target)
    return target


def _prune(root: Path, keep: Path, newest: int = 3, min_age_s: float = 600.0) -> None:
    """Drop staged copies beyond the `newest` few, if untouched for `min_age_s` (a concurrent
    synth may still be reading a recent one)."""
    now = time.time()
    staged = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in staged[newest:]:
        if now - old.stat().st_mtime > min_age_s:
            shutil.rmtree(old, ignore_errors=True)
