"""How a checkpoint request reaches the agent: its job's signal item and, on AWS, instance metadata.

On AWS nothing can signal a Batch container except stopping it, so the control plane writes
`checkpoint_requested_at` on the job's signal item (`signal#<team>#<job_id>` in the jobs table,
written with the job's item) and the agent polls it (architecture.md, "The agent's side of a
preemption"); a Spot reclaim shows up in instance metadata two minutes ahead. The team's job
role may read that item and no other (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spotline.resources import JOBS, signal_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)

REQUEST_ATTRIBUTE = "checkpoint_requested_at"
# The Batch job the control plane recorded as the job's current run (`JobRecord.batch_job_id`).
RUN_ATTRIBUTE = "batch_job_id"


@dataclass(frozen=True)
class JobSignals:
    """What the agent reads from its job's item at each poll."""

    checkpoint_requested_at: float | None = None
    # The run the control plane recorded (None until it has recorded one): a container whose own
    # Batch job id differs is a stray run (a launch submitted twice, a run already replaced).
    batch_job_id: str | None = None


class JobRecordPoller:
    """Reads `checkpoint_requested_at` (epoch seconds) and the recorded run from the job's signal
    item, `signal#<team>#<job_id>` (without a team, a standalone run: the job's own item).

    One consistent GetItem that projects those two attributes: about 1 read unit per poll.
    """

    def __init__(self, client: DynamoDBClient, table: str, job_id: str, team: str | None = None) -> None:
        self.client = client
        self.table = table
        self.job_id = job_id
        self.key = signal_key(team, job_id) if team else job_id

    def read(self) -> JobSignals:
        response = self.client.get_item(
            TableName=self.table,
            Key={JOBS.partition_key: {"S": self.key}},
            ProjectionExpression="#requested, #run",
            ExpressionAttributeNames={"#requested": REQUEST_ATTRIBUTE, "#run": RUN_ATTRIBUTE},
            ConsistentRead=True,
        )
        item = response.get("Item", {})
        requested: float | None = None
        value = item.get(REQUEST_ATTRIBUTE)
        if value is not None and "N" in value:
            requested = float(value["N"])
        elif value is not None and "S" in value:  # tolerate a string-typed timestamp from a hand-written item
            requested = float(value["S"])
        run = item.get(RUN_ATTRIBUTE, {}).get("S")
        return JobSignals(checkpoint_requested_at=requested, batch_job_id=run)


@dataclass(frozen=True)
class SpotInstanceAction:
    """The body of /latest/meta-data/spot/instance-action: {"action": "terminate", "time": ...}."""

    action: str
    time: str


# urlopen-compatible: (request, timeout) -> response with .read() / .status
Opener = Callable[..., Any]


class InstanceMetadata:
    """A minimal IMDSv2 client (token PUT, then GETs with the token). Standard library only."""

    TOKEN_TTL_S = 21600

    def __init__(
        self,
        endpoint: str,
        *,
        timeout_s: float = 1.0,
        opener: Opener = urllib.request.urlopen,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self._open = opener
        self._clock = clock
        self._token: str | None = None
        self._token_expires = 0.0
        self._lock = threading.Lock()  # the poller thread and the main thread share the token

    def _fetch_token(self) -> str:
        request = urllib.request.Request(
            f"{self.endpoint}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.TOKEN_TTL_S)},
        )
        with self._open(request, timeout=self.timeout_s) as response:
            token: str = response.read().decode()
        return token

    def _token_now(self, refresh: bool = False) -> str:
        with self._lock:
            # Renew a minute early so a token never expires between fetching and using it.
            if refresh or self._token is None or self._clock() >= self._token_expires - 60:
                self._token = self._fetch_token()
                self._token_expires = self._clock() + self.TOKEN_TTL_S
            return self._token

    def get(self, path: str) -> str | None:
        """GET /latest/meta-data/<path>: its text, or None on 404."""
        for attempt in range(2):
            request = urllib.request.Request(
                f"{self.endpoint}/latest/meta-data/{path.lstrip('/')}",
                headers={"X-aws-ec2-metadata-token": self._token_now(refresh=attempt > 0)},
            )
            try:
                with self._open(request, timeout=self.timeout_s) as response:
                    text: str = response.read().decode()
                    return text
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401 and attempt == 0:
                    continue  # the token expired or the instance was restored: get a new one
                raise
        return None  # pragma: no cover - the loop always returns or raises

    def spot_instance_action(self) -> SpotInstanceAction | None:
        """The pending Spot interruption, or None (IMDS answers 404 until there is one)."""
        body = self.get("spot/instance-action")
        if body is None:
            return None
        parsed = json.loads(body)
        return SpotInstanceAction(action=str(parsed.get("action", "")), time=str(parsed.get("time", "")))

    def instance_id(self) -> str | None:
        return self.get("instance-id")

    def region(self) -> str | None:
        return self.get("placement/region")
