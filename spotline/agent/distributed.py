"""The torch.distributed / NCCL rendezvous of a gang job, from AWS Batch's multi-node variables.

On a multi-node parallel job Batch sets `AWS_BATCH_JOB_NUM_NODES` and `AWS_BATCH_JOB_NODE_INDEX`
on every node, and `AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS` on every node but the main one
(the main node is the address). The wrapper hands the command what `torchrun` and
`torch.distributed`'s `env://` initialisation read:

| variable | value |
|---|---|
| `MASTER_ADDR` | the main node's private IPv4 address (this node's own on the main node) |
| `MASTER_PORT` | `SPOTLINE_MASTER_PORT`, default 29500 (gang nodes reach each other on every port) |
| `NNODES`, `WORLD_SIZE` | the gang's node count |
| `NODE_RANK`, `RANK` | this node's index |

`WORLD_SIZE` and `RANK` are right for one process per node; `torchrun --nnodes $NNODES
--node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT` sets its workers'
own. A variable the environment already has is left alone. A single-node job gets nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

DEFAULT_MASTER_PORT = 29500
ENV_MASTER_PORT = "SPOTLINE_MASTER_PORT"
BATCH_NUM_NODES = "AWS_BATCH_JOB_NUM_NODES"
BATCH_NODE_INDEX = "AWS_BATCH_JOB_NODE_INDEX"
BATCH_MAIN_NODE_INDEX = "AWS_BATCH_JOB_MAIN_NODE_INDEX"
BATCH_MAIN_NODE_ADDRESS = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"


def own_address() -> str:
    """This node's private IPv4 address, as its hostname resolves (127.0.0.1 if it does not)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def distributed_environment(
    environ: Mapping[str, str], address: Callable[[], str] = own_address
) -> dict[str, str]:
    """The rendezvous variables to add for a gang node (empty for a single-node job). ValueError
    names a malformed Batch variable."""
    raw_nodes = environ.get(BATCH_NUM_NODES, "").strip()
    if not raw_nodes:
        return {}
    try:
        nodes = int(raw_nodes)
        index = int(environ.get(BATCH_NODE_INDEX, "0"))
        port = int(environ.get(ENV_MASTER_PORT, str(DEFAULT_MASTER_PORT)))
    except ValueError as error:
        raise ValueError(
            f"{BATCH_NUM_NODES}, {BATCH_NODE_INDEX} and {ENV_MASTER_PORT} must be integers: {error}"
        ) from error
    if nodes < 2:
        return {}
    if not 0 <= index < nodes:
        raise ValueError(f"{BATCH_NODE_INDEX}={index} is outside a gang of {nodes} nodes")
    main = environ.get(BATCH_MAIN_NODE_ADDRESS, "").strip()
    if not main:
        main_index = int(environ.get(BATCH_MAIN_NODE_INDEX, "0") or 0)
        if index != main_index:
            raise ValueError(f"{BATCH_MAIN_NODE_ADDRESS} is not set on gang node {index}")
        main = address()
    wanted = {
        "MASTER_ADDR": main,
        "MASTER_PORT": str(port),
        "NNODES": str(nodes),
        "WORLD_SIZE": str(nodes),
        "NODE_RANK": str(index),
        "RANK": str(index),
    }
    return {k: v for k, v in wanted.items() if k not in environ}
