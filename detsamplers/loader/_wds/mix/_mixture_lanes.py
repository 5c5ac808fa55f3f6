"""The order of a mixture of shard sets with rank-local parts: one mixture law per lane.

NOTE [ mixture lanes ]
With ``parts = C > 1`` (NOTE [ rank-local parts ]) a rank of a world size ``W`` dividing
``C`` must read, from every shard set, only the parts its positions' residues modulo
``C`` own. The plain mixture (NOTE [ shard stream mixture ]) hands set ``k`` its samples
in the order of the mixture's positions, whichever rank holds them, so every rank would
read every part. So the stream is cut into ``C`` *lanes*: global position ``p`` is
position ``j = p // C`` of lane ``u = p mod C``, and each lane is a mixture of its own,
with no state other than ``p``:

1. Segment ``s`` of the curriculum (``start``, weights, window ``P`` and counts ``c_k``
   as :class:`~detsamplers.MixSampler` computes them, NOTE [ mixture law ]) starts in
   lane ``u`` at lane position ``a_u = ceil((start - u) / C)``, the lane's first position
   at or after ``start``, so a position's segment is the one its global position is in.
2. Lane ``u``'s position ``l = j - a_u`` of the segment lies in the lane's window
   ``w, o = divmod(l, P)``, which is window ``w C + u`` of a ``MixSampler`` keyed by
   ``derive(seed, "wds-mix-lanes", s)`` with the segment's weights and window: the lanes'
   windows are distinct windows of one law, so their interleavings are unrelated, and
   every window of ``P`` positions of a lane gives set ``k`` exactly ``c_k`` of them.
   Its label is the set ``k``, and its rank among set ``k``'s positions in the lane is
   ``Q = B_{k,u} + q - (w (C - 1) + u) c_k``, where ``q`` is the law's count at the
   virtual position and ``B_{k,u}`` is what lane ``u`` had given set ``k`` when the
   segment began (0 for the first segment, or a set that enters with this one; NOTE
   [ adding a component ]).
3. Set ``k``'s sample is position ``t = Q C + u`` of its own shard stream with parts
   (NOTE [ shard stream order ], with ``parts = C`` and the set's seed): lane ``u``'s
   ``Q``-th sample of set ``k``. ``(u, Q) -> t`` is a bijection, so set ``k``'s stream
   ``t = 0, 1, ...`` is read exactly once, and each of its epochs (``t // N_k``) gives
   every sample once. Epoch ``e``'s offsets ``t - e N_k`` of lane ``u`` are
   ``≡ u - e N_k (mod C)``, one part of the deal; a rank's lanes ``u ≡ r + o_0 (mod W)``
   thus read the parts ``≡ r + o_0 - e N_k (mod W)`` of set ``k``'s epoch ``e``: its own
   ``C / W`` parts, as a single source's rank does.

The order depends on ``(seed, weights, window, curriculum, C, the sets' orders)`` and
``p`` only, not on the world size, so the split, resume and elastic laws are the single
source's. The cost: the lanes advance through a set together but not in step (at a given
``p`` their counts differ by up to a window's ``c_k``), and a batch of ``G < C`` positions
draws its sets from ``G`` lanes at about the same offset of unrelated windows, so a
batch's make-up varies around the weights like independent draws, where the plain law
gives every ``P`` consecutive positions their exact counts; each lane window, ``C P``
positions in all, still does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...._mix import MixSampler
from ...._seeds import derive
from ..order._shard_order import ShardOrder

__all__ = ["LaneOrder"]

I64 = npt.NDArray[np.int64]


class LaneOrder:
    """Map global positions to ``(shard, sample index)`` by lanes (NOTE [ mixture lanes ]).

    Args:
        plan: The segments ``(start, weights)``, the first starting at 0.
        window: The mixture's ``window`` argument (``None``: each segment's default).
        seed: The mixture's seed.
        parts: ``C``, the number of lanes.
        orders: Each shard set's own shard stream order, with ``parts=C``.

    Examples:
        >>> import numpy as np
        >>> orders = [ShardOrder([4], 1, False, 0, parts=2), ShardOrder([2, 2], 2, False, 0, parts=2)]
        >>> order = LaneOrder([(0, [1, 1])], None, 0, 2, orders)
        >>> shards, samples = order.locate(np.arange(8))
        >>> sorted(zip(shards.tolist(), samples.tolist()))
        [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (2, 1)]
    """  # noqa: E501

    def __init__(
        self,
        plan: Sequence[tuple[int, Sequence[float]]],
        window: int | None,
        seed: int,
        parts: int,
        orders: Sequence[ShardOrder],
    ) -> None:
        self._args = (plan, window, seed, parts, orders)
        self.parts = parts
        self.orders = list(orders)
        self.sets = len(self.orders)
        sizes = [len(order.counts) for order in self.orders]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.starts = [int(start) for start, _ in plan]
        self.laws = [
            MixSampler(
                [range(max(order.total, 1)) for order in self.orders[: len(weights)]],
                list(weights),
                derive(seed, "wds-mix-lanes", s),
                window=window,
            )
            for s, (_, weights) in enumerate(plan)
        ]
        self.counts = [np.asarray(law.counts, dtype=np.int64) for law in self.laws]
        lanes = np.arange(parts, dtype=np.int64)
        #: Each segment's first lane position in each lane (``a_u``).
        self.first = [(start - lanes + parts - 1) // parts for start in self.starts]
        #: What each lane had given each set when each segment began (``B_{k,u}``).
        self.bases = [np.zeros((parts, self.sets), dtype=np.int64)]
        for s in range(1, len(self.laws)):
            lengths = self.first[s] - self.first[s - 1]
            self.bases.append(self.bases[-1] + self._consumed(s - 1, lanes, lengths))

    def fork(self) -> LaneOrder:
        """An equal order with caches of its own, for another thread."""
        plan, window, seed, parts, orders = self._args
        return LaneOrder(plan, window, seed, parts, [order.fork() for order in orders])

    def _consumed(self, s: int, lanes: I64, lengths: I64) -> I64:
        """What each of ``lanes`` gave each set in its first ``lengths`` of segment ``s``."""
        law, counts = self.laws[s], self.counts[s]
        size = law.window
        # Lane u's position l is the law's virtual position (w C + u) P + o (step 2 above),
        # for every lane at once: a state saved per batch asks for all C lanes.
        w, o = np.divmod(np.asarray(lengths, dtype=np.int64), size)
        got = law.consumed_many((w * self.parts + lanes) * size + o)
        out = np.zeros((len(lanes), self.sets), dtype=np.int64)
        out[:, : got.shape[1]] = got - (w * (self.parts - 1) + lanes)[:, None] * counts[None, :]
        return out

    def lane_counts(self, position: int) -> I64:
        """``(lanes, sets)``: each lane's samples of each set in positions ``[0, position)``."""
        lanes = np.arange(self.parts, dtype=np.int64)
        reached = (position - lanes + self.parts - 1) // self.parts
        segment = np.zeros(self.parts, dtype=np.int64)
        for s in range(1, len(self.laws)):
            segment[reached >= self.first[s]] = s
        out = np.empty((self.parts, self.sets), dtype=np.int64)
        for s in np.unique(segment).tolist():
            u = np.flatnonzero(segment == s)
            out[u] = self.bases[s][u] + self._consumed(s, u, reached[u] - self.first[s][u])
        return out

    def progress(self, position: int) -> list[int]:
        """Samples each shard set has given in positions ``[0, position)``."""
        counts: list[int] = self.lane_counts(position).sum(axis=0).tolist()
        return counts

    def stream(self, positions: I64) -> tuple[I64, I64]:
        """The shard set and its shard stream position ``t`` of each global position."""
        positions = np.asarray(positions, dtype=np.int64)
        lane, j = positions % self.parts, positions // self.parts
        which = np.searchsorted(np.asarray(self.starts), positions, side="right") - 1
        sets = np.empty_like(positions)
        stream = np.empty_like(positions)
        for s in np.unique(which).tolist():
            mask = which == s
            u = lane[mask]
            law, counts = self.laws[s], self.counts[s]
            size = law.window
            w, o = np.divmod(j[mask] - self.first[s][u], size)
            k, q = law.locate((w * self.parts + u) * size + o)
            rank = self.bases[s][u, k] + q - (w * (self.parts - 1) + u) * counts[k]
            sets[mask] = k
            stream[mask] = rank * self.parts + u
        return sets, stream

    def locate(self, positions: I64) -> tuple[I64, I64]:
        """The shard (numbered across the shard sets) and sample of each global position."""
        positions = np.asarray(positions, dtype=np.int64)
        sets, stream = self.stream(positions)
        shards = np.empty_like(positions)
        samples = np.empty_like(positions)
        for k in np.unique(sets).tolist():
            where = np.flatnonzero(sets == k)
            shard, sample = self.orders[k].locate(stream[where])
            shards[where] = shard + self.offsets[k]
            samples[where] = sample
        return shards, samples
