"""torchrun, 2 processes, gloo: a Spotline request checkpoints on both ranks at one step (one shard
each, one manifest), SIGTERM stops both at one step, and the restarted run resumes with the same
per-rank loss sequence as an uninterrupted run. Real processes against a moto server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from spotline.agent import S3CheckpointStore
from spotline.resources import signal_key

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "training" / "torchrun_ddp.py"
BUCKET, TABLE, JOB = "spotline-checkpoints", "spotline-jobs", "job-ddp"
PREFIX = f"checkpoints/team-a/{JOB}/"
STEPS, SEED = 40, 3


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket=BUCKET)
    dynamodb = boto3.client("dynamodb", endpoint_url=url)
    dynamodb.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
    )
    dynamodb.put_item(TableName=TABLE, Item={"job_id": {"S": JOB}, "state": {"S": "RUNNING"}})
    try:
        yield url
    finally:
        server.stop()


def torchrun_env(endpoint: str, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTLINE_", "RANK", "LOCAL_RANK"))}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        SPOTLINE_JOB_ID=JOB,
        SPOTLINE_TEAM="team-a",
        SPOTLINE_RUN_ID=f"spotline-{JOB}-r1",
        SPOTLINE_INSTANCE_ID="local-0",
        SPOTLINE_CHECKPOINT_URI=f"s3://{BUCKET}/{PREFIX}",
        SPOTLINE_JOBS_TABLE=TABLE,
        SPOTLINE_AGENT_POLL_S="0.1",
        SPOTLINE_CHECKPOINT_INTERVAL_S="0",
        SPOTLINE_HEARTBEAT_S="0",
        SPOTLINE_LOCAL_CHECKPOINT_DIR=str(tmp / "local"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
    )
    return env


def torchrun_command(losses: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(EXAMPLE), "--steps", str(STEPS), "--seed", str(SEED), "--losses", str(losses), *extra,
    ]  # fmt: skip


def run_to_end(endpoint: str, tmp: Path, losses: Path) -> None:
    done = subprocess.run(
        torchrun_command(losses), env=torchrun_env(endpoint, tmp), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def per_rank(losses: Path) -> dict[int, dict[str, Any]]:
    rows = [json.loads(line) for line in losses.read_text().splitlines()]
    return {row["rank"]: row for row in rows}


def completed_events(log: list[str]) -> list[dict[str, Any]]:
    marker = "Checkpoint Completed "
    return [json.loads(line.split(marker, 1)[1]) for line in log if marker in line]


def test_request_sigterm_and_resume_on_two_ranks(endpoint: str, tmp_path: Path) -> None:
    # The uninterrupted reference
    # (no request and no SIGTERM: it writes no checkpoint, so the runs below start fresh)
    run_to_end(endpoint, tmp_path / "ref", tmp_path / "ref.jsonl")
    expected = per_rank(tmp_path / "ref.jsonl")
    assert sorted(expected) == [0, 1] and len(expected[0]["losses"]) == STEPS

    # A run that gets a request at step 5, then SIGTERM once that checkpoint is durable
    dynamodb = boto3.client("dynamodb", endpoint_url=endpoint)
    run = subprocess.Popen(
        torchrun_command(tmp_path / "run1.jsonl", "--step-time-s", "0.05"),
        env=torchrun_env(endpoint, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.stdout is not None
    log: list[str] = []
    requested = signalled = False
    deadline = time.monotonic() + 120
    for line in run.stdout:
        log.append(line)
        assert time.monotonic() < deadline, "".join(log)
        if not requested and "step 5/" in line:
            requested = True
            # What the control plane writes: the job's signal item, which the agent polls
            dynamodb.put_item(
                TableName=TABLE,
                Item={
                    "job_id": {"S": signal_key("team-a", JOB)},
                    "checkpoint_requested_at": {"N": repr(time.time())},
                },
            )
        if not signalled and completed_events(log):
            signalled = True
            run.send_signal(signal.SIGTERM)  # what docker stop does to the container's torchrun
    run.wait(60)
    first = per_rank(tmp_path / "run1.jsonl")
    events = completed_events(log)
    assert [e["reason"] for e in events] == ["requested", "sigterm"], "".join(log)
    requested_step, stop_step = events[0]["step"], events[1]["step"]
    assert 5 <= requested_step < stop_step < STEPS
    # Both ranks stopped at the step of the SIGTERM checkpoint, with the status of a stopped run
    assert {r: (row["stopped"], len(row["losses"])) for r, row in first.items()} == {
        0: (True, stop_step),
        1: (True, stop_step),
    }
    assert run.returncode != 0  # torchrun reports its workers' stop (143) as a failure
    # One manifest per checkpoint, naming both ranks' shards
    store = S3CheckpointStore(BUCKET, PREFIX, boto3.client("s3", endpoint_url=endpoint))
    manifests = store.manifests()
    assert [m.step for m in manifests] == [stop_step, requested_step]
    names = {f.name for f in manifests[0].files}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= names

    # The restarted run resumes on both ranks and ends where the uninterrupted run ended
    run_to_end(endpoint, tmp_path, tmp_path / "run2.jsonl")
    second = per_rank(tmp_path / "run2.jsonl")
    for rank in (0, 1):
        assert second[rank]["start"] == stop_step
        assert first[rank]["losses"] + second[rank]["losses"] == expected[rank]["losses"]  # bit-exact
