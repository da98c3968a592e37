"""The scheduling core's data: jobs, pools, team quotas and a snapshot of the cluster.

Times are seconds since the epoch (floats). The core never reads a clock: every function that
needs the current time takes `now`.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spotline.domain.admission_models import DeadlineAnswer
from spotline.domain.arrays import (
    MAX_ARRAY_ELEMENTS,
    MAX_DEPENDENCIES,
    Dependency,
    check_sweep,
    parse_array_range,
    sweep_elements,
)
from spotline.domain.elastic_spec import ElasticSpec


class Priority(StrEnum):
    """Priority classes, highest first."""

    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for low ... 3 for critical: larger is more important."""
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2, Priority.CRITICAL: 3}
PRIORITIES_HIGH_FIRST: tuple[Priority, ...] = (
    Priority.CRITICAL,
    Priority.HIGH,
    Priority.NORMAL,
    Priority.LOW,
)


class SpotPreference(StrEnum):
    AUTO = "auto"
    REQUIRED = "required"
    NEVER = "never"


class Purchase(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class JobState(StrEnum):
    """The job lifecycle (architecture.md: these names are a contract)."""

    PENDING = "PENDING"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    CHECKPOINTING = "CHECKPOINTING"
    PREEMPTED = "PREEMPTED"
    INTERRUPTED = "INTERRUPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

# Allowed transitions: every state change is checked against this table before it is written.
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED}),
    JobState.ADMITTED: frozenset(
        {JobState.RUNNING, JobState.PENDING, JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED}
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.CHECKPOINTING,
            JobState.INTERRUPTED,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.CHECKPOINTING: frozenset(
        {
            JobState.PREEMPTED,
            JobState.INTERRUPTED,
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.INTERRUPTED: frozenset({JobState.PENDING, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def can_transition(source: JobState, target: JobState) -> bool:
    """True when the lifecycle allows moving a job from `source` to `target`."""
    return target in TRANSITIONS[source]


# RFC 3339 date-time, as the OpenAPI document's `format: date-time` says (pydantic alone would
# also take a number of seconds, a bare date or a digit string).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?")


def _rfc3339(value: Any) -> Any:
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError("not an ISO-8601 date-time (e.g. 2030-01-31T18:00:00Z)")
    if not isinstance(value, (str, datetime)) and value is not None:
        raise ValueError("a date-time is a string (ISO-8601, e.g. 2030-01-31T18:00:00Z)")
    return value


# A sweep's values: what a YAML or JSON list of scalars holds (strict: no coercion).
SweepValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(strict=True)]
    | Annotated[float, Field(strict=True, allow_inf_nan=False)]
    | Annotated[str, Field(max_length=256, strict=True)]
)

# A deadline as the API takes it: an ISO-8601 string (or a datetime from Python code), nothing else.
DateTime = Annotated[datetime, BeforeValidator(_rfc3339)]


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn")


def check_name(value: str) -> str:
    """A job's name: some visible character, no control character."""
    if any(_is_control(c) for c in value):
        raise ValueError("contains a control character")
    if not value.strip():
        raise ValueError("is blank (only whitespace)")
    return value


def check_image(value: str) -> str:
    """A container image reference: no whitespace and no control character."""
    if any(c.isspace() or _is_control(c) for c in value):
        raise ValueError("contains whitespace or a control character")
    return value


def check_command(value: list[str]) -> list[str]:
    """argv: every argument non-empty, none with a NUL byte (execve cannot pass one)."""
    for index, arg in enumerate(value):
        if not arg:
            raise ValueError(f"argument {index} is empty")
        if "\0" in arg:
            raise ValueError(f"argument {index} contains a NUL byte")
    if not value[0].strip():
        raise ValueError("the program (argument 0) is blank")
    return value


# A job's own environment variables (`env`): POSIX-portable names, bounded sizes (they travel in
# AWS Batch's 8 KiB of container overrides, with the command), none that the agent, AWS or a gang's
# rendezvous sets, and no secret in plain text (a spec is stored and shown as written).
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
MAX_ENV_VARS = 64
MAX_ENV_NAME = 128
MAX_ENV_VALUE = 4096
RESERVED_ENV_PREFIXES = ("AWS_", "SPOTLINE_", "ECS_")
RESERVED_ENV_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK"}
)
SECRETS_POINTER = (
    "keep secrets out of the job spec (it is stored and shown as written): store them in AWS Secrets"
    " Manager or SSM Parameter Store and read them at run time (docs: security.md, Secrets for jobs)"
)
# Name parts that say a value is a credential (HF_TOKEN, WANDB_API_KEY, DB_PASSWORD; not
# TOKENIZERS_PARALLELISM), and the shapes of well-known credentials.
_SECRET_NAME_PARTS = frozenset(
    {"SECRET", "PASSWORD", "PASSWD", "TOKEN", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)
_SECRET_NAME_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("AUTH", "KEY")})
_SECRET_VALUES = (
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.")),
    ("a URL with a password", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")),
)


def check_env(value: dict[str, str]) -> dict[str, str]:
    """A job's environment: see ENV_NAME and the limits above; the first problem, naming the
    variable."""
    if len(value) > MAX_ENV_VARS:
        raise ValueError(f"{len(value)} variables, at most {MAX_ENV_VARS}")
    for name, text in value.items():
        if len(name) > MAX_ENV_NAME or not ENV_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a variable name: upper-case letters, digits and _, not starting with a"
                f" digit, at most {MAX_ENV_NAME} characters"
            )
        if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV_NAMES:
            prefixes = ", ".join(p + "*" for p in RESERVED_ENV_PREFIXES)
            raise ValueError(
                f"{name} is reserved: Spotline, AWS and the gang's rendezvous set {prefixes} and"
                f" {', '.join(sorted(RESERVED_ENV_NAMES))}"
            )
        if len(text) > MAX_ENV_VALUE:
            raise ValueError(f"{name}: {len(text)} characters, at most {MAX_ENV_VALUE}")
        if "\0" in text:
            raise ValueError(f"{name}: contains a NUL byte")
        parts = name.split("_")
        if _SECRET_NAME_PARTS & set(parts) or _SECRET_NAME_PAIRS & set(itertools.pairwise(parts)):
            raise ValueError(f"{name}: its name says it holds a secret; {SECRETS_POINTER}")
        for what, pattern in _SECRET_VALUES:
            if pattern.search(text):
                raise ValueError(f"{name}: its value looks like {what}; {SECRETS_POINTER}")
    return value


class JobSpec(BaseModel):
    """What a team submits (the body of `POST /jobs`, or the file `spotline submit` reads).

    Validation that depends on the time (a deadline in the past) or on the cluster (an unknown
    GPU type) reads `now` and `gpu_types` from the validation context, so the model stays pure:
    `JobSpec.model_validate(body, context={"now": now, "gpu_types": {"a100", ...}})`.
    """

    # Every number finite (a JSON number too large for a float parses as inf) and no coercion a
    # user would not expect: `true` or "4" is not a GPU count, 1.5 is not a count at all.
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True, allow_inf_nan=False)

    name: Annotated[str, AfterValidator(check_name)] = Field(
        min_length=1,
        max_length=128,
        strict=True,
        description="A name for people: shown by `spotline list` and the dashboard; need not be unique.",
    )
    priority: Priority = Field(
        default=Priority.NORMAL,
        description="The priority class: a higher class is admitted first and may preempt lower ones"
        " (within the team's policy: a team may be capped below `critical`).",
    )
    gpus: int = Field(
        gt=0,
        le=4096,
        strict=True,
        description="GPUs in all (over every node of a gang): a whole number that `nodes` divides.",
    )
    image: Annotated[str, AfterValidator(check_image)] = Field(
        min_length=1,
        max_length=512,
        strict=True,
        description="The container image the command runs in on AWS (its ENTRYPOINT is the Spotline"
        " agent's wrapper); the local runtime runs the command without pulling it.",
    )
    command: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=4096, strict=True)]], AfterValidator(check_command)
    ] = Field(
        min_length=1,
        max_length=256,
        description="The program and its arguments (argv, no shell), run under the agent; with `env`,"
        " at most 6 KiB as JSON (AWS Batch's container overrides).",
    )
    gpu_type: str | None = Field(
        default=None,
        max_length=64,
        strict=True,
        description="A GPU type of the deployment's pools (e.g. `a100`); any type when left out.",
    )
    nodes: int = Field(
        default=1,
        gt=0,
        le=512,
        strict=True,
        description="Gang size: more than 1 runs as an AWS Batch multi-node parallel job (On-Demand"
        " only), each node with `gpus / nodes` GPUs and the rendezvous variables.",
    )
    deadline: DateTime | None = Field(
        default=None,
        description="When the job must be done (ISO-8601 with a zone, in the future): the deadline"
        " guard moves it off Spot in time to make it.",
    )
    spot: SpotPreference = Field(
        default=SpotPreference.AUTO,
        description="`auto`: Spot or On-Demand, whichever the scheduler judges better; `required`:"
        " Spot only; `never`: On-Demand only.",
    )
    checkpoint_interval_s: float = Field(
        default=1800.0,
        gt=0,
        le=1e9,
        strict=True,
        description="Seconds between periodic checkpoints (the agent's SPOTLINE_CHECKPOINT_INTERVAL_S),"
        " besides those a preemption, a Spot notice or SIGTERM ask for.",
    )
    expected_runtime_s: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        strict=True,
        description="Your estimate of the run time without interruptions: the scheduler plans with it"
        " until the job reports progress.",
    )
    max_runtime_s: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        strict=True,
        description="A cap on the run time over all runs: each run gets what is left as its AWS Batch"
        " attempt timeout, and a run that reaches it fails.",
    )
    # An array (spotline.domain.arrays): indexes "0-15", or a sweep matrix; and its cap.
    array: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        strict=True,
        description='An array of jobs, one per index: `"0-15"`, `"1,3,5-7"`, or Slurm\'s `"0-15%4"`'
        " (with its cap); each element gets SPOTLINE_ARRAY_INDEX.",
    )
    sweep: dict[str, list[SweepValue]] | None = Field(
        default=None,
        max_length=16,
        description="A sweep: one job per combination of the values (`{lr: [0.1, 0.01]}`); each element"
        " gets `SPOTLINE_PARAM_<NAME>` and SPOTLINE_ARRAY_INDEX.",
    )
    max_running: int | None = Field(
        default=None,
        gt=0,
        le=MAX_ARRAY_ELEMENTS,
        strict=True,
        description="With `array` or `sweep`: at most this many elements hold GPUs at once.",
    )
    # Dependencies (Slurm's --dependency): job or array ids of the same team; afterok by default.
    after: list[Annotated[str, Field(min_length=1, max_length=64, strict=True)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DEPENDENCIES,
        description="Job or array ids of the same team that must end before this job is queued.",
    )
    dependency: Dependency | None = Field(
        default=None,
        description="With `after`: `afterok` (the default: they must succeed) or `afterany` (any end).",
    )
    env: Annotated[
        dict[str, Annotated[str, Field(strict=True)]] | None, AfterValidator(lambda v: v and check_env(v))
    ] = Field(
        default=None,
        description="Environment variables for the command (`{NAME: value}`): names `[A-Z_][A-Z0-9_]*`,"
        f" at most {MAX_ENV_VARS}, values at most {MAX_ENV_VALUE} characters; AWS_*, SPOTLINE_*, ECS_*"
        " and the rendezvous names are refused, and so is anything that looks like a secret (keep"
        " secrets in Secrets Manager or Parameter Store).",
    )

    elastic: ElasticSpec | None = Field(
        default=None,
        description="An elastic job (`{min_gpus, max_gpus, sizes or step, cooldown_s}`): shrunk toward"
        " min_gpus instead of preempted, grown into idle GPUs up to max_gpus; each resize is a"
        " checkpoint and a restart at the new size (`gpus` is the size it runs at; docs: elastic.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _array_cap_suffix(cls, data: Any) -> Any:
        """Slurm's spelling of the cap, `array: "0-15%4"`, is `max_running: 4`."""
        if isinstance(data, dict) and isinstance(data.get("array"), str) and "%" in data["array"]:
            indexes, _, cap = data["array"].partition("%")
            if not cap.strip().isdigit():
                raise ValueError(f"array: {cap!r} after % is not a number of elements")
            if data.get("max_running") is not None:
                raise ValueError("array: give the cap as %N or as max_running, not both")
            data = {**data, "array": indexes.strip(), "max_running": int(cap)}
        return data

    @field_validator("array")
    @classmethod
    def _array_range(cls, value: str | None) -> str | None:
        if value is not None:
            parse_array_range(value)
        return value

    @field_validator("sweep")
    @classmethod
    def _sweep_matrix(cls, value: dict[str, list[SweepValue]] | None) -> dict[str, list[SweepValue]] | None:
        if value is not None:
            check_sweep(value)
        return value

    @field_validator("after")
    @classmethod
    def _after_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("names a job twice")
        return value

    @field_validator("deadline")
    @classmethod
    def _deadline_in_future(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("deadline must carry a time zone (ISO-8601 with Z or an offset)")
        now = (info.context or {}).get("now")
        if now is not None and value.timestamp() <= float(now):
            raise ValueError("deadline is in the past")
        return value

    @field_validator("gpu_type")
    @classmethod
    def _known_gpu_type(cls, value: str | None, info: ValidationInfo) -> str | None:
        known = (info.context or {}).get("gpu_types")
        if value is not None and known is not None and value not in known:
            raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(sorted(known))}")
        return value

    @model_validator(mode="after")
    def _gang_divides_gpus(self) -> JobSpec:
        if self.gpus % self.nodes != 0:
            raise ValueError(f"nodes: gang size {self.nodes} does not divide gpus={self.gpus}")
        if self.nodes > 1 and self.spot is SpotPreference.REQUIRED:
            raise ValueError(
                "spot: a multi-node job runs only On-Demand (AWS Batch runs no multi-node parallel job"
                " on Spot); use spot auto or never"
            )
        if (
            self.max_runtime_s is not None
            and self.expected_runtime_s is not None
            and self.expected_runtime_s > self.max_runtime_s
        ):
            raise ValueError("expected_runtime_s: larger than max_runtime_s")
        if self.array is not None and self.sweep is not None:
            raise ValueError("array: give array or sweep, not both")
        if self.max_running is not None and self.array is None and self.sweep is None:
            raise ValueError("max_running: applies to an array; give array or sweep")
        if self.dependency is not None and self.after is None:
            raise ValueError("dependency: applies to jobs named in after; give after")
        if self.elastic is not None:
            self._check_elastic(self.elastic)
        return self

    def _check_elastic(self, elastic: ElasticSpec) -> None:
        """`gpus` is one of its sizes; a multi-node job's sizes are whole nodes of its shape, at
        least two of them (it stays a multi-node job at every size)."""
        if self.gpus not in elastic.ladder():
            raise ValueError(f"elastic: gpus={self.gpus} is not one of its sizes {list(elastic.ladder())}")
        if self.nodes > 1:
            per_node = self.gpus_per_node
            listed = elastic.sizes is not None or elastic.step is not None
            sizes = elastic.ladder() if listed else (elastic.min_gpus, elastic.max_gpus)
            odd = [s for s in sizes if s % per_node or s < 2 * per_node]
            if odd:
                raise ValueError(
                    f"elastic: size {odd[0]} is not 2 or more whole nodes of {per_node} GPUs (a"
                    " multi-node job grows and shrinks by whole nodes, and stays multi-node)"
                )

    @property
    def is_array(self) -> bool:
        return self.array is not None or self.sweep is not None

    def elements(self) -> list[tuple[int, dict[str, str]]]:
        """The (index, parameters) of each element of an array spec (one element, index 0 and
        no parameters, for a plain job)."""
        if self.array is not None:
            return [(i, {}) for i in parse_array_range(self.array)]
        if self.sweep is not None:
            return list(enumerate(sweep_elements(self.sweep)))
        return [(0, {})]

    def elastic_sizes(self) -> tuple[int, ...]:
        """The sizes it may run at (just `gpus` for a job that is not elastic)."""
        if self.elastic is None:
            return (self.gpus,)
        return self.elastic.node_sizes(self.gpus_per_node) if self.nodes > 1 else self.elastic.ladder()

    def at_size(self, gpus: int) -> JobSpec:
        """The spec resized to `gpus` (one of `elastic_sizes`): a multi-node job keeps its GPUs per
        node and changes its node count."""
        nodes = gpus // self.gpus_per_node if self.nodes > 1 else 1
        return self.model_copy(update={"gpus": gpus, "nodes": nodes})

    def element_spec(self) -> JobSpec:
        """The spec each element stores: the array's fields left out (the element's own index,
        parameters and cap are on its `Job`)."""
        return self.model_copy(update={"array": None, "sweep": None, "max_running": None})

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def deadline_at(self) -> float | None:
        return None if self.deadline is None else self.deadline.timestamp()


class Job(BaseModel):
    """A job with its spec and what the control plane knows about its progress."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    team: str
    spec: JobSpec
    state: JobState = JobState.PENDING
    version: int = 0
    submitted_at: float
    # When the job last entered the queue: its submission, or its last requeue.
    enqueued_at: float
    # When the job last started running (None while it has never run since its last requeue).
    started_at: float | None = None
    # Work done in earlier runs that survived (up to the last durable checkpoint), in seconds.
    runtime_s: float = 0.0
    last_checkpoint_at: float | None = None
    last_checkpoint_step: int | None = None
    last_checkpoint_uri: str | None = None
    # What the agent measured of its last checkpoint (spotline.domain.checkpoint_cost uses them).
    checkpoint_bytes: int | None = Field(default=None, ge=0)
    checkpoint_write_s: float | None = Field(default=None, ge=0)
    checkpoint_restore_s: float | None = Field(default=None, ge=0)
    progress: float | None = Field(default=None, ge=0.0, le=1.0)
    utilization: float | None = Field(default=None, ge=0.0, le=1.0)
    preemptions: int = 0
    interruptions: int = 0
    lost_work_s: float = 0.0
    pool: str | None = None
    # When its last resize (an elastic job's) started: the next waits its `elastic.cooldown_s`.
    # The run after a resize keeps `started_at` (a resize renews no protection period).
    resized_at: float | None = None
    # The size an elastic job ran at before it first grew into idle GPUs: what it holds above
    # it is given back first when a job arrives (None: it never grew).
    base_gpus: int | None = Field(default=None, gt=0)
    # An array's element: the array's id, its index and parameters, and the array's cap.
    array_id: str | None = None
    array_index: int | None = None
    array_params: dict[str, str] | None = None
    max_running: int | None = None
    # What its deadline was answered at submission, and the On-Demand GPUs held for it.
    deadline_answer: DeadlineAnswer | None = None

    # Conveniences that read like the domain.
    @property
    def priority(self) -> Priority:
        return self.spec.priority

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def nodes(self) -> int:
        return self.spec.nodes

    @property
    def disruptions(self) -> int:
        """Preemptions plus interruptions this job has suffered."""
        return self.preemptions + self.interruptions

    def elapsed_s(self, now: float) -> float:
        """Work done so far, counting the current run up to `now`."""
        current = 0.0 if self.started_at is None else max(0.0, now - self.started_at)
        return self.runtime_s + current

    def remaining_s(self, now: float) -> float | None:
        """Estimated run time left: from reported progress when there is some, else from the
        declared `expected_runtime_s`; None when neither is known."""
        elapsed = self.elapsed_s(now)
        if self.progress is not None and self.progress > 0.0 and elapsed > 0.0:
            return max(0.0, elapsed * (1.0 - self.progress) / self.progress)
        expected = self.spec.expected_runtime_s
        if expected is not None:
            return max(0.0, expected - elapsed)
        return None

    def unsaved_work_s(self, now: float) -> float:
        """Seconds of the current run that a stop now would lose (since the last durable
        checkpoint of this run, or since the run started)."""
        if self.started_at is None:
            return 0.0
        since = self.started_at
        if self.last_checkpoint_at is not None and self.last_checkpoint_at > since:
            since = self.last_checkpoint_at
        return max(0.0, now - since)

    def with_changes(self, **changes: Any) -> Job:
        """A copy with some fields changed (the model is immutable)."""
        return self.model_copy(update=changes)


class ReservedWindow(BaseModel):
    """When a reserved pool's capacity is there (an EC2 Capacity Block or an On-Demand Capacity
    Reservation): paid for from `start` to `end` (seconds since the epoch), used or not."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    start: float
    end: float
    # The Capacity Block's reservation id, or the ODCR group's ARN (what the events name).
    reservation_id: str | None = None

    @model_validator(mode="after")
    def _ends_after_start(self) -> ReservedWindow:
        if not self.end > self.start:
            raise ValueError(f"a reservation must end after it starts (start {self.start}, end {self.end})")
        return self


class Pool(BaseModel):
    """Capacity of one GPU type bought one way (one Batch compute environment and job queue)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    gpu_type: str
    purchase: Purchase
    capacity_gpus: int = Field(ge=0)
    gpus_per_node: int = Field(default=8, gt=0)
    # Price of a GPU-hour relative to On-Demand (1.0 for On-Demand, 1 - savings for Spot, 0 for
    # a reserved pool: paid for up front, it costs nothing at the margin).
    price: float = Field(default=1.0, ge=0)
    # Expected reclaims per instance-hour (0 for On-Demand).
    interruption_rate_per_hour: float = Field(default=0.0, ge=0)
    # A reserved pool's window (`spotline.domain.reserved`); None for Spot and On-Demand pools.
    reservation: ReservedWindow | None = None

    @property
    def is_spot(self) -> bool:
        return self.purchase is Purchase.SPOT

    @property
    def is_reserved(self) -> bool:
        return self.reservation is not None

    @model_validator(mode="after")
    def _reserved_is_not_spot(self) -> Pool:
        if self.reservation is not None and self.purchase is Purchase.SPOT:
            raise ValueError(f"pool {self.name}: a reserved pool is not Spot (purchase on-demand)")
        return self

    def demand_gpus(self, job: Job) -> int:
        """GPUs a job takes in this pool: a gang job (nodes > 1) takes whole nodes."""
        spec = job.spec  # (read once: a pass asks this for most jobs it decides)
        if spec.nodes > 1:
            return spec.nodes * self.gpus_per_node
        return spec.gpus

    def can_host(self, job: Job) -> bool:
        """GPU type and node shape allow the job here (capacity aside). A gang job (nodes > 1)
        runs only On-Demand: AWS Batch runs no multi-node parallel job on a Spot compute
        environment."""
        if job.spec.gpu_type is not None and job.spec.gpu_type != self.gpu_type:
            return False
        if job.nodes > 1 and self.is_spot:
            return False
        return job.spec.gpus_per_node <= self.gpus_per_node and self.demand_gpus(job) <= self.capacity_gpus


class TeamQuota(BaseModel):
    """A team's share of the cohort, in Kueue's sense.

    `nominal_gpus` is the team's own quota; it may use up to `borrowing_limit_gpus` more of
    other teams' idle quota (None: no limit), and lend at most `lending_limit_gpus` of its own
    idle quota (None: all of it). `weight` is its fair-share.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    team: str
    nominal_gpus: int = Field(ge=0)
    borrowing_limit_gpus: int | None = Field(default=None, ge=0)
    lending_limit_gpus: int | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, gt=0)


class MovingTo(BaseModel):
    """What the allocation of a job moving between Spot and On-Demand leaves for: to resume in
    `pool`, whose GPUs a pass holds for it until it has checkpointed, left and been requeued."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    pool: str


# What a leaving allocation leaves for: the job id of the preemptor it makes room for (or the
# name of another disruption, e.g. an interruption), or a move.
DrainTarget = str | MovingTo


class Allocation(BaseModel):
    """A job holding GPUs in a pool: running, or checkpointing before it leaves."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    job: Job
    pool: str
    gpus: int = Field(gt=0)
    # Set while the job checkpoints before it leaves (it cannot be picked again).
    draining_for: DrainTarget | None = None
    # An elastic job's resize under way: the size it restarts at here once its checkpoint is
    # written (`gpus` is what it holds meanwhile: the larger of the two sizes).
    resize_to: int | None = Field(default=None, gt=0)

    @property
    def leaving_gpus(self) -> int:
        """GPUs it gives back when it has checkpointed: all of them, or a shrink's difference."""
        return self.gpus if self.resize_to is None else max(0, self.gpus - self.resize_to)


class SpotPoolSignal(BaseModel):
    """What the control plane knows of a Spot pool's capacity at a pass (`spot_watch.PoolWatch`):
    whether Spot is there (its last observation), how long it has been missing, and its history
    over a bounded window (observed and available seconds, completed outage lengths, ascending).

    `spans_s` places the completed outages in time: `(began, ended)` in seconds before the pass,
    oldest first, clipped to the window (at most `spot_watch.MAX_OUTAGES` of them). The deadline
    guard's plan samples the history from them (`deadline_plan.observations`); only the past."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    available: bool = True
    outage_s: float = Field(default=0.0, ge=0)
    observed_s: float = Field(default=0.0, ge=0)
    available_s: float = Field(default=0.0, ge=0)
    outages_s: tuple[float, ...] = ()
    spans_s: tuple[tuple[float, float], ...] = ()
    # A rebalance recommendation for one of the pool's instances within the last
    # `spot_watch.AT_RISK_S`, with Spot there: capacity at elevated risk of reclaim.
    at_risk: bool = False


class ClusterSnapshot(BaseModel):
    """What one scheduling pass sees: pools, who holds what, quotas and fair-share usage.

    `usage_gpu_hours` is each team's decayed past usage (Slurm's fair-share input), kept by the
    adapter that owns the history.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    pools: dict[str, Pool]
    allocations: tuple[Allocation, ...] = ()
    quotas: dict[str, TeamQuota] = Field(default_factory=dict)
    usage_gpu_hours: dict[str, float] = Field(default_factory=dict)
    # What the control plane has seen of each Spot pool's capacity (absent: nothing seen, and
    # Spot counts as there): the deadline guard's history and Spot signal.
    spot: dict[str, SpotPoolSignal] = Field(default_factory=dict)

    @classmethod
    def build(
        cls,
        pools: Iterable[Pool],
        allocations: Iterable[Allocation] = (),
        quotas: Iterable[TeamQuota] = (),
        usage_gpu_hours: Mapping[str, float] | None = None,
        spot: Mapping[str, SpotPoolSignal] | None = None,
    ) -> ClusterSnapshot:
        return cls(
            pools={p.name: p for p in pools},
            allocations=tuple(allocations),
            quotas={q.team: q for q in quotas},
            usage_gpu_hours=dict(usage_gpu_hours or {}),
            spot=dict(spot or {}),
        )

    def used_gpus(self, pool: str) -> int:
        return sum(a.gpus for a in self.allocations if a.pool == pool)

    def free_gpus(self, pool: str) -> int:
        return self.pools[pool].capacity_gpus - self.used_gpus(pool)

    def team_usage(self) -> dict[str, int]:
        usage: dict[str, int] = {}
        for a in self.allocations:
            usage[a.job.team] = usage.get(a.job.team, 0) + a.gpus
        return usage

    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(p.gpu_type for p in self.pools.values())

    @property
    def total_gpus(self) -> int:
        return sum(p.capacity_gpus for p in self.pools.values())
