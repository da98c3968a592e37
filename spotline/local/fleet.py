"""A local fleet in place of AWS Batch and EC2.

Pools of nodes with instance ids and GPUs; Batch job states SUBMITTED -> RUNNABLE -> STARTING ->
RUNNING -> SUCCEEDED | FAILED, each published as a `Batch Job State Change` event in AWS's
documented shape on the default bus; each job's command run as a real local process with the
agent's environment, the runtime's own interpreter environment first on PATH, under the agent's
wrapper (`python -m spotline.agent --`, the training image's ENTRYPOINT), as the image would run
it; TerminateJob as `docker stop` does it (SIGTERM to the wrapper, which passes it on; SIGKILL
to every process of the run `stop_grace_s` later); and injected failures: a Spot reclaim (an
`EC2 Spot Instance Interruption Warning` in AWS's shape, then the node dies after the notice)
and a node failure. A warned node drains (`drain`), whoever put the warning on the bus. A job
that cannot be started, whatever the error, fails with its GPUs given back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("spotline.local.fleet")
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
HOST_TERMINATED = "Host EC2 (instance {instance}) terminated."
# What the training image's ENTRYPOINT puts before a job's command (images/training/Dockerfile).
AGENT_WRAPPER: tuple[str, ...] = (sys.executable, "-m", "spotline.agent", "--")
# How long a stopped run has between SIGTERM and SIGKILL (`docker stop`'s timeout locally).
STOP_GRACE_S = 10.0


@dataclass
class Node:
    instance_id: str
    pool: str
    gpus: int
    used: int = 0
    alive: bool = True
    draining: bool = False
    # Set once the node's end is scheduled (a Spot notice running): a second warning changes nothing.
    reclaim_scheduled: bool = False
    # When it joined, began to drain, is due to end (a Spot notice), and died (epoch seconds).
    joined_at: float = field(default_factory=time.time)
    drained_at: float | None = None
    ends_at: float | None = None
    died_at: float | None = None


@dataclass(frozen=True)
class Joining:
    """A replacement on its way into `pool`, due at `at` (Batch launching an instance)."""

    pool: str
    gpus: int
    since: float
    at: float


@dataclass
class LocalBatchJob:
    job_id: str
    name: str
    queue: str
    pool: str
    command: list[str]
    environment: dict[str, str]
    gpus: int
    nodes: int
    status: str = "SUBMITTED"
    status_reason: str = ""
    instances: list[str] = field(default_factory=list)
    instances_held: bool = False  # its GPUs are counted as used on `instances`
    process: subprocess.Popen[bytes] | None = None
    created_at: int = field(default_factory=lambda: int(time.time() * 1000))
    started_at: int | None = None
    stopped_at: int | None = None
    exit_code: int | None = None
    # The run's process log (stdout and stderr), once it started.
    log_path: Path | None = None


@dataclass(frozen=True)
class PoolSpec:
    name: str
    job_queue: str
    nodes: int
    gpus_per_node: int
    spot: bool


def _instance_id() -> str:
    return "i-" + uuid.uuid4().hex[:17]


def interpreter_first_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the directory of this runtime's interpreter (a venv's bin) first on PATH, so
    a job's `python -m spotline...` runs with Spotline installed, as it would in its image."""
    bin_dir = str(Path(sys.executable).parent)  # not resolved: a venv's python is a link
    rest = [d for d in env.get("PATH", os.defpath).split(os.pathsep) if d and d != bin_dir]
    return {**env, "PATH": os.pathsep.join([bin_dir, *rest])}


class LocalFleet:
    """Runs Batch jobs as local processes on emulated nodes and publishes their state changes."""

    def __init__(
        self,
        pools: Sequence[PoolSpec],
        publish: Callable[[list[dict[str, Any]]], None],
        log_dir: Path,
        base_env: Mapping[str, str] | None = None,
        start_delay_s: float = 0.3,
        stop_grace_s: float = STOP_GRACE_S,
        capacity_return_s: float = 5.0,
        wrapper: Sequence[str] = AGENT_WRAPPER,
    ) -> None:
        self._pools = {p.name: p for p in pools}
        self._queue_pool = {p.job_queue: p.name for p in pools}
        self._publish = publish
        self._log_dir = log_dir
        self._base_env = interpreter_first_on_path(base_env or os.environ)
        self._start_delay_s = start_delay_s
        self._stop_grace_s = stop_grace_s
        self._wrapper = list(wrapper)
        # A lost node's replacement joins its pool this long after it died (Batch launching one).
        self._capacity_return_s = capacity_return_s
        self._lock = threading.RLock()
        self.nodes: list[Node] = [
            Node(_instance_id(), p.name, p.gpus_per_node) for p in pools for _ in range(p.nodes)
        ]
        self.jobs: dict[str, LocalBatchJob] = {}
        self.joining: list[Joining] = []
        # Instances a pool may hold now (a Spot availability trace sets it: `set_capacity`);
        # absent: its configured node count.
        self._limits: dict[str, int] = {}
        self._closed = threading.Event()
        log_dir.mkdir(parents=True, exist_ok=True)

    # --- Batch's API -------------------------------------------------------------------

    def submit_job(
        self,
        *,
        job_name: str,
        job_queue: str,
        command: Sequence[str],
        environment: Mapping[str, str],
        gpus: int,
        nodes: int = 1,
    ) -> str:
        """SubmitJob: returns the Batch job id; the job starts as soon as nodes are free."""
        pool = self._queue_pool.get(job_queue) or job_queue
        if pool not in self._pools:
            raise ValueError(f"unknown job queue {job_queue!r}")
        job = LocalBatchJob(
            job_id=str(uuid.uuid4()),
            name=job_name,
            queue=job_queue,
            pool=pool,
            command=list(command),
            environment=dict(environment),
            gpus=gpus,
            nodes=nodes,
        )
        with self._lock:
            self.jobs[job.job_id] = job
        self._emit(job)
        threading.Thread(target=self._lifecycle, args=(job,), name=f"batch-{job_name}", daemon=True).start()
        return job.job_id

    def log_path(self, job_id: str) -> Path | None:
        """The process log of a run (what CloudWatch holds on AWS), None before it started."""
        with self._lock:
            job = self.jobs.get(job_id)
        return None if job is None else job.log_path

    def terminate_job(self, job_id: str, reason: str) -> None:
        """TerminateJob: SIGTERM (the agent checkpoints on it), then SIGKILL after the grace."""
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None or job.status in ("SUCCEEDED", "FAILED"):
            return
        job.status_reason = reason
        self._stop_process(job, signal.SIGTERM)

    def list_jobs(self, job_queue: str, job_name: str) -> list[tuple[str, str]]:
        """ListJobs with a JOB_NAME filter: (Batch job id, status) of every job of that name in
        the queue, oldest first."""
        pool = self._queue_pool.get(job_queue) or job_queue
        with self._lock:
            found = [j for j in self.jobs.values() if j.name == job_name and j.pool == pool]
            return [(j.job_id, j.status) for j in sorted(found, key=lambda j: j.created_at)]

    def describe_jobs(self, job_ids: Sequence[str]) -> dict[str, str]:
        """DescribeJobs: the status of each job the fleet knows (unknown ids are left out)."""
        with self._lock:
            return {i: self.jobs[i].status for i in job_ids if i in self.jobs}

    def inventory(self) -> tuple[list[Node], list[Joining]]:
        """Copies of the nodes (the dead ones included) and of the replacements on their way."""
        with self._lock:
            return [replace(n) for n in self.nodes], list(self.joining)

    # --- injected failures --------------------------------------------------------------

    def instance_of(self, name_prefix: str) -> str | None:
        """The first instance running a job whose name starts with `name_prefix`."""
        with self._lock:
            for job in self.jobs.values():
                if job.name.startswith(name_prefix) and job.status == "RUNNING" and job.instances:
                    return job.instances[0]
        return None

    def spot_interruption_warning(self, instance_id: str) -> dict[str, Any]:
        """The event EC2 sends two minutes before reclaiming a Spot instance (AWS's shape)."""
        node = self._node(instance_id)
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": ACCOUNT_ID,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}a:instance/{node.instance_id}"],
            "detail": {"instance-id": node.instance_id, "instance-action": "terminate"},
        }

    def reclaim(self, instance_id: str, notice_s: float) -> None:
        """Publish the Spot warning now, and kill the node after `notice_s` seconds."""
        event = self.spot_interruption_warning(instance_id)
        self._publish(
            [
                {
                    "Source": event["source"],
                    "DetailType": event["detail-type"],
                    "Detail": json.dumps(event["detail"]),
                    "Resources": event["resources"],
                    "EventBusName": "default",
                }
            ]
        )
        self.reclaim_after(instance_id, notice_s)

    def drain(self, instance_id: str) -> bool:
        """No new job is placed on the node (what ECS does on a Spot warning when
        ECS_ENABLE_SPOT_INSTANCE_DRAINING is set; the stack sets it). False for an instance
        this fleet does not have."""
        with self._lock:
            node = next((n for n in self.nodes if n.instance_id == instance_id), None)
            if node is None:
                return False
            if not node.draining:
                node.draining, node.drained_at = True, time.time()
            return True

    def is_spot(self, instance_id: str) -> bool:
        """Whether the instance is one of this fleet's Spot nodes (EC2 warns only those)."""
        with self._lock:
            node = next((n for n in self.nodes if n.instance_id == instance_id), None)
            return node is not None and self._pools[node.pool].spot

    def reclaim_after(self, instance_id: str, notice_s: float) -> bool:
        """The node drains now and dies `notice_s` seconds from now (the end of a Spot notice);
        its replacement joins the pool `capacity_return_s` later. Once per node: a repeated
        warning (EventBridge delivers at least once) keeps the first deadline. False when the
        node's end was already scheduled or it is gone."""
        with self._lock:
            node = self._node(instance_id)
            if node.reclaim_scheduled or not node.alive:
                return False
            now = time.time()
            if not node.draining:
                node.draining, node.drained_at = True, now
            node.reclaim_scheduled = True
            node.ends_at = now + notice_s
        timer = threading.Timer(notice_s, self.fail_node, args=(instance_id,))
        timer.daemon = True
        timer.start()
        return True

    def fail_node(self, instance_id: str) -> None:
        """The node dies: its processes are killed, its jobs fail with Batch's host-loss reason,
        and a replacement node joins the pool `capacity_return_s` later (as Batch replaces lost
        capacity with a new instance)."""
        with self._lock:
            node = self._node(instance_id)
            if not node.alive:
                return
            node.alive = False
            node.died_at = time.time()
            if self._capacity_return_s > 0:
                self.joining.append(
                    Joining(node.pool, node.gpus, node.died_at, node.died_at + self._capacity_return_s)
                )
            victims = [j for j in self.jobs.values() if instance_id in j.instances and j.status == "RUNNING"]
        for job in victims:
            job.status_reason = HOST_TERMINATED.format(instance=instance_id)
            self._stop_process(job, signal.SIGKILL)
        if self._capacity_return_s <= 0:
            self._replace(node)
        else:
            timer = threading.Timer(self._capacity_return_s, self._replace, args=(node,))
            timer.daemon = True
            timer.start()

    def _replace(self, lost: Node) -> None:
        with self._lock:
            self.joining = [j for j in self.joining if not (j.pool == lost.pool and j.since == lost.died_at)]
            if not self._closed.is_set() and self._standing(lost.pool) < self._limit(lost.pool):
                self.nodes.append(Node(_instance_id(), lost.pool, lost.gpus))

    def _limit(self, pool: str) -> int:
        return self._limits.get(pool, self._pools[pool].nodes)

    def _standing(self, pool: str) -> int:
        """The pool's nodes alive and not under a reclaim notice."""
        return sum(1 for n in self.nodes if n.pool == pool and n.alive and not n.reclaim_scheduled)

    def set_capacity(self, pool: str, instances: int, notice_s: float) -> list[str]:
        """The Spot capacity of `pool` is now `instances` (at most its configured nodes), as an
        availability trace says. Above what stands, nodes join now (a Spot launch that waited
        for capacity then starts). Below it, EC2 reclaims the nodes beyond capacity, idle ones
        first: each gets the Spot interruption warning (`reclaim`) and dies `notice_s` later.
        At 0, a Spot launch waits (RUNNABLE) until capacity returns. Returns the instances warned."""
        spec = self._pools[pool]
        if not spec.spot:
            raise ValueError(f"{pool} is not a Spot pool: only Spot capacity follows a trace")
        warned: list[str] = []
        with self._lock:
            self._limits[pool] = max(0, min(instances, spec.nodes))
            standing = [n for n in self.nodes if n.pool == pool and n.alive and not n.reclaim_scheduled]
            excess = len(standing) - self._limits[pool]
            if excess > 0:
                standing.sort(key=lambda n: (n.used > 0, n.instance_id))  # idle nodes go first
                warned = [n.instance_id for n in standing[:excess]]
            elif excess < 0 and not self._closed.is_set():
                for _ in range(-excess):
                    self.nodes.append(Node(_instance_id(), pool, spec.gpus_per_node))
        for instance in warned:
            self.reclaim(instance, notice_s)
        return warned

    def lost_run(self, batch_job_id: str, job_name: str, job_queue: str, instance_ids: Sequence[str]) -> None:
        """A run the fleet of an earlier local runtime ran, lost with it (its process and node
        died when that runtime stopped): published as Batch publishes a job whose host was
        lost, so the control plane requeues it from its checkpoint, as on AWS."""
        pool = self._queue_pool.get(job_queue) or job_queue
        job = LocalBatchJob(
            job_id=batch_job_id,
            name=job_name,
            queue=job_queue,
            pool=pool,
            command=[],
            environment={},
            gpus=0,
            nodes=1,
            status="FAILED",
            status_reason=HOST_TERMINATED.format(instance=(list(instance_ids) or ["i-0"])[0]),
            instances=list(instance_ids),
        )
        job.stopped_at = int(time.time() * 1000)
        with self._lock:
            self.jobs.setdefault(batch_job_id, job)
        self._emit(job)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            running = [j for j in self.jobs.values() if j.process is not None and j.process.poll() is None]
        for job in running:
            job.status_reason = "local runtime stopped"
            self._stop_process(job, signal.SIGKILL)

    # --- internals ------------------------------------------------------------------------

    def _node(self, instance_id: str) -> Node:
        for node in self.nodes:
            if node.instance_id == instance_id:
                return node
        raise KeyError(f"no instance {instance_id}")

    def _place(self, job: LocalBatchJob) -> list[Node] | None:
        per_node = job.gpus // job.nodes
        chosen: list[Node] = []
        for node in self.nodes:
            if (
                node.pool == job.pool
                and node.alive
                and not node.draining
                and node.gpus - node.used >= per_node
            ):
                chosen.append(node)
                if len(chosen) == job.nodes:
                    return chosen
        return None

    def _lifecycle(self, job: LocalBatchJob) -> None:
        try:
            self._run(job)
        except Exception as error:  # never leave a job running or a node's GPUs held
            if self._closed.is_set():
                # The runtime is stopping: the emulated AWS may be gone before this job's last
                # state change is published (nothing is left to receive it).
                log.debug("batch job %s: not published at close: %s", job.job_id, error)
            else:
                log.exception("batch job %s failed in the fleet", job.job_id)
            if job.status not in ("SUCCEEDED", "FAILED"):
                job.status_reason = job.status_reason or f"CannotStartContainerError: {error}"
                with contextlib.suppress(Exception):
                    self._finish(job, "FAILED")

    def _run(self, job: LocalBatchJob) -> None:
        self._set(job, "RUNNABLE")
        while True:
            if self._closed.is_set() or job.status == "FAILED":
                return
            with self._lock:
                placed = self._place(job)
                if placed is not None:
                    for node in placed:
                        node.used += job.gpus // job.nodes
                    job.instances = [n.instance_id for n in placed]
                    job.instances_held = True
            if placed is not None:
                break
            time.sleep(0.2)
        self._set(job, "STARTING")
        time.sleep(self._start_delay_s)
        if job.status == "FAILED":  # terminated while starting
            self._release(job)
            return
        env = {
            **self._base_env,
            **job.environment,
            "SPOTLINE_INSTANCE_ID": job.instances[0],
            "AWS_BATCH_JOB_ID": job.job_id,
        }
        job.log_path = self._log_dir / f"{job.name}-{job.job_id[:8]}.log"
        logfile = job.log_path.open("wb")
        try:
            job.process = subprocess.Popen(
                [*self._wrapper, *job.command],
                env=env,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError, TypeError) as error:  # ValueError: a NUL byte in an argument
            logfile.close()
            job.status_reason = f"CannotStartContainerError: {error}"
            self._finish(job, "FAILED")
            return
        job.started_at = int(time.time() * 1000)
        self._set(job, "RUNNING")
        code = job.process.wait()
        job.exit_code = 128 - code if code < 0 else code  # a death by signal N, as Docker reports it
        logfile.close()
        self._finish(job, "SUCCEEDED" if job.exit_code == 0 and not job.status_reason else "FAILED")

    def _release(self, job: LocalBatchJob) -> None:
        """Give the job's GPUs back to its nodes (once)."""
        with self._lock:
            if not job.instances_held:
                return
            job.instances_held = False
            for instance in job.instances:
                self._node(instance).used -= job.gpus // job.nodes

    def _finish(self, job: LocalBatchJob, status: str) -> None:
        self._release(job)
        job.stopped_at = int(time.time() * 1000)
        if status == "FAILED" and not job.status_reason:
            job.status_reason = f"Essential container in task exited (exit code {job.exit_code})"
        self._set(job, status)

    def _stop_process(self, job: LocalBatchJob, sig: signal.Signals) -> None:
        process = job.process
        if process is None or process.poll() is not None:
            if job.status in ("SUBMITTED", "RUNNABLE", "STARTING"):
                self._set(job, "FAILED")
            return
        try:
            if sig == signal.SIGKILL or not self._wrapper:
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)  # as `docker stop`: PID 1 (the wrapper) passes it on
        except ProcessLookupError:
            return
        if sig != signal.SIGKILL:

            def escalate() -> None:
                if process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)

            timer = threading.Timer(self._stop_grace_s, escalate)
            timer.daemon = True
            timer.start()

    def _set(self, job: LocalBatchJob, status: str) -> None:
        job.status = status
        self._emit(job)

    def _emit(self, job: LocalBatchJob) -> None:
        self._publish(
            [
                {
                    "Source": "aws.batch",
                    "DetailType": "Batch Job State Change",
                    "Detail": json.dumps(batch_state_detail(job)),
                    "Resources": [f"arn:aws:batch:{REGION}:{ACCOUNT_ID}:job/{job.job_id}"],
                    "EventBusName": "default",
                }
            ]
        )


def batch_state_detail(job: LocalBatchJob) -> dict[str, Any]:
    """The `detail` of a Batch Job State Change event, in AWS's documented shape."""
    detail: dict[str, Any] = {
        "jobArn": f"arn:aws:batch:{REGION}:{ACCOUNT_ID}:job/{job.job_id}",
        "jobName": job.name,
        "jobId": job.job_id,
        "jobQueue": f"arn:aws:batch:{REGION}:{ACCOUNT_ID}:job-queue/{job.queue}",
        "status": job.status,
        "attempts": [],
        "createdAt": job.created_at,
        "retryStrategy": {"attempts": 1, "evaluateOnExit": []},
        "dependsOn": [],
        "jobDefinition": f"arn:aws:batch:{REGION}:{ACCOUNT_ID}:job-definition/spotline-training:1",
        "parameters": {},
        "container": {
            "image": "spotline/train:local",
            "command": job.command,
            "resourceRequirements": [{"value": str(job.gpus // job.nodes), "type": "GPU"}],
            "environment": [{"name": k, "value": v} for k, v in sorted(job.environment.items())],
            "mountPoints": [],
            "ulimits": [],
            "networkInterfaces": [],
            "secrets": [],
        },
        "tags": {},
        "propagateTags": False,
        "platformCapabilities": ["EC2"],
    }
    if job.instances:
        # Batch names the ECS container instance; locally its id is the node's instance id.
        detail["container"]["containerInstanceArn"] = (
            f"arn:aws:ecs:{REGION}:{ACCOUNT_ID}:container-instance/spotline-{job.pool}/{job.instances[0]}"
        )
    if job.status_reason:
        detail["statusReason"] = job.status_reason
    if job.started_at is not None:
        detail["startedAt"] = job.started_at
    if job.stopped_at is not None:
        detail["stoppedAt"] = job.stopped_at
        detail["attempts"] = [
            {
                "container": {
                    "exitCode": job.exit_code,
                    "logStreamName": f"spotline/default/{job.job_id}",
                    "networkInterfaces": [],
                },
                "startedAt": job.started_at or job.stopped_at,
                "stoppedAt": job.stopped_at,
                "statusReason": job.status_reason or "Essential container in task exited",
            }
        ]
    return detail
