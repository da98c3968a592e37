"""An elastic job resized on the CPU (gloo): 2 processes, shrunk to 1, grown back to 2, each time
resuming from the distributed checkpoint of the size before. With the global batch kept by
gradient accumulation (`spotline.integrations.elastic`), its loss curve is the unresized run's
within floating-point rounding (the documented difference, docs/elastic.md)."""

from __future__ import annotations

import json
import os
import socket
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from spotline.agent import Agent, AgentSettings, LocalCheckpointStore, RecordingPublisher
from spotline.integrations.elastic import accumulation_steps, loss_scale, world_size
from spotline.integrations.torch import DistributedCheckpointer

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

GLOBAL_BATCH = 8
MICRO_BATCH = 2
SAMPLES = 64
# What docs/elastic.md promises: the same curve up to rounding (float32 sums in another order).
TOLERANCE = 1e-5


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    return x, y


def _phase(rank: int, world: int, port: int, store: str, work: str, start: int, end: int, out: str) -> None:
    """One run of the job at `world` ranks: resume (expecting step `start`), train to `end`,
    checkpoint, stop. Rank 0 writes the loss over all the samples before each step to `out`."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    settings = AgentSettings(job_id="job-e", checkpoint_interval_s=0, heartbeat_s=0, poll_s=0)
    agent = Agent(settings, store=LocalCheckpointStore(Path(store)), publisher=RecordingPublisher())
    ckpt = DistributedCheckpointer(agent, Path(work) / f"rank{rank}", model=model, optimizer=optimizer)
    step = ckpt.restore()
    assert step == start, (step, start)
    size = world_size()
    assert size == world
    micro_steps = accumulation_steps(GLOBAL_BATCH, MICRO_BATCH, size)
    x, y = _data()
    share = GLOBAL_BATCH // size
    for step in range(start, end):
        rows = [(step * GLOBAL_BATCH + i) % SAMPLES for i in range(GLOBAL_BATCH)]
        if rank == 0:
            with torch.no_grad():
                loss = nn.functional.mse_loss(model.module(x), y).item()
            with open(out, "a") as file:
                file.write(json.dumps({"step": step, "world": size, "loss": loss}) + "\n")
        mine = rows[rank * share : (rank + 1) * share]
        for micro in range(micro_steps):
            part = mine[micro * MICRO_BATCH : (micro + 1) * MICRO_BATCH]
            last = micro == micro_steps - 1
            with nullcontext() if last else model.no_sync():
                (nn.functional.mse_loss(model(x[part]), y[part]) * loss_scale(micro_steps)).backward()
        optimizer.step()
        optimizer.zero_grad()
    ckpt.save(end, ckpt.training_state(), wait=True).result()
    ckpt.close()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(world: int, store: Path, work: Path, start: int, end: int, out: Path) -> None:
    args = (world, _free_port(), str(store), str(work), start, end, str(out))
    mp.spawn(_phase, args=args, nprocs=world, join=True)


def _curve(path: Path) -> list[tuple[int, int, float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["step"], r["world"], r["loss"]) for r in rows]


def test_shrunk_to_one_and_grown_back_to_two_it_follows_the_unresized_loss_curve(tmp_path: Path) -> None:
    # The unresized run: 2 ranks for 12 steps
    _run(2, tmp_path / "fixed-store", tmp_path / "fixed-work", 0, 12, tmp_path / "fixed.jsonl")
    # The resized run: 2 ranks for 4 steps, 1 rank for 4 (shrunk), 2 ranks for 4 (grown back)
    store, work, out = tmp_path / "store", tmp_path / "work", tmp_path / "resized.jsonl"
    _run(2, store, work, 0, 4, out)
    _run(1, store, work, 4, 8, out)
    _run(2, store, work, 8, 12, out)

    fixed, resized = _curve(tmp_path / "fixed.jsonl"), _curve(out)
    assert [s for s, _, _ in resized] == list(range(12))
    assert [w for _, w, _ in resized] == [2] * 4 + [1] * 4 + [2] * 4
    # It trains (the loss falls), and each step's loss is the unresized run's within rounding
    assert resized[-1][2] < resized[0][2] * 0.8
    for (step, _, want), (_, _, got) in zip(fixed, resized, strict=True):
        assert got == pytest.approx(want, rel=TOLERANCE, abs=TOLERANCE), step
