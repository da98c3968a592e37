"""A DeepSpeed (ZeRO stage 2) loop under torchrun that checkpoints with Spotline and resumes exactly.

    torchrun --nproc_per_node 2 examples/training/deepspeed_train.py --steps 60

On a Spotline request, a Spot notice or SIGTERM every rank writes DeepSpeed's own checkpoint
(`engine.save_checkpoint`: the model states and each rank's ZeRO partition) plus its data position
and random generators; each rank uploads its own files, the manifest last. A new run resumes
through `engine.load_checkpoint`, so its losses are those of an uninterrupted run. On the CPU it
uses DeepSpeed's CPU accelerator (gloo). Needs `pip install 'spotline[deepspeed]'`.
"""

from __future__ import annotations

import argparse
import sys
import time

import deepspeed  # its accelerator: CUDA where there is one, else the CPU (gloo)
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.data import ResumableDataLoader
from spotline.integrations.deepspeed import DeepSpeedCheckpointer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0, help="stands in for a larger model")
    parser.add_argument("--local-dir", default="/tmp/spotline-deepspeed")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(0.1), nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 16,
        "zero_optimization": {"stage": 2},
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2), config=config
    )
    rank = engine.global_rank
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1, generator=g))
    loader = ResumableDataLoader(data, batch_size=16, shuffle=True, seed=args.seed)  # a share per rank
    torch.manual_seed(args.seed + rank)  # each rank's own dropout

    agent = Agent.from_env().start()
    ckpt = DeepSpeedCheckpointer(agent, engine, args.local_dir, loader=loader)
    step = ckpt.restore()  # 0, or the step of the checkpoint restored (all of the above as saved)
    stopped = False
    while step < args.steps and not stopped:
        for inputs, targets in loader:
            loss = F.mse_loss(engine(inputs.to(engine.device)), targets.to(engine.device))
            engine.backward(loss)
            engine.step()
            step += 1
            print(f"rank {rank} step {step} loss {loss.item()!r}", flush=True)
            time.sleep(args.step_time_s)
            if not ckpt.step(step, progress=step / args.steps):
                stopped = True  # every rank stops at this step, its checkpoint durable
            if stopped or step == args.steps:
                break
    ckpt.close()  # waits for the last upload
    deepspeed.comm.destroy_process_group()
    return EXIT_STOPPED if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
