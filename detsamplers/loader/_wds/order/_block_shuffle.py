"""The cross-shard block shuffle of a shard stream: one keyed permutation per block of shards.

NOTE [ shard block shuffle ]
A window shuffle (NOTE [ shard stream order ], step 3) permutes samples within one shard,
so a batch holds neighbours from one or two shards. The block shuffle mixes shards: with
``shuffle_block_shards = k > 1``, epoch ``e``'s shard order ``pi_e`` is cut into blocks of
``k`` consecutive shards (the last block shorter), and the ``m`` samples of block ``j``
(offsets ``[a_j, a_j + m)`` of the epoch) are permuted by a keyed Feistel permutation
(NOTE [ keyed permutation ]) of ``[0, m)``. Its key hashes ``(seed, "wds-block", j)`` and its
round keys hash that with ``e`` (never ``seed + epoch``, NOTE [ seed mixing ]). Offset
``a_j + u`` of the epoch then reads the sample at offset ``a_j + sigma_{e,j}(u)`` of the
shard order, so the stream still walks the shards block by block, and every batch drawn
inside a block draws from all ``k`` of its shards, each in proportion to its size (in
expectation).

It is a pure function of the position, like the rest of the order: each block is a
bijection of its own offsets, so an epoch reads every sample once; seeking, resuming at
any sample, the split across ranks and workers (NOTE [ shard stream split ]) and the
elastic law are unchanged. The cost is in reading: within a block, reads jump at random
among its ``k`` shards, so a reader keeps the block's shards open (``ShardReaders``, up to
``2 k`` per DataLoader worker, since a batch can straddle two blocks), every worker of
every rank opens all ``k`` (positions are dealt to ranks in turn), and each read is a seek.
Over remote shards most reads fall outside the blocks a reader keeps, so each starts a range
request (docs/webdataset-order.md has the figures).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from ...._permute import FeistelPermutation
from ...._seeds import derive

__all__ = ["BlockShuffle"]

I64 = npt.NDArray[np.int64]
_PERMUTATIONS_KEPT = 8


class BlockShuffle:
    """Permute an epoch's offsets within blocks of ``k`` consecutive shards of its order.

    Args:
        seed: Keys the permutations (hashed with the block and the epoch).
        shards_per_block: ``k``, at least 2.

    Determinism:
        ``permute(epoch, starts, offsets)`` depends only on the arguments.

    Examples:
        >>> import numpy as np
        >>> blocks = BlockShuffle(seed=0, shards_per_block=2)
        >>> starts = np.array([0, 3, 5, 9])  # three shards of 3, 2 and 4 samples
        >>> out = blocks.permute(0, starts, np.arange(9))
        >>> sorted(out[:5].tolist()), sorted(out[5:].tolist())  # blocks {0, 1} and {2}
        ([0, 1, 2, 3, 4], [5, 6, 7, 8])
    """

    def __init__(self, seed: int, shards_per_block: int) -> None:
        if shards_per_block < 2:
            raise ValueError(
                f"shards_per_block should be at least 2, but got shards_per_block="
                f"{shards_per_block}"
            )
        self.seed = seed
        self.k = shards_per_block
        self._permutations: OrderedDict[tuple[int, int], FeistelPermutation] = OrderedDict()

    def bounds(self, starts: I64) -> I64:
        """The first offset of each block, then the epoch's length, from the shards' starts.

        Examples:
            >>> BlockShuffle(0, 2).bounds(np.array([0, 3, 5, 9])).tolist()
            [0, 5, 9]
        """
        shards = len(starts) - 1
        out: I64 = starts[np.append(np.arange(0, shards, self.k), shards)]
        return out

    def _permutation(self, epoch: int, block: int, size: int) -> FeistelPermutation:
        key = (epoch, block)
        perm = self._permutations.get(key)
        if perm is None:
            perm = FeistelPermutation(size, derive(self.seed, "wds-block", block))
            self._permutations[key] = perm
            while len(self._permutations) > _PERMUTATIONS_KEPT:
                self._permutations.popitem(last=False)
        return perm

    def permute(self, epoch: int, starts: I64, offsets: I64) -> I64:
        """The shard-order offset each epoch offset reads.

        Args:
            epoch: The epoch of every offset.
            starts: The first offset of each shard in the epoch's order, then the epoch's
                length (``len(shards) + 1`` entries, non-decreasing).
            offsets: Offsets within the epoch, in ``[0, starts[-1])``.
        """
        bounds = self.bounds(starts)
        # side="right" - 1 skips blocks with no samples (equal consecutive bounds).
        blocks = np.searchsorted(bounds, offsets, side="right") - 1
        out = np.empty_like(offsets)
        for block in np.unique(blocks).tolist():
            mask = blocks == block
            first = int(bounds[block])
            perm = self._permutation(epoch, block, int(bounds[block + 1]) - first)
            out[mask] = first + perm.at_epoch(offsets[mask] - first, epoch)
        return out
