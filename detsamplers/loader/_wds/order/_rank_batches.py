"""The split of a shard stream across ranks and DataLoader workers, and its pass length.

NOTE [ shard stream split ]
The source yields whole batches (collated inside it), so it is used with
``DataLoader(batch_size=None)``; ``WebDataLoader`` is that DataLoader, plus the
bookkeeping of the position. With ``B = batch_size``, ``W = world_size`` and the global
batch ``G = B * W``, batch ``t`` of rank ``r`` holds the global positions
``(t * B + i) * W + r`` for ``i < B`` (NOTE [ shard stream order ] maps them to samples):
global batch ``t`` is the positions ``[t G, (t + 1) G)``, dealt out across ranks.

DataLoader worker ``w`` of ``K`` builds the batches ``t0 + w, t0 + w + K, ...`` of its
rank, where ``t0`` is the batch the pass starts at. Torch's DataLoader takes one item from
each worker in turn, so the rank still receives ``t0, t0 + 1, ...`` in order, whatever
``K``: nothing is duplicated or lost. A batch's contents and its map-stage random draws
(seeded from ``batch_key(seed, o + t * G + r)``, NOTE [ per-batch seeding ]) do not
depend on ``K``, on prefetching, or on where the run resumed.

The state holds the global position after the last batch handed out: the samples of
every rank consumed. Resuming it with another ``num_workers`` gives the same batches.
Resuming it with another world size ``W'`` and batch size ``B'`` continues the stream at
that sample (NOTE [ sample positions ]): with ``repeat=True`` the grid starts at the
position's remainder ``o = position mod G'``, so global batch ``t`` is the positions
``[o + t G', o + (t + 1) G')`` and rank ``r`` reads ``o + (t B' + i) W' + r``. A position
need not be a multiple of ``G'``; with ``repeat=False`` (one validation pass) it must be.
The map-stage draws are keyed by the batch's first position on its rank,
``o + t G + r``, so they change with the batch size and world size (as in the map-style
loader), never with ``num_workers``.

``repeat=True`` (training) streams epoch after epoch forever: every rank gets a full batch
at every step, so uneven shards can never leave one rank waiting in a collective.
``repeat=False`` (validation) is one pass over epoch 0's order. With ``drop_last=True``
every rank yields ``N // G`` full batches (the last ``N % G`` samples are not read), so
ranks stay in step. With ``drop_last=False`` every sample is read once: the last, partial
global batch gives rank ``r`` the positions ``≡ r (mod W)`` left, so a rank may get a
smaller last batch, or none; ``len()`` is exact per rank (``ceil((N - r) / G)``), and
code that runs a collective per step must use ``drop_last=True``. Nothing is ever padded.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["BatchShape", "pass_batches", "rank_batches", "rank_positions"]


class BatchShape(NamedTuple):
    """A rank's batches' shape: :func:`rank_positions`'s arguments after the batch.

    ``limit`` is the pass's sample count with ``repeat=False`` (``None``: no end);
    ``origin`` where the grid starts (NOTE [ shard stream split ]).

    Examples:
        >>> shape = BatchShape(batch_size=3, world_size=2, rank=1, limit=None, origin=0)
        >>> rank_positions(1, *shape).tolist()
        [7, 9, 11]
    """

    batch_size: int
    world_size: int
    rank: int
    limit: int | None
    origin: int


def pass_batches(num_samples: int, global_batch: int, drop_last: bool) -> int:
    """Global batches in a pass with ``repeat=False`` (the last may be partial).

    Examples:
        >>> pass_batches(10, 4, drop_last=False), pass_batches(10, 4, drop_last=True)
        (3, 2)
    """
    full, partial = divmod(num_samples, global_batch)
    return full + (partial > 0 and not drop_last)


def rank_batches(
    num_samples: int, batch_size: int, world_size: int, rank: int, drop_last: bool
) -> int:
    """Batches rank ``rank`` yields in one pass (NOTE [ shard stream split ]).

    Examples:
        >>> [rank_batches(10, 2, 2, r, drop_last=False) for r in (0, 1)]
        [3, 3]
        >>> [rank_batches(9, 2, 2, r, drop_last=False) for r in (0, 1)]
        [3, 2]
    """
    global_batch = batch_size * world_size
    if drop_last:
        return pass_batches(num_samples, global_batch, drop_last)
    return max(0, -(-(num_samples - rank) // global_batch))


def rank_positions(
    batch: int, batch_size: int, world_size: int, rank: int, limit: int | None, origin: int = 0
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The global positions of rank ``rank``'s batch ``batch``, those below ``limit`` if given.

    ``origin`` is where the grid starts (a resume at a position that is not a multiple of
    the global batch).

    Examples:
        >>> rank_positions(1, 3, 2, 1, None).tolist()
        [7, 9, 11]
        >>> rank_positions(1, 3, 2, 1, 10).tolist()
        [7, 9]
        >>> rank_positions(1, 3, 2, 1, None, origin=5).tolist()
        [12, 14, 16]
    """
    offsets = np.arange(batch_size, dtype=np.int64) + batch * batch_size
    positions = origin + offsets * world_size + rank
    if limit is not None:
        positions = positions[positions < limit]
    return positions
