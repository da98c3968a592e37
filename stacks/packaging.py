"""Lambda packaging without Docker.

The code asset is a staged copy of the repository's `spotline/` and `functions/` packages: a plain
directory, so synth needs neither Docker nor pip. The third-party dependencies (Powertools with
its tracer and parser extras, pydantic v2, aws-xray-sdk) come from the public Powertools layer,
which is built with `aws-lambda-powertools[all]`; boto3 is part of the Lambda runtime.

Bytecode: a function's code directory is read-only, so Python cannot keep the `.pyc` files it
compiles, and every cold start compiled the whole library again (35-50 ms of a handler's
init, `make bench`'s cold-start table). Where the synthesizing machine has an interpreter of the
runtime's version (`bytecode_compiler`), the staged copy ships bytecode compiled by it, in
checked-hash mode: the header holds the source's hash, not its time, so the files are the same
on every machine and Python still refuses one that does not match its source.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from spotline.resources import POWERTOOLS_LAYER_ACCOUNT, POWERTOOLS_LAYER_NAME

# The developer's bytecode and tool caches never ship (bytecode for the runtime is compiled
# afresh, `compile_with`); they also must not change the asset hash.
_SKIPPED_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def powertools_layer_arn(version: int) -> str:
    """ARN of the public Powertools v3 layer for Python 3.12 on x86_64 in the stack's region."""
    from aws_cdk import Aws  # here, so that staging code (`bench.cold_start`) needs no CDK

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


def bytecode_compiler(version: tuple[int, int]) -> str | None:
    """An interpreter of Python `version` on this machine to compile the Lambda code with: this
    one where it is that version, else a working `pythonX.Y` on the PATH; None where there is
    none (a version manager's shim that cannot run that version counts as none)."""
    if sys.version_info[:2] == version:
        return sys.executable
    found = shutil.which(f"python{version[0]}.{version[1]}")
    if found is None:
        return None
    try:
        tag = _cache_tag(found)
    except (OSError, subprocess.SubprocessError):
        return None
    return found if tag == f"cpython-{version[0]}{version[1]}" else None


def _cache_tag(python: str) -> str:
    """The tag in the names of `python`'s bytecode files (`cpython-312`)."""
    if python == sys.executable:
        return str(sys.implementation.cache_tag)
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.implementation.cache_tag)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def stage_lambda_code(packages: Mapping[str, Path], build_dir: Path, compile_with: str | None = None) -> Path:
    """Copy each package (name in the bundle -> source directory) into a directory keyed by the
    hash of what it contains, and return that directory. With `compile_with` (an interpreter of
    the runtime's version), the copy also holds the bytecode of every module, compiled by it.

    Keying by content makes the staging idempotent and safe for concurrent synths (tests and
    `make synth` may run at once): an existing directory is reused, a new one appears atomically.
    """
    digest = hashlib.sha256()
    if compile_with is not None:
        digest.update(f"bytecode:{_cache_tag(compile_with)}\0".encode())
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
        if compile_with is not None:
            compiled = subprocess.run(
                [compile_with, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash", str(staging)],
                capture_output=True,
                text=True,
            )
            if compiled.returncode != 0:
                output = compiled.stdout + compiled.stderr
                raise RuntimeError(f"compiling the Lambda code with {compile_with} failed:\n{output}")
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
