"""``ShardReaders``: several shards open at once, for reads that jump among a block's shards."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from ..remote._remote_reads import RemoteOptions, RemoteShard
from ..shard._shard_info import ShardInfo
from ._first_blocks import AHEAD, fetch_first_blocks
from ._shard_reader import ShardReader

__all__ = ["ShardReaders"]


class ShardReaders:
    """Read samples by (shard, index) with up to ``capacity`` shards kept open.

    A :class:`ShardReader` keeps one shard open, which suits a stream that reads shard
    after shard. The block shuffle (NOTE [ shard block shuffle ]) reads at random among the
    ``k`` shards of a block, so this keeps ``capacity`` readers, each holding one shard, and
    hands a shard that is not open to the reader used least recently. Memory is that of
    ``capacity`` readers: a file handle and its buffer per local shard, up to three blocks
    of ``read_ahead`` bytes per remote one.

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> from detsamplers.loader._wds.index._index_shards import index_shards
        >>> from detsamplers.loader._wds.remote._urls import expand_urls
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), maxcount=1, verbose=0) as w:
        ...     for i in range(3):
        ...         w.write({"__key__": f"k{i}", "cls": b"7"})
        >>> shards = index_shards(expand_urls(os.path.join(folder, "s-{0..2}.tar")))
        >>> readers = ShardReaders(shards, capacity=2)
        >>> [readers.read(s, 0)["__key__"] for s in (2, 0, 2, 1)]
        ['k2', 'k0', 'k2', 'k1']
        >>> readers.close()
    """

    def __init__(
        self, shards: Sequence[ShardInfo], capacity: int, options: RemoteOptions | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity should be a positive integer, but got capacity={capacity}")
        self.shards = shards
        self.options = options
        self.capacity = capacity
        self._free: list[ShardReader] = []
        self._open: OrderedDict[int, ShardReader] = OrderedDict()

    def read(self, shard: int, index: int) -> dict[str, Any]:
        """The sample ``index`` of shard ``shard`` (numbered as in the URL list)."""
        return self._reader(shard).read(shard, index)

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """The samples ``(shards[i], indexes[i])``, in that order, as :meth:`read` gives them.

        Each shard's samples go to its reader's :meth:`ShardReader.read_many` together.
        """
        jobs = self.open_batch(shards, indexes)
        if len(jobs) > 1:  # NOTE [ first blocks of a batch ]
            fetch_first_blocks(jobs)
        return self.read_opened(shards, indexes)

    def open_batch(
        self, shards: Sequence[int], indexes: Sequence[int], limit: int = AHEAD
    ) -> list[tuple[RemoteShard, ShardInfo, int]]:
        """Open the remote shards this batch opens (up to ``limit``), each in its reader.

        The jobs for :func:`fetch_first_blocks`, as :meth:`ShardReader.open_batch`.
        """
        firsts: dict[int, int] = {}
        for shard, index in zip(shards, indexes, strict=True):
            firsts.setdefault(shard, index)
        jobs = []
        for shard in list(firsts)[: min(self.capacity, limit)]:
            job = self._reader(shard).open_remote(shard, firsts[shard])
            if job is not None:
                jobs.append(job)
        return jobs

    def read_opened(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """:meth:`read_many` after :meth:`open_batch`: the batch's samples, in order."""
        out: list[dict[str, Any]] = [{}] * len(shards)
        by_shard: dict[int, list[int]] = {}
        for i, shard in enumerate(shards):
            by_shard.setdefault(shard, []).append(i)
        for shard, items in by_shard.items():
            got = self._reader(shard).read_many([shard] * len(items), [indexes[i] for i in items])
            for i, sample in zip(items, got, strict=True):
                out[i] = sample
        return out

    def _reader(self, shard: int) -> ShardReader:
        """The reader holding ``shard``, opening it in the least recently used one if needed."""
        reader = self._open.get(shard)
        if reader is None:
            if len(self._open) >= self.capacity:
                _, reader = self._open.popitem(last=False)
                reader.close()
            elif self._free:
                reader = self._free.pop()
            else:
                reader = ShardReader(self.shards, self.options)
            self._open[shard] = reader
        else:
            self._open.move_to_end(shard)
        return reader

    def follow(self, plan: Iterator[Sequence[int]]) -> None:
        """Ignore ``plan``: this reader does not prefetch (NOTE [ sample readers ])."""
        del plan

    def close(self) -> None:
        """Close every open shard; the readers are kept for reuse."""
        for reader in self._open.values():
            reader.close()
            self._free.append(reader)
        self._open.clear()
