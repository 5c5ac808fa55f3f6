"""The global sample order of a mixture of shard sets: the mixture law over shard streams.

NOTE [ shard stream mixture ]
A mixture of ``K`` shard sets maps its global position ``p`` to a sample in two steps,
with no state other than ``p``:

1. ``(k, q)``: the mixture law of :class:`~detsamplers.MixSampler` (NOTE [ mixture law ]),
   evaluated by a ``MixSampler`` over ``range(N_k)`` for each component's ``N_k`` samples
   per pass, with the mixture's seed, weights, window and curriculum. Every window of
   ``P`` positions gives component ``k`` its ``c_k`` positions; the interleaving is keyed
   by ``(seed, segment, window)``; component ``k`` advances through its own stream in
   order, so ``q`` counts its samples and ``q // N_k`` is its epoch.
2. ``(shard, sample)``: position ``q`` of component ``k``'s own shard stream (NOTE [ shard
   stream order ]), the stream a ``WebDatasetSource`` over the ``k``-th shard set with seed
   ``derive(seed, "mix-component", k)`` yields: its own keyed shard order per epoch, its
   own window shuffle, its own repeat.

Shards are numbered across the shard sets in order (set 0's shards, then set 1's...). The
split across ranks and workers and the batch grid are the single source's (NOTE [ shard
stream split ]): the mixture position is the global sample position, so a state is one
position and resuming on another world size or global batch continues at that sample.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...._mix import MixSampler
from ..order._shard_order import ShardOrder

__all__ = ["MixOrder"]

I64 = npt.NDArray[np.int64]


class MixOrder:
    """Map global positions to ``(shard, sample index)`` (NOTE [ shard stream mixture ]).

    Args:
        mixture: The law: a ``MixSampler`` over ``range(N_k)`` per component.
        orders: Each component's shard stream order.

    Examples:
        >>> import numpy as np
        >>> orders = [ShardOrder([2], 0, False, 0), ShardOrder([1, 1], 0, False, 0)]
        >>> order = MixOrder(MixSampler([range(2), range(2)], [1, 1], seed=0), orders)
        >>> shards, samples = order.locate(np.arange(4))
        >>> sorted(zip(shards.tolist(), samples.tolist()))
        [(0, 0), (0, 1), (1, 0), (2, 0)]
    """

    def __init__(self, mixture: MixSampler, orders: Sequence[ShardOrder]) -> None:
        self.mixture = mixture
        self.orders = list(orders)
        sizes = [len(order.counts) for order in self.orders]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def fork(self) -> MixOrder:
        """An equal order with caches of its own, for another thread (the prefetch's)."""
        mixture = copy.deepcopy(self.mixture)  # via __getstate__: tables rebuilt lazily
        return MixOrder(mixture, [order.fork() for order in self.orders])

    def locate(self, positions: I64) -> tuple[I64, I64]:
        """The shard (numbered across the shard sets) and sample of each global position."""
        positions = np.asarray(positions, dtype=np.int64)
        component, q = self.mixture.locate(positions)
        shards = np.empty_like(positions)
        samples = np.empty_like(positions)
        # A few sets: one pass per set beats np.unique's sort; many sets: only those present.
        present = range(len(self.orders)) if len(self.orders) <= 8 else np.unique(component)
        for k in present:
            where = np.flatnonzero(component == k)
            if len(where) == 0:
                continue
            shard, sample = self.orders[k].locate(q[where])
            shards[where] = shard + self.offsets[k]
            samples[where] = sample
        return shards, samples
