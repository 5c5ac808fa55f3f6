"""A source's arguments, checked once and grouped: how it batches, stages, orders and reads.

NOTE [ source options ]
``WebDatasetSource`` takes its 26 keywords flat, as users pass them (their names and
defaults are the public interface). Inside, :func:`source_options` checks them in one pass,
in the order a user reads them (so which of two wrong arguments is named first never
changes), and hands the source four frozen groups, each documented where it is defined:
:class:`BatchOptions` (who reads which batch), :class:`StageOptions` (what turns samples
into a batch), :class:`OrderOptions` (the order and where it starts) and
:class:`StorageOptions` (where the shards are and how they are read: the remote reads,
the index folder and the node cache). The source keeps its attributes as before; the
groups are how ``__init__`` reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torch.utils.data import default_collate

from ..._errors import check_bool, check_callable, check_int, check_one_of
from ._decode import make_decoder
from .remote._remote_reads import RemoteOptions, make_options
from .remote._urls import expand_urls, folder_arg

__all__ = [
    "BatchOptions",
    "OrderOptions",
    "SourceOptions",
    "StageOptions",
    "StorageOptions",
    "source_options",
]


@dataclass(frozen=True)
class BatchOptions:
    """Who reads which batch: ``seed``, ``seeding``, ``batch_size``, ``world_size``, ``rank``."""

    seed: int
    seeding: str
    batch_size: int
    world_size: int
    rank: int


@dataclass(frozen=True)
class StageOptions:
    """What turns samples into a batch: the decoder built from ``decode``, ``map``, ``collate_fn``.

    ``collate_fn`` is never ``None`` here: ``None`` means torch's ``default_collate``.
    """

    decoder: Callable[[dict[str, Any]], Any] | None
    map: Callable[[Any], Any] | None
    collate_fn: Callable[[list[Any]], Any]


@dataclass(frozen=True)
class OrderOptions:
    """The order and where it starts (NOTE [ shard stream order ], NOTE [ shard stream split ]).

    ``shuffle_shards``, ``shuffle_window``, ``shuffle_block_shards`` (as given: ``0`` or
    ``1`` is off), ``repeat``, ``drop_last``, ``skip``, ``skip_samples`` and ``parts``
    (``None``: chosen by the source, NOTE [ parts chosen at load ]).
    """

    shuffle_shards: bool
    shuffle_window: int
    shuffle_block_shards: int
    repeat: bool
    drop_last: bool
    skip: int
    skip_samples: int
    parts: int | None


@dataclass(frozen=True)
class StorageOptions:
    """Where the shards are and how they are read.

    ``urls`` expanded to one URL or path a shard, ``index_dir`` (``None``: the default
    folders), ``remote`` (``timeout``, ``retries``, ``read_ahead`` and ``storage_options``,
    NOTE [ remote reads ]), and the node cache's ``cache_dir`` (``False``: none; ``None``:
    the default), ``cache_limit`` and ``prefetch`` (NOTE [ shard cache ]).
    """

    urls: list[str]
    index_dir: str | None
    remote: RemoteOptions
    cache_dir: str | Literal[False] | None
    cache_limit: int | None
    prefetch: int


@dataclass(frozen=True)
class SourceOptions:
    """A source's arguments, checked and grouped (NOTE [ source options ])."""

    batches: BatchOptions
    stages: StageOptions
    order: OrderOptions
    storage: StorageOptions


def source_options(
    urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    seed: Any,
    batch_size: Any,
    world_size: Any,
    rank: Any,
    decode: Any,
    map: Any,
    collate_fn: Any,
    shuffle_shards: Any,
    shuffle_window: Any,
    shuffle_block_shards: Any,
    repeat: Any,
    drop_last: Any,
    skip: Any,
    skip_samples: Any,
    index_dir: Any,
    storage_options: Mapping[str, Any] | None,
    timeout: Any,
    retries: Any,
    read_ahead: Any,
    seeding: Any,
    parts: Any,
    cache_dir: Any,
    cache_limit: Any,
    prefetch: Any,
) -> SourceOptions:
    """Check ``WebDatasetSource``'s arguments (its docstring says each) and group them.

    Raises:
        TypeError: an argument has the wrong type (the message names it).
        ValueError: an argument is out of range, or two of them do not go together.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "s-0.tar")
        >>> defaults = dict(world_size=1, rank=0, decode=None, map=None, collate_fn=None,
        ...     shuffle_shards=True, shuffle_window=0, shuffle_block_shards=0, repeat=True,
        ...     drop_last=False, skip=0, skip_samples=0, index_dir=None, storage_options=None,
        ...     timeout=60.0, retries=5, read_ahead=4 << 20, seeding="batch", parts=None,
        ...     cache_dir=None, cache_limit=None, prefetch=8)
        >>> options = source_options(path, seed=0, batch_size=4, **defaults)
        >>> options.batches
        BatchOptions(seed=0, seeding='batch', batch_size=4, world_size=1, rank=0)
        >>> options.storage.urls == [path], options.stages.collate_fn is default_collate
        (True, True)
        >>> source_options(path, seed=0, batch_size=0, **defaults)
        Traceback (most recent call last):
        ...
        ValueError: batch_size should be a positive integer value, but got batch_size=0
    """
    seed = check_int("seed", seed)
    seeding = check_one_of("seeding", seeding, ("batch", "record"))
    batch_size = check_int("batch_size", batch_size, minimum=1)
    world_size = check_int("world_size", world_size, minimum=1)
    rank = check_int("rank", rank, minimum=0, below=world_size, below_name="world_size")
    check_callable("map", map)
    check_callable("collate_fn", collate_fn)
    if collate_fn is None:  # torch's meaning of None
        collate_fn = default_collate
    shuffle_shards = check_bool("shuffle_shards", shuffle_shards)
    shuffle_window = check_int("shuffle_window", shuffle_window, minimum=0)
    shuffle_block_shards = check_int("shuffle_block_shards", shuffle_block_shards, minimum=0)
    if shuffle_block_shards > 1 and shuffle_window > 1:
        raise ValueError(
            f"shuffle_window should be 0 with shuffle_block_shards > 1, but got "
            f"shuffle_window={shuffle_window} and shuffle_block_shards="
            f"{shuffle_block_shards}: the block shuffle already permutes every sample of "
            "its block; pass one of them"
        )
    repeat = check_bool("repeat", repeat)
    drop_last = check_bool("drop_last", drop_last)
    skip = check_int("skip", skip, minimum=0)
    skip_samples = check_int("skip_samples", skip_samples, minimum=0)
    if skip_samples and not repeat:
        raise ValueError(
            f"skip_samples should be 0 with repeat=False, but got skip_samples="
            f"{skip_samples}: a validation pass is never resumed mid-way"
        )
    index_dir = folder_arg("index_dir", index_dir)
    if parts is not None:
        parts = check_int("parts", parts, minimum=0)
    if cache_dir is not False:  # False: no cache (NOTE [ parts chosen at load ])
        try:
            cache_dir = folder_arg("cache_dir", cache_dir)
        except TypeError:
            raise TypeError(
                "cache_dir should be a folder (a str or an os.PathLike), False (no cache) "
                f"or None (the default folder), but got cache_dir={cache_dir!r}"
            ) from None
    if cache_limit is not None:
        cache_limit = check_int("cache_limit", cache_limit, minimum=1)
    prefetch = check_int("prefetch", prefetch, minimum=1)
    decoder = make_decoder(decode)
    expanded = expand_urls(urls)
    remote = make_options(timeout, retries, read_ahead, storage_options)
    return SourceOptions(
        BatchOptions(seed, seeding, batch_size, world_size, rank),
        StageOptions(decoder, map, collate_fn),
        OrderOptions(
            shuffle_shards,
            shuffle_window,
            shuffle_block_shards,
            repeat,
            drop_last,
            skip,
            skip_samples,
            parts,
        ),
        StorageOptions(expanded, index_dir, remote, cache_dir, cache_limit, prefetch),
    )
