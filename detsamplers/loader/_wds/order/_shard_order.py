"""The global sample order of a shard source: a pure function of the global position.

NOTE [ shard stream order ]
Let the shards have ``c_0 .. c_{S-1}`` samples, ``N = sum(c)``. Global position ``p`` maps
to a sample as follows, with no state other than ``p``:

1. ``epoch, offset = divmod(p, N)`` (repeat).
2. Epoch ``e`` reads the shards in the order ``pi_e``, a keyed permutation of ``[0, S)``
   with key ``derive(seed, "wds-shards")`` at epoch ``e`` (``make_permutation("exact")``;
   the identity if ``shuffle_shards=False``). ``offset`` is found in the cumulative
   counts of that order by binary search: the shard ``s`` and the index ``k`` within it.
3. With ``shuffle_window = w > 0``, shard ``s`` is cut into consecutive windows of ``w``
   samples (the last one shorter) and ``k`` is permuted within its window by the keyed
   permutation ``derive(seed, "wds-window", s, window)`` at epoch ``e``. So a shard is
   still read front to back, window by window, while the order inside each window is a
   pure function of ``(seed, e, s)`` — webdataset's buffer shuffle, without its state.
4. With ``shuffle_block_shards = k > 1`` instead (the source refuses both), ``offset`` is
   first permuted within its block of ``k`` consecutive shards of ``pi_e`` (NOTE [ shard
   block shuffle ]), so a batch mixes ``k`` shards; step 2 then finds the shard and index
   of the permuted offset.
5. With ``parts = C > 1``, before steps 2-3 the offset is first dealt to one of ``C``
   contiguous parts of the epoch's sequence (NOTE [ rank-local parts ]), so that the
   ranks of a world size dividing ``C`` read disjoint runs of shards; step 3 then
   permutes the sequence index it gives, and ``shuffle_block_shards`` permutes within
   blocks of each part instead of step 4 (NOTE [ part block shuffle ]). The parts are
   cut from one shard order of the run and dealt by the global position, so a rank reads
   the same parts, and shards, every epoch; each epoch lays out each part's shards anew
   (NOTE [ fixed part cover ]; ``part_shards="epoch"``, the law of states saved before it,
   cuts them from ``pi_e`` and deals them by the epoch's offset instead).

Shards are named by their index in the URL list. Everything here depends only on
``(counts, seed, shuffle_shards, shuffle_window, shuffle_block_shards, parts,
part_shards)`` and ``p``:
resuming at ``p`` needs no replay, and splitting positions across ranks and workers
(NOTE [ shard stream split ]) cannot lose or duplicate a sample.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...._permute import Permutation, make_permutation
from ...._seeds import derive
from ._block_shuffle import BlockShuffle
from ._fixed_part_cover import PartCover
from ._local_parts import PartDeal

__all__ = ["ShardOrder"]

I64 = npt.NDArray[np.int64]
_EPOCHS_KEPT = 2
_WINDOWS_KEPT = 64


class ShardOrder:
    """Map global positions to ``(shard, sample index)`` (NOTE [ shard stream order ]).

    Args:
        counts: Each shard's number of samples; their sum must be positive.
        seed: Keys the shuffles.
        shuffle_shards: Permute the shards each epoch.
        shuffle_window: Permute samples within windows of this many (0 or 1: no shuffle).
        shuffle_block_shards: Permute samples within blocks of this many consecutive
            shards of each epoch's order (0 or 1: no block shuffle).
        parts: Deal each epoch's offsets to this many contiguous parts of it (0 or 1:
            off; NOTE [ rank-local parts ]).
        part_shards: With ``parts``, ``"run"``: a rank reads the same parts and shards every
            epoch (NOTE [ fixed part cover ]); ``"epoch"``: the parts are cut from each
            epoch's shard order and dealt by the epoch's offset (the earlier law).

    Determinism:
        ``locate(p)`` depends only on the arguments and ``p``.

    Examples:
        >>> import numpy as np
        >>> order = ShardOrder([2, 3], seed=0, shuffle_shards=False, shuffle_window=0)
        >>> shards, samples = order.locate(np.arange(6))
        >>> shards.tolist(), samples.tolist()
        ([0, 0, 1, 1, 1, 0], [0, 1, 0, 1, 2, 0])
    """

    def __init__(
        self,
        counts: Sequence[int],
        seed: int,
        shuffle_shards: bool,
        shuffle_window: int,
        shuffle_block_shards: int = 0,
        parts: int = 0,
        part_shards: str = "run",
    ) -> None:
        self._args = (
            counts,
            seed,
            shuffle_shards,
            shuffle_window,
            shuffle_block_shards,
            parts,
            part_shards,
        )
        self.counts = np.asarray(counts, dtype=np.int64)
        self.total = int(self.counts.sum())
        self.seed = seed
        self.window = shuffle_window if shuffle_window > 1 else 0
        self._shards: Permutation | None = None
        if shuffle_shards and len(self.counts) > 1:
            self._shards = make_permutation("exact", len(self.counts), derive(seed, "wds-shards"))
        self._epochs: OrderedDict[int, tuple[I64, I64]] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int, int], I64] = OrderedDict()
        self.blocks: BlockShuffle | None = None
        self.parts: PartDeal | None = None
        if parts > 1:  # with parts, the block shuffle stays within each part
            block = 0
            if shuffle_block_shards > 1:
                block = -(-shuffle_block_shards * self.total // len(self.counts))
            self.parts = PartDeal(parts, self.total, block, seed)
        elif shuffle_block_shards > 1:
            self.blocks = BlockShuffle(seed, shuffle_block_shards)
        self.cover: PartCover | None = None
        self._fixed: tuple[I64, I64] | None = None
        self.rotate = self.parts is not None and part_shards == "run"
        if self.rotate and self._shards is not None:
            slots = np.arange(len(self.counts), dtype=np.int64)
            key = derive(seed, "wds-part-shards")
            order = make_permutation("exact", len(self.counts), key)(slots, np.zeros_like(slots))
            starts = np.concatenate([[0], np.cumsum(self.counts[order])]).astype(np.int64)
            self._fixed = (order, starts)
            self.cover = PartCover(starts, parts, seed)

    def fork(self) -> ShardOrder:
        """An equal order with caches of its own, for another thread."""
        return ShardOrder(*self._args)

    def shard_order(self, epoch: int) -> I64:
        """The shards in the order epoch ``epoch`` reads them.

        Examples:
            >>> ShardOrder([1, 1, 1], 0, False, 0).shard_order(5).tolist()
            [0, 1, 2]
        """
        return self._epoch(epoch)[0]

    def shard_starts(self, epoch: int) -> I64:
        """Where each shard of ``shard_order(epoch)`` starts in the epoch's sequence, and its end.

        Kept with the order (the last epochs' few), so callers do not each sum the counts.

        Examples:
            >>> ShardOrder([2, 0, 3], 0, False, 0).shard_starts(0).tolist()
            [0, 2, 2, 5]
        """
        return self._epoch(epoch)[1]

    def _epoch(self, epoch: int) -> tuple[I64, I64]:
        if self._fixed is not None:
            return self._fixed
        cached = self._epochs.get(epoch)
        if cached is None:
            slots = np.arange(len(self.counts), dtype=np.int64)
            order = slots
            if self._shards is not None:
                order = self._shards(slots, np.full_like(slots, epoch))
            starts = np.concatenate([[0], np.cumsum(self.counts[order])]).astype(np.int64)
            cached = (order, starts)
            self._epochs[epoch] = cached
            while len(self._epochs) > _EPOCHS_KEPT:
                self._epochs.popitem(last=False)
        return cached

    def _window(self, epoch: int, shard: int, window: int) -> I64:
        key = (epoch, shard, window)
        perm = self._windows.get(key)
        if perm is None:
            start = window * self.window
            length = min(self.window, int(self.counts[shard]) - start)
            key_w = derive(self.seed, "wds-window", shard, window)
            family = make_permutation("exact", length, key_w)
            slots = np.arange(length, dtype=np.int64)
            perm = start + family(slots, np.full_like(slots, epoch))
            self._windows[key] = perm
            while len(self._windows) > _WINDOWS_KEPT:
                self._windows.popitem(last=False)
        return perm

    def locate(self, positions: I64) -> tuple[I64, I64]:
        """Return the shard and the sample index within it for each global position."""
        epochs, offsets = np.divmod(positions, self.total)
        shards = np.empty_like(positions)
        samples = np.empty_like(positions)
        for epoch in np.unique(epochs).tolist():
            mask = epochs == epoch
            order, starts = self._epoch(int(epoch))
            within = offsets[mask]
            if self.parts is not None:
                shift = int(epoch) * self.total % self.parts.parts if self.rotate else 0
                within = self.parts.sequence(within, int(epoch), shift)
                if self.cover is not None:
                    within = self.cover.arrange(within, int(epoch))
            if self.blocks is not None:
                within = self.blocks.permute(int(epoch), starts, within)
            # side="right" - 1 skips shards with no samples (equal consecutive starts).
            slot = np.searchsorted(starts, within, side="right") - 1
            shards[mask] = order[slot]
            samples[mask] = within - starts[slot]
        if self.window and len(samples):
            # Each run of positions in one (epoch, shard, window) takes its permutation at
            # once (a batch spans a few such runs): the same samples as one by one.
            windows, within = np.divmod(samples, self.window)
            group = np.lexsort((windows, shards, epochs))
            keys = np.stack((epochs[group], shards[group], windows[group]))
            cuts = np.flatnonzero(np.any(keys[:, 1:] != keys[:, :-1], axis=0)) + 1
            bounds = [0, *cuts.tolist(), len(group)]
            heads = keys[:, bounds[:-1]].T.tolist()
            for (epoch, shard, window), low, high in zip(
                heads, bounds[:-1], bounds[1:], strict=True
            ):
                rows = group[low:high]
                samples[rows] = self._window(epoch, shard, window)[within[rows]]
        return shards, samples
