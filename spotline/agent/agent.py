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

After each durable checkpoint the agent emits `Checkpoint Completed`; the background thread emits
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
import signal
import threading
import time
from collections.abc import Callable, Mapping
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
from spotline.agent.store import CheckpointRecord, CheckpointStore, open_store
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
        if not self._threads:
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
        """Stop the pollers and give SIGTERM back to whoever had it."""
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
        found = self.store.latest()
        if found is None:
            log.info("no durable checkpoint under %s: starting fresh", self.store.uri)
            return None
        record, data = found
        state = decode_state(data, record.encoding)
        with self._lock:
            self.last_checkpoint = record
            self._step, self._progress = record.step, record.progress
        log.info("restored step %d from %s", record.step, record.uri)
        return Restored(step=record.step, state=state, record=record)

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
        captured_at = self._clock() if captured_at is None else captured_at
        reason = reason or self.checkpoint_reason() or CheckpointReason.MANUAL
        sigterm_seen = self._sigterm
        with self._lock:
            request = self._pending_request
        if self.stray_of is not None:
            log.warning(
                "checkpoint at step %d skipped: this run is not the job's (%s is)", step, self.stray_of
            )
            return None
        if not self.settings.is_main_node:
            log.debug("checkpoint at step %d (%s) left to the gang's main node", step, reason)
            record = None
        elif self.store is None:
            log.warning("checkpoint at step %d (%s) skipped: no checkpoint store configured", step, reason)
            record = None
        else:
            data, encoding = encode_state(state)
            record = self.store.save(
                step,
                data,
                encoding=encoding,
                job_id=self.job_id,
                created_at=captured_at,
                progress=progress,
                reason=str(reason),
                final=final,
                meta={**(meta or {}), "instance_id": self.instance_id},
            )
            log.info("checkpoint at step %d (%s): %s", step, reason, record.uri)
        with self._lock:
            self._last_checkpoint_at = captured_at
            self._answered_until = max(self._answered_until, captured_at)
            # A request made while we were writing is not answered by this state: keep it.
            answered = request if request is not None and request <= captured_at else None
            if self._pending_request is not None and self._pending_request <= captured_at:
                self._pending_request = None
            self._spot_pending = False
            self._sigterm_answered = self._sigterm_answered or sigterm_seen
            if record is not None:
                self.last_checkpoint = record
        if record is not None:
            self.publisher.publish(
                DETAIL_CHECKPOINT_COMPLETED,
                checkpoint_completed_detail(
                    record, instance_id=self.instance_id, requested_at=answered, run_id=self.settings.run_id
                ),
            )
            if self.store is not None and self.settings.keep_checkpoints > 0:
                # After the event: a preemption waiting for this checkpoint does not wait for it.
                pruned = self.store.prune(self.settings.keep_checkpoints, newest=record)
                if pruned:
                    log.info("pruned %d older checkpoint(s) (steps %s)", len(pruned), pruned)
        return record

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
        elif self.settings.is_main_node:
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
