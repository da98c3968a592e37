"""The stores' contract: what every implementation of the ports' stores (`spotline.control.ports`)
does, run against the DynamoDB adapters on moto and the memory stores (`spotline.control.memory`)
alike. The services' tests run on the memory stores in the fast tier (`tests/unit/control`); this
suite is what makes that a test of production behaviour.

Above all, every state change is a conditional write: a transition only from the state and version
the caller read, a new job only under a free id, a reservation only within its counter's limit,
and a transaction all or nothing."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from moto import mock_aws

from spotline.aws.clients import AwsClients
from spotline.aws.costs import CostBook
from spotline.aws.instances import InstanceRepository
from spotline.aws.jobs import JobRepository
from spotline.aws.ledger import LedgerRepository
from spotline.aws.page_tokens import PageTokens
from spotline.aws.spot_pools import SpotPoolHistory
from spotline.aws.timeline import TimelineRepository
from spotline.control import memory
from spotline.control.errors import (
    CapacityExhausted,
    InvalidPageToken,
    InvalidTransition,
    ItemTooLarge,
    JobAlreadyExists,
    JobNotFound,
    StaleJobError,
)
from spotline.control.months import month_of
from spotline.control.ports import (
    CostStore,
    InstanceStore,
    JobStore,
    LedgerStore,
    PageTokenStore,
    SpotPoolStore,
    TimelineStore,
)
from spotline.control.records import (
    ARRAY_CREATING,
    ARRAY_READY,
    ArrayRecord,
    Counter,
    JobRecord,
    TimelineEntry,
)
from spotline.domain import Job, JobSpec, JobState, Priority, TeamQuota
from spotline.local.provision import create_tables

from .helpers import REGION

NOW = 1_800_000_000.0
HALF_LIFE_S = 7 * 86400.0


@dataclass
class Stores:
    backend: str
    jobs: JobStore
    timeline: TimelineStore
    ledger: LedgerStore
    instances: InstanceStore
    pages: PageTokenStore
    costs: CostStore
    spot_pools: SpotPoolStore
    commits: list[tuple[str, JobState, int]] = field(default_factory=list)

    def record(self, record: JobRecord, entries: Any) -> None:
        self.commits.append((record.id, record.state, record.version))


@pytest.fixture(scope="module")
def moto_clients() -> Iterator[AwsClients]:
    """One moto for the module; each test gets tables of its own (`_fresh`)."""
    with mock_aws():
        yield AwsClients(region=REGION)


_tables = itertools.count()


def _on_moto(clients: AwsClients) -> Stores:
    names = create_tables(clients.client("dynamodb"), prefix=f"contract{next(_tables)}")
    client = clients.dynamodb
    tables = {logical: name for logical, name in names.items()}
    timeline = TimelineRepository(client, tables["Timeline"])
    ledger = LedgerRepository(client, tables["Ledger"], usage_half_life_s=HALF_LIFE_S)
    stores = Stores(
        "moto",
        jobs=JobRepository(client, tables["Jobs"], timeline, ledger),
        timeline=timeline,
        ledger=ledger,
        instances=InstanceRepository(client, tables["Instances"]),
        pages=PageTokens(client, tables["Ledger"]),
        costs=CostBook(client, tables["Ledger"]),
        spot_pools=SpotPoolHistory(client, tables["Ledger"]),
    )
    stores.jobs.listeners.append(stores.record)  # type: ignore[attr-defined]
    return stores


def _in_memory() -> Stores:
    tables = memory.MemoryTables()
    timeline = memory.MemoryTimeline(tables)
    ledger = memory.MemoryLedger(tables, usage_half_life_s=HALF_LIFE_S)
    stores = Stores(
        "memory",
        jobs=memory.MemoryJobs(tables, timeline, ledger),
        timeline=timeline,
        ledger=ledger,
        instances=memory.MemoryInstances(tables),
        pages=memory.MemoryPageTokens(tables),
        costs=memory.MemoryCosts(tables),
        spot_pools=memory.MemorySpotPools(tables),
    )
    stores.jobs.listeners.append(stores.record)  # type: ignore[attr-defined]
    return stores


@pytest.fixture(params=["memory", "moto"])
def stores(request: pytest.FixtureRequest, aws_env: None) -> Stores:
    if request.param == "memory":
        return _in_memory()
    return _on_moto(request.getfixturevalue("moto_clients"))


def job(job_id: str, *, team: str = "vision", at: float = NOW, **spec: Any) -> Job:
    fields: dict[str, Any] = {
        "name": job_id,
        "gpus": 8,
        "image": "train:1",
        "command": ["python", "train.py"],
    }
    return Job(id=job_id, team=team, spec=JobSpec(**{**fields, **spec}), submitted_at=at, enqueued_at=at)


def admit(stores: Stores, record: JobRecord, pool: str = "a100-spot", capacity: int = 16) -> JobRecord:
    """PENDING -> ADMITTED with the pool's and the team's GPUs reserved in the same transaction,
    as the scheduling pass admits."""
    prepared = stores.jobs.prepare_transition(
        record,
        JobState.ADMITTED,
        "admitted",
        now=NOW,
        job={"pool": pool},
        changes={"gpus_held": record.job.gpus, "admitted_at": NOW, "run": record.run + 1},
    )
    items, roles = stores.ledger.reserve_items(
        pool=pool, capacity_gpus=capacity, team=record.team, gpus=record.job.gpus
    )
    stores.jobs.commit_together([prepared], items, roles)
    return prepared.new


def entries(stores: Stores, job_id: str) -> list[TimelineEntry]:
    return list(stores.timeline.list(job_id, limit=100)[0])


# --- new jobs -------------------------------------------------------------------------------------


def test_a_new_job_is_stored_pending_with_its_first_timeline_entry(stores: Stores) -> None:
    created = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")

    assert stores.jobs.get("job-a") == created
    assert created.state is JobState.PENDING and created.version == 0
    assert [(e.seq, e.source, e.target, e.reason) for e in entries(stores, "job-a")] == [
        (0, "-", "PENDING", "submitted")
    ]
    assert stores.commits == [("job-a", JobState.PENDING, 0)]
    assert stores.jobs.find("job-none") is None
    with pytest.raises(JobNotFound):
        stores.jobs.get("job-none")


def test_a_taken_id_refuses_the_whole_batch_and_writes_nothing(stores: Stores) -> None:
    stores.jobs.create(job("job-a"), now=NOW, reason="first")

    with pytest.raises(JobAlreadyExists) as refused:
        stores.jobs.create_many([job("job-b"), job("job-a")], now=NOW + 1, reasons=["b", "a again"])

    assert refused.value.job_id == "job-a"
    assert stores.jobs.find("job-b") is None and entries(stores, "job-b") == []
    assert [e.reason for e in entries(stores, "job-a")] == ["first"]


def test_a_job_too_large_for_an_item_is_refused_before_any_write(stores: Stores) -> None:
    with pytest.raises(ItemTooLarge):
        stores.jobs.create(job("job-big", command=["x" * 4000] * 100), now=NOW, reason="submitted")
    assert stores.jobs.find("job-big") is None and entries(stores, "job-big") == []


# --- transitions: conditional on the state and version read ---------------------------------------


def test_a_transition_from_what_was_read_bumps_the_version_and_appends_its_entries(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    running = stores.jobs.transition(admit(stores, record), JobState.RUNNING, "started", now=NOW + 5)

    preempted = stores.jobs.transition(
        stores.jobs.transition(running, JobState.CHECKPOINTING, "preempted for job-x", now=NOW + 9),
        JobState.PENDING,
        "requeued",
        now=NOW + 10,
        via=JobState.PREEMPTED,
        via_reason="stopped",
    )

    assert preempted.version == 5 and stores.jobs.get("job-a") == preempted
    assert [(e.seq, e.source, e.target) for e in entries(stores, "job-a")] == [
        (0, "-", "PENDING"),
        (1, "PENDING", "ADMITTED"),
        (2, "ADMITTED", "RUNNING"),
        (3, "RUNNING", "CHECKPOINTING"),
        (4, "CHECKPOINTING", "PREEMPTED"),
        (5, "PREEMPTED", "PENDING"),
    ]


def test_a_transition_from_a_stale_version_is_refused_and_changes_nothing(stores: Stores) -> None:
    read = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    stores.jobs.update_spec(
        read, read.job.spec.model_copy(update={"priority": Priority.HIGH}), "high", now=NOW + 1
    )
    before = stores.jobs.get("job-a")

    with pytest.raises(StaleJobError) as refused:
        stores.jobs.transition(read, JobState.CANCELLED, "cancelled", now=NOW + 2)

    assert refused.value.job_id == "job-a"
    assert stores.jobs.get("job-a") == before and before.version == 1
    assert [e.seq for e in entries(stores, "job-a")] == [0, 1]


def test_a_transition_from_a_state_or_version_not_stored_is_refused(stores: Stores) -> None:
    read = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    # The job item's own condition: their timeline entries (seq 1, seq 8) would be free.
    other_state = read.with_changes(job={"state": JobState.RUNNING})
    other_version = read.with_changes(job={"version": 7})

    with pytest.raises(StaleJobError):
        stores.jobs.transition(other_state, JobState.SUCCEEDED, "done", now=NOW + 1)
    with pytest.raises(StaleJobError):
        stores.jobs.transition(other_version, JobState.CANCELLED, "cancelled", now=NOW + 1)
    assert stores.jobs.get("job-a") == read and [e.seq for e in entries(stores, "job-a")] == [0]


def test_a_transition_the_lifecycle_forbids_is_refused_before_any_write(stores: Stores) -> None:
    read = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    with pytest.raises(InvalidTransition):
        stores.jobs.transition(read, JobState.SUCCEEDED, "done", now=NOW + 1)
    assert stores.jobs.get("job-a") == read


def test_a_transition_to_a_job_that_was_never_stored_is_stale(stores: Stores) -> None:
    ghost = JobRecord(job=job("job-ghost"), updated_at=NOW)
    with pytest.raises(StaleJobError):
        stores.jobs.transition(ghost, JobState.CANCELLED, "cancelled", now=NOW)
    assert stores.jobs.find("job-ghost") is None


def test_a_transition_keeps_what_other_writers_changed_after_the_read(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    running = stores.jobs.transition(admit(stores, record), JobState.RUNNING, "started", now=NOW + 5)
    # After the transition's read: a heartbeat (no version bump) and a termination to retry.
    stores.jobs.update_fields(
        "job-a", states=[JobState.RUNNING], set_fields={"step": 42, "last_heartbeat_at": NOW + 6}
    )
    stores.jobs.mark_terminating("job-a", ["batch-old"])

    moved = stores.jobs.transition(
        running, JobState.CHECKPOINTING, "preempted", now=NOW + 7, changes={"draining_for": "job-x"}
    )

    stored = stores.jobs.get("job-a")
    assert stored.state is JobState.CHECKPOINTING and stored.draining_for == "job-x"
    assert stored.step == 42 and stored.last_heartbeat_at == NOW + 6  # not in `moved`, kept
    assert stored.terminating_batch_job_ids == ("batch-old",) and moved.terminating_batch_job_ids == ()


def test_transitions_committed_together_all_apply_or_none(stores: Stores) -> None:
    a = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    b = stores.jobs.create(job("job-b"), now=NOW, reason="submitted")
    stale_b = b
    stores.jobs.transition(b, JobState.CANCELLED, "cancelled", now=NOW + 1)

    first = stores.jobs.prepare_transition(a, JobState.CANCELLED, "cancelled", now=NOW + 2)
    second = stores.jobs.prepare_transition(stale_b, JobState.CANCELLED, "again", now=NOW + 2)
    with pytest.raises(StaleJobError) as refused:
        stores.jobs.commit_together([first, second])

    assert refused.value.job_id == "job-b"
    assert stores.jobs.get("job-a") == a and [e.seq for e in entries(stores, "job-a")] == [0]


def test_update_spec_bumps_the_version_with_an_entry_in_the_same_state(stores: Stores) -> None:
    read = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    changed = stores.jobs.update_spec(
        read, read.job.spec.model_copy(update={"priority": Priority.LOW}), "priority low", now=NOW + 1
    )
    assert stores.jobs.get("job-a") == changed and changed.job.priority is Priority.LOW
    assert [(e.seq, e.source, e.target, e.reason) for e in entries(stores, "job-a")][-1] == (
        1,
        "PENDING",
        "PENDING",
        "priority low",
    )
    with pytest.raises(StaleJobError):
        stores.jobs.update_spec(read, read.job.spec, "from a stale read", now=NOW + 2)


def test_annotate_bumps_the_version_with_an_entry_and_can_give_lost_work_back(stores: Stores) -> None:
    from spotline.control.records import LostWork

    # Given a run that ended charged with an hour of lost work on 8 GPUs
    record = admit(stores, stores.jobs.create(job("job-a"), now=NOW, reason="submitted"))
    running = stores.jobs.transition(record, JobState.RUNNING, "started", now=NOW)
    requeued = stores.jobs.transition(
        running,
        JobState.PENDING,
        "requeued",
        via=JobState.INTERRUPTED,
        now=NOW + 3600,
        job={"lost_work_s": 3600.0},
        changes={"lost_work": LostWork(run=1, since=NOW, until=NOW + 3600, gpus=8, pool="a100-spot")},
    )
    month = stores.costs.months(["vision"], month_of(NOW), [], NOW + 3600)["vision"]
    assert month.lost_gpu_s == {"a100-spot": 8 * 3600.0}
    # When a late checkpoint gives back 3000 s of it
    noted = stores.jobs.annotate(
        requeued,
        "late checkpoint",
        now=NOW + 3700,
        job={"lost_work_s": 600.0, "last_checkpoint_step": 9},
        changes={"restored_step": 9},
        lost_gpu_s_returned=8 * 3000.0,
    )
    # Then the record, its timeline and the team's month say so, in one write
    assert stores.jobs.get("job-a") == noted and noted.version == requeued.version + 1
    assert (noted.state, noted.job.lost_work_s, noted.job.last_checkpoint_step) == (
        JobState.PENDING,
        600.0,
        9,
    )
    assert noted.lost_work == requeued.lost_work and noted.restored_step == 9
    assert [(e.source, e.target, e.reason) for e in entries(stores, "job-a")][-1] == (
        "PENDING",
        "PENDING",
        "late checkpoint",
    )
    month = stores.costs.months(["vision"], month_of(NOW), [], NOW + 3700)["vision"]
    assert month.lost_gpu_s == {"a100-spot": 8 * 600.0}
    # And from a stale read it changes nothing
    with pytest.raises(StaleJobError):
        stores.jobs.annotate(requeued, "again", now=NOW + 3800)


# --- writes that are not transitions --------------------------------------------------------------


def test_update_fields_holds_only_under_all_its_conditions(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    running = stores.jobs.transition(admit(stores, record), JobState.RUNNING, "started", now=NOW + 5)
    update = stores.jobs.update_fields

    # "<=?" accepts a missing attribute; then the stored one is compared.
    assert (
        update(
            "job-a", states=[JobState.RUNNING], set_fields={"step": 10}, conditions=[("step", "<=?", 10)]
        ).step
        == 10
    )
    with pytest.raises(StaleJobError):
        update("job-a", states=[JobState.RUNNING], set_fields={"step": 9}, conditions=[("step", "<=?", 9)])
    with pytest.raises(StaleJobError):  # the state is not among `states`
        update("job-a", states=[JobState.PENDING], set_fields={"step": 11})
    with pytest.raises(StaleJobError):  # another version
        update("job-a", states=[JobState.RUNNING], version=running.version + 1, set_fields={"step": 11})
    with pytest.raises(StaleJobError):  # "=" on a missing attribute fails
        update(
            "job-a",
            states=[JobState.RUNNING],
            set_fields={"step": 11},
            conditions=[("checkpoint_task_token", "=", "t")],
        )
    # A group of `any_of` holds if one of its conditions does.
    done = update(
        "job-a",
        states=[JobState.RUNNING],
        version=running.version,
        set_fields={"step": 12},
        conditions=[("run", "=", 1)],
        any_of=[[("last_checkpoint_run", "<>?", 1), ("last_checkpoint_step", "<=?", 12)]],
    )
    assert done.step == 12 and done.version == running.version  # no version bump
    with pytest.raises(StaleJobError):
        update(
            "job-a",
            states=[JobState.RUNNING],
            set_fields={"step": 13},
            any_of=[[("run", "=", 2), ("step", ">", 12)]],
        )
    with pytest.raises(StaleJobError):
        update("job-none", states=list(JobState), set_fields={"step": 1})
    assert stores.jobs.get("job-a").step == 12


def test_update_fields_adds_to_and_deletes_from_sets_and_removes_fields(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    stores.jobs.transition(admit(stores, record), JobState.RUNNING, "started", now=NOW + 5)
    stores.jobs.update_fields(
        "job-a",
        states=[JobState.RUNNING],
        add_to_set={"instance_ids": ["i-2", "i-1"]},
        set_fields={"step": 3},
    )
    stores.jobs.update_fields("job-a", states=[JobState.RUNNING], add_to_set={"instance_ids": ["i-1", "i-3"]})
    assert stores.jobs.get("job-a").instance_ids == ("i-1", "i-2", "i-3")

    stores.jobs.update_fields(
        "job-a",
        states=[JobState.RUNNING],
        delete_from_set={"instance_ids": ["i-1", "i-2", "i-3"]},
        remove_fields=["step"],
        conditions=[("instance_ids", "contains", "i-3")],
    )
    stored = stores.jobs.get("job-a")
    assert stored.instance_ids == () and stored.step is None


def test_an_agent_facing_field_also_changes_the_jobs_signal_item(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    stores.jobs.transition(admit(stores, record), JobState.RUNNING, "started", now=NOW + 5)
    read_signals = stores.jobs.read_signals  # type: ignore[attr-defined]

    stores.jobs.update_fields(
        "job-a", states=[JobState.RUNNING], set_fields={"checkpoint_requested_at": NOW + 6}
    )
    assert read_signals("vision", "job-a")["checkpoint_requested_at"] == NOW + 6
    assert read_signals("vision", "job-a")["job"] == "job-a"
    stores.jobs.update_fields("job-a", states=[JobState.RUNNING], remove_fields=["checkpoint_requested_at"])
    assert "checkpoint_requested_at" not in read_signals("vision", "job-a")


def test_a_termination_keeps_the_job_in_the_active_index_until_batch_confirms_it(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    cancelled = stores.jobs.transition(admit(stores, record), JobState.CANCELLED, "cancelled", now=NOW + 1)
    assert stores.jobs.active() == [] and stores.jobs.terminating() == []

    marked = stores.jobs.mark_terminating("job-a", ["batch-1", "batch-2"])
    assert marked is not None and marked.terminating_batch_job_ids == ("batch-1", "batch-2")
    assert [r.id for r in stores.jobs.terminating()] == ["job-a"] and stores.jobs.active() == []

    assert stores.jobs.confirm_stopped("job-a", "batch-1") is not None
    assert stores.jobs.confirm_stopped("job-a", "batch-1") is None  # once
    assert stores.jobs.confirm_stopped("job-a", "batch-2") is not None
    assert stores.jobs.terminating() == []
    assert stores.jobs.get("job-a").state is JobState.CANCELLED and cancelled.version == 2
    assert stores.jobs.mark_terminating("job-none", ["batch-9"]) is None


# --- the ledger: every reservation within its limit -----------------------------------------------


def test_an_admission_reserves_the_pool_and_the_team_or_nothing(stores: Stores) -> None:
    first = admit(stores, stores.jobs.create(job("job-a"), now=NOW, reason="submitted"), capacity=16)
    second = admit(stores, stores.jobs.create(job("job-b"), now=NOW, reason="submitted"), capacity=16)
    third = stores.jobs.create(job("job-c"), now=NOW, reason="submitted")
    assert stores.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 16}, {"vision": 16})  # type: ignore[attr-defined]

    with pytest.raises(CapacityExhausted, match="pool a100-spot"):
        admit(stores, third, capacity=16)

    assert stores.jobs.get("job-c") == third and [e.seq for e in entries(stores, "job-c")] == [0]
    assert stores.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 16}, {"vision": 16})  # type: ignore[attr-defined]
    assert {r.id for r in stores.jobs.active()} == {first.id, second.id}
    assert stores.ledger.counters(["a100-spot"], ["vision"]) == {
        "POOL#a100-spot": Counter(16, moves=2),
        "TEAM#vision": Counter(16, moves=2),
    }


def test_leaving_an_active_state_gives_the_gpus_back_and_charges_the_run(stores: Stores) -> None:
    record = admit(stores, stores.jobs.create(job("job-a"), now=NOW, reason="submitted"))
    running = stores.jobs.transition(record, JobState.RUNNING, "started", now=NOW)

    done = stores.jobs.transition(running, JobState.SUCCEEDED, "exit 0", now=NOW + 3600)

    assert done.gpus_held == 0 and done.gpu_s_by_pool == {"a100-spot": 8 * 3600.0}
    assert stores.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})  # type: ignore[attr-defined]
    buckets = stores.ledger.usage_buckets(["vision", "nlp"])
    assert buckets["nlp"] == {} and sum(buckets["vision"].values()) > 0
    month = stores.costs.months(["vision"], month_of(NOW), [], NOW + 3600)["vision"]
    assert month.runs == 1 and month.gpu_s == {"a100-spot": 8 * 3600.0}


QUOTAS = {
    "vision": TeamQuota(team="vision", nominal_gpus=8, borrowing_limit_gpus=8),
    "nlp": TeamQuota(team="nlp", nominal_gpus=8),
}


def test_borrowing_checks_that_no_lender_grew_since_the_read(stores: Stores) -> None:
    stores.ledger.set_usage({}, {"vision": 8})  # type: ignore[attr-defined]
    items, roles = stores.ledger.reserve_items(
        pool="a100-spot", capacity_gpus=32, team="vision", gpus=8, quotas=QUOTAS
    )
    assert ("lender", "nlp") in roles
    # nlp takes GPUs of its own after vision's read: what it lends shrank.
    nlp_items, nlp_roles = stores.ledger.reserve_items(
        pool="a100-spot", capacity_gpus=32, team="nlp", gpus=8, quotas=QUOTAS, team_usage_hint=0
    )
    stores.jobs.commit_together([], nlp_items, nlp_roles)

    with pytest.raises(CapacityExhausted, match=r"team nlp .* lends less"):
        stores.jobs.commit_together([], items, roles)
    assert stores.ledger.usage(["a100-spot"], ["vision", "nlp"]) == (
        {"a100-spot": 8},
        {"vision": 8, "nlp": 8},
    )  # type: ignore[attr-defined]


def test_a_team_at_its_hard_limit_is_refused_by_its_own_counter(stores: Stores) -> None:
    stores.ledger.set_usage({}, {"vision": 4})  # type: ignore[attr-defined]
    items, roles = stores.ledger.reserve_items(
        pool="a100-spot", capacity_gpus=32, team="vision", gpus=8, quotas=QUOTAS, team_usage_hint=0
    )  # a stale hint: the team's condition still holds the line
    with pytest.raises(CapacityExhausted, match="team vision"):
        stores.jobs.commit_together([], items, roles)


def test_reservations_together_take_each_counter_once_for_all_their_admissions(stores: Stores) -> None:
    items, roles = stores.ledger.reserve_together_items(
        pools={"a100-spot": (16, 16, 2)}, teams={"vision": (16, None, 2)}
    )
    stores.jobs.commit_together([], items, roles)
    assert stores.ledger.counters(["a100-spot"], []) == {"POOL#a100-spot": Counter(16, moves=2)}
    items, roles = stores.ledger.reserve_together_items(pools={"a100-spot": (8, 16, 1)}, teams={})
    with pytest.raises(CapacityExhausted):
        stores.jobs.commit_together([], items, roles)


def test_a_drift_is_repaired_only_as_marked_and_only_if_nothing_moved(stores: Stores) -> None:
    ledger = stores.ledger
    ledger.set_usage({"a100-spot": 3}, {})  # type: ignore[attr-defined]
    assert not ledger.repair_drift("POOL#a100-spot", 3, 0, 0)  # not marked yet
    assert ledger.mark_drift("POOL#a100-spot", 3, 0, 0)
    assert not ledger.mark_drift("POOL#a100-spot", 3, 0, 5)  # the counter has not moved 5 times
    assert ledger.counters(["a100-spot"], []) == {"POOL#a100-spot": Counter(3, 0, (3, 0, 0))}
    assert not ledger.repair_drift("POOL#a100-spot", 3, 1, 0)  # another drift than the one marked
    assert ledger.repair_drift("POOL#a100-spot", 3, 0, 0)
    assert ledger.counters(["a100-spot"], []) == {"POOL#a100-spot": Counter(0, 1, None)}
    assert ledger.mark_drift("POOL#none", 0, 2, 0)  # a missing counter is marked too
    ledger.clear_drift_mark("POOL#none")
    assert ledger.counters(["none"], []) == {"POOL#none": Counter(0, 0, None)}


def test_the_fair_share_usage_of_a_later_pass_is_never_overwritten(stores: Stores) -> None:
    assert stores.ledger.fairshare_usage() == {}
    stores.ledger.put_fairshare_usage({"vision": 2.0}, NOW + 10)
    stores.ledger.put_fairshare_usage({"vision": 1.0}, NOW)  # an earlier pass, late
    assert stores.ledger.fairshare_usage() == {"vision": 2.0}
    shown: dict[str, float] = {}
    stores.ledger.usage_buckets(["vision"], shown=shown)
    assert shown == {"vision": 2.0}


# --- index reads ----------------------------------------------------------------------------------


def test_the_queue_index_reads_a_class_oldest_first_within_its_limit(stores: Stores) -> None:
    for i, at in enumerate([NOW + 3, NOW + 1, NOW + 2, NOW]):
        stores.jobs.create(job(f"job-{i}", at=at), now=at, reason="submitted")
    stores.jobs.create(job("job-high", priority="high"), now=NOW, reason="submitted")
    admit(stores, stores.jobs.get("job-3"))

    assert [r.id for r in stores.jobs.queue_head(Priority.NORMAL, 2)] == ["job-1", "job-2"]
    assert [r.id for r in stores.jobs.queue_head(Priority.NORMAL, 10)] == ["job-1", "job-2", "job-0"]
    assert [r.id for r in stores.jobs.queue_head(Priority.HIGH, 10)] == ["job-high"]
    assert [r.id for r in stores.jobs.active()] == ["job-3"]


def test_the_deadline_and_held_indexes(stores: Stores) -> None:
    stores.jobs.create(job("job-late", deadline="2099-01-02T00:00:00Z"), now=NOW, reason="submitted")
    stores.jobs.create(job("job-soon", deadline="2099-01-01T00:00:00Z"), now=NOW, reason="submitted")
    stores.jobs.create(job("job-none"), now=NOW, reason="submitted")
    held = stores.jobs.create(job("job-held", after=["job-none"]), now=NOW, reason="submitted")

    assert [r.id for r in stores.jobs.deadline_head(10)] == ["job-soon", "job-late"]
    assert [r.id for r in stores.jobs.held_head(10)] == ["job-held"]
    assert "job-held" not in [r.id for r in stores.jobs.queue_head(Priority.NORMAL, 10)]
    stores.jobs.update_spec(
        held, held.job.spec, "dependencies met", now=NOW + 1, changes={"deps_met_at": NOW + 1}
    )
    assert stores.jobs.held_head(10) == []
    assert "job-held" in [r.id for r in stores.jobs.queue_head(Priority.NORMAL, 10)]


def test_a_teams_jobs_are_listed_newest_first_a_page_at_a_time(stores: Stores) -> None:
    for i in range(5):
        stores.jobs.create(job(f"job-{i}", at=NOW + i), now=NOW + i, reason="submitted")
    stores.jobs.create(job("job-other", team="nlp"), now=NOW, reason="submitted")
    stores.jobs.transition(stores.jobs.get("job-3"), JobState.CANCELLED, "cancelled", now=NOW + 9)

    page, token = stores.jobs.list_team("vision", limit=2)
    assert [r.id for r in page] == ["job-4", "job-3"] and token is not None
    rest, token = stores.jobs.list_team("vision", limit=10, next_token=token)
    assert [r.id for r in rest] == ["job-2", "job-1", "job-0"] and token is None

    pending, token = stores.jobs.list_team("vision", state=JobState.PENDING, limit=2)
    assert [r.id for r in pending] == ["job-4", "job-2"] and token is not None
    pending, token = stores.jobs.list_team("vision", state=JobState.PENDING, limit=2, next_token=token)
    assert [r.id for r in pending] == ["job-1", "job-0"]
    # The limit counts the items read before the filter: one read of one item finds none.
    cancelled, token = stores.jobs.list_team("vision", state=JobState.CANCELLED, limit=1, max_pages=1)
    assert cancelled == [] and token is not None
    cancelled, _ = stores.jobs.list_team("vision", state=JobState.CANCELLED, limit=1, max_pages=2)
    assert [r.id for r in cancelled] == ["job-3"]
    with pytest.raises(ValueError, match="next_token"):
        stores.jobs.list_team("vision", next_token="not a token")


def test_the_timeline_pages_oldest_first(stores: Stores) -> None:
    record = stores.jobs.create(job("job-a"), now=NOW, reason="submitted")
    for n in range(4):
        record = stores.jobs.update_spec(record, record.job.spec, f"change {n}", now=NOW + n)

    first, token = stores.timeline.list("job-a", limit=3)
    rest, last = stores.timeline.list("job-a", limit=3, next_token=token)
    assert [e.seq for e in first] == [0, 1, 2] and [e.seq for e in rest] == [3, 4] and last is None
    assert stores.jobs.find_many(["job-a", "job-none", "job-a"]) == {"job-a": stores.jobs.get("job-a")}


# --- arrays ---------------------------------------------------------------------------------------


def test_an_array_is_written_staged_then_released_into_the_queue(stores: Stores) -> None:
    array = ArrayRecord(
        id="arr-1",
        team="vision",
        name="sweep",
        element_ids=("arr-1-0", "arr-1-1"),
        indexes=(0, 1),
        submitted_at=NOW,
        spec="{}",
        state=ARRAY_CREATING,
    )
    elements = [job(f"arr-1-{i}").with_changes(array_id="arr-1", array_index=i) for i in range(2)]
    stores.jobs.arrays.begin(array, elements)
    with pytest.raises(JobAlreadyExists):
        stores.jobs.arrays.begin(array, elements)
    with pytest.raises(JobAlreadyExists):  # an array's id is no job's
        stores.jobs.create(job("arr-1"), now=NOW, reason="submitted")

    staged = stores.jobs.arrays.add_elements(array, elements, ["element 0", "element 1"], now=NOW)
    again = stores.jobs.arrays.add_elements(array, elements, ["element 0", "element 1"], now=NOW)
    assert [r.id for r in again] == [r.id for r in staged] == ["arr-1-0", "arr-1-1"]
    assert stores.jobs.queue_head(Priority.NORMAL, 10) == [] and stores.jobs.find("arr-1") is None

    ready = stores.jobs.arrays.finish(array, now=NOW + 1)
    assert ready.state == ARRAY_READY and stores.jobs.arrays.finish(array, now=NOW + 2).state == ARRAY_READY
    assert stores.jobs.arrays.find("arr-1") is not None and stores.jobs.arrays.find("arr-1-0") is None
    released = stores.jobs.arrays.release(staged, "released", now=NOW + 1)
    assert all(r.staged_for_array is None and r.version == 1 for r in released)
    assert [r.id for r in stores.jobs.queue_head(Priority.NORMAL, 10)] == ["arr-1-0", "arr-1-1"]


# --- instances, page tokens, costs and Spot pools -------------------------------------------------


def test_an_instance_lists_the_jobs_on_it(stores: Stores) -> None:
    stores.instances.add_job(["i-1", "i-2"], "job-a", NOW)
    stores.instances.add_job(["i-1"], "job-b", NOW)
    stores.instances.add_job(["i-1"], "job-b", NOW)
    assert stores.instances.jobs_on("i-1") == ["job-a", "job-b"] and stores.instances.jobs_on("i-9") == []
    stores.instances.remove_job(["i-1", "i-9"], "job-a")
    stores.instances.remove_job(["i-2"], "job-a")
    assert stores.instances.jobs_on("i-1") == ["job-b"] and stores.instances.jobs_on("i-2") == []


def test_a_page_token_opens_only_for_its_own_query_and_not_after_a_day(stores: Stores) -> None:
    binding = {"team": "vision", "route": "/jobs", "limit": 2}
    token = stores.pages.seal("position-1", binding, now=NOW)
    assert token is not None and stores.pages.seal(None, binding, now=NOW) is None
    assert stores.pages.open(token, binding, now=NOW + 60) == "position-1"
    with pytest.raises(InvalidPageToken, match="expired"):
        stores.pages.open(token, binding, now=NOW + 24 * 3600 + 1)
    with pytest.raises(InvalidPageToken):
        stores.pages.open(token, {**binding, "team": "nlp"}, now=NOW)
    with pytest.raises(InvalidPageToken):
        stores.pages.open(token[:-2] + "xx", binding, now=NOW)


def test_a_budget_level_is_notified_once(stores: Stores) -> None:
    month = month_of(NOW)
    assert stores.costs.mark_notified("vision", month, "soft", None)
    assert not stores.costs.mark_notified("vision", month, "soft", None)
    assert not stores.costs.mark_notified("vision", month, "hard", "none-such")
    assert stores.costs.mark_notified("vision", month, "hard", "soft")
    assert stores.costs.months(["vision"], month, [], NOW)["vision"].notified == "hard"


def test_a_spot_pool_observation_is_written_only_when_it_changes_the_pool(stores: Stores) -> None:
    pools = stores.spot_pools
    assert pools.signals(["a100-spot"], NOW) == {}
    assert pools.observe("a100-spot", True, NOW)
    assert not pools.observe("a100-spot", True, NOW + 60)  # a repeat
    assert pools.observe("a100-spot", False, NOW + 120)
    assert not pools.observe("a100-spot", True, NOW + 100)  # older than the last change
    assert pools.observe_risk("a100-spot", NOW + 130) and not pools.observe_risk("a100-spot", NOW + 125)
    signal = pools.signals(["a100-spot", "a100-spot", "other"], NOW + 180)["a100-spot"]
    assert (
        signal.available is False
        and signal.at_risk is False
        and set(pools.signals(["a100-spot", "other"], NOW + 180)) == {"a100-spot"}
    )
