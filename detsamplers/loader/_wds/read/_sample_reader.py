"""``SampleReader``: what every reader of indexed samples offers, one protocol for them all.

NOTE [ sample readers ]
A source reads its samples through one reader per process or DataLoader worker, whichever
it is: a :class:`ShardReader` (one shard open at a time), a :class:`ShardReaders` (several,
for the block shuffle and parts), a mixture's ``MixReader`` (one per shard set) or a
:class:`CachedReader` (the node cache). They read the same way (NOTE [ one way to read a
sample ]) and offer the same four methods, so the source names this protocol, never a
union of them: :meth:`~SampleReader.follow` hands every reader the plan of the batches to
come; only the cache's reader uses it (NOTE [ shard prefetch ]), the others ignore it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

__all__ = ["SampleReader"]


class SampleReader(Protocol):
    """Read samples by (shard, index), the shards numbered as in the source's URL list.

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> from detsamplers.loader._wds.index._index_shards import index_shards
        >>> from detsamplers.loader._wds.read._shard_reader import ShardReader
        >>> from detsamplers.loader._wds.remote._urls import expand_urls
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
        ...     for i in range(3):
        ...         w.write({"__key__": f"k{i}", "cls": b"7"})
        >>> reader: SampleReader = ShardReader(
        ...     index_shards(expand_urls(os.path.join(folder, "s-0.tar"))))
        >>> reader.follow(iter([[0], [0]]))  # a plan: this reader does not prefetch
        >>> [s["__key__"] for s in reader.read_many([0, 0], [2, 0])]
        ['k2', 'k0']
        >>> reader.close()
    """

    def read(self, shard: int, index: int) -> dict[str, Any]:
        """The sample ``index`` of shard ``shard``."""
        ...

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """The samples ``(shards[i], indexes[i])``, in that order: one batch."""
        ...

    def follow(self, plan: Iterator[Sequence[int]]) -> None:
        """Take ``plan``, the shards of each batch to come, in order (NOTE [ sample readers ])."""
        ...

    def close(self) -> None:
        """Close what the reader holds open; it may read again after."""
        ...
