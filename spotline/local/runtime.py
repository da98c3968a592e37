"""`spotline local up`: the whole control plane on this machine.

moto's server stands in for AWS (DynamoDB, EventBridge, SQS, Step Functions, S3); the tables,
bus, rules, queues and workflows are created from `spotline.resources` and the ASL files,
as the stack creates them; the real handlers run in this process (the router delivers rule
matches to them; Step Functions' Lambda tasks are dispatched to them); a local fleet of
processes stands in for Batch and EC2; and the API handler is served over HTTP.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotline import resources as r
from spotline.aws.clients import AwsClients, reset_default_clients
from spotline.aws.plane import build_control_plane
from spotline.control.logs import FileRunLogs
from spotline.control.ports import TERMINAL_BATCH_STATUSES, BatchJobRequest, NodeView
from spotline.control.settings import Settings, get_settings
from spotline.domain import JobState
from spotline.local import lambdas, provision
from spotline.local.emulator import LocalAws
from spotline.local.fleet import LocalFleet, PoolSpec
from spotline.local.http_api import ACCESS_KEY_HEADER, LocalApiServer, LocalIdentity
from spotline.local.moto_lambda_route import LambdaTaskDispatcher
from spotline.local.router import Router
from spotline.local.spot_trace import SpotTraceReplay
from spotline.local.state import SavedState, StateStore
from spotline.sim.availability import AvailabilityTrace

log = logging.getLogger("spotline.local")


@dataclass(frozen=True)
class LocalPool:
    name: str
    gpu_type: str
    purchase: str  # spot | on-demand
    nodes: int
    gpus_per_node: int
    price: float = 1.0
    interruption_rate_per_hour: float = 0.0
    # A reserved pool (a local Capacity Block): its window, epoch seconds; None for the others.
    reserved_from: float | None = None
    reserved_until: float | None = None
    reservation_id: str | None = None


# The reservation id the local block carries (what `spotline local reservation-warning` names).
LOCAL_RESERVATION_ID = "cr-00000000000000001"


def reserved_pool(nodes: int, gpus_per_node: int, start: float, end: float) -> LocalPool:
    """A local reserved pool ("a100-block"): On-Demand nodes, prepaid, there from `start` to `end`."""
    return LocalPool(
        "a100-block",
        "a100",
        "on-demand",
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        price=0.0,
        reserved_from=start,
        reserved_until=end,
        reservation_id=LOCAL_RESERVATION_ID,
    )


@dataclass(frozen=True)
class LocalConfig:
    """What the local control plane runs: its cluster, teams and (short) time constants."""

    pools: tuple[LocalPool, ...] = (
        LocalPool(
            "a100-spot",
            "a100",
            "spot",
            nodes=2,
            gpus_per_node=4,
            price=0.33,
            interruption_rate_per_hour=0.0002,
        ),
        LocalPool("a100-on-demand", "a100", "on-demand", nodes=1, gpus_per_node=4),
    )
    teams: tuple[str, ...] = ("vision", "nlp")
    # Each team's nominal quota, in GPUs (borrowing allowed).
    team_nominal_gpus: int = 6
    # Seconds, short so a demo takes minutes: the scheduler's tick, a preempted job's grace to
    # checkpoint, the Spot notice, the protection period after a start, how long a job waits
    # before it may preempt, the agent's poll.
    tick_s: float = 2.0
    reconcile_s: float = 10.0
    grace_period_s: int = 20
    spot_notice_s: int = 12
    protection_period_s: float = 5.0
    preemption_delay_s: float = 3.0
    # A local story lasts a minute, so a preemptor does not wait for jobs about to end.
    release_wait_s: float = 0.0
    restart_cost_s: float = 2.0
    agent_poll_s: float = 0.5
    heartbeat_timeout_s: float = 60.0
    state_dir: Path = Path(".spotline")
    # Keep jobs, usage, checkpoints, team keys and ports in STATE_DIR/state/ across restarts
    # (`spotline local up --state-dir DIR`); otherwise all of it ends with the process.
    persistent: bool = False
    snapshot_s: float = 30.0  # how often the state is saved while running (and on a clean stop)
    # A reclaimed node's replacement joins its pool this long after the node died.
    capacity_return_s: float = 5.0
    region: str = "us-east-1"
    seed: int = 1
    # The Spot pool's capacity follows this availability trace (SkyPilot's format), one tick
    # per `spot_tick_s` wall seconds (`spotline local up --spot-availability FILE`); the first
    # Spot pool unless `spot_trace_pool` names another.
    spot_availability: AvailabilityTrace | None = None
    spot_tick_s: float = 2.0
    spot_trace_pool: str | None = None
    # The deadline guard on local time: a move's restart, and the scheduler's tick as its step.
    deadline_changeover_s: float = 3.0
    # A Spot launch RUNNABLE this long counts as Spot capacity missing in its pool.
    spot_missing_after_s: float = 4.0
    # On-Demand jobs move to Spot room with at least this long left (0: never).
    move_to_spot_min_remaining_s: float = 0.0

    def __post_init__(self) -> None:
        if self.spot_tick_s <= 0:
            raise ValueError(f"spot_tick_s must be a positive number of seconds, got {self.spot_tick_s!r}")
        spot = [p.name for p in self.pools if p.purchase == "spot"]
        if self.spot_trace_pool is not None and self.spot_trace_pool not in spot:
            raise ValueError(
                f"spot_trace_pool {self.spot_trace_pool!r} is not a local Spot pool"
                f" (one of {', '.join(spot)})"
            )
        if self.spot_availability is not None and not spot:
            raise ValueError("a Spot availability trace needs a Spot pool, and the local cluster has none")

    @property
    def traced_pool(self) -> str | None:
        """The Spot pool whose capacity follows the trace (None without a trace)."""
        if self.spot_availability is None:
            return None
        return self.spot_trace_pool or next(p.name for p in self.pools if p.purchase == "spot")

    def spotline_config(self, identities: dict[str, str], admins: tuple[str, ...] = ()) -> dict[str, Any]:
        """The SPOTLINE_CONFIG JSON the functions read (on AWS the stack writes it)."""
        return {
            "pools": [
                {
                    "name": p.name,
                    "gpu_type": p.gpu_type,
                    "purchase": p.purchase,
                    "capacity_gpus": p.nodes * p.gpus_per_node,
                    "gpus_per_node": p.gpus_per_node,
                    "price": p.price,
                    "interruption_rate_per_hour": p.interruption_rate_per_hour,
                    "job_queue": f"spotline-local-{p.name}",
                    **(
                        {}
                        if p.reserved_until is None or p.reserved_from is None
                        else {
                            "reservation": {
                                "start": p.reserved_from,
                                "end": p.reserved_until,
                                "reservation_id": p.reservation_id,
                            }
                        }
                    ),
                }
                for p in self.pools
            ],
            "job_definition": "spotline-local-training",
            "teams": [{"team": t, "nominal_gpus": self.team_nominal_gpus} for t in self.teams],
            "identities": identities,
            "admins": list(admins),
            "scheduler": {
                "protection_period_s": self.protection_period_s,
                "preemption_delay_s": self.preemption_delay_s,
                "release_wait_s": self.release_wait_s,
                "restart_cost_s": self.restart_cost_s,
                "deadline_changeover_s": self.deadline_changeover_s,
                "deadline_step_s": self.tick_s,
                "move_to_spot_min_remaining_s": self.move_to_spot_min_remaining_s,
            },
            "spot_missing_after_s": self.spot_missing_after_s,
            "grace_period_s": self.grace_period_s,
            "spot_notice_s": self.spot_notice_s,
            "spot_notice_margin_s": 2,
            "agent_poll_s": self.agent_poll_s,
            "heartbeat_timeout_s": self.heartbeat_timeout_s,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class TeamCredentials:
    """The AWS access key a team's jobs run with on the emulated AWS (as a team's job role's
    credentials on AWS): each team its own, none the control plane's. moto does not evaluate
    IAM, so the boundary itself is held by the policy documents (tests/infra/test_tenant_isolation.py);
    locally the keys make every request attributable to its team."""

    access_key_id: str
    secret_access_key: str

    @classmethod
    def new(cls, team: str) -> TeamCredentials:
        return cls("SLJ" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30))

    def environment(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}


class FleetLauncher:
    """`BatchLauncher` on the local fleet: each job runs with its team's credentials."""

    def __init__(self, fleet: LocalFleet, credentials: dict[str, TeamCredentials] | None = None) -> None:
        self.fleet = fleet
        self.credentials = credentials if credentials is not None else {}

    def submit(self, request: BatchJobRequest) -> str:
        credentials = self.credentials.get(request.team)
        if credentials is None:
            credentials = self.credentials.setdefault(request.team, TeamCredentials.new(request.team))
        return self.fleet.submit_job(
            job_name=request.job_name,
            job_queue=request.job_queue,
            command=request.command,
            environment={**request.environment, **credentials.environment()},
            gpus=request.gpus_per_node * request.nodes,
            nodes=request.nodes,
        )

    def find_live(self, job_queue: str, job_name: str) -> list[str]:
        return [
            job_id
            for job_id, status in self.fleet.list_jobs(job_queue, job_name)
            if status not in TERMINAL_BATCH_STATUSES
        ]

    def terminate(self, batch_job_id: str, reason: str) -> None:
        self.fleet.terminate_job(batch_job_id, reason)

    def stopped(self, batch_job_ids: Sequence[str]) -> set[str]:
        known = self.fleet.describe_jobs(batch_job_ids)
        return {i for i in batch_job_ids if known.get(i, "SUCCEEDED") in TERMINAL_BATCH_STATUSES}


# A reclaimed or failed node stays in `spotline pools` this long after it died.
RECLAIMED_SHOWN_S = 600.0


class FleetNodes:
    """The local fleet's nodes as `spotline pools` shows them (the `NodeSource` port)."""

    def __init__(self, fleet: LocalFleet) -> None:
        self.fleet = fleet

    def nodes(self, now: float) -> list[NodeView]:
        nodes, joining = self.fleet.inventory()
        found: list[NodeView] = []
        for node in nodes:
            if not node.alive:
                if node.died_at is not None and now - node.died_at <= RECLAIMED_SHOWN_S:
                    found.append(
                        NodeView(node.pool, "reclaimed", node.gpus, 0, node.instance_id, since=node.died_at)
                    )
                continue
            if node.draining:
                state, since, until = "draining", node.drained_at, node.ends_at
            else:
                state, since, until = ("running" if node.used else "idle"), node.joined_at, None
            found.append(NodeView(node.pool, state, node.gpus, node.used, node.instance_id, since, until))
        found += [NodeView(j.pool, "joining", j.gpus, since=j.since, until=j.at) for j in joining]
        return found


class LocalInstanceResolver:
    """The local fleet names a node's container instance `.../container-instance/<cluster>/<instance id>`."""

    def resolve(self, container_instances: Sequence[str]) -> list[str]:
        return sorted({arn.rsplit("/", 1)[-1] for arn in container_instances if arn})


CHECKPOINT_BUCKET = "spotline-local-checkpoints"
LOG_FILE = "control-plane.log"  # in the state dir: the handlers' logs (CloudWatch Logs on AWS)
# The states in which a job holds a run on the fleet.
_HOLDING = frozenset({JobState.ADMITTED, JobState.RUNNING, JobState.CHECKPOINTING})


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[-1])


# moto's backends, the handlers' environment and the control plane the handlers use are all
# process-wide: a second plane started beside a running one would share (and reset) its tables
# and queues, and the first plane's router would take the second one's events.
_running_lock = threading.Lock()
_running: LocalControlPlane | None = None


class PlaneAlreadyRunning(RuntimeError):
    """Only one local control plane runs in a process at a time."""


@dataclass
class LocalControlPlane:
    config: LocalConfig = field(default_factory=LocalConfig)
    aws: LocalAws | None = None
    fleet: LocalFleet | None = None
    api: LocalApiServer | None = None
    router: Router | None = None
    teams: dict[str, LocalIdentity] = field(default_factory=dict)
    # The local admin (`admins`): no team's, reads the deployment's history.
    admin: LocalIdentity | None = None
    # Each team's jobs run with these (the fleet's processes), never with the control plane's.
    job_credentials: dict[str, TeamCredentials] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _dispatcher: LambdaTaskDispatcher | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _plane: Any = None
    # The handlers' log streams while their output goes to STATE_DIR/control-plane.log.
    _log_streams: list[tuple[logging.StreamHandler[Any], Any]] = field(default_factory=list)
    _log_file: Any = None
    _store: StateStore | None = None
    _saved: SavedState = field(default_factory=SavedState)
    _tables: dict[str, str] = field(default_factory=dict)
    # What start() found in the state dir: saved items written back, and runs lost with the
    # previous process (requeued from their checkpoints).
    restored_items: int = 0
    lost_runs: list[str] = field(default_factory=list)
    # The Spot pool's availability trace playing on the fleet (`LocalConfig.spot_availability`).
    spot_replay: SpotTraceReplay | None = None

    def start(self) -> dict[str, Any]:
        """Start everything; returns (and writes) the contents of `.spotline/local.json`."""
        global _running
        with _running_lock:
            if _running is not None and _running is not self:
                raise PlaneAlreadyRunning(
                    "a local control plane is already running in this process "
                    f"(state dir {_running.config.state_dir}); stop it before starting another"
                )
            _running = self
        try:
            return self._start()
        except BaseException:
            try:  # undo what started; the start's own error is the one to report
                self.stop()
            except Exception:
                log.exception("stopping a half-started local control plane failed")
            raise

    def _start(self) -> dict[str, Any]:
        cfg = self.config
        if cfg.persistent:
            self._store = StateStore(cfg.state_dir)
            self._saved = self._store.load()  # before anything starts: a bad file stops here
        saved = self._saved
        self._save_env()
        self.aws = LocalAws(region=cfg.region, port=saved.ports.get("aws", 0))
        self.aws.start()
        made = self.aws.create_resources()
        self._tables = made.tables
        s3 = self.aws.client("s3")
        bucket = CHECKPOINT_BUCKET
        s3.create_bucket(Bucket=bucket)
        stepfunctions = self.aws.client("stepfunctions")
        machines = provision.create_state_machines(stepfunctions, prefix="spotline-local")
        if self._store is not None and not saved.empty:
            self.restored_items = self._store.restore(
                self.aws.client("dynamodb"), s3, made.tables, bucket, saved
            )

        for team in cfg.teams:
            kept = saved.teams.get(team) or {}
            key = kept.get("access_key") or "SLK" + secrets.token_hex(8).upper()
            self.teams[team] = LocalIdentity(
                team=team, access_key=key, user_arn=f"arn:aws:iam::{lambdas.ACCOUNT_ID}:user/{team}"
            )
            if kept.get("job_access_key_id") and kept.get("job_secret_access_key"):
                self.job_credentials[team] = TeamCredentials(
                    kept["job_access_key_id"], kept["job_secret_access_key"]
                )
            else:
                self.job_credentials[team] = TeamCredentials.new(team)
        identities = {identity.user_arn: team for team, identity in self.teams.items()}
        # The local admin: reads the whole deployment's history (`spotline history export`).
        admin = self.admin = LocalIdentity(
            team="",
            access_key="SLA" + secrets.token_hex(8).upper(),
            user_arn=f"arn:aws:iam::{lambdas.ACCOUNT_ID}:user/spotline-admin",
        )
        env = provision.environment(
            made.tables,
            event_bus=made.project_bus,
            state_machines=machines,
            config=cfg.spotline_config(identities, (admin.user_arn,)),
            scheduler_queue_url=made.scheduler_queue_url,
            checkpoint_bucket=bucket,
        )
        env.update(
            {
                "POWERTOOLS_SERVICE_NAME": r.POWERTOOLS_SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": r.POWERTOOLS_METRICS_NAMESPACE,
                "POWERTOOLS_TRACE_DISABLED": "true",
                "POWERTOOLS_METRICS_DISABLED": "true",
                # INFO, as on Lambda: the handlers' logs go to STATE_DIR/control-plane.log.
                "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "INFO"),
            }
        )
        os.environ.update(env)
        get_settings.cache_clear()
        reset_default_clients()
        settings = Settings.from_env(os.environ)

        events = self.aws.client("events")

        def publish(entries: list[dict[str, Any]]) -> None:
            events.put_events(Entries=entries)

        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.fleet = LocalFleet(
            [
                PoolSpec(p.name, f"spotline-local-{p.name}", p.nodes, p.gpus_per_node, p.purchase == "spot")
                for p in cfg.pools
            ],
            publish,
            log_dir=cfg.state_dir / "logs",
            capacity_return_s=cfg.capacity_return_s,
        )
        clients = AwsClients(region=cfg.region, endpoint_url=self.aws.endpoint_url)
        plane = build_control_plane(
            settings,
            clients,
            launcher=FleetLauncher(self.fleet, self.job_credentials),
            instance_resolver=LocalInstanceResolver(),
            run_logs=FileRunLogs(self.fleet.log_path),
        )
        plane.nodes = FleetNodes(self.fleet)
        from functions.runtime import use_control_plane

        # From here on the handlers (their logger exists once functions.runtime is imported) log
        # to the file, before the router, the ticks or the API can invoke one.
        self._route_logs(cfg.state_dir / LOG_FILE)
        use_control_plane(plane)
        self._plane = plane
        self._dispatcher = LambdaTaskDispatcher(
            {f.name: lambdas.import_handler(f) for f in r.FUNCTIONS}
        ).install()
        self.router = Router(
            self.aws.client("sqs"),
            made.rule_queues,
            made.scheduler_queue_url,
            observers={"spot_interruption": self._drain_warned_node},
        )
        self.router.start()
        traced = cfg.traced_pool
        if cfg.spot_availability is not None and traced is not None:
            self.spot_replay = SpotTraceReplay(
                self.fleet, traced, cfg.spot_availability, cfg.spot_tick_s, float(cfg.spot_notice_s)
            )
            self.spot_replay.start()
        self._every(cfg.tick_s, self._tick, "scheduler-tick")
        self._every(cfg.reconcile_s, self._reconcile, "reconciler")

        api_handler = lambdas.import_handler(next(f for f in r.FUNCTIONS if f.name == "api"))
        self.api = LocalApiServer(
            api_handler,
            {i.access_key: i for i in (*self.teams.values(), admin)},
            lambdas.LambdaContextStub.for_function("spotline-api"),
            port=saved.ports.get("api", 0),
        )
        self.api.start()
        self._sqs = self.aws.client("sqs")
        self._scheduler_queue_url = made.scheduler_queue_url
        info = {
            "api_url": self.api.url,
            "aws_endpoint_url": self.aws.endpoint_url,
            "region": cfg.region,
            "event_bus": made.project_bus,
            "spot_notice_s": cfg.spot_notice_s,
            "teams": {team: {"headers": {ACCESS_KEY_HEADER: i.access_key}} for team, i in self.teams.items()},
            "admin": {"headers": {ACCESS_KEY_HEADER: admin.access_key}},
        }
        if cfg.spot_availability is not None:
            trace = cfg.spot_availability
            info["spot_availability"] = {"pool": traced, "trace": trace.name, "tick_s": cfg.spot_tick_s}
        reserved = {p.name: p for p in cfg.pools if p.reserved_until is not None}
        if reserved:
            # What `spotline local reservation-warning` names: each block's reservation and end.
            info["reservations"] = {
                name: {"reservation_id": p.reservation_id, "end": p.reserved_until}
                for name, p in reserved.items()
            }
        (cfg.state_dir / "local.json").write_text(json.dumps(info, indent=2))
        if self._store is not None:
            self._saved = SavedState(
                ports={"api": _port(self.api.url), "aws": _port(self.aws.endpoint_url)},
                teams={
                    team: {
                        "access_key": identity.access_key,
                        "job_access_key_id": self.job_credentials[team].access_key_id,
                        "job_secret_access_key": self.job_credentials[team].secret_access_key,
                    }
                    for team, identity in self.teams.items()
                },
            )
            self.lost_runs = self._requeue_lost_runs()
            self.snapshot()
            self._every(cfg.snapshot_s, self.snapshot, "state-snapshot")
        return info

    def _route_logs(self, path: Path) -> None:
        """The handlers' structured (JSON) logs go to `path`, as they go to CloudWatch on AWS,
        not into the terminal of whoever runs the local runtime or the demo."""
        self._log_file = path.open("a", encoding="utf-8")
        for handler in logging.getLogger("spotline").handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                self._log_streams.append((handler, handler.setStream(self._log_file)))

    def _unroute_logs(self) -> None:
        for handler, stream in self._log_streams:
            handler.setStream(stream)
        self._log_streams.clear()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def snapshot(self) -> None:
        """Save jobs, usage, checkpoints, team keys and ports to STATE_DIR/state/ (persistent
        mode only; also every `snapshot_s` and on a clean stop)."""
        if self._store is None or self.aws is None:
            return
        self._store.snapshot(
            self.aws.client("dynamodb"), self.aws.client("s3"), self._tables, CHECKPOINT_BUCKET, self._saved
        )

    def _requeue_lost_runs(self) -> list[str]:
        """Jobs the saved state shows holding GPUs ran on the previous process's fleet, which
        died with it: each run is reported FAILED with Batch's host-loss reason, so the control
        plane requeues the job from its last checkpoint (as it does for a lost EC2 host). A job
        admitted without a Batch job is left to the reconciler's launch timeout."""
        from spotline.control.lifecycle import launch_request

        if self.fleet is None:
            return []
        lost = []
        for record in self._plane.jobs.active():
            if record.batch_job_id is None or record.state not in _HOLDING:
                continue
            request = launch_request(self._plane, record)
            self.fleet.lost_run(record.batch_job_id, request.job_name, request.job_queue, record.instance_ids)
            lost.append(record.id)
        return lost

    def stop(self) -> None:
        global _running
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._store is not None and self.api is not None:  # started: save where it stands
            try:
                self.snapshot()
            except Exception:
                log.exception("saving the local state on stop failed; the last periodic save stands")
        if self.spot_replay is not None:
            self.spot_replay.stop()
        if self.router is not None:
            self.router.stop()
        if self.fleet is not None:
            self.fleet.close()
        if self.api is not None:
            self.api.stop()
        if self._dispatcher is not None:
            self._dispatcher.uninstall()
        from functions.runtime import use_control_plane

        use_control_plane(None)
        if self.aws is not None:
            self.aws.stop()
        self._unroute_logs()
        with_file = self.config.state_dir / "local.json"
        with_file.unlink(missing_ok=True)
        self._restore_env()
        get_settings.cache_clear()
        reset_default_clients()
        with _running_lock:
            if _running is self:
                _running = None

    def trigger_pass(self) -> None:
        """A scheduling pass now (what the one-minute tick does on AWS)."""
        self._tick()

    def _drain_warned_node(self, event: dict[str, Any]) -> None:
        """A Spot warning on the default bus, from EC2 or any client (`spotline local
        spot-warning`): the local fleet does what EC2 does. The node drains now (ECS drains on
        AWS), so no requeued job is placed back on it; it is reclaimed when the notice ends
        (`spot_notice_s`), and a replacement joins the pool later. A node that merely drained
        and stayed would hold its GPUs out of the pool while the ledger still counted them."""
        instance = (event.get("detail") or {}).get("instance-id")
        if self.fleet is None or not isinstance(instance, str):
            return
        if self.fleet.is_spot(instance):
            self.fleet.reclaim_after(instance, self.config.spot_notice_s)
        else:
            log.info("Spot warning for %s, not a local Spot instance: the fleet ignores it", instance)

    def _tick(self) -> None:
        self._sqs.send_message(
            QueueUrl=self._scheduler_queue_url,
            MessageBody=json.dumps({"tick": time.time()}),
            MessageGroupId=r.SCHEDULER_MESSAGE_GROUP,
        )

    def _reconcile(self) -> None:
        event = {
            "version": "0",
            "id": secrets.token_hex(8),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": lambdas.ACCOUNT_ID,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": self.config.region,
            "resources": [],
            "detail": {},
        }
        reconciler = next(f for f in r.FUNCTIONS if f.name == "reconciler")
        lambdas.import_handler(reconciler)(
            event, lambdas.LambdaContextStub.for_function("spotline-reconciler")
        )

    def _every(self, period_s: float, action: Any, name: str) -> None:
        def loop() -> None:
            while not self._stop.wait(period_s):
                try:
                    action()
                except Exception:
                    if not self._stop.is_set():
                        log.exception("%s failed", name)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _save_env(self) -> None:
        keys = (
            [t.env for t in r.TABLES]
            + [m.env for m in r.STATE_MACHINES]
            + [
                r.ENV_EVENT_BUS,
                r.ENV_CONFIG,
                r.ENV_SCHEDULER_QUEUE_URL,
                r.ENV_CHECKPOINT_BUCKET,
                "AWS_ENDPOINT_URL",
                "AWS_DEFAULT_REGION",
                "AWS_REGION",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "POWERTOOLS_SERVICE_NAME",
                "POWERTOOLS_METRICS_NAMESPACE",
                "POWERTOOLS_TRACE_DISABLED",
                "POWERTOOLS_METRICS_DISABLED",
                "POWERTOOLS_LOG_LEVEL",
            ]
        )
        self._saved_env = {k: os.environ.get(k) for k in keys}

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
