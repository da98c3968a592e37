"""The rendezvous a gang node's command gets from Batch's multi-node variables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spotline.agent.distributed import distributed_environment
from spotline.agent.events import RecordingPublisher
from spotline.agent.settings import AgentSettings
from spotline.agent.wrapper import CommandWrapper


def test_a_child_node_gets_the_main_nodes_address_and_its_rank() -> None:
    env = {
        "AWS_BATCH_JOB_NUM_NODES": "4",
        "AWS_BATCH_JOB_NODE_INDEX": "2",
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.3.7",
    }
    assert distributed_environment(env) == {
        "MASTER_ADDR": "10.0.3.7",
        "MASTER_PORT": "29500",
        "NNODES": "4",
        "WORLD_SIZE": "4",
        "NODE_RANK": "2",
        "RANK": "2",
    }


def test_the_main_node_is_the_address_and_set_variables_are_kept() -> None:
    env = {
        "AWS_BATCH_JOB_NUM_NODES": "2",
        "AWS_BATCH_JOB_NODE_INDEX": "0",
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
        "SPOTLINE_MASTER_PORT": "23456",
        "WORLD_SIZE": "16",  # the user's: one process per GPU
    }
    got = distributed_environment(env, address=lambda: "10.0.1.5")
    assert got["MASTER_ADDR"] == "10.0.1.5" and got["MASTER_PORT"] == "23456"
    assert got["NODE_RANK"] == "0" and "WORLD_SIZE" not in got


@pytest.mark.parametrize("env", [{}, {"AWS_BATCH_JOB_NUM_NODES": "1"}])
def test_a_single_node_job_gets_nothing(env: dict[str, str]) -> None:
    assert distributed_environment(env) == {}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AWS_BATCH_JOB_NUM_NODES": "two"}, "must be integers"),
        ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "5"}, "outside a gang of 2"),
        ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1"}, "is not set on gang node 1"),
    ],
)
def test_malformed_batch_variables_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        distributed_environment(env)


def test_the_wrapper_hands_the_rendezvous_to_the_command(tmp_path: Path) -> None:
    env = {
        "AWS_BATCH_JOB_NUM_NODES": "2",
        "AWS_BATCH_JOB_NODE_INDEX": "1",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.3.7",
        "SPOTLINE_HEARTBEAT_S": "0",
        "PATH": "/usr/bin:/bin",
    }
    out = f"{tmp_path}/env.txt"
    script = (
        "import os; open(os.environ['OUT'], 'w').write("
        "' '.join(os.environ[k] for k in ('MASTER_ADDR', 'MASTER_PORT', 'NODE_RANK', 'NNODES')))"
    )
    wrapper = CommandWrapper(
        AgentSettings.from_env(env),
        publisher=RecordingPublisher(),
        instance_id=None,
        utilization_probe=lambda: None,
    )
    assert wrapper.run([sys.executable, "-c", script], env={**env, "OUT": out}) == 0
    with open(out) as written:
        assert written.read() == "10.0.3.7 29500 1 2"
