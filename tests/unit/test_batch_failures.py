"""Classifying a FAILED Batch job from Batch's reasons."""

from __future__ import annotations

import pytest

from spotline.control.batch_failures import FailureKind, classify_failure

CASES = {
    "host terminated (Spot reclaim, scale-in)": (
        "Host EC2 (instance i-0123456789abcdef0) terminated.",
        FailureKind.HOST_LOST,
    ),
    "host stopped": ("Host EC2 (instance i-0abc) stopped.", FailureKind.HOST_LOST),
    "host loss as the attempt's reason": (
        "Essential container in task exited; Host EC2 (instance i-0abc) terminated.",
        FailureKind.HOST_LOST,
    ),
    # The bug: "spot" anywhere in the reason was taken for a lost host.
    "private image named after spot": (
        "Task failed to start; CannotPullContainerError: pull image manifest has been retried 5 "
        "time(s): failed to resolve ref 123456789012.dkr.ecr.us-east-1.amazonaws.com/spotline-train:"
        "latest: not found",
        FailureKind.IMAGE,
    ),
    "image pull after the host went": (
        "CannotPullContainerError: access denied; Host EC2 (instance i-0abc) terminated.",
        FailureKind.IMAGE,
    ),
    "container cannot be created": (
        "CannotCreateContainerError: Error response from daemon: devices not found",
        FailureKind.CONFIGURATION,
    ),
    "task resources": ("ResourceInitializationError: unable to pull secrets", FailureKind.CONFIGURATION),
    "Batch misconfiguration": ("MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT", FailureKind.CONFIGURATION),
    "timeout": ("Job attempt duration exceeded timeout", FailureKind.TIMEOUT),
    # What passes is retried (bounded by max_interruptions)
    "registry timeout": (
        "CannotPullContainerError: failed to copy: httpReadSeeker: failed open: failed to do request: "
        "Get https://prod-us-east-1-starport-layer-bucket.s3.amazonaws.com/...: dial tcp: i/o timeout",
        FailureKind.TRANSIENT,
    ),
    "registry throttled": (
        "CannotPullContainerError: toomanyrequests: Rate exceeded",
        FailureKind.TRANSIENT,
    ),
    "daemon timed out starting": (
        "CannotStartContainerError: Error response from daemon: context deadline exceeded",
        FailureKind.TRANSIENT,
    ),
    "runtime timeout": (
        "ContainerRuntimeTimeoutError: Could not transition to running",
        FailureKind.TRANSIENT,
    ),
    "a timeout on an image that does not exist is not transient": (
        "CannotPullContainerError: pull image manifest has been retried 5 time(s): not found (timeout)",
        FailureKind.IMAGE,
    ),
    "the job's own failure": ("Essential container in task exited", FailureKind.APPLICATION),
    "a job that printed about spot": ("spot reclaim simulation failed; host lost", FailureKind.APPLICATION),
    "no reason": ("", FailureKind.APPLICATION),
}


@pytest.mark.parametrize(("reasons", "kind"), CASES.values(), ids=list(CASES))
def test_classify_failure(reasons: str, kind: FailureKind) -> None:
    cause = classify_failure(reasons)
    assert cause.kind is kind
    assert cause.requeue is (kind in (FailureKind.HOST_LOST, FailureKind.TRANSIENT, FailureKind.STOPPED))
    if kind is not FailureKind.APPLICATION:
        assert cause.evidence and cause.evidence in reasons


EXIT_CASES = {
    # The agent's wrapper exits 143 once SIGTERM reached the run, whatever the script did.
    "stopped from outside": ("Essential container in task exited", 143, FailureKind.STOPPED),
    "the job's own error": ("Essential container in task exited", 1, FailureKind.APPLICATION),
    "killed (OOM or the stop timeout)": ("Essential container in task exited", 137, FailureKind.APPLICATION),
    "a lost host decides before the code": (
        "Host EC2 (instance i-0abc) terminated.",
        143,
        FailureKind.HOST_LOST,
    ),
    "a timeout decides before the code": ("Job attempt duration exceeded timeout", 143, FailureKind.TIMEOUT),
    "an image error decides before the code": ("CannotPullContainerError: not found", 143, FailureKind.IMAGE),
}


@pytest.mark.parametrize(("reasons", "exit_code", "kind"), EXIT_CASES.values(), ids=list(EXIT_CASES))
def test_exit_143_is_a_stop_from_outside_the_job_unless_a_reason_says_more(
    reasons: str, exit_code: int, kind: FailureKind
) -> None:
    cause = classify_failure(reasons, exit_code)
    assert cause.kind is kind
    assert cause.requeue is (kind in (FailureKind.HOST_LOST, FailureKind.STOPPED))
