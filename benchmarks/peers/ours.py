"""detsamplers: the chain ``make_batch_sampler`` and the shard source ``WebDatasetSource``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch.utils.data as tud

import detsamplers as ds
from peers import Peer


def index_batches(n: int, world: int, rank: int, batch: int) -> Iterable[list[int]]:
    """The training chain over ``range(n)``: shuffle, repeat, shard, batch."""
    return ds.make_batch_sampler(
        range(n), "training", shuffle_seed=0, num_workers=world, rank=rank, batch_size=batch
    )


def resume(n: int, batch: int, position: int) -> Callable[[], Sequence[int]]:
    """Load the chain's state at ``position`` samples (its Stateful API) into a fresh chain."""
    at = ds.make_batch_sampler(
        range(n), "training", shuffle_seed=0, num_workers=1, rank=0, batch_size=batch,
        skip=position // batch,
    )  # fmt: skip
    saved = at.state_dict()  # type: ignore[attr-defined]

    def run() -> Sequence[int]:
        chain = index_batches(n, 1, 0, batch)
        chain.load_state_dict(saved)  # type: ignore[attr-defined]
        return next(iter(chain))

    return run


def shuffle_first(n: int) -> int:
    """The first index of ``ReproducibleShuffleSampler`` over ``range(n)``."""
    return next(iter(ds.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0)))


PEERS = [
    Peer(
        name="detsamplers",
        how="make_batch_sampler(range(N), 'training', shuffle_seed=0, num_workers=W, rank=r, "
        "batch_size=B); resume: load_state_dict of the chain's state_dict",
        index_batches=index_batches,
        resume=resume,
        shuffle_first=shuffle_first,
    )
]
