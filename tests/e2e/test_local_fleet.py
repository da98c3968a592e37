"""The local fleet (Batch and EC2 on this machine), without the control plane: what it runs a
job's command with, and that no error in it leaks a node."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from spotline.local.fleet import LocalFleet, PoolSpec

from .conftest import Events


def fleet(tmp_path: Path, events: Events, **env: str) -> LocalFleet:
    return LocalFleet(
        [PoolSpec("spot", "q-spot", nodes=1, gpus_per_node=4, spot=True)],
        events,
        log_dir=tmp_path,
        base_env={"PATH": "/usr/bin:/bin", **env},
        start_delay_s=0.0,
    )


def test_a_command_with_a_nul_byte_fails_the_job_and_frees_the_node(tmp_path: Path) -> None:
    events = Events()
    local = fleet(tmp_path, events)
    try:
        bad = local.submit_job(
            job_name="spotline-nul", job_queue="q-spot", command=["true", "a\0b"], environment={}, gpus=4
        )
        detail = events.final(bad)
        assert detail["status"] == "FAILED"
        assert "CannotStartContainerError" in detail["statusReason"]
        assert [n.used for n in local.nodes] == [0]
        # The node's 4 GPUs are free: a 4-GPU job runs on it.
        good = local.submit_job(
            job_name="spotline-ok", job_queue="q-spot", command=["true"], environment={}, gpus=4
        )
        assert events.final(good)["status"] == "SUCCEEDED"
    finally:
        local.close()


def test_any_error_starting_a_job_fails_it_and_frees_the_node(tmp_path: Path) -> None:
    events = Events()
    local = fleet(tmp_path, events)
    try:
        job = local.submit_job(
            job_name="spotline-env", job_queue="q-spot", command=["true"], environment={"BAD": "x\0y"}, gpus=4
        )
        assert events.final(job)["status"] == "FAILED"
        assert [n.used for n in local.nodes] == [0]
    finally:
        local.close()


def test_python_on_the_path_is_the_runtimes_own(tmp_path: Path) -> None:
    # Given a PATH without this runtime's environment (no venv activated)
    events = Events()
    local = fleet(tmp_path, events)
    try:
        # When a job runs `python`, then it is this interpreter's environment, with Spotline
        job = local.submit_job(
            job_name="spotline-python",
            job_queue="q-spot",
            command=["python", "-c", "import sys, spotline.examples.train; print(sys.prefix)"],
            environment={},
            gpus=1,
        )
        assert events.final(job)["status"] == "SUCCEEDED"
        (log,) = tmp_path.glob("spotline-python-*.log")
        # (the agent's wrapper, the image's ENTRYPOINT, logs a heartbeat before it)
        assert log.read_text().strip().splitlines()[-1] == sys.prefix
    finally:
        local.close()


def test_a_drained_node_gets_no_new_job(tmp_path: Path) -> None:
    events = Events()
    local = fleet(tmp_path, events)
    try:
        (node,) = local.nodes
        assert local.drain(node.instance_id)
        assert not local.drain("i-unknown")
        job = local.submit_job(
            job_name="spotline-wait", job_queue="q-spot", command=["true"], environment={}, gpus=1
        )
        time.sleep(0.5)
        assert local.jobs[job].status == "RUNNABLE" and node.used == 0
    finally:
        local.close()


def test_a_reclaimed_node_dies_after_the_notice_and_capacity_comes_back(tmp_path: Path) -> None:
    # Given a Spot node running a job
    events = Events()
    local = LocalFleet(
        [PoolSpec("spot", "q-spot", nodes=1, gpus_per_node=4, spot=True)],
        events,
        log_dir=tmp_path,
        base_env={"PATH": "/usr/bin:/bin"},
        start_delay_s=0.0,
        capacity_return_s=0.5,
    )
    try:
        (node,) = local.nodes
        assert local.is_spot(node.instance_id) and not local.is_spot("i-unknown")
        job = local.submit_job(
            job_name="spotline-long", job_queue="q-spot", command=["sleep", "30"], environment={}, gpus=4
        )
        deadline = time.time() + 5
        while local.jobs[job].status != "RUNNING" and time.time() < deadline:
            time.sleep(0.05)
        # When the notice starts (twice: a warning may be delivered more than once)
        assert local.reclaim_after(node.instance_id, 0.3)
        assert not local.reclaim_after(node.instance_id, 0.3)
        # Then the job fails with Batch's host-loss reason when it ends
        detail = events.final(job)
        assert detail["statusReason"] == f"Host EC2 (instance {node.instance_id}) terminated."
        assert not node.alive
        # And a replacement node joins the pool later, on which a new job runs
        after = local.submit_job(
            job_name="spotline-after", job_queue="q-spot", command=["true"], environment={}, gpus=4
        )
        assert events.final(after)["status"] == "SUCCEEDED"
        (replacement,) = [n for n in local.nodes if n.alive]
        assert replacement.instance_id != node.instance_id
        assert local.jobs[after].instances == [replacement.instance_id]
    finally:
        local.close()


def test_a_script_ignoring_sigterm_gets_each_stop_and_is_killed_after_the_grace(tmp_path: Path) -> None:
    # Given a job whose script ignores SIGTERM (it prints each one), under the agent's wrapper
    events = Events()
    local = LocalFleet(
        [PoolSpec("spot", "q-spot", nodes=1, gpus_per_node=4, spot=True)],
        events,
        log_dir=tmp_path,
        base_env={"PATH": "/usr/bin:/bin", "SPOTLINE_HEARTBEAT_S": "0"},
        start_delay_s=0.0,
        stop_grace_s=1.5,
    )
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('got SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    try:
        job = local.submit_job(
            job_name="spotline-stubborn",
            job_queue="q-spot",
            command=["python", "-c", script],
            environment={},
            gpus=1,
        )
        deadline = time.time() + 20
        while "ready" not in (
            (local.log_path(job) or tmp_path / "none").read_text() if local.log_path(job) else ""
        ):
            assert time.time() < deadline, "the script never started"
            time.sleep(0.05)
        # When TerminateJob comes twice (the preempt workflow, then the reconciler's retry)
        stopped_at = time.monotonic()
        local.terminate_job(job, "Spotline: preempted")
        time.sleep(0.3)
        local.terminate_job(job, "Spotline: run no longer owned by its job (retry)")
        detail = events.final(job)
        # Then each SIGTERM reached the script, and it was killed the grace after the first
        assert time.monotonic() - stopped_at >= 1.5
        log = local.log_path(job)
        assert log is not None and log.read_text().count("got SIGTERM") == 2
        assert detail["status"] == "FAILED" and detail["attempts"][0]["container"]["exitCode"] == 128 + 9
    finally:
        local.close()


def test_the_local_stop_grace_is_ten_seconds() -> None:
    from spotline.local.fleet import STOP_GRACE_S

    assert STOP_GRACE_S == 10.0  # what docs/training.md says
