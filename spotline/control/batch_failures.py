"""Why a Batch job failed, from the reasons and the exit code Batch reports (not a substring).

A failed run is requeued from its checkpoint only when its host went away under it. Batch (and
ECS under it) say so in a fixed form, `Host EC2 (instance i-0123abcd) terminated.` (or
`stopped.`), which covers Spot reclaims, scale-in and hardware failures. Everything else is the
job's or its configuration's fault, and running it again would fail again: an image that cannot
be pulled, a container that cannot be created, a timeout, an exit code. Those end the job FAILED
with the reason, so a bad image named `spotline-train` on a Spot pool is not requeued forever.

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
    TIMEOUT = "attempt timed out"
    APPLICATION = "the job failed"


@dataclass(frozen=True)
class FailureCause:
    kind: FailureKind
    # The reason part that decided it (empty when only the exit code did).
    evidence: str = ""

    @property
    def requeue(self) -> bool:
        """Worth running again from the checkpoint (only when the host went away)."""
        return self.kind is FailureKind.HOST_LOST

    def describe(self) -> str:
        return f"{self.kind.value}: {self.evidence}" if self.evidence else self.kind.value


_HOST_LOST = re.compile(r"^Host EC2 \(instance i-[0-9a-f]+\) (terminated|stopped)\.?$")
_IMAGE = re.compile(r"^(CannotPullContainerError|CannotPullImageManifestError|PullImageManifestError)\b")
_CONFIGURATION = re.compile(
    r"^(CannotCreateContainerError|CannotStartContainerError|CannotInspectContainerError|"
    r"ResourceInitializationError|ContainerRuntimeError|ContainerRuntimeTimeoutError|"
    r"InternalError|MISCONFIGURATION)\b"
)
_TIMEOUT = re.compile(r"^Job attempt duration exceeded timeout$")


def classify_failure(reasons: str) -> FailureCause:
    """The cause of a FAILED Batch job. `reasons`: Batch's reasons joined by "; ". The exit code
    does not decide: a container whose host is reclaimed is killed too (137 or 143)."""
    parts = [part.strip() for part in reasons.split(";") if part.strip()]
    # A container that never started decides first: the host may have been stopped after it.
    for pattern, kind in ((_IMAGE, FailureKind.IMAGE), (_CONFIGURATION, FailureKind.CONFIGURATION)):
        for part in parts:
            if pattern.match(part):
                return FailureCause(kind, part)
    for part in parts:
        if _HOST_LOST.match(part):
            return FailureCause(FailureKind.HOST_LOST, part)
    for part in parts:
        if _TIMEOUT.match(part):
            return FailureCause(FailureKind.TIMEOUT, part)
    return FailureCause(FailureKind.APPLICATION, "; ".join(parts))
