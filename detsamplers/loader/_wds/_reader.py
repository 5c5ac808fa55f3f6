"""``ShardReader``: read indexed samples from local tar shards, one open shard at a time."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any, BinaryIO

from ._index import ShardInfo

__all__ = ["ShardReader"]

_READ_BUFFER = 1 << 16


class ShardReader:
    """Read samples by (shard, index), keeping the current shard open.

    One reader per process or worker. A sample is the dict webdataset yields: ``__key__``,
    ``__url__``, one raw ``bytes`` entry per suffix and ``__local_path__``. Each member
    is one seek and one read at the offsets of the index (NOTE [ shard index ]); reads
    within a shard are mostly sequential, so the buffer serves most seeks.

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> from detsamplers.loader._wds._index import index_shards
        >>> from detsamplers.loader._wds._urls import expand_urls
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
        ...     w.write({"__key__": "k0", "cls": b"7"})
        >>> reader = ShardReader(index_shards(expand_urls(os.path.join(folder, "s-0.tar"))))
        >>> sample = reader.read(0, 0); reader.close()
        >>> sample["__key__"], sample["cls"]
        ('k0', b'7')
    """

    def __init__(self, shards: Sequence[ShardInfo]) -> None:
        self.shards = shards
        self.local = [urllib.parse.urlparse(s.url).path or s.path for s in shards]
        self.current = -1
        self.handle: BinaryIO | None = None

    def read(self, shard: int, index: int) -> dict[str, Any]:
        info = self.shards[shard]
        if shard != self.current or self.handle is None:
            self.close()
            self.handle = open(info.path, "rb", buffering=_READ_BUFFER)  # noqa: SIM115
            self.current = shard
        handle = self.handle
        sample: dict[str, Any] = {"__key__": info.keys[index], "__url__": info.url}
        for suffix, offset, size in info.members[index]:
            handle.seek(offset)
            data = handle.read(size)
            if len(data) != size:
                raise ValueError(
                    f"shard {info.path!r} is shorter than when it was indexed; it changed "
                    "while in use: rebuild the source (its index is refreshed automatically)"
                )
            sample[suffix] = data
        sample["__local_path__"] = self.local[shard]
        return sample

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
