"""Why a Batch job failed, from the reasons and the exit code Batch reports (not a substring).

A failed run is requeued from its checkpoint when its host went away under it (Batch, and ECS
under it, say so in a fixed form, `Host EC2 (instance i-0123abcd) terminated.` or `stopped.`:
Spot reclaims, scale-in, hardware failures), and when its container could not start for a
reason that passes (a registry timeout or throttle, a daemon error while creating or starting the
container: `TRANSIENT`). Each requeue counts in the job's `interruptions`, so retries are bounded
by `max_interruptions` and the last one ends the job FAILED with the cause as its reason.
A run that ended on a stop from outside the job is requeued the same way: its container exited
143 (128 + SIGTERM). The agent's wrapper (the image's ENTRYPOINT, PID 1) reports 143 whenever
SIGTERM reached the container or the training script's agent, whatever status the script exited
with (Lightning exits 0 after SIGTERM), so such a run is never a success; Batch's reason then
says only "Essential container in task exited". That is a host going down or ECS stopping the
task, not the job's own error (`STOPPED`). Everything else is the job's or its configuration's
fault, and running it again would fail again: an image that does not exist or may not be pulled,
a misconfiguration, a timeout, any other exit code. Those end the job FAILED at once with the reason,
so a bad image named `spotline-train` on a Spot pool is not requeued at all.

The reasons come joined by "; " (job, last attempt, container; `BatchJobStateDetail.reasons`).
ECS's task error names: docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    HOST_LOST = "host lost"
    IMAGE = "image could not be pulled"
    CONFIGURATION = "container could not be created or started"
    TRANSIENT = "container did not start (transient)"
    TIMEOUT = "attempt timed out"
    STOPPED = "stopped by SIGTERM from outside the job"
    APPLICATION = "the job failed"


@dataclass(frozen=True)
class FailureCause:
    kind: FailureKind
    # The reason part that decided it (empty when only the exit code did).
    evidence: str = ""

    @property
    def requeue(self) -> bool:
        """Worth running again from the checkpoint: the host went away, or the container did not
        start for a reason that passes (bounded by max_interruptions)."""
        return self.kind in (FailureKind.HOST_LOST, FailureKind.TRANSIENT, FailureKind.STOPPED)

    def describe(self) -> str:
        return f"{self.kind.value}: {self.evidence}" if self.evidence else self.kind.value


_HOST_LOST = re.compile(r"^Host EC2 \(instance i-[0-9a-f]+\) (terminated|stopped)\.?$")
_IMAGE = re.compile(r"^(CannotPullContainerError|CannotPullImageManifestError|PullImageManifestError)\b")
_CONFIGURATION = re.compile(
    r"^(CannotCreateContainerError|CannotStartContainerError|CannotInspectContainerError|"
    r"ResourceInitializationError|ContainerRuntimeError|ContainerRuntimeTimeoutError|"
    r"InternalError|MISCONFIGURATION)\b"
)
# Of those, what passes: the registry or the network timing out or throttling, the container
# runtime timing out or failing inside (the same request succeeds a minute later). An image that
# is not found or not allowed, or a device, secret or requirement that is wrong, does not pass.
_PERMANENT = re.compile(
    r"not found|manifest unknown|access denied|accessdenied|unauthorized|forbidden|denied|"
    r"no such|invalid|MISCONFIGURATION|devices? not found|unable to pull secrets",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"timeout|timed out|deadline exceeded|i/o timeout|connection reset|connection refused|"
    r"toomanyrequests|too many requests|rate exceeded|throttl|503|service unavailable|"
    r"ContainerRuntimeTimeoutError|InternalError|temporar",
    re.IGNORECASE,
)
_TIMEOUT = re.compile(r"^Job attempt duration exceeded timeout$")
# 128 + SIGTERM: what the agent's wrapper exits with once a stop reached the run.
EXIT_STOPPED = 143


def classify_failure(reasons: str, exit_code: int | None = None) -> FailureCause:
    """The cause of a FAILED Batch job. `reasons`: Batch's reasons joined by "; ". The reasons
    decide first (a container whose host is reclaimed is killed too, 137 or 143); then an exit
    code of 143 is a stop from outside the job; anything else is the job's own failure."""
    parts = [part.strip() for part in reasons.split(";") if part.strip()]
    # A container that never started decides first: the host may have been stopped after it.
    for pattern, kind in ((_IMAGE, FailureKind.IMAGE), (_CONFIGURATION, FailureKind.CONFIGURATION)):
        for part in parts:
            if pattern.match(part):
                if _TRANSIENT.search(part) and not _PERMANENT.search(part):
                    return FailureCause(FailureKind.TRANSIENT, part)
                return FailureCause(kind, part)
    for part in parts:
        if _HOST_LOST.match(part):
            return FailureCause(FailureKind.HOST_LOST, part)
    for part in parts:
        if _TIMEOUT.match(part):
            return FailureCause(FailureKind.TIMEOUT, part)
    if exit_code == EXIT_STOPPED:
        return FailureCause(FailureKind.STOPPED, f"exit code {exit_code}")
    return FailureCause(FailureKind.APPLICATION, "; ".join(parts))
