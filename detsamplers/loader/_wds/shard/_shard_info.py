"""What an index holds for one shard (``ShardInfo``), and the fallback folder of index files.

The record NOTE [ shard index ] (index/_index_shards.py) builds for each shard, whether from a scan
(index/_scan_shard.py), a local index file (NOTE [ index file format ], index/_shard_index_file.py)
or a remote one (index/_remote_index.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._file_checks import Stamp

__all__ = ["PROGRESS_MIN_SHARDS", "Member", "ShardInfo", "default_index_dir", "user_cache_dir"]

#: Show a progress bar when at least this many shards must be scanned.
PROGRESS_MIN_SHARDS = 16

#: One member of a sample: [suffix, byte offset of its data, size in bytes]. Lists, as JSON
#: loads them: converting 100k samples' members to tuples would triple the load time.
Member = list[Any]


@dataclass(frozen=True)
class ShardInfo:
    """The samples of one shard: their keys and members, in tar order.

    Attributes:
        url: The shard's URL as given (after brace expansion).
        path: Its absolute local path, or its URL if it is remote.
        keys: Each sample's ``__key__``.
        members: Each sample's members as ``[suffix, data offset, size]``.
        size: A remote shard's size in bytes when indexed (-1 for a local shard).
        version: A remote shard's ETag (or modification time) when indexed, or ``None``.
        stamp: A local shard's ``(size, mtime_ns, inode)`` when the source was built,
            compared when it is opened (NOTE [ index verification ]), or ``None``.
        index_file: The index file the keys and members were read from (``""``: a scan).

    Examples:
        >>> info = ShardInfo("a.tar", "/d/a.tar", ("k0",), [[["cls", 512, 1]]])
        >>> len(info)
        1
    """

    url: str
    path: str
    keys: Sequence[str]
    members: Sequence[list[Member]]
    size: int = -1
    version: str | None = None
    stamp: Stamp | None = None
    index_file: str = field(default="", compare=False)  # where from, not what

    def __len__(self) -> int:
        return len(self.keys)


def default_index_dir() -> str:
    """The fallback folder for index files: ``$XDG_CACHE_HOME/detsamplers/shard-index``.

    Examples:
        >>> default_index_dir().endswith(os.path.join("detsamplers", "shard-index"))
        True
    """
    return user_cache_dir("shard-index")


def user_cache_dir(name: str) -> str:
    """``$XDG_CACHE_HOME/detsamplers/<name>`` (``~/.cache`` when the variable is unset).

    Examples:
        >>> user_cache_dir("shards").endswith(os.path.join("detsamplers", "shards"))
        True
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "detsamplers", name)
