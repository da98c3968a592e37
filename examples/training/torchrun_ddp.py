"""A plain PyTorch DDP loop under torchrun, checkpointing with Spotline (one shard per rank).

    torchrun --nproc_per_node 2 examples/training/torchrun_ddp.py --steps 200

On a Spotline request, a Spot notice or SIGTERM every rank checkpoints at the same step
(`torch.distributed.checkpoint`, one shard per rank, uploaded by its own rank; the manifest last);
on SIGTERM every rank stops at that step and the process exits with 143. A restarted run resumes
from the newest durable checkpoint. Gloo on the CPU, NCCL where there are GPUs. The model and its
data are made here (no download): a small regression whose batches depend only on the seed, the
step and the rank, so a resumed run sees the data an uninterrupted one would.

`--losses FILE` writes each rank's losses (JSON lines) for the tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.torch import DistributedCheckpointer


def batch(seed: int, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * world + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1 * torch.randn(16, 1, generator=g)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0, help="sleep per step (a slower model)")
    parser.add_argument(
        "--local-dir", default=os.environ.get("SPOTLINE_LOCAL_CHECKPOINT_DIR", "/tmp/spotline")
    )
    parser.add_argument("--losses", help="append this rank's losses here (JSON lines)")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s rank" + os.environ.get("RANK", "0") + " %(message)s"
    )

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")

    torch.manual_seed(args.seed)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device),
        device_ids=[device.index] if cuda else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    def state() -> dict[str, object]:
        model_state, optim_state = get_state_dict(model, optimizer)
        return {"model": model_state, "optim": optim_state}

    losses: list[float] = []
    stopped = False
    with Agent.from_env() as agent:
        checkpointer = DistributedCheckpointer(agent, Path(args.local_dir) / f"job-{agent.job_id}")
        current = state()
        start = checkpointer.restore(current)
        if start:
            set_state_dict(
                model, optimizer, model_state_dict=current["model"], optim_state_dict=current["optim"]
            )
        for step in range(start, args.steps):
            x, y = batch(args.seed, step, rank, world)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            logging.info("step %d/%d loss %.6f", step + 1, args.steps, losses[-1])
            if args.step_time_s:
                time.sleep(args.step_time_s)
            if not checkpointer.step(step + 1, state, progress=(step + 1) / args.steps):
                stopped = True
                break
        checkpointer.close()
    if args.losses:
        with open(args.losses, "a") as out:
            out.write(json.dumps({"rank": rank, "start": start, "losses": losses, "stopped": stopped}) + "\n")
    dist.destroy_process_group()
    return EXIT_STOPPED if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
