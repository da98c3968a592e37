"""A PyTorch DDP loop under torchrun that checkpoints with Spotline and resumes exactly.

    torchrun --nproc_per_node 2 examples/training/torchrun_ddp.py --steps 60

On a Spotline request, a Spot notice or SIGTERM every rank checkpoints at the same step with
`torch.distributed.checkpoint` (one shard per rank, each uploaded by its rank; the manifest last);
on SIGTERM every rank stops there and the run exits with 143. A new run resumes from the newest
durable checkpoint: model, AdamW's state, each rank's data position and random generators, so
its losses are those of an uninterrupted run. Gloo on the CPU, NCCL where there are GPUs. The
data are made here (no download). Needs `pip install 'spotline[torch]'`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.data import ResumableDataLoader
from spotline.integrations.torch import DistributedCheckpointer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0, help="stands in for a larger model")
    parser.add_argument("--local-dir", default="/tmp/spotline-ddp")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")

    torch.manual_seed(args.seed)
    net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(0.1), nn.Linear(32, 1)).to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
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
