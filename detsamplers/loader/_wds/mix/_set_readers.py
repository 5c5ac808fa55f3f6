"""One reader per shard set of a mixture, so that each set's reads stay sequential.

NOTE [ mixture readers ]
A mixture's positions interleave its shard sets (NOTE [ shard stream mixture ]), so one
reader over all their shards would jump between sets at nearly every sample and drop its
read-ahead each time. A DataLoader worker of a :class:`WebDatasetMix` keeps one reader per
shard set instead: set ``k``'s samples come in its own stream order, so its reader reads
forward as a single source's does. With the block shuffle or parts each set's reader keeps
several of the set's shards open (the shards a rank reads side by side); with the node
cache (NOTE [ shard cache ]) the mixture reads through one :class:`CachedReader` over all
the sets' shards, since a cached read is a ``pread`` of a local file with no read-ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..read._block_reader import ShardReaders
from ..read._first_blocks import AHEAD, fetch_first_blocks
from ..read._shard_reader import ShardReader
from ..remote._remote_reads import RemoteOptions
from ..shard._shard_info import ShardInfo

__all__ = ["MixReader"]


class MixReader(ShardReader):
    """One reader per shard set (NOTE [ mixture readers ]).

    Set ``k``'s reader is a :class:`ShardReaders` keeping up to ``capacities[k]`` of the
    set's shards open when that is above 1 (a block shuffle, or parts: a rank reads
    ``C / W`` parts side by side), else a :class:`ShardReader`.
    """

    def __init__(
        self,
        shards: Sequence[ShardInfo],
        options: RemoteOptions,
        offsets: list[int],
        capacities: Sequence[int],
    ) -> None:
        super().__init__(shards, options)
        self.offsets = offsets
        bounds = [*offsets[1:], len(shards)]
        self.parts: list[ShardReader | ShardReaders] = [
            ShardReaders(shards[a:b], min(capacity, b - a), options)
            if capacity > 1
            else ShardReader(shards[a:b], options)
            for a, b, capacity in zip(offsets, bounds, capacities, strict=True)
        ]
        self.owner = [
            k for k, (a, b) in enumerate(zip(offsets, bounds, strict=True)) for _ in range(a, b)
        ]

    def read(self, shard: int, index: int) -> dict[str, Any]:
        k = self.owner[shard]
        return self.parts[k].read(shard - self.offsets[k], index)

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """:meth:`ShardReader.read_many`, each set's samples read by that set's reader."""
        out: list[dict[str, Any]] = [{}] * len(shards)
        by_set: dict[int, list[int]] = {}
        for i, shard in enumerate(shards):
            by_set.setdefault(self.owner[shard], []).append(i)
        asked = {
            k: ([shards[i] - self.offsets[k] for i in items], [indexes[i] for i in items])
            for k, items in by_set.items()
        }
        # NOTE [ first blocks of a batch ]: every set's at once, AHEAD in all.
        share = max(1, AHEAD // len(asked))
        jobs = []
        for n, (k, (local, wanted)) in enumerate(asked.items()):
            jobs += self.parts[k].open_batch(local, wanted, share if n < AHEAD else 0)
        if len(jobs) > 1:
            fetch_first_blocks(jobs)
        for k, items in by_set.items():
            got = self.parts[k].read_opened(*asked[k])
            for i, sample in zip(items, got, strict=True):
                out[i] = sample
        return out

    def close(self) -> None:
        for part in self.parts:
            part.close()
        super().close()
