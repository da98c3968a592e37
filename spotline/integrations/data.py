"""Data that resumes mid-epoch: the batches after a resume are the ones an uninterrupted run
would have drawn next, and drawing them does not touch the process's random generators.

    loader = ResumableDataLoader(dataset, batch_size=32, shuffle=True, seed=0)
    for batch in loader: ...                 # epoch after epoch (or `loader.set_epoch(e)`)
    state = loader.state_dict()              # {"epoch", "batches"}: where the next batch comes from
    loader.load_state_dict(state)            # the next iteration resumes there

A plain `DataLoader(shuffle=True)` draws its order, and its workers' base seed, from the global
generator each time an epoch's iterator is made, so a resumed run both restarts the epoch's data
(Lightning then warns that the loader is not resumable) and shifts every random draw after it
(dropout, augmentation). `ResumableSampler` draws each epoch's order from a generator of its own,
seeded by `(seed, epoch)`, and can start an epoch part way; `ResumableDataLoader` counts the
batches it handed out and gives its iterator a generator of its own for the workers' seeds.

Under several processes (torchrun, Lightning DDP) each rank reads its own share of the epoch, as
`DistributedSampler` does (same order on every rank, rank r takes every world_size-th index).
With Lightning DDP pass `use_distributed_sampler=False` to the `Trainer`: the loader shards itself.

The state counts the batches handed to the training loop. Lightning fetches one batch ahead, so
`SpotlineCallback` records the batches its fit loop actually trained instead (a loader used
without it would skip one batch on resume). Random augmentation inside DataLoader workers is not
covered: a resumed worker's generator starts again from the epoch's seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler

_STATE_KEY = "spotline_resumable"


def _seed_of(seed: int, epoch: int) -> int:
    """One generator seed per (seed, epoch), never the same for two epochs of one seed."""
    return (seed * 1_000_003 + epoch) % (2**63)


class ResumableSampler(Sampler[int]):
    """A shuffling (or sequential) sampler that can start an epoch part way; see the module
    docstring. `rank` and `world_size` default to the process group's (1 process without one)."""

    def __init__(
        self,
        data_source: Sized | int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        self.size = data_source if isinstance(data_source, int) else len(data_source)
        distributed = dist.is_available() and dist.is_initialized()
        self.world_size = (
            world_size if world_size is not None else (dist.get_world_size() if distributed else 1)
        )
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in a world of {self.world_size}")
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self._start = 0  # indices of this epoch to skip at the next iteration (a resume)

    def __len__(self) -> int:
        if self.drop_last:
            return self.size // self.world_size
        return -(-self.size // self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration draws (what `DistributedSampler.set_epoch` does). A resume
        into another epoch starts that epoch from its beginning."""
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def order(self, epoch: int) -> list[int]:
        """This rank's indices of `epoch`, in order."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(_seed_of(self.seed, epoch))
            indices = torch.randperm(self.size, generator=generator).tolist()
        else:
            indices = list(range(self.size))
        per_rank = len(self)
        total = per_rank * self.world_size
        if total > len(indices):  # pad with the first indices, as DistributedSampler does
            indices += (indices * (total // max(1, len(indices)) + 1))[: total - len(indices)]
        return indices[:total][self.rank : total : self.world_size]

    def __iter__(self) -> Iterator[int]:
        start, self._start = self._start, 0
        epoch = self.epoch
        yield from self.order(epoch)[start:]
        if self.epoch == epoch:
            self.epoch = epoch + 1  # the next iteration is the next epoch (set_epoch overrides)

    def skip_to(self, epoch: int, index: int) -> None:
        """The next iteration draws `epoch` from its `index`-th index on."""
        self.epoch = epoch
        self._start = max(0, min(index, len(self)))


class ResumableDataLoader(DataLoader[Any]):
    """A `DataLoader` over a `ResumableSampler`, with `state_dict` / `load_state_dict` (what
    Lightning's fit loop saves for a resumable loader); see the module docstring. Takes
    DataLoader's own keyword arguments besides `sampler`, `shuffle` and `generator`."""

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int = 1,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        for refused in ("sampler", "batch_sampler", "generator"):
            if refused in kwargs:
                raise TypeError(f"ResumableDataLoader makes its own {refused}")
        sampler = ResumableSampler(
            len(dataset),  # type: ignore[arg-type]
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
        )
        self._own_generator = torch.Generator()
        super().__init__(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=drop_last,
            generator=self._own_generator,
            **kwargs,
        )
        self.resumable_sampler = sampler
        self.seed = seed
        self._epoch = 0
        self._batches = 0  # handed out in `_epoch`

    def set_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._batches = 0
        self._epoch = epoch
        self.resumable_sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler = self.resumable_sampler
        epoch = sampler.epoch
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, 0
        batch_size = self.batch_size or 1
        sampler.skip_to(epoch, self._batches * batch_size)
        # The workers' base seed comes from this generator, not the global one.
        self._own_generator.manual_seed(_seed_of(self.seed, epoch) ^ 0x5EED)
        for batch in super().__iter__():
            self._batches += 1
            yield batch
        self._epoch, self._batches = epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch comes from: `epoch`, and `batches` handed out in it."""
        return {_STATE_KEY: True, "epoch": self._epoch, "batches": self._batches, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"the loader's state was saved with seed {state['seed']}, not {self.seed}")
        self._epoch, self._batches = int(state["epoch"]), int(state["batches"])
        self.resumable_sampler.skip_to(self._epoch, self._batches * (self.batch_size or 1))


def is_resumable_state(state: Any) -> bool:
    """Whether `state` is a `ResumableDataLoader.state_dict()`."""
    return isinstance(state, dict) and state.get(_STATE_KEY) is True
