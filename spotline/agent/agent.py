"""The in-container side of Spotline: resume, checkpoint when it matters, report progress.

A training loop uses it like this (see spotline/examples/train.py for a complete one):

    with Agent.from_env() as agent:
        restored = agent.restore()                  # newest durable checkpoint, or None
        state = restored.state if restored else fresh_state()
        for step in range(first_step, total_steps):
            train_one_step(state)
            if not agent.step(step + 1, (step + 1) / total_steps, lambda: state):
                sys.exit(EXIT_STOPPED)              # SIGTERM: checkpoint written, stop now
        agent.finish(total_steps, state)

`step()` is the safe point: between two steps the state is consistent, so that is where every
checkpoint happens, whatever asked for it:

* periodically, every SPOTLINE_CHECKPOINT_INTERVAL_S seconds;
* on request: a background thread reads the job's item every SPOTLINE_AGENT_POLL_S seconds, and
  a `checkpoint_requested_at` newer than the state of the last checkpoint asks for one;
* on a Spot interruption notice (instance metadata, polled every 5 s on AWS): once per notice;
* on SIGTERM: checkpoint, then `step()` returns False and the loop should exit.

A container whose Batch job is not the run the control plane recorded for the job (a launch
submitted twice, a run already replaced) is a stray: once the job's item names another run,
`step()` returns False without a checkpoint, and no checkpoint is written, so the stray can never
put manifests beside those of the real run.

A framework that writes its own checkpoint files (Lightning, Hugging Face, torch.distributed.checkpoint)
reports them with `save_files(step, path)`: the agent uploads them (in the background unless told
to wait; a second checkpoint waits for the one in flight) and writes the manifest last;
`restore_files(dest)` brings the newest back into a local directory. `spotline.integrations`
has the callbacks that do both for each framework.

After each durable checkpoint the agent emits `Checkpoint Completed` (with the checkpoint's size
and how long its write and the last restore took); the background thread emits
`Job Heartbeat` with the last step / progress / utilization the loop reported.

In a gang job (a Batch multi-node parallel job) every node runs the loop and restores the same
checkpoint, but only the main node writes checkpoints and sends events; the other nodes answer
the same triggers by writing nothing, so every node stops at the same step on SIGTERM or a stray.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol, cast

import boto3

from spotline.agent.events import (
    DETAIL_CHECKPOINT_COMPLETED,
    DETAIL_JOB_HEARTBEAT,
    EventBridgePublisher,
    EventPublisher,
    LogPublisher,
    checkpoint_completed_detail,
    heartbeat_detail,
)
from spotline.agent.settings import AgentSettings
from spotline.agent.signals import InstanceMetadata, JobRecordPoller, JobSignals, SpotInstanceAction
from spotline.agent.state import decode_state, encode_state
from spotline.agent.store import CheckpointFile, CheckpointRecord, CheckpointStore, open_store
from spotline.aws.clients import AwsClients

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

# The exit status of a run stopped by SIGTERM after its checkpoint: what a process killed by
# SIGTERM would report (128 + 15), so nobody mistakes a stopped run for a finished one (0).
EXIT_STOPPED = 128 + signal.SIGTERM

# While pausing (a simulated step, a data wait), how often to look for an urgent checkpoint.
_PAUSE_SLICE_S = 0.05
# Under the command wrapper: how stale the step / progress in its heartbeats may be, at most.
_STATUS_FILE_S = 1.0


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


class JobSignalSource(Protocol):
    """Where the agent reads its job's signals (`JobRecordPoller` on DynamoDB)."""

    def read(self) -> JobSignals: ...


class Agent:
    """See the module docstring. Every collaborator is injectable; `from_env` wires the real ones."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        store: CheckpointStore | None = None,
        publisher: EventPublisher | None = None,
        job_poller: JobSignalSource | None = None,
        imds: InstanceMetadata | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.job_id = settings.job_id
        self.store = store
        self.publisher: EventPublisher = publisher or LogPublisher()
        self.job_poller = job_poller
        self.imds = imds
        # Epoch seconds: `checkpoint_requested_at` is written with the control plane's clock,
        # and NTP keeps instances within milliseconds of it.
        self._clock = clock
        self._sleep = sleep
        self.instance_id = settings.instance_id or self._instance_id_from_imds()

        self._lock = threading.Lock()
        now = clock()
        self.started_at = now
        # Requests at or before this time are answered: by a checkpoint whose state was captured
        # later, or (at start) because they were meant for an earlier run of this job.
        self._answered_until = now
        self._pending_request: float | None = None
        self._spot_pending = False
        self._spot_notices_seen: set[SpotInstanceAction] = set()
        # Set from the signal handler: a plain attribute store, no lock (the handler runs on the
        # main thread, possibly while it holds self._lock).
        self._sigterm = False
        self._sigterm_answered = False
        # The job's item names another Batch job as its run: this container is a stray.
        self.stray_of: str | None = None
        self._last_checkpoint_at = now
        self.last_checkpoint: CheckpointRecord | None = None
        self._step = 0
        self._progress: float | None = None
        self._utilization: float | None = None
        self._next_job_poll = now + settings.poll_s
        self._next_spot_poll = now
        self._next_heartbeat = now
        self._poll_failures = 0

        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._previous_sigterm: Any = None
        # Files checkpoints upload on one background thread, one at a time.
        self._uploads: ThreadPoolExecutor | None = None
        self._inflight: Future[CheckpointRecord | None] | None = None
        # How long the last restore took (seconds), reported with each checkpoint.
        self.last_restore_s: float | None = None

    # -- construction from the container's environment ----------------------------------------

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        aws: AwsClients | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        **overrides: Any,
    ) -> Agent:
        """An agent configured by the SPOTLINE_* variables (see AgentSettings); keyword overrides
        replace single settings, e.g. `Agent.from_env(checkpoint_uri="file:///tmp/ckpt")`.
        AWS clients come from `aws` (default: built from the environment, AWS_ENDPOINT_URL included)."""
        settings = dataclasses.replace(AgentSettings.from_env(env), **overrides)
        imds = InstanceMetadata(settings.imds_endpoint) if settings.imds_endpoint else None
        uses_aws = bool(
            (settings.checkpoint_uri or "").startswith("s3://") or settings.event_bus or settings.jobs_table
        )
        if aws is None and uses_aws:
            aws = AwsClients(region=resolve_region(imds))
        store = None
        if settings.checkpoint_uri:
            on_s3 = aws is not None and settings.checkpoint_uri.startswith("s3://")
            s3 = cast("S3Client", aws.client("s3")) if aws and on_s3 else None
            store = open_store(settings.checkpoint_uri, s3_client=s3, kms_key=settings.checkpoint_kms_key)
        publisher: EventPublisher = LogPublisher()
        if settings.event_bus and aws:
            publisher = EventBridgePublisher(aws.events, settings.event_bus, team=settings.team)
        job_poller = None
        if settings.jobs_table and aws:
            job_poller = JobRecordPoller(aws.dynamodb, settings.jobs_table, settings.job_id, settings.team)
        return cls(
            settings,
            store=store,
            publisher=publisher,
            job_poller=job_poller,
            imds=imds,
            clock=clock,
            sleep=sleep,
        )

    def _instance_id_from_imds(self) -> str | None:
        if self.imds is None:
            return None
        try:
            return self.imds.instance_id()
        except Exception as exc:  # heartbeats without an instance id still help
            log.warning("instance id not available from instance metadata: %s", exc)
            return None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Agent:
        """Install the SIGTERM handler (main thread only) and start the background pollers."""
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        else:
            log.warning("agent started off the main thread: SIGTERM will not trigger a checkpoint")
        if not self.settings.is_node_leader:
            # torchrun's other local ranks: the node's leader polls for all of them, and the
            # integrations share what it sees with every rank (spotline.integrations.torch).
            log.debug("local rank %s: no polling (the node's local rank 0 polls)", self.settings.local_rank)
        elif not self._threads:
            self._threads.append(
                threading.Thread(
                    target=self._run_poller, args=(True, False), name="spotline-agent-control", daemon=True
                )
            )
            if self.imds is not None:
                self._threads.append(
                    threading.Thread(
                        target=self._run_poller, args=(False, True), name="spotline-agent-spot", daemon=True
                    )
                )
            for thread in self._threads:
                thread.start()
        return self

    def close(self) -> None:
        """Wait for an upload in flight, stop the pollers and give SIGTERM back to whoever had it."""
        self.wait_for_upload()
        if self._uploads is not None:
            self._uploads.shutdown(wait=True)
            self._uploads = None
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)  # daemon threads: a call stuck in a timeout does not block exit
        self._threads = []
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def __enter__(self) -> Agent:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the state is consistent at the next step boundary, not here.
        self._sigterm = True

    def now(self) -> float:
        """The agent's clock (epoch seconds): what `captured_at` is measured in."""
        return self._clock()

    def request_stop(self) -> None:
        """What SIGTERM does: checkpoint at the next step, then stop."""
        self._sigterm = True

    @property
    def stop_requested(self) -> bool:
        return self._sigterm or self.stray_of is not None

    # -- resume ---------------------------------------------------------------------------------

    def restore(self) -> Restored | None:
        """The newest durable checkpoint (manifest written, data intact), or None to start fresh."""
        if self.store is None:
            return None
        started = time.monotonic()
        found = self.store.latest()
        if found is None:
            log.info("no durable checkpoint under %s: starting fresh", self.store.uri)
            return None
        record, data = found
        state = decode_state(data, record.encoding)
        self.last_restore_s = time.monotonic() - started
        with self._lock:
            self.last_checkpoint = record
            self._step, self._progress = record.step, record.progress
        log.info("restored step %d from %s", record.step, record.uri)
        return Restored(step=record.step, state=state, record=record)

    def restore_files(self, dest: str | os.PathLike[str]) -> RestoredFiles | None:
        """The newest durable checkpoint of files, downloaded into the directory `dest` (replaced)
        and checked against its manifest; None to start fresh. Every rank of a job may call it
        (each gets the whole checkpoint)."""
        if self.store is None:
            return None
        started = time.monotonic()
        found = self.store.latest_files(dest)
        if found is None:
            log.info("no durable checkpoint of files under %s: starting fresh", self.store.uri)
            return None
        record, path = found
        self.last_restore_s = time.monotonic() - started
        with self._lock:
            self.last_checkpoint = record
            self._step, self._progress = record.step, record.progress
        log.info("restored step %d into %s in %.2f s", record.step, path, self.last_restore_s)
        return RestoredFiles(step=record.step, path=path, record=record)

    # -- the safe point -------------------------------------------------------------------------

    def report(self, step: int, progress: float | None = None, utilization: float | None = None) -> None:
        """Record where training is, for heartbeats."""
        with self._lock:
            self._step = step
            if progress is not None:
                self._progress = progress
            if utilization is not None:
                self._utilization = utilization

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

    def step(
        self,
        step: int,
        progress: float | None,
        state_fn: Callable[[], object],
        *,
        utilization: float | None = None,
    ) -> bool:
        """Call after each training step. Checkpoints if one is due (`state_fn` is only called
        then) and returns False when the run should stop (SIGTERM; its checkpoint is written)."""
        # The state is that of the step that just ended: a request made after this instant (while
        # state_fn runs or the checkpoint is written) is not answered by it.
        captured_at = self._clock()
        self.report(step, progress, utilization)
        if self.stray_of is not None:
            log.warning("stopping at step %d: this run is not the job's (it runs %s)", step, self.stray_of)
            return False
        reason = self.checkpoint_reason()
        if reason is not None:
            self._checkpoint_step(step, progress, state_fn, reason, captured_at)
            if reason is not CheckpointReason.SIGTERM and self._sigterm and not self._sigterm_answered:
                # SIGTERM came while that checkpoint was being written (after its state was
                # taken): it gets its own, of the same step, before the run stops.
                self._checkpoint_step(step, progress, state_fn, CheckpointReason.SIGTERM, self._clock())
        if self._sigterm:
            log.info("stopping at step %d after SIGTERM", step)
            return False
        return True

    def _checkpoint_step(
        self,
        step: int,
        progress: float | None,
        state_fn: Callable[[], object],
        reason: CheckpointReason,
        captured_at: float,
    ) -> None:
        try:
            self.checkpoint(step, state_fn(), progress=progress, reason=reason, captured_at=captured_at)
        except Exception:
            log.exception("checkpoint at step %d (%s) failed", step, reason)
            if reason is CheckpointReason.PERIODIC:
                # Try again an interval later instead of at every step; urgent ones retry now.
                with self._lock:
                    self._last_checkpoint_at = self._clock()

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

    def finish(
        self, step: int, state: object, *, progress: float = 1.0, meta: dict[str, Any] | None = None
    ) -> CheckpointRecord | None:
        """The run is complete: write the final state as a checkpoint and send a last heartbeat."""
        self.report(step, progress)
        record = self.checkpoint(
            step, state, progress=progress, reason=CheckpointReason.FINAL, final=True, meta=meta
        )
        self._heartbeat()
        return record

    def pause(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking early when a checkpoint is due for a reason that cannot
        wait (SIGTERM, Spot notice, request). True if it slept the whole time."""
        deadline = self._clock() + seconds
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return True
            reason = self.checkpoint_reason()
            if reason is not None and reason is not CheckpointReason.PERIODIC:
                return False
            self._sleep(min(remaining, _PAUSE_SLICE_S))

    # -- background polling -----------------------------------------------------------------

    def poll_once(self, *, control: bool = True, spot: bool = True) -> float:
        """Do whatever polling and heartbeats are due; return seconds until the next is due.
        `control`: the job record and heartbeats; `spot`: instance metadata. The background
        threads call this in a loop (one for each, so a slow control plane cannot delay a Spot
        notice); tests call it directly."""
        now = self._clock()
        due = [now + 60.0]
        if control and self.job_poller is not None:
            if now >= self._next_job_poll:
                self._next_job_poll = now + self.settings.poll_s
                self._poll_job_record()
            due.append(self._next_job_poll)
        if spot and self.imds is not None:
            if now >= self._next_spot_poll:
                self._next_spot_poll = now + self.settings.spot_poll_s
                self._poll_spot_notice()
            due.append(self._next_spot_poll)
        heartbeat_s = self._heartbeat_interval()
        if control and heartbeat_s > 0:
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + heartbeat_s
                self._heartbeat()
            due.append(self._next_heartbeat)
        return max(0.0, min(due) - self._clock())

    def _heartbeat_interval(self) -> float:
        if self.settings.status_file:
            # The wrapper owns the heartbeat schedule; keep its figures fresh whatever ours says.
            own = self.settings.heartbeat_s
            return min(own, _STATUS_FILE_S) if own > 0 else _STATUS_FILE_S
        return self.settings.heartbeat_s

    def _run_poller(self, control: bool, spot: bool) -> None:
        while not self._stop.is_set():
            try:
                delay = self.poll_once(control=control, spot=spot)
            except Exception:  # the poller must outlive any single failure
                log.exception("agent poll failed")
                delay = 1.0
            if self._stop.wait(max(0.05, delay)):
                return

    def _poll_job_record(self) -> None:
        assert self.job_poller is not None
        try:
            signals = self.job_poller.read()
        except Exception as exc:  # keep training through a control-plane outage
            self._poll_failures += 1
            if self._poll_failures in (1, 10) or self._poll_failures % 100 == 0:
                log.warning("reading job %s failed (%d times): %s", self.job_id, self._poll_failures, exc)
            return
        self._poll_failures = 0
        own_run = self.settings.batch_job_id
        if own_run and signals.batch_job_id and signals.batch_job_id != own_run and self.stray_of is None:
            log.warning(
                "job %s runs as Batch job %s, not this one (%s): stopping",
                self.job_id,
                signals.batch_job_id,
                own_run,
            )
            self.stray_of = signals.batch_job_id
        requested_at = signals.checkpoint_requested_at
        if requested_at is None:
            return
        with self._lock:
            if requested_at > self._answered_until and requested_at != self._pending_request:
                log.info("checkpoint requested at %.3f", requested_at)
                self._pending_request = requested_at

    def _poll_spot_notice(self) -> None:
        assert self.imds is not None
        try:
            action = self.imds.spot_instance_action()
        except Exception as exc:
            log.warning("instance metadata unavailable: %s", exc)
            return
        if action is None:
            return
        with self._lock:
            # The notice stays in metadata until the instance goes: checkpoint once per notice.
            if action not in self._spot_notices_seen:
                self._spot_notices_seen.add(action)
                self._spot_pending = True
                log.warning("Spot instance-action %s at %s: checkpointing now", action.action, action.time)

    def _heartbeat(self) -> None:
        with self._lock:
            last = self.last_checkpoint
            detail = heartbeat_detail(
                job_id=self.job_id,
                run_id=self.settings.run_id,
                instance_id=self.instance_id,
                step=self._step,
                progress=self._progress,
                utilization=self._utilization,
                last_checkpoint_step=last.step if last else None,
            )
        if self.settings.status_file:
            # Under the command wrapper: it sends the heartbeats, with our figures.
            _write_json_atomically(Path(self.settings.status_file), detail)
        elif self.settings.is_node_leader:
            # Every node of a gang sends them (one process per node): a node that went quiet
            # is a node lost, whichever it is.
            if self.settings.node_index is not None:
                detail["node_index"] = self.settings.node_index
            self.publisher.publish(DETAIL_JOB_HEARTBEAT, detail)


def resolve_region(imds: InstanceMetadata | None) -> str | None:
    """boto3's own region (AWS_REGION, AWS_DEFAULT_REGION, ~/.aws/config), else the instance's:
    a Batch container on EC2 does not always have a region in its environment."""
    region = boto3.session.Session().region_name
    if region or imds is None:
        return region
    try:
        return imds.region()
    except Exception as exc:
        log.warning("region not available from instance metadata: %s", exc)
        return None


def _write_json_atomically(path: Path, body: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)
