"""What `spotline local up --state-dir DIR` keeps across restarts.

moto keeps everything in its process's memory and has no persistence of its own, so the local
runtime snapshots what a user would miss into DIR/state/ and loads it into the fresh emulator on
the next start:

- every item of every table (jobs, timeline, ledger, usage, instances, idempotency), as the
  DynamoDB JSON that Scan returns and BatchWriteItem takes;
- every object of the checkpoint bucket (the agents' checkpoints), one file per key;
- the teams' API keys, the jobs' per-team credentials, and the two ports (API and AWS endpoint),
  so clients, scripts and local.json keep working.

A snapshot is written on a clean stop and every `snapshot_s` while running; each file is written
to a temporary name and renamed, so a crash leaves the previous snapshot whole. Tables and objects
are read one request at a time (moto serves one at a time), not as one transaction: a snapshot
taken while jobs move may be a second apart between tables, which the reconciler's ledger check
repairs (`spotline.control.reconciler`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("spotline.local.state")

FORMAT = 1
STATE_FILE = "state.json"
CHECKPOINTS = "checkpoints"


@dataclass
class SavedState:
    """What a previous run left in DIR/state/ (empty on a first start)."""

    ports: dict[str, int] = field(default_factory=dict)  # "api" | "aws" -> port
    # team -> {"access_key", "job_access_key_id", "job_secret_access_key"}
    teams: dict[str, dict[str, str]] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # logical id -> items

    @property
    def empty(self) -> bool:
        return not (self.ports or self.teams or self.tables)


class StateStore:
    """DIR/state/: state.json (ports, teams, table items) and checkpoints/ (the bucket's objects)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "state"

    def load(self) -> SavedState:
        """The saved state; empty if none. A file that cannot be read is an error naming it,
        never silently a fresh start (that would lose the user's jobs)."""
        path = self.root / STATE_FILE
        if not path.exists():
            return SavedState()
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise StateError(
                f"{path}: cannot read the saved local state ({error}); move it away to start fresh"
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise StateError(
                f"{path}: not a saved local state of format {FORMAT}; move it away to start fresh"
            )
        return SavedState(
            ports={k: int(v) for k, v in (data.get("ports") or {}).items()},
            teams=dict(data.get("teams") or {}),
            tables={k: list(v) for k, v in (data.get("tables") or {}).items()},
        )

    def save(self, state: SavedState) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        body = {"format": FORMAT, "ports": state.ports, "teams": state.teams, "tables": state.tables}
        _write_atomically(self.root / STATE_FILE, json.dumps(body, separators=(",", ":")).encode())

    # --- the emulated AWS ---------------------------------------------------------------

    def snapshot(
        self, dynamodb: Any, s3: Any, tables: dict[str, str], bucket: str, state: SavedState
    ) -> None:
        """Read every table and the checkpoint bucket from the emulator; write them with
        `state`'s ports and teams."""
        state.tables = {logical: _scan(dynamodb, name) for logical, name in tables.items()}
        self._save_objects(s3, bucket)
        self.save(state)

    def restore(self, dynamodb: Any, s3: Any, tables: dict[str, str], bucket: str, state: SavedState) -> int:
        """Write the saved items and checkpoints into the fresh emulator; returns the items
        written. A table saved by a version that no longer has it is reported and skipped."""
        written = 0
        for logical, items in state.tables.items():
            name = tables.get(logical)
            if name is None:
                log.warning("saved table %s is not one this version has: skipped", logical)
                continue
            for start in range(0, len(items), 25):  # BatchWriteItem takes 25 at a time
                requests = [
                    {"PutRequest": {"Item": {k: _from_json(v) for k, v in item.items()}}}
                    for item in items[start : start + 25]
                ]
                pending: dict[str, Any] = {name: requests}
                while pending:
                    pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
            written += len(items)
        folder = self.root / CHECKPOINTS
        if folder.is_dir():
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                s3.put_object(Bucket=bucket, Key=path.relative_to(folder).as_posix(), Body=path.read_bytes())
        return written

    def _save_objects(self, s3: Any, bucket: str) -> None:
        """Mirror the bucket into checkpoints/: new and changed objects written, deleted ones
        removed (the agent prunes old checkpoints)."""
        folder = self.root / CHECKPOINTS
        keys: set[str] = set()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents") or []:
                key = item["Key"]
                path = folder / key
                if not _inside(folder, path):
                    log.warning("checkpoint key %r leaves the state folder: not saved", key)
                    continue
                keys.add(key)
                if path.exists() and path.stat().st_size == item["Size"] and _etag(path) == item["ETag"]:
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_atomically(path, s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        if folder.is_dir():
            for path in [p for p in folder.rglob("*") if p.is_file()]:
                if path.relative_to(folder).as_posix() not in keys:
                    path.unlink()


class StateError(RuntimeError):
    """The saved local state cannot be used (the message names the file and what to do)."""


def _scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend({k: _to_json(v) for k, v in item.items()} for item in page.get("Items") or [])
    return items


def _to_json(value: dict[str, Any]) -> dict[str, Any]:
    """One DynamoDB attribute value as JSON: binary (B, BS) base64-encoded, as DynamoDB's own
    wire format has it."""
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(inner).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in inner]}
    if kind == "M":
        return {"M": {k: _to_json(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_to_json(v) for v in inner]}
    return value


def _from_json(value: dict[str, Any]) -> dict[str, Any]:
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64decode(inner)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b) for b in inner]}
    if kind == "M":
        return {"M": {k: _from_json(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_from_json(v) for v in inner]}
    return value


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _inside(folder: Path, path: Path) -> bool:
    return os.path.normpath(path).startswith(os.path.normpath(folder) + os.sep)


def _etag(path: Path) -> str:
    return '"' + hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest() + '"'


def remove(state_dir: Path) -> None:
    """Forget the saved state (tests, and a user who wants a fresh start)."""
    shutil.rmtree(state_dir / "state", ignore_errors=True)
