"""Locate a rank's batches a chunk at a time: one ``ShardOrder.locate`` call per chunk.

NOTE [ batches located together ]
``ShardOrder.locate`` maps each position on its own (a pure function of the position,
NOTE [ shard stream order ]) in a dozen numpy calls whatever the number of positions: with
batches of 64 its calls, not its arithmetic, are the cost (about 1 us a sample with
``parts``, as much as reading the sample from a warm cache). So a reader that walks this
rank's batches ``t, t + step, t + 2 step, ...`` locates them ``CHUNK_POSITIONS`` positions
at a time and hands them out batch by batch: each batch gets exactly the shards and
sample indexes that locating it alone gives (the positions are those of
:func:`rank_positions`, concatenated). The source's batches and the prefetch plan (NOTE
[ shard prefetch ]) each walk so, with an order of their own (the plan's a fork, used by
its thread only). The first chunk is one batch and each next one twice the last, up to
``CHUNK_POSITIONS``: a reader that stops after a few batches (a first batch, a resume, a
small validation set) locates about what it reads, not a whole chunk ahead (with a window
shuffle, each window located costs a keyed permutation). Memory: one chunk's positions,
shards and indexes (at most ``CHUNK_POSITIONS`` or one batch, 24 bytes each).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ._rank_batches import BatchShape
from ._shard_order import ShardOrder

__all__ = ["CHUNK_POSITIONS", "batch_positions", "located_batches"]

#: Positions located in one call (batches of more are located one by one).
CHUNK_POSITIONS = 1024

I64 = np.ndarray[Any, np.dtype[np.int64]]


def batch_positions(
    batches: I64, batch_size: int, world_size: int, rank: int, limit: int | None, origin: int
) -> tuple[I64, I64]:
    """The positions of rank ``rank``'s ``batches``, concatenated, and each batch's count.

    Batch ``t`` holds :func:`rank_positions` ``(t, ...)``: those below ``limit`` if given.

    Examples:
        >>> positions, counts = batch_positions(np.array([0, 2]), 3, 2, 1, 10, 0)
        >>> positions.tolist(), counts.tolist()
        ([1, 3, 5], [3, 0])
    """
    offsets = batches[:, None] * batch_size + np.arange(batch_size, dtype=np.int64)
    positions = origin + offsets * world_size + rank
    if limit is None:
        return positions.reshape(-1), np.full(len(batches), batch_size, dtype=np.int64)
    below = positions < limit
    return positions[below], below.sum(axis=1)


def located_batches(
    order: ShardOrder,
    shape: BatchShape,
    batch: int,
    step: int,
    end: int | None,
) -> Iterator[tuple[I64, I64]]:
    """``(shards, indexes)`` of batches ``batch, batch + step, ...`` (before ``end``).

    ``shape`` is the :class:`BatchShape` of the rank's batches, as :func:`rank_positions`
    takes it; ``order`` is used by the caller's thread only.

    Examples:
        >>> order = ShardOrder([3, 3], seed=0, shuffle_shards=False, shuffle_window=0)
        >>> shape = BatchShape(batch_size=2, world_size=1, rank=0, limit=6, origin=0)
        >>> [(s.tolist(), i.tolist()) for s, i in located_batches(order, shape, 1, 1, 3)]
        [([0, 1], [2, 0]), ([1, 1], [1, 2])]
    """
    widest = max(1, CHUNK_POSITIONS // shape.batch_size)
    chunk = 1  # batches in this call: doubling up to ``widest``
    first = batch
    while True:
        stop = first + step * chunk if end is None else min(end, first + step * chunk)
        if stop <= first:
            return
        batches = np.arange(first, stop, step, dtype=np.int64)
        positions, counts = batch_positions(batches, *shape)
        shards, indexes = order.locate(positions)
        bounds = np.cumsum(counts).tolist()
        for low, high in zip([0, *bounds[:-1]], bounds, strict=True):
            yield shards[low:high], indexes[low:high]
        first, chunk = stop, min(2 * chunk, widest)
