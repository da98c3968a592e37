"""The agent's control-plane side: the background pollers (the job's item, the Spot notice in
instance metadata) and the heartbeats. A mixin of `spotline.agent.agent.Agent`, which owns the
state it reads and writes."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from spotline.agent.events import DETAIL_JOB_HEARTBEAT, EventPublisher, heartbeat_detail
from spotline.agent.settings import AgentSettings
from spotline.agent.signals import InstanceMetadata, JobSignals, SpotInstanceAction
from spotline.agent.store import CheckpointRecord

log = logging.getLogger(__name__)

# Under the command wrapper: how stale the step / progress in its heartbeats may be, at most.
_STATUS_FILE_S = 1.0


class JobSignalSource(Protocol):
    """Where the agent reads its job's signals (`JobRecordPoller` on DynamoDB)."""

    def read(self) -> JobSignals: ...


class ControlPlanePoller:
    """Polling and heartbeats (see spotline.agent.agent)."""

    # Owned and initialised by Agent.__init__.
    settings: AgentSettings
    job_id: str
    publisher: EventPublisher
    job_poller: JobSignalSource | None
    imds: InstanceMetadata | None
    instance_id: str | None
    last_checkpoint: CheckpointRecord | None
    restored: CheckpointRecord | None
    stray_of: str | None
    _clock: Callable[[], float]
    _lock: threading.Lock
    _stop: threading.Event
    _answered_until: float
    _pending_request: float | None
    _spot_pending: bool
    _spot_notices_seen: set[SpotInstanceAction]
    _step: int
    _progress: float | None
    _utilization: float | None
    _next_job_poll: float
    _next_spot_poll: float
    _next_heartbeat: float
    _poll_failures: int

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
                restored=self.restored,
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


def _write_json_atomically(path: Path, body: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)
