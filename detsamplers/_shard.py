"""Shard: rank ``r`` of ``W`` owns positions ``r, r + W, r + 2W, ...`` of the inner stream.

Over an addressable chain each rank computes only its own positions, so its cost is
proportional to its share, whatever ``W`` is. Over a foreign sampler it falls back to
iterating and filtering, as Determined's ``DistributedSampler`` always does.

NOTE [ shard lengths ]
Over a finite stream of ``L`` items, rank ``r`` yields ``len(range(r, L, W))`` items per
pass: the first ``L % W`` ranks get one more. Nothing is padded or dropped (padding would
duplicate records). ``len()`` is that exact per-rank count, ``L // W + (L % W > r)``, on
both the addressable and the foreign path, as Determined's ``DistributedSampler`` and
``DistributedBatchSampler`` report it (tests/test_determined_parity.py compares with them).
So ``len()`` differs between ranks when ``W`` does not divide ``L``: code that needs a
length every rank agrees on computes it explicitly (the trial loop counts an epoch as
``ceil(len(dataset) / global_batch_size)`` global batches, detsamplers/trial/_units.py),
never from one rank's ``len()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._errors import check_int
from ._source import check_reach
from ._stage import Stage

__all__ = ["DistributedBatchSampler", "DistributedSampler"]

I64 = npt.NDArray[np.int64]
T = TypeVar("T")


def _world_size(num_workers: int | None, world_size: int | None) -> int:
    if num_workers is not None and world_size is not None:
        raise TypeError(
            "pass the world size once, as num_workers or as world_size, but got "
            f"num_workers={num_workers!r} and world_size={world_size!r}"
        )
    if num_workers is None and world_size is None:
        raise TypeError("missing the world size: pass num_workers (or its alias world_size)")
    name = "num_workers" if num_workers is not None else "world_size"
    return check_int(name, num_workers if num_workers is not None else world_size, minimum=1)


class _Shard(Stage[T]):
    verb = "shard"

    def __init__(
        self,
        inner: Any,
        num_workers: int | None,
        rank: int | None,
        world_size: int | None,
        inner_param: str,
    ) -> None:
        size = _world_size(num_workers, world_size)
        if rank is None:
            raise TypeError("missing the rank: pass rank, an integer in [0, num_workers)")
        self._rank = check_int("rank", rank, minimum=0, below=size, below_name="num_workers")
        self._world = size
        super().__init__(inner, inner_param)

    @property
    def num_workers(self) -> int:
        """The number of ranks (Determined's name for the world size)."""
        return self._world

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._world

    @property
    def rank(self) -> int:
        """This rank, in ``[0, world_size)``."""
        return self._rank

    @property
    def pass_length(self) -> int:
        if self.infinite and (error := self._no_pass()) is not None:
            raise error
        length = self._inner.pass_length
        if self.indexable:
            return len(range(self._rank, length, self._world))
        return -(-length // self._world)

    def _map(self, positions: I64) -> I64:
        if self.infinite:
            check_reach(positions, self._world, self._rank, type(self).__name__)
            return positions * self._world + self._rank
        length = self.pass_length
        epoch = positions // length
        offset = positions - epoch * length
        out: I64 = epoch * self._inner.pass_length + self._rank + offset * self._world
        return out

    def _shard(self, items: Iterator[Any]) -> Iterator[Any]:
        return islice(items, self._rank, None, self._world)

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        return self._shard(self._inner.fallback_pass(epoch))

    def fallback_stream(self) -> Iterator[Any]:
        return self._shard(self._inner.fallback_stream())

    def config(self) -> dict[str, Any]:
        return {"stage": "shard", "world_size": self._world, "rank": self._rank}

    def __len__(self) -> int:
        # Exact per rank (NOTE [ shard lengths ]).
        length = len(self._inner_obj)
        return length // self._world + int(length % self._world > self._rank)


class DistributedSampler(_Shard[T]):
    """Give rank ``rank`` of ``num_workers`` the positions ``rank, rank + W, ...``.

    Determined's building-block ``DistributedSampler`` (not torch's standalone one): it
    shards whatever sampler it wraps. Shard after the repeat, so that the ranks' epoch
    boundaries stay aligned and the world size can change between runs.

    Args:
        sampler: The sampler to shard, usually a :class:`RepeatSampler`.
        num_workers: The world size (Determined's name for it).
        rank: This process's rank, in ``[0, num_workers)``.
        world_size: Keyword alias for ``num_workers``; pass one of the two.

    Raises:
        TypeError: an argument is not an integer, or the world size is given twice.
        ValueError: ``num_workers < 1``, ``rank`` out of range, or ``sampler`` is already
            sharded or contains a skip.

    Examples:
        >>> from detsamplers import DistributedSampler
        >>> list(DistributedSampler(range(10), num_workers=3, rank=1))
        [1, 4, 7]
        >>> [len(DistributedSampler(range(10), num_workers=3, rank=r)) for r in range(3)]
        [4, 3, 3]
    """

    def __init__(
        self,
        sampler: Iterable[T],
        num_workers: int | None = None,
        rank: int | None = None,
        *,
        world_size: int | None = None,
    ) -> None:
        super().__init__(sampler, num_workers, rank, world_size, "sampler")

    @property
    def sampler(self) -> Iterable[T]:
        """The wrapped sampler."""
        return self._inner_obj  # type: ignore[no-any-return]


class DistributedBatchSampler(_Shard[list[int]], tud.BatchSampler):
    """Give rank ``rank`` of ``num_workers`` every ``num_workers``-th batch.

    Args:
        batch_sampler: The batch sampler to shard.
        num_workers: The world size (Determined's name for it).
        rank: This process's rank, in ``[0, num_workers)``.
        world_size: Keyword alias for ``num_workers``.

    Examples:
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import DistributedBatchSampler
        >>> batches = BatchSampler(range(10), batch_size=2, drop_last=False)
        >>> list(DistributedBatchSampler(batches, num_workers=2, rank=0))
        [[0, 1], [4, 5], [8, 9]]
        >>> len(DistributedBatchSampler(batches, num_workers=2, rank=1))
        2
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        num_workers: int | None = None,
        rank: int | None = None,
        *,
        world_size: int | None = None,
    ) -> None:
        super().__init__(batch_sampler, num_workers, rank, world_size, "batch_sampler")

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The wrapped batch sampler."""
        return self._inner_obj  # type: ignore[no-any-return]
