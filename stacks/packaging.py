"""Lambda packaging without Docker.

The code asset is a staged copy of the repository's `spotline/` and `functions/` packages: a plain
directory, so synth needs neither Docker nor pip. The third-party dependencies (Powertools with
its tracer and parser extras, pydantic v2, aws-xray-sdk) come from the public Powertools layer,
which is built with `aws-lambda-powertools[all]`; boto3 is part of the Lambda runtime.

Without the layer (`-c target=localstack`: LocalStack's free edition cannot fetch AWS's public
layers), `bundle_dependencies` installs the same distributions, at the versions installed here
(the ones the tests ran), as wheels for the runtime's Python and platform into a directory that
`stage_lambda_code` merges into the asset: pip, no Docker, reused across synths.

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
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
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


# What the functions import beyond the runtime's own SDK: the public layer's Powertools (built
# with its extras; the functions use the tracer and the parser) and what it depends on.
BUNDLED_ROOT = ("aws-lambda-powertools", ("tracer", "parser"))
# The Lambda Python runtime's own SDK and what it brings: never bundled (a copy would shadow it).
RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}
)
# Lambda x86_64 (Amazon Linux 2023, glibc 2.34): wheels of either manylinux tag load there.
LAMBDA_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def bundled_requirements(python: tuple[int, int]) -> list[str]:
    """`name==version` of every distribution the bundle needs, at the versions installed in this
    environment: Powertools with its extras and their dependencies for Python `python` on Linux
    x86_64, less what the runtime provides."""
    from packaging.requirements import Requirement

    environment = {
        "python_version": f"{python[0]}.{python[1]}",
        "python_full_version": f"{python[0]}.{python[1]}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    pinned: dict[str, str] = {}
    pending: list[tuple[str, tuple[str, ...]]] = [BUNDLED_ROOT]
    while pending:
        name, extras = pending.pop()
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError as missing:
            raise RuntimeError(
                f"bundling the Lambda dependencies: {name} is not installed here (pip install -e '.[dev]')"
            ) from missing
        key = _canonical(name)
        if key in pinned:
            continue
        pinned[key] = version
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            wanted = any(
                requirement.marker is None or requirement.marker.evaluate({**environment, "extra": extra})
                for extra in ("", *extras)
            )
            if wanted and _canonical(requirement.name) not in RUNTIME_PROVIDED:
                pending.append((requirement.name, tuple(sorted(requirement.extras))))
    return [f"{name}=={version}" for name, version in sorted(pinned.items())]


def bundle_dependencies(requirements: list[str], build_dir: Path, python: tuple[int, int]) -> Path:
    """A directory holding `requirements` installed (wheels only, no dependencies resolved beyond
    the list) for Python `python` on Lambda's platform; keyed by the list, so a second synth
    reuses it. pip fetches from its configured indexes (PyPI, or a local wheel mirror)."""
    digest = hashlib.sha256("\0".join([*requirements, *LAMBDA_PLATFORMS, f"{python}"]).encode())
    root = build_dir / "lambda-deps"
    target = root / digest.hexdigest()[:16]
    if target.is_dir():
        os.utime(target)
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        platforms = [arg for platform in LAMBDA_PLATFORMS for arg in ("--platform", platform)]
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--no-compile", "--only-binary=:all:", *platforms, "--implementation", "cp",
            "--python-version", f"{python[0]}.{python[1]}", "--target", str(staging), *requirements,
        ]  # fmt: skip
        installed = subprocess.run(command, capture_output=True, text=True)
        if installed.returncode != 0:
            raise RuntimeError(
                "installing the Lambda dependencies for the bundle failed (pip needs PyPI or a "
                f"wheel mirror):\n{' '.join(command)}\n{installed.stdout}{installed.stderr}"
            )
        shutil.rmtree(staging / "bin", ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # a concurrent synth made the same one
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    _prune(root, keep=target)
    return target


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


def stage_lambda_code(
    packages: Mapping[str, Path],
    build_dir: Path,
    compile_with: str | None = None,
    dependencies: Path | None = None,
) -> Path:
    """Copy each package (name in the bundle -> source directory) into a directory keyed by the
    hash of what it contains, and return that directory. With `compile_with` (an interpreter of
    the runtime's version), the copy also holds the bytecode of every module, compiled by it.
    `dependencies` (from `bundle_dependencies`, named by the hash of its list) is merged into the
    copy's root.

    Keying by content makes the staging idempotent and safe for concurrent synths (tests and
    `make synth` may run at once): an existing directory is reused, a new one appears atomically.
    """
    digest = hashlib.sha256()
    if compile_with is not None:
        digest.update(f"bytecode:{_cache_tag(compile_with)}\0".encode())
    if dependencies is not None:
        digest.update(f"dependencies:{dependencies.name}\0".encode())
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
        if dependencies is not None:
            shutil.copytree(dependencies, staging, dirs_exist_ok=True)
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
