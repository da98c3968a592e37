"""Output files of the CLI's long commands (`--json`, `--decisions`, `--plot`): checked before any
work, so a bad path fails at once, and written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written; the message names the flag, the path and why."""


def check_file(path: Path, flag: str) -> None:
    """Refuse, before any work, a file path that cannot be written: a directory, or a parent that
    is missing, not a directory or not writable."""
    if path.is_dir():
        raise OutputError(f"{flag}: {path} is a directory (give a file path)")
    _check_parent(path, flag)


def check_dir(path: Path, flag: str) -> None:
    """Refuse, before any work, a directory path that cannot be made (with its parents) or
    written into."""
    existing = next(p for p in (path, *path.parents) if p.exists())  # "/" or "." at the latest
    if not existing.is_dir():
        raise OutputError(f"{flag}: cannot make the directory {path} ({existing} is not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{flag}: cannot write into {path} (permission denied in {existing})")


def _check_parent(path: Path, flag: str) -> None:
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"{flag}: cannot write {path} (the directory {parent} {why})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{flag}: cannot write {path} (permission denied in {parent})")


def write_text(path: Path, text: str, flag: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file beside it, then a rename."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise OutputError(f"{flag}: cannot write {path} ({error.strerror or error})") from None
