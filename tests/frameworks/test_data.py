"""spotline.integrations.data: a resumed loader hands out the batches an uninterrupted one would
have, draws nothing from the global generator, and shards an epoch across ranks."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from spotline.integrations.data import ResumableDataLoader, ResumableSampler

pytestmark = pytest.mark.frameworks


def dataset(n: int = 50) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def batches(loader: ResumableDataLoader, count: int) -> list[list[int]]:
    out: list[list[int]] = []
    while len(out) < count:
        for (batch,) in loader:
            out.append(batch.tolist())
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_resumed_mid_epoch_continues_with_the_uninterrupted_batches(num_workers: int) -> None:
    # 50 examples in batches of 8: 7 a epoch; three epochs uninterrupted
    reference = batches(ResumableDataLoader(dataset(), batch_size=8, seed=3, num_workers=num_workers), 21)
    assert sorted(i for b in reference[:7] for i in b) == list(range(50))  # an epoch is a permutation
    assert reference[:7] != reference[7:14]  # each epoch its own order

    # A run stopped after 10 batches (mid-epoch 2), its state saved, a new loader resumed from it
    first = ResumableDataLoader(dataset(), batch_size=8, seed=3, num_workers=num_workers)
    head = batches(first, 10)
    state = first.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 3)
    second = ResumableDataLoader(dataset(), batch_size=8, seed=3, num_workers=num_workers)
    second.load_state_dict(state)
    assert head + batches(second, 11) == reference


def test_the_loader_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    batches(ResumableDataLoader(dataset(), batch_size=8, seed=1), 9)
    assert torch.equal(torch.get_rng_state(), before)


def test_ranks_share_an_epoch_like_distributed_sampler() -> None:
    samplers = [ResumableSampler(10, seed=5, rank=r, world_size=3) for r in range(3)]
    shares = [list(s) for s in samplers]
    assert all(len(share) == 4 for share in shares)  # padded: 12 = 3 x 4
    assert set().union(*shares) == set(range(10))
    # Each rank's share is its slice of the epoch's order; the next iteration is the next epoch
    assert samplers[0].order(0) == shares[0] and samplers[0].epoch == 1


def test_a_state_of_another_seed_is_refused() -> None:
    loader = ResumableDataLoader(dataset(), batch_size=8, seed=1)
    with pytest.raises(ValueError, match="seed 2"):
        loader.load_state_dict({"epoch": 0, "batches": 1, "seed": 2})
