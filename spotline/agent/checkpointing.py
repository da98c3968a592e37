"""The agent's checkpoint orchestration: why a checkpoint is due, writing one (in-line for a
state, on the upload thread for files and shards), what each answers, `Checkpoint Completed`
and pruning. A mixin of `spotline.agent.agent.Agent`, which owns the state it reads and writes."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from spotline.agent.events import DETAIL_CHECKPOINT_COMPLETED, EventPublisher, checkpoint_completed_detail
from spotline.agent.settings import AgentSettings
from spotline.agent.state import encode_state
from spotline.agent.store import CheckpointFile, CheckpointRecord, CheckpointStore

log = logging.getLogger(__name__)


class CheckpointReason(StrEnum):
    """Why a checkpoint was taken; most urgent first."""

    SIGTERM = "sigterm"
    SPOT_INTERRUPTION = "spot-interruption"
    REQUESTED = "requested"
    PERIODIC = "periodic"
    FINAL = "final"
    MANUAL = "manual"


@dataclass(frozen=True)
class Restored:
    """The checkpoint a run resumes from."""

    step: int
    state: Any  # bytes, or the tree that was checkpointed (tuples come back as lists)
    record: CheckpointRecord


@dataclass(frozen=True)
class RestoredFiles:
    """A checkpoint of files, downloaded and checked: resume from `path`."""

    step: int
    path: Path
    record: CheckpointRecord


@dataclass(frozen=True)
class _Capture:
    """What a checkpoint answers, taken when its state was: see `_capture` and `_settle`."""

    step: int
    reason: CheckpointReason | str
    captured_at: float
    request: float | None
    sigterm_seen: bool
    spot_seen: bool


class CheckpointOrchestration:
    """Checkpoints at the safe point and their bookkeeping (see spotline.agent.agent)."""

    # Owned and initialised by Agent.__init__.
    settings: AgentSettings
    job_id: str
    store: CheckpointStore | None
    publisher: EventPublisher
    instance_id: str | None
    last_checkpoint: CheckpointRecord | None
    last_restore_s: float | None
    stray_of: str | None
    _clock: Callable[[], float]
    _lock: threading.Lock
    _answered_until: float
    _pending_request: float | None
    _spot_pending: bool
    _sigterm: bool
    _sigterm_answered: bool
    _last_checkpoint_at: float
    _uploads: ThreadPoolExecutor | None
    _inflight: Future[CheckpointRecord | None] | None

    def checkpoint_reason(self) -> CheckpointReason | None:
        """Why a checkpoint is due now, or None."""
        if self._sigterm and not self._sigterm_answered:
            return CheckpointReason.SIGTERM
        with self._lock:
            if self._spot_pending:
                return CheckpointReason.SPOT_INTERRUPTION
            if self._pending_request is not None:
                return CheckpointReason.REQUESTED
            interval = self.settings.checkpoint_interval_s
            if interval > 0 and self._clock() - self._last_checkpoint_at >= interval:
                return CheckpointReason.PERIODIC
        return None

    def should_checkpoint(self) -> bool:
        return self.checkpoint_reason() is not None

    def checkpoint(
        self,
        step: int,
        state: object,
        *,
        progress: float | None = None,
        reason: CheckpointReason | str | None = None,
        final: bool = False,
        meta: dict[str, Any] | None = None,
        captured_at: float | None = None,
    ) -> CheckpointRecord | None:
        """Write a checkpoint of `state` (bytes or a tree of dicts / lists / arrays / scalars) at
        `step`, then emit `Checkpoint Completed`. None if no store is configured.

        `captured_at` is when `state` was taken (default: now); only requests made before it count
        as answered, so pass it when building the state takes a while."""
        capture = self._capture(step, reason, captured_at)
        if self.stray_of is not None:
            self._writes(step, capture.reason)  # logs why
            return None
        if not self._writes(step, capture.reason):
            self._settle(capture, None)
            return None
        assert self.store is not None
        started = time.monotonic()
        data, encoding = encode_state(state)
        record = self.store.save(
            step,
            data,
            encoding=encoding,
            job_id=self.job_id,
            created_at=capture.captured_at,
            progress=progress,
            reason=str(capture.reason),
            final=final,
            meta={**(meta or {}), "instance_id": self.instance_id},
        )
        write_s = time.monotonic() - started
        log.info("checkpoint at step %d (%s): %s in %.2f s", step, capture.reason, record.uri, write_s)
        self._settle(capture, record)
        self._completed(capture, record, write_s)
        return record

    def save_files(
        self,
        step: int,
        path: str | os.PathLike[str],
        *,
        progress: float | None = None,
        reason: CheckpointReason | str | None = None,
        final: bool = False,
        meta: dict[str, Any] | None = None,
        captured_at: float | None = None,
        wait: bool = False,
        remove_after: bool = False,
        started: float | None = None,
    ) -> Future[CheckpointRecord | None]:
        """Report a checkpoint the framework wrote at `path` (a file, or a directory: every file
        under it) for `step`: upload it, manifest last, then emit `Checkpoint Completed`.

        The upload runs on the agent's upload thread and training goes on; a second call waits
        for the upload in flight first. `wait=True` (what a SIGTERM checkpoint needs before the
        process exits) returns once it is durable. `remove_after` deletes `path` once uploaded.
        The future's result is the record (None where this process does not write: a gang's
        other nodes, a stray, no store); a failed upload raises from it, is logged, and the
        request it answered is asked again at the next step. `started` (time.monotonic()) is
        when the framework began writing the files: the write time reported counts from there."""
        capture = self._capture(step, reason, captured_at)
        self.wait_for_upload()
        done: Future[CheckpointRecord | None]
        if not self._writes(step, capture.reason):
            self._settle(capture, None)
            done = Future()
            done.set_result(None)
            return done
        # Answered now, so the next step does not ask again while the upload runs.
        self._settle(capture, None)
        if self._uploads is None:
            self._uploads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spotline-upload")
        source = Path(path)
        extra = {**(meta or {}), "instance_id": self.instance_id}
        done = self._uploads.submit(
            self._upload_files, capture, source, progress, final, extra, remove_after, started
        )
        self._inflight = done
        if wait:
            done.result()
        return done

    def save_shards(
        self,
        step: int,
        prefix: str,
        upload: Callable[[], list[CheckpointFile]],
        *,
        progress: float | None = None,
        reason: CheckpointReason | str | None = None,
        final: bool = False,
        meta: dict[str, Any] | None = None,
        captured_at: float | None = None,
        wait: bool = False,
        started: float | None = None,
    ) -> Future[CheckpointRecord | None]:
        """A sharded checkpoint, on every rank: `upload` (run on the upload thread) uploads this
        rank's files under `prefix` (from `store.new_files_prefix`, the same on every rank) and
        returns every rank's entries; the writer then commits the manifest naming them all and
        emits `Checkpoint Completed`. `spotline.integrations.torch` drives it."""
        capture = self._capture(step, reason, captured_at)
        self.wait_for_upload()
        self._settle(capture, None)
        if self._uploads is None:
            self._uploads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spotline-upload")
        extra = {**(meta or {}), "instance_id": self.instance_id}
        done = self._uploads.submit(
            self._upload_shards, capture, prefix, upload, progress, final, extra, started
        )
        self._inflight = done
        if wait:
            done.result()
        return done

    def _upload_shards(
        self,
        capture: _Capture,
        prefix: str,
        upload: Callable[[], list[CheckpointFile]],
        progress: float | None,
        final: bool,
        meta: dict[str, Any],
        started: float | None,
    ) -> CheckpointRecord | None:
        assert self.store is not None
        started = time.monotonic() if started is None else started
        try:
            files = upload()
            if not self._writes(capture.step, capture.reason):
                return None
            record = self.store.commit_files(
                capture.step,
                prefix,
                files,
                job_id=self.job_id,
                created_at=capture.captured_at,
                progress=progress,
                reason=str(capture.reason),
                final=final,
                meta=meta,
            )
        except Exception:
            log.exception("sharded checkpoint at step %d (%s) failed", capture.step, capture.reason)
            self._rearm(capture)
            raise
        write_s = time.monotonic() - started
        with self._lock:
            self.last_checkpoint = record
        self._completed(capture, record, write_s)
        return record

    def wait_for_upload(self) -> CheckpointRecord | None:
        """Wait for the files checkpoint in flight, if any; its record (None if it failed)."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return None
        try:
            return inflight.result()
        except Exception:
            return None  # logged by the upload thread

    def _upload_files(
        self,
        capture: _Capture,
        source: Path,
        progress: float | None,
        final: bool,
        meta: dict[str, Any],
        remove_after: bool,
        started: float | None,
    ) -> CheckpointRecord | None:
        assert self.store is not None
        started = time.monotonic() if started is None else started
        try:
            record = self.store.save_files(
                capture.step,
                source,
                job_id=self.job_id,
                created_at=capture.captured_at,
                progress=progress,
                reason=str(capture.reason),
                final=final,
                meta=meta,
            )
        except Exception:
            log.exception("checkpoint at step %d (%s) failed to upload", capture.step, capture.reason)
            self._rearm(capture)
            raise
        write_s = time.monotonic() - started
        log.info(
            "checkpoint at step %d (%s): %d bytes in %.2f s, %s",
            capture.step,
            capture.reason,
            record.size,
            write_s,
            record.uri,
        )
        with self._lock:
            self.last_checkpoint = record
        self._completed(capture, record, write_s)
        if remove_after:
            if source.is_dir():
                shutil.rmtree(source, ignore_errors=True)
            else:
                source.unlink(missing_ok=True)
        return record

    def _capture(
        self, step: int, reason: CheckpointReason | str | None, captured_at: float | None
    ) -> _Capture:
        captured_at = self._clock() if captured_at is None else captured_at
        reason = reason or self.checkpoint_reason() or CheckpointReason.MANUAL
        with self._lock:
            return _Capture(
                step=step,
                reason=reason,
                captured_at=captured_at,
                request=self._pending_request,
                sigterm_seen=self._sigterm,
                spot_seen=self._spot_pending,
            )

    def _writes(self, step: int, reason: CheckpointReason | str) -> bool:
        """Whether this process writes the checkpoint (logged when it does not)."""
        if self.stray_of is not None:
            log.warning(
                "checkpoint at step %d skipped: this run is not the job's (%s is)", step, self.stray_of
            )
            return False
        if not self.settings.is_writer:
            log.debug("checkpoint at step %d (%s) left to the job's writer", step, reason)
            return False
        if self.store is None:
            log.warning("checkpoint at step %d (%s) skipped: no checkpoint store configured", step, reason)
            return False
        return True

    def _settle(self, capture: _Capture, record: CheckpointRecord | None) -> None:
        """The triggers this checkpoint's state answers are answered."""
        with self._lock:
            self._last_checkpoint_at = capture.captured_at
            self._answered_until = max(self._answered_until, capture.captured_at)
            # A request made while we were writing is not answered by this state: keep it.
            if self._pending_request is not None and self._pending_request <= capture.captured_at:
                self._pending_request = None
            self._spot_pending = False
            self._sigterm_answered = self._sigterm_answered or capture.sigterm_seen
            if record is not None:
                self.last_checkpoint = record

    def _rearm(self, capture: _Capture) -> None:
        """A background upload failed: what it answered is asked again at the next step."""
        with self._lock:
            if capture.request is not None and self._pending_request is None:
                self._pending_request = capture.request
                self._answered_until = min(self._answered_until, capture.request - 1e-6)
            self._spot_pending = self._spot_pending or capture.spot_seen
            if capture.sigterm_seen:
                self._sigterm_answered = False

    def _completed(self, capture: _Capture, record: CheckpointRecord, write_s: float) -> None:
        """Emit `Checkpoint Completed`, then prune older checkpoints."""
        answered = (
            capture.request
            if capture.request is not None and capture.request <= capture.captured_at
            else None
        )
        self.publisher.publish(
            DETAIL_CHECKPOINT_COMPLETED,
            checkpoint_completed_detail(
                record,
                instance_id=self.instance_id,
                requested_at=answered,
                run_id=self.settings.run_id,
                write_s=write_s,
                restore_s=self.last_restore_s,
            ),
        )
        if self.store is not None and self.settings.keep_checkpoints > 0:
            # After the event: a preemption waiting for this checkpoint does not wait for it.
            pruned = self.store.prune(self.settings.keep_checkpoints, newest=record)
            if pruned:
                log.info("pruned %d older checkpoint(s) (steps %s)", len(pruned), pruned)
