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

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, cast

import boto3

from spotline.agent.checkpointing import (
    CheckpointOrchestration,
    CheckpointReason,
    Restored,
    RestoredFiles,
)
from spotline.agent.control import ControlPlanePoller, JobSignalSource
from spotline.agent.events import EventBridgePublisher, EventPublisher, LogPublisher
from spotline.agent.settings import AgentSettings, sigterm_marker
from spotline.agent.signals import InstanceMetadata, JobRecordPoller, SpotInstanceAction
from spotline.agent.state import decode_state
from spotline.agent.store import CheckpointRecord, CheckpointStore, open_store
from spotline.aws.clients import AwsClients

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["EXIT_STOPPED", "Agent", "CheckpointReason", "Restored", "RestoredFiles", "resolve_region"]

log = logging.getLogger(__name__)

# The exit status of a run stopped by SIGTERM after its checkpoint: what a process killed by
# SIGTERM would report (128 + 15), so nobody mistakes a stopped run for a finished one (0).
EXIT_STOPPED = 128 + signal.SIGTERM

# While pausing (a simulated step, a data wait), how often to look for an urgent checkpoint.
_PAUSE_SLICE_S = 0.05


class Agent(CheckpointOrchestration, ControlPlanePoller):
    """See the module docstring. Every collaborator is injectable; `from_env` wires the real ones.
    The checkpoint orchestration lives in `spotline.agent.checkpointing`, the pollers and
    heartbeats in `spotline.agent.control`; this class owns the state they share."""

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
        # The checkpoint this run resumed from (None: a fresh start), reported in heartbeats.
        self.restored: CheckpointRecord | None = None
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
        self._log_handler: logging.Handler | None = None
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
        """Install the SIGTERM handler (main thread only) and start the background pollers. The
        agent's log lines go to stderr (the run's log) unless the script configured logging."""
        self._log_handler = _attach_log_handler()
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
        if self._log_handler is not None:
            logging.getLogger(_LOGGER).removeHandler(self._log_handler)
            self._log_handler = None

    def __enter__(self) -> Agent:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the state is consistent at the next step boundary, not here. Under the
        # wrapper, a marker too (no lock taken: the main thread may hold it): the wrapper then
        # reports a stopped run even if the script exits 0 (Lightning's SIGTERMException does).
        self._sigterm = True
        if self.settings.status_file:
            with contextlib.suppress(OSError):
                Path(sigterm_marker(self.settings.status_file)).touch()

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
        self._restored_from(record)
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
        self._restored_from(record)
        log.info("restored step %d into %s in %.2f s", record.step, path, self.last_restore_s)
        return RestoredFiles(step=record.step, path=path, record=record)

    def _restored_from(self, record: CheckpointRecord) -> None:
        """This run resumes from `record`: a heartbeat says so now (not at the next beat), so
        the job's status and timeline name the checkpoint actually restored."""
        with self._lock:
            self.last_checkpoint = record
            self.restored = record
            self._step, self._progress = record.step, record.progress
        if self.settings.is_node_leader and (self.settings.heartbeat_s > 0 or self.settings.status_file):
            try:
                self._heartbeat()
            except Exception:  # a lost heartbeat must never stop the restore
                log.warning("heartbeat after the restore not sent", exc_info=True)

    # -- the safe point -------------------------------------------------------------------------

    def report(self, step: int, progress: float | None = None, utilization: float | None = None) -> None:
        """Record where training is, for heartbeats."""
        with self._lock:
            self._step = step
            if progress is not None:
                self._progress = progress
            if utilization is not None:
                self._utilization = utilization

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


_LOGGER = "spotline"
_LOG_FORMAT = "spotline-agent: %(levelname)s %(name)s: %(message)s"


def _attach_log_handler() -> logging.Handler | None:
    """Send the agent's INFO lines (checkpoints, restores, stops) to stderr, which is the run's
    log (`spotline logs`), when the script did not configure logging itself. The handler steps
    aside once the root logger has a handler of its own (e.g. `logging.basicConfig` called
    later), so no line is printed twice. None when one is already in place."""
    logger = logging.getLogger(_LOGGER)
    if logger.handlers or logging.getLogger().handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    handler.addFilter(lambda record: not logging.getLogger().handlers)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return handler


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
