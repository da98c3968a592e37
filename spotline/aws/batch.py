"""Launching training jobs: the `BatchLauncher` protocol, its AWS Batch implementation, and the
mapping from a Batch container instance to its EC2 instance id.

The launch workflow submits once per admission (a *run*, docs RUN_IDENTITY): the Batch job name
is the run id `spotline-<job_id>-r<run>`, into the job queue of the pool the scheduler chose.
Submission is idempotent per run: the workflow first asks `find_live` for a live Batch job of
that name and adopts it. The preempt workflow, the reconciler and the event handlers call
`terminate`; `stopped` tells which of some Batch jobs have ended (a termination is pending until
then). The
local runtime provides its own launcher (local processes) with the same protocol and the same
agent environment (`resources.AGENT_ENV_*`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from spotline.aws.errors import error_code, is_throttling
from spotline.control.errors import BatchThrottled, LaunchFailed
from spotline.control.ports import TERMINAL_BATCH_STATUSES, BatchJobRequest
from spotline.control.records import GANG_MAIN_NODE

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

logger = logging.getLogger(__name__)

# AWS Batch refuses container overrides (command, environment, resource requirements) over this.
CONTAINER_OVERRIDES_LIMIT_BYTES = 8 * 1024


def _definition_gone(error: ClientError) -> bool:
    """SubmitJob refused a job definition that no longer exists or is no longer active."""
    message = str(error.response.get("Error", {}).get("Message", "")).lower()
    return (
        error_code(error) == "ClientException"
        and "definition" in message
        and ("inactive" in message or "not found" in message or "does not exist" in message)
    )


def _launch_error(error: ClientError) -> BatchThrottled | LaunchFailed:
    if is_throttling(error) or error_code(error) == "TooManyRequestsException":
        return BatchThrottled(str(error))
    return LaunchFailed(str(error))


# Container properties of a Fargate job that a multi-node (EC2-only) definition may not carry.
_FARGATE_ONLY = frozenset({"networkConfiguration", "fargatePlatformConfiguration", "runtimePlatform"})


def resource_requirements(request: BatchJobRequest) -> list[dict[str, str]]:
    """SubmitJob's resourceRequirements override: the GPUs, and the vCPUs and memory (MiB) the
    job's share of its node gets (spotline.control.sizing) when known."""
    wanted = [{"type": "GPU", "value": str(request.gpus_per_node)}]
    if request.vcpus is not None:
        wanted.append({"type": "VCPU", "value": str(request.vcpus)})
    if request.memory_mib is not None:
        wanted.append({"type": "MEMORY", "value": str(request.memory_mib)})
    return wanted


def _fits(container: Mapping[str, Any], image: str, shared_memory_mib: int | None) -> bool:
    """A definition's container runs `image` (or names none) with that /dev/shm (None: any)."""
    if container.get("image") not in (None, image):
        return False
    shm = (container.get("linuxParameters") or {}).get("sharedMemorySize")
    return shared_memory_mib is None or shm == shared_memory_mib


def _with_shared_memory(container: Mapping[str, Any], shared_memory_mib: int | None) -> dict[str, Any]:
    if shared_memory_mib is None:
        return dict(container)
    linux = {**(container.get("linuxParameters") or {}), "sharedMemorySize": shared_memory_mib}
    return {**container, "linuxParameters": linux}


class AwsBatchLauncher:
    """`BatchLauncher` on AWS Batch.

    Each team's jobs run under that team's job definition (`team_definitions`), which carries
    the team's job role: Batch cannot override a role at SubmitJob.

    Batch cannot override a container image per job either, so a job whose image differs from
    its team's definition runs under a derived definition `<base>-<hash of image>` (the role and
    environment copied), registered once and reused.

    A gang job (nodes > 1) runs as a multi-node parallel job. Without a configured
    `multinode_job_definition`, it runs under one derived from the base definition,
    `<base>-mnp-<hash of image>`: the base's container on every node (node range `0:`, open-ended,
    so SubmitJob's `numNodes` override sets the gang size), registered once and reused. (CDK's
    MultiNodeJobDefinition cannot write an open-ended range, aws-cdk#29415.)

    A job in a pool whose instances have an EFA runs under its team's EFA definition
    (`efa_team_definitions`: the team's, plus the `/dev/infiniband/uverbs0` device and the
    libfabric environment), from which the same derivations are made. A device mapping names a
    host path, so a container mapping it cannot start on an instance without an EFA: the plain
    definition serves every other pool.
    """

    def __init__(
        self,
        client: BatchClient,
        job_definition: str | None,
        multinode_job_definition: str | None = None,
        *,
        team_definitions: Mapping[str, str] | None = None,
        efa_team_definitions: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.job_definition = job_definition
        self.multinode_job_definition = multinode_job_definition
        self.team_definitions = dict(team_definitions or {})
        self.efa_team_definitions = dict(efa_team_definitions or {})
        self._definitions: dict[tuple[str, str, bool, int | None], str] = {}
        self._lock = threading.Lock()

    def base_definition(self, team: str, *, gang: bool, efa: bool = False) -> str:
        """The definition a team's job derives from: the team's own (it carries the team's job
        role; a gang derives its multi-node definition from it), its EFA one in an EFA pool, or,
        where no team has one, the single `job_definition`. A team without a definition cannot
        launch: its jobs never run under another team's role."""
        if efa and self.team_definitions:
            definition = self.efa_team_definitions.get(team)
            if definition is None:
                raise LaunchFailed(
                    f"team {team!r} has no EFA job definition (config efa_job_definitions) for an EFA pool"
                )
            return definition
        if self.team_definitions:
            definition = self.team_definitions.get(team)
            if definition is None:
                raise LaunchFailed(f"team {team!r} has no job definition (config job_definitions)")
            return definition
        if self.job_definition is None:
            raise LaunchFailed("no job definition configured")
        return (self.multinode_job_definition or self.job_definition) if gang else self.job_definition

    def submit(self, request: BatchJobRequest) -> str:
        gang = request.nodes > 1
        base = self.base_definition(request.team, gang=gang, efa=request.efa)
        container: dict[str, Any] = {
            "command": list(request.command),
            "environment": [{"name": k, "value": v} for k, v in sorted(request.environment.items())],
            "resourceRequirements": resource_requirements(request),
        }
        kwargs: dict[str, Any] = {
            "jobName": request.job_name,
            "jobQueue": request.job_queue,
            "tags": {"spotline:job-id": request.job_id, "spotline:team": request.team, **request.tags},
            "propagateTags": True,
        }
        if request.timeout_s is not None:
            kwargs["timeout"] = {"attemptDurationSeconds": max(60, request.timeout_s)}
        try:
            return self._submit(request, base, gang, container, kwargs)
        except ClientError as error:
            if not _definition_gone(error):
                raise _launch_error(error) from error
            # A deploy replaced (deregistered) the definition this warm Lambda cached: resolve
            # it again by name and submit once more.
            logger.warning("cached job definition gone; resolving again", extra={"error": str(error)})
            with self._lock:
                self._definitions.clear()
            try:
                return self._submit(request, base, gang, container, kwargs)
            except ClientError as again:
                raise _launch_error(again) from again

    def _submit(
        self,
        request: BatchJobRequest,
        base: str,
        gang: bool,
        container: dict[str, Any],
        kwargs: dict[str, Any],
    ) -> str:
        kwargs["jobDefinition"] = self._definition_for(
            base, request.image, multinode=gang, shared_memory_mib=request.shared_memory_mib
        )
        overrides = len(json.dumps(container).encode())
        if overrides > CONTAINER_OVERRIDES_LIMIT_BYTES:
            raise LaunchFailed(
                f"container overrides of {overrides} bytes (command and environment), over AWS Batch's "
                f"{CONTAINER_OVERRIDES_LIMIT_BYTES}"
            )
        if gang:
            kwargs["nodeOverrides"] = {
                "numNodes": request.nodes,
                "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": container}],
            }
        else:
            kwargs["containerOverrides"] = container
        response = self.client.submit_job(**kwargs)
        return str(response["jobId"])

    def find_live(self, job_queue: str, job_name: str) -> list[str]:
        """ListJobs with a JOB_NAME filter (which lists every status; the ended ones are left
        out here)."""
        found: list[tuple[int, str]] = []
        kwargs: dict[str, Any] = {
            "jobQueue": job_queue,
            "filters": [{"name": "JOB_NAME", "values": [job_name]}],
        }
        try:
            while True:
                response = self.client.list_jobs(**kwargs)
                for summary in response.get("jobSummaryList", []):
                    if summary.get("jobName") != job_name:
                        continue  # the filter matches a prefix when given one ending in *
                    if summary.get("status") in TERMINAL_BATCH_STATUSES:
                        continue
                    found.append((int(summary.get("createdAt") or 0), str(summary["jobId"])))
                token = response.get("nextToken")
                if not token:
                    break
                kwargs["nextToken"] = token
        except ClientError as error:
            if is_throttling(error) or error_code(error) == "TooManyRequestsException":
                raise BatchThrottled(str(error)) from error
            raise LaunchFailed(str(error)) from error
        return [job_id for _, job_id in sorted(found)]

    def terminate(self, batch_job_id: str, reason: str) -> None:
        try:
            self.client.terminate_job(jobId=batch_job_id, reason=reason[:256])
        except ClientError as error:
            if is_throttling(error) or error_code(error) == "TooManyRequestsException":
                raise BatchThrottled(str(error)) from error
            # An unknown or finished job needs no stopping.
            logger.warning("terminate_job refused", extra={"batch_job_id": batch_job_id, "error": str(error)})

    def stopped(self, batch_job_ids: Sequence[str]) -> set[str]:
        """DescribeJobs (100 ids a call): a job it no longer returns has ended long ago."""
        ids = list(dict.fromkeys(batch_job_ids))
        ended: set[str] = set()
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            try:
                response = self.client.describe_jobs(jobs=chunk)
            except ClientError as error:
                if is_throttling(error) or error_code(error) == "TooManyRequestsException":
                    raise BatchThrottled(str(error)) from error
                raise
            live = {
                str(job["jobId"])
                for job in response.get("jobs", [])
                if job.get("status") not in TERMINAL_BATCH_STATUSES
            }
            ended |= set(chunk) - live
        return ended

    def _definition_for(
        self, base: str, image: str, *, multinode: bool = False, shared_memory_mib: int | None = None
    ) -> str:
        key = (base, image, multinode, shared_memory_mib)
        with self._lock:
            cached = self._definitions.get(key)
        if cached is not None:
            return cached
        described = self._latest(base)
        if described is None:
            raise LaunchFailed(f"job definition {base} not found")
        shm = shared_memory_mib
        kind = described.get("type")
        if multinode and kind != "multinode":
            if kind != "container":
                raise LaunchFailed(
                    f"job definition {base} is of type {kind}: no multi-node job can derive from it"
                )
            arn = self._derived(described, image, multinode=True, shared_memory_mib=shm)
        elif multinode:
            ranges = (described.get("nodeProperties") or {}).get("nodeRangeProperties") or []
            fits = all(_fits(r.get("container") or {}, image, shm) for r in ranges)
            arn = (
                str(described["jobDefinitionArn"])
                if fits
                else self._derived(described, image, shared_memory_mib=shm)
            )
        else:
            properties = described.get("containerProperties") or {}
            if kind != "container" or _fits(properties, image, shm):
                arn = str(described["jobDefinitionArn"])
            else:
                arn = self._derived(described, image, shared_memory_mib=shm)
        with self._lock:
            self._definitions[key] = arn
        return arn

    def _derived(
        self,
        described: dict[str, Any],
        image: str,
        *,
        multinode: bool = False,
        shared_memory_mib: int | None = None,
    ) -> str:
        """The ARN of `described` with `image` (as a multi-node definition when `multinode`, with
        /dev/shm of `shared_memory_mib` when given), registered under a name derived from them
        if no active revision has it yet."""
        # Named by everything the derived definition carries: the base's own properties (its
        # roles, environment, devices: a deploy that changes them makes a new base revision, so a
        # new derived name, never a stale copy reused), the image and /dev/shm.
        carried = {
            k: described.get(k)
            for k in ("type", "containerProperties", "nodeProperties", "retryStrategy", "timeout")
        }
        variant = json.dumps(
            {"base": carried, "image": image, "shm": shared_memory_mib, "multinode": multinode},
            sort_keys=True,
            default=str,
        )
        digest = hashlib.sha256(variant.encode()).hexdigest()[:12]
        name = f"{described['jobDefinitionName']}-{'mnp-' if multinode else ''}{digest}"
        derived = self._latest(name)
        if derived is not None:
            return str(derived["jobDefinitionArn"])
        kept = {
            k: described[k] for k in ("retryStrategy", "timeout", "platformCapabilities") if described.get(k)
        }

        def sized(container: dict[str, Any]) -> dict[str, Any]:
            return {**_with_shared_memory(container, shared_memory_mib), "image": image}

        if described.get("type") == "multinode":
            nodes = dict(described["nodeProperties"])
            nodes["nodeRangeProperties"] = [
                {**r, "container": sized(r.get("container") or {})} for r in nodes["nodeRangeProperties"]
            ]
            definition: dict[str, Any] = {"type": "multinode", "nodeProperties": nodes}
        elif multinode:
            container = {
                k: v
                for k, v in (described.get("containerProperties") or {}).items()
                if k not in _FARGATE_ONLY
            }
            definition = {
                "type": "multinode",
                "nodeProperties": {
                    "numNodes": 2,  # a placeholder: each SubmitJob sets the gang size
                    "mainNode": GANG_MAIN_NODE,
                    "nodeRangeProperties": [{"targetNodes": "0:", "container": sized(container)}],
                },
            }
        else:
            definition = {
                "type": "container",
                "containerProperties": sized(described.get("containerProperties") or {}),
            }
        client: Any = self.client  # the stubs' TypedDicts do not fit a copied definition
        registered = client.register_job_definition(jobDefinitionName=name, **definition, **kept)
        return str(registered["jobDefinitionArn"])

    def _latest(self, name_or_arn: str) -> dict[str, Any] | None:
        if name_or_arn.startswith("arn:"):
            response = self.client.describe_job_definitions(jobDefinitions=[name_or_arn])
        else:
            response = self.client.describe_job_definitions(jobDefinitionName=name_or_arn, status="ACTIVE")
        found: list[dict[str, Any]] = [dict(d) for d in response.get("jobDefinitions", [])]
        if not found:
            return None
        return max(found, key=lambda d: int(d.get("revision", 0)))


class EcsInstanceResolver:
    """Looks up `ec2InstanceId` with ECS DescribeContainerInstances (the Batch event names the
    ECS container instance, a Spot warning names the EC2 instance). Best effort: the agent's
    heartbeats report the instance id too."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def resolve(self, container_instances: Sequence[str]) -> list[str]:
        ids = [c for c in container_instances if c.startswith("i-")]
        by_cluster: dict[str, list[str]] = {}
        for arn in container_instances:
            # arn:aws:ecs:<region>:<account>:container-instance/<cluster>/<id>
            parts = arn.split(":", 5)[-1].split("/") if arn.startswith("arn:") else []
            if len(parts) == 3 and parts[0] == "container-instance":
                by_cluster.setdefault(parts[1], []).append(arn)
        for cluster, arns in by_cluster.items():
            try:
                response = self.client.describe_container_instances(cluster=cluster, containerInstances=arns)
            except ClientError as error:
                logger.warning("cannot resolve container instances", extra={"error": str(error)})
                continue
            ids += [
                c["ec2InstanceId"] for c in response.get("containerInstances", []) if c.get("ec2InstanceId")
            ]
        return sorted(set(ids))
