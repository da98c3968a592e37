"""An FSDP2 (`fully_shard`) loop under torchrun that checkpoints with Spotline and resumes exactly.

    torchrun --nproc_per_node 2 examples/training/fsdp2_train.py --steps 60

Each rank holds a shard of the parameters and of AdamW's state; a checkpoint saves the shards with
`torch.distributed.checkpoint` (each rank uploads its own, the manifest last), and a new run loads
them back into its shards (resharded if the world size changed), with each rank's data position
and random generators, so its losses are those of an uninterrupted run. Gloo on the CPU, NCCL
where there are GPUs. The data are made here (no download). Needs `pip install 'spotline[torch]'`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.data import ResumableDataLoader
from spotline.integrations.torch import DistributedCheckpointer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0, help="stands in for a larger model")
    parser.add_argument("--local-dir", default="/tmp/spotline-fsdp2")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda" if cuda else "cpu", (dist.get_world_size(),))

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(0.1), nn.Linear(32, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1, generator=g))
    loader = ResumableDataLoader(data, batch_size=16, shuffle=True, seed=args.seed)  # a share per rank
    torch.manual_seed(args.seed + rank)  # each rank's own dropout

    agent = Agent.from_env().start()
    ckpt = DistributedCheckpointer(agent, args.local_dir, model=model, optimizer=optimizer, loader=loader)
    step = ckpt.restore()  # 0, or the step of the checkpoint restored (all of the above as saved)
    stopped = False
    while step < args.steps and not stopped:
        for inputs, targets in loader:
            optimizer.zero_grad()
            device = "cuda" if cuda else "cpu"
            loss = F.mse_loss(model(inputs.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
            step += 1
            print(f"rank {rank} step {step} loss {loss.item()!r}", flush=True)
            time.sleep(args.step_time_s)
            if not ckpt.step(step, progress=step / args.steps):
                stopped = True  # every rank stops at this step, its checkpoint durable
            if stopped or step == args.steps:
                break
    ckpt.close()  # waits for the last upload
    dist.destroy_process_group()
    return EXIT_STOPPED if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
