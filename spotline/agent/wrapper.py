"""`python -m spotline.agent -- cmd args...`: run any training command under the agent.

The wrapper runs the command, forwards SIGTERM to it, passes its exit status through (a death by
signal N becomes 128 + N, as a shell reports it) and sends `Job Heartbeat`s while it runs.

A stopped run is never reported as a success: once SIGTERM reached the container (the wrapper is
its PID 1: Batch stopping the job, the host going down) or the command's own agent, the wrapper
exits with `EXIT_STOPPED` (143) whatever status the command exits with (Lightning's
`SIGTERMException` exits 0, torchrun 1), and the control plane requeues the job from its
checkpoint instead of calling it done (docs/training.md, "When a run ends").

What it cannot do is checkpoint: only the training loop knows its state and its safe points. A
command that does not use the library (`spotline.agent.Agent`) is therefore never checkpointed:
on preemption or Spot reclaim it restarts from scratch (or from whatever checkpoints it keeps
itself), and a checkpoint request goes unanswered until the control plane's grace period ends.
A command that does use the library checkpoints as usual; the wrapper hands it a status file
(SPOTLINE_AGENT_STATUS_FILE) and its heartbeats, sent by the wrapper, carry the command's step,
progress and utilization instead of being sent twice.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from spotline.agent.distributed import distributed_environment
from spotline.agent.events import DETAIL_JOB_HEARTBEAT, EventBridgePublisher, EventPublisher, LogPublisher
from spotline.agent.events import heartbeat_detail as make_heartbeat_detail
from spotline.agent.settings import AGENT_ENV_STATUS_FILE, AgentSettings, sigterm_marker
from spotline.agent.signals import InstanceMetadata

log = logging.getLogger(__name__)

# How often the wrapper wakes to check on the child and on the heartbeat schedule.
_TICK_S = 0.2
# What a run stopped by SIGTERM exits with (128 + SIGTERM), as `spotline.agent.EXIT_STOPPED`.
_EXIT_STOPPED = 128 + signal.SIGTERM

Popen = Callable[..., "subprocess.Popen[bytes]"]


def gpu_utilization() -> float | None:
    """Mean GPU utilization (0..1) from nvidia-smi, or None without one: the only figure a
    wrapper can get for a command that reports nothing itself."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        values = [float(line) for line in out.split() if line.strip()]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return sum(values) / len(values) / 100.0 if values else None


class CommandWrapper:
    """Runs one command; see the module docstring."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        publisher: EventPublisher,
        instance_id: str | None,
        popen: Popen = subprocess.Popen,
        clock: Callable[[], float] = time.monotonic,
        utilization_probe: Callable[[], float | None] = gpu_utilization,
    ) -> None:
        self.settings = settings
        self.publisher = publisher
        self.instance_id = instance_id
        self._popen = popen
        self._clock = clock
        self._probe = utilization_probe
        self.heartbeats_sent = 0
        # SIGTERM reached the wrapper and was passed on: the run was stopped from outside.
        self.stop_relayed = False
        self._status_seen: tuple[float, int] | None = None
        self._restore_sent: Any = None

    def run(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
        """Run `command` to completion; return its exit status (128 + N for death by signal N)."""
        import os

        with tempfile.TemporaryDirectory(prefix="spotline-agent-") as tmp:
            status_file = Path(tmp) / "status.json"
            base = os.environ if env is None else env
            # A gang node's command gets the rendezvous (MASTER_ADDR, NODE_RANK, ...) from Batch's.
            child_env = {**base, **distributed_environment(base), AGENT_ENV_STATUS_FILE: str(status_file)}
            process = self._popen(list(command), env=child_env)
            restore = self._forward_sigterm(process)
            try:
                next_heartbeat = self._clock()
                while True:
                    # Every node of a gang sends them: the control plane learns each node's
                    # instance (a Spot notice for any of them concerns the job) and its liveness.
                    due = self.settings.heartbeat_s > 0 and self._clock() >= next_heartbeat
                    if self.settings.is_node_leader and (due or self._restore_reported(status_file)):
                        next_heartbeat = self._clock() + self.settings.heartbeat_s
                        self._heartbeat(status_file)
                    try:
                        process.wait(timeout=_TICK_S)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            finally:
                restore()
            stopped_by = (
                "the container"
                if self.stop_relayed
                else "the command"
                if Path(sigterm_marker(str(status_file))).exists()
                else None
            )
        code = process.returncode
        status = 128 - code if code < 0 else code
        if stopped_by is not None and status != _EXIT_STOPPED:
            log.warning(
                "the command exited %d after SIGTERM reached %s: reported as stopped (%d), not as its own"
                " status, so the run is requeued from its checkpoint and never counted as done",
                status,
                stopped_by,
                _EXIT_STOPPED,
            )
            return _EXIT_STOPPED
        return status

    def _restore_reported(self, status_file: Path) -> bool:
        """The command just reported the checkpoint it restored (its status file names one not
        sent yet): worth a heartbeat now rather than at the next beat."""
        try:
            stat = status_file.stat()
        except OSError:
            return False
        seen = (stat.st_mtime, stat.st_size)
        if seen == self._status_seen:
            return False
        self._status_seen = seen
        body = _read_status(status_file) or {}
        restored = body.get("restored_checkpoint_uri")
        if restored is None or restored == self._restore_sent:
            return False
        self._restore_sent = restored
        return True

    def _forward_sigterm(self, process: subprocess.Popen[bytes]) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def forward(signum: int, frame: FrameType | None) -> None:
            # `docker stop` (how Batch stops a job) signals only PID 1: pass it on, then keep
            # waiting, so the child's checkpoint and exit status are not cut short by us. Each
            # SIGTERM is passed on: a second TerminateJob sends a second one.
            self.stop_relayed = True
            if process.poll() is None:
                process.send_signal(signum)

        previous_term = signal.signal(signal.SIGTERM, forward)
        # A terminal's Ctrl-C already reaches the child (same process group): don't die before it.
        previous_int = signal.signal(signal.SIGINT, lambda signum, frame: None)

        def restore() -> None:
            signal.signal(signal.SIGTERM, previous_term)
            signal.signal(signal.SIGINT, previous_int)

        return restore

    def _heartbeat(self, status_file: Path) -> None:
        detail = _read_status(status_file)
        if detail is None:
            # A command that does not use the library: alive, but no step or progress to report.
            detail = make_heartbeat_detail(
                job_id=self.settings.job_id,
                run_id=self.settings.run_id,
                instance_id=self.instance_id,
                step=0,
                progress=None,
                utilization=self._probe(),
                last_checkpoint_step=None,
            )
        else:
            detail["job_id"] = self.settings.job_id
            detail["run_id"] = self.settings.run_id
            detail["instance_id"] = detail.get("instance_id") or self.instance_id
        if self.settings.node_index is not None:
            # The control plane judges each node of a gang by its own heartbeats.
            detail["node_index"] = self.settings.node_index
        self.publisher.publish(DETAIL_JOB_HEARTBEAT, detail)
        self.heartbeats_sent += 1


def _read_status(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m spotline.agent [--heartbeat-s S] -- cmd args...`."""
    args = list(sys.argv[1:] if argv is None else argv)
    options, command = (
        (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else ([], args)
    )
    parser = argparse.ArgumentParser(
        prog="python -m spotline.agent",
        description="Run a training command under the Spotline agent (heartbeats, SIGTERM forwarding). "
        "Only commands that use the spotline.agent library can checkpoint.",
        usage="%(prog)s [--heartbeat-s S] -- command [args...]",
    )
    parser.add_argument(
        "--heartbeat-s",
        type=float,
        default=None,
        help="seconds between heartbeats (default: SPOTLINE_HEARTBEAT_S or 30)",
    )
    parsed = parser.parse_args(options)
    if not command:
        parser.error("no command given (put it after --)")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="spotline-agent: %(levelname)s %(name)s: %(message)s"
    )

    settings = AgentSettings.from_env()
    if parsed.heartbeat_s is not None:
        from dataclasses import replace

        settings = replace(settings, heartbeat_s=parsed.heartbeat_s)
    instance_id = settings.instance_id
    imds = InstanceMetadata(settings.imds_endpoint) if settings.imds_endpoint else None
    if instance_id is None and imds is not None:
        try:
            instance_id = imds.instance_id()
        except Exception as exc:
            log.warning("instance id not available from instance metadata: %s", exc)
    publisher: EventPublisher = LogPublisher()
    if settings.event_bus:
        from spotline.agent.agent import resolve_region
        from spotline.aws.clients import AwsClients

        publisher = EventBridgePublisher(
            AwsClients(region=resolve_region(imds)).events, settings.event_bus, team=settings.team
        )
    try:
        return CommandWrapper(settings, publisher=publisher, instance_id=instance_id).run(command)
    except FileNotFoundError as exc:
        log.error("cannot run %s: %s", command[0], exc)
        return 127
