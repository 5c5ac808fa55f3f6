"""torch's ``DistributedSampler`` under a ``BatchSampler``, as a training loop drives it."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils.data as tud

from peers import Peer


def sampler(n: int, world: int, rank: int = 0) -> tud.DistributedSampler[int]:
    """``DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=0)``."""
    dataset: Any = range(n)  # torch types it as a Dataset; it only needs len()
    return tud.DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)


def chain(n: int, world: int, batch: int, epoch: int = 0) -> Iterable[list[int]]:
    """One epoch of batches after ``set_epoch(epoch)``."""
    out = sampler(n, world)
    out.set_epoch(epoch)
    return tud.BatchSampler(out, batch, drop_last=False)


def epochs(n: int, world: int, rank: int, batch: int) -> Iterator[list[int]]:
    """``set_epoch(e)`` then a full pass, for every epoch."""
    shuffle = sampler(n, world, rank)
    batches = tud.BatchSampler(shuffle, batch, drop_last=False)
    for epoch in itertools.count():
        shuffle.set_epoch(epoch)
        yield from batches


def resume(n: int, world: int, epoch: int, offset: int, batch: int) -> Iterator[list[int]]:
    """torch resumed mid-epoch: ``set_epoch``, ``iter`` (its randperm), skip ``offset`` indices.

    A generator, so that all of the work happens in ``next()``: this is how torchdata's
    ``StatefulDistributedSampler`` resumes (``islice(iter, yielded, None)``).
    """
    shuffle = sampler(n, world)
    shuffle.set_epoch(epoch)
    indices = itertools.islice(iter(shuffle), offset, None)
    while out := list(itertools.islice(indices, batch)):
        yield out


def shuffle_first(n: int) -> int:
    """The first index of a fresh ``DistributedSampler(range(n), 1, 0, shuffle=True)``."""
    return next(iter(sampler(n, 1)))


PEERS = [
    Peer(
        name="torch",
        how="BatchSampler(DistributedSampler(range(N), W, r, shuffle=True, seed=0), B), "
        "set_epoch(e) each epoch",
    )
]
