"""A mixture's plan over set indexes: the sets listed by local set index files, and their fetch.

NOTE [ mixture plan set index ]
A mixture's sets are shards in folders, and a folder of remote shards may hold a set index
(``detsamplers-set.index.npz``, NOTE [ set index ]): each rank's ``WebDatasetMix`` then
fetches it once a folder when it is built (one GET, its bytes), and knows the folder's
shards from it. The mixture's plan (NOTE [ mixture plan ]) counts these fetches as the
single source's plan does (NOTE [ plan inputs ]): per node, the bytes and files of every
folder's set index times the node's ranks (``index_bytes``, ``index_requests``). A
planned resume's nodes count them too, times their ranks: each resumed rank builds its
mixture anew.

Instead of URL patterns, ``plan_mixture(set_index=[file, ...])`` takes one local set index
file per set, read with the single source's checks (a regular file, bounded, refused by
name otherwise): the set is the shards the file lists, in its folder, and the mixture is
built with :class:`_IndexedMix`, which differs from the mixture in its ``_index`` hook only
(the infos the file gives: counts, sizes and the embedded index files), as a synthetic
mixture does (NOTE [ synthetic mixture plan ]). The shards are planned as if served from
that folder, each rank fetching each file once. Mixing set index files and URL patterns
or synthetic sets in one plan is refused, naming the arguments.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

from .._plan_inputs import shard_sizes
from ..index._set_index_file import set_index_size
from ..remote._remote_reads import RemoteOptions
from ..remote._urls import is_remote
from ..shard._shard_info import ShardInfo
from ._webdataset_mix import WebDatasetMix

__all__ = ["indexed_inputs", "set_index_fetches"]


class _IndexedMix(WebDatasetMix):
    """A mixture whose shards come from set index files (NOTE [ mixture plan set index ])."""

    def __init__(self, listed: dict[str, ShardInfo], *args: Any, **kwargs: Any) -> None:
        self._listed = listed
        super().__init__(*args, **kwargs)

    def _index(self, urls: list[str], index_dir: str | None, progress: bool) -> list[ShardInfo]:
        return [self._listed[url] for url in urls]


def indexed_inputs(
    set_index: Any, weights: Any
) -> tuple[list[list[str]], Callable[..., WebDatasetMix], tuple[int, int]]:
    """Each set's shard paths from its set index file, the mixture class, and the files' fetch.

    The fetch is ``(bytes, files)`` a rank reads: every file once.

    Examples:
        >>> indexed_inputs("a.npz", [1])
        Traceback (most recent call last):
        ...
        TypeError: set_index should be a list of set index files, one per shard set, ...
    """
    if isinstance(set_index, str | bytes | os.PathLike) or not isinstance(set_index, Sequence):
        raise TypeError(
            f"set_index should be a list of set index files, one per shard set, but got "
            f"{type(set_index).__name__}; pass set_index=['a/detsamplers-set.index.npz', ...]"
        )
    listed = isinstance(weights, Sequence) and not isinstance(weights, str | bytes)
    if not set_index or (listed and len(weights) != len(set_index)):
        raise ValueError(
            f"set_index should hold one set index file per weight, but got {len(set_index)} "
            f"files for {len(weights) if listed else 'the'} weights; give one file a set"
        )
    names: list[list[str]] = []
    infos: dict[str, ShardInfo] = {}
    sent = 0
    for k, path in enumerate(set_index):
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"set_index[{k}] should be a path, but got {type(path).__name__}")
        sizes = shard_sizes(None, os.fspath(path), None, None)
        assert sizes.info is not None and sizes.names is not None
        names.append([])
        for shard in range(len(sizes.counts)):
            info = sizes.info(shard)
            names[-1].append(info.url)
            infos[info.url] = info
        sent += sizes.set_index_bytes
    return names, functools.partial(_IndexedMix, infos), (sent, len(set_index))


def set_index_fetches(urls: Sequence[str], options: RemoteOptions) -> tuple[int, int]:
    """Bytes and files of the set indexes a rank fetches building a mixture over ``urls``.

    One request a folder of remote shards that holds one (local shards: none).

    Examples:
        >>> set_index_fetches(["/data/a-0.tar", "/data/a-1.tar"], RemoteOptions())
        (0, 0)
    """
    folders = sorted({u.rsplit("/", 1)[0] + "/" for u in urls if is_remote(u)})
    found = [size for size in (set_index_size(f, options) for f in folders) if size]
    return sum(found), len(found)
