"""The inputs of a run plan: the shards (indexed URLs, a set index or a synthetic set), the network.

NOTE [ plan inputs ]
A plan (NOTE [ run plan ]) needs of the shards only what the order and the cache use: each
shard's sample count and byte size. They come from one of three places, each checked
before anything is allocated:

- **URLs** (paths or fsspec URLs, brace patterns): indexed by the source's own indexer
  (NOTE [ shard index ]), so the counts are those a ``WebDatasetSource`` sees;
- **a set index** (``detsamplers-set.index.npz``, NOTE [ set index ]): a local file read
  with the source's own decoder, after checking it is a regular file no larger than
  ``SET_INDEX_LIMIT`` (a FIFO or ``/dev/zero`` is named and refused, never read); given with
  URLs, it must lie in their folder and list them;
- **a synthetic description** (:class:`SyntheticShards`): a shard count, a mean size and a
  spread (sizes drawn uniformly in ``mean * (1 +- spread)`` by a seeded generator), and
  samples per shard. A description no tar could have (a sample under 1,024 bytes, the tar
  header and one padded block) or over ``SYNTHETIC_LIMIT`` shards is refused by name.

A node that reads a shard only in part fetches byte ranges of it (NOTE [ node fetches ]),
so the plan also needs, for those shards only, each sample's offsets (``ShardSizes.info``,
called lazily): the indexed ``ShardInfo`` for URLs; for a set index, the index files it
embeds, or else each shard's own index file beside it, read as the source reads them; for
a synthetic description, an assumed layout: a shard's ``samples_per_shard`` samples are
equal and back to back, sample ``i`` of a shard of ``S`` bytes and ``n`` samples the bytes
``[i S // n, (i + 1) S // n)`` (its tar header first, no end blocks).

The network model (:class:`Network`) is five positive numbers; a plan without one reports
bytes and requests only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from stat import S_ISREG
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._errors import check_int
from .index._index_shards import index_shards
from .index._set_index_file import (
    EMBED_LIMIT,
    SET_INDEX_NAME,
    EmbeddedIndex,
    RemoteLazyIndex,
    decode_set_indexes,
    set_index_size,
)
from .remote._remote_reads import RemoteOptions
from .remote._urls import expand_urls, is_remote
from .shard._packed_members import PackedMembers
from .shard._shard_info import ShardInfo

__all__ = ["SET_INDEX_LIMIT", "SYNTHETIC_LIMIT", "Network", "ShardSizes", "SyntheticShards"]

I64 = npt.NDArray[np.int64]
#: The largest set index file a plan reads (the embedded index files' limit, plus its lists).
SET_INDEX_LIMIT = EMBED_LIMIT + (64 << 20)
#: The most shards a synthetic description may have (8 bytes a shard per array).
SYNTHETIC_LIMIT = 10**8
#: The fewest bytes a sample takes in a tar: a 512-byte header and one 512-byte block.
SAMPLE_MIN_BYTES = 1024


def _check_number(name: str, value: Any, *, positive: bool) -> float:
    """``value`` as a float, refusing a bool, a non-number, NaN and a value out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} should be a number, but got {name}={value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "above 0" if positive else "of at least 0"
        raise ValueError(
            f"{name} should be a finite number {bound}, but got {name}={value!r}; pass a "
            f"measured or quoted figure {bound}"
        )
    return float(value)


@dataclass(frozen=True)
class Network:
    """A node's network, for the plan's times and costs (NOTE [ run plan ]).

    Args:
        bandwidth: Bytes per second a node downloads at, positive.
        rtt: Seconds of one request's round trip, at least 0.
        requests_per_second: Requests a node may start per second, positive.
        price_per_gb: Price of 1e9 bytes of egress, at least 0.
        price_per_1000_gets: Price of 1,000 GET requests, at least 0.

    Examples:
        >>> Network(bandwidth=1e9, rtt=0.02).rtt
        0.02
        >>> Network(bandwidth=0)
        Traceback (most recent call last):
        ...
        ValueError: bandwidth should be a finite number above 0, but got bandwidth=0; ...
    """

    bandwidth: float
    rtt: float = 0.0
    requests_per_second: float = 3500.0
    price_per_gb: float = 0.0
    price_per_1000_gets: float = 0.0

    def __post_init__(self) -> None:
        for name in ("bandwidth", "requests_per_second"):
            object.__setattr__(self, name, _check_number(name, getattr(self, name), positive=True))
        for name in ("rtt", "price_per_gb", "price_per_1000_gets"):
            object.__setattr__(self, name, _check_number(name, getattr(self, name), positive=False))


@dataclass(frozen=True)
class SyntheticShards:
    """A shard set described, not read: for plans of data not written yet (NOTE [ plan inputs ]).

    Args:
        shards: How many shards, positive, at most ``SYNTHETIC_LIMIT``.
        shard_bytes: Their mean size in bytes.
        samples_per_shard: Samples in each shard; each takes at least 1,024 bytes.
        spread: Sizes are drawn uniformly in ``shard_bytes * (1 +- spread)``, in ``[0, 1)``.
        seed: Seeds the draw.

    Examples:
        >>> SyntheticShards(4, 1 << 20, 100).sizes().sizes.tolist()
        [1048576, 1048576, 1048576, 1048576]
        >>> SyntheticShards(4, 50_000, 100)
        Traceback (most recent call last):
        ...
        ValueError: samples_per_shard should leave each sample at least 1024 bytes ...
    """

    shards: int
    shard_bytes: int
    samples_per_shard: int
    spread: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("shards", self.shards, minimum=1)
        if self.shards > SYNTHETIC_LIMIT:
            raise ValueError(
                f"shards should be at most {SYNTHETIC_LIMIT}, but got shards={self.shards}; "
                f"plan a sample of the shards and scale the figures"
            )
        check_int("shard_bytes", self.shard_bytes, minimum=1)
        check_int("samples_per_shard", self.samples_per_shard, minimum=1)
        check_int("seed", self.seed, minimum=0)
        spread = _check_number("spread", self.spread, positive=False)
        if spread >= 1:
            raise ValueError(f"spread should be below 1, but got spread={self.spread!r}")
        smallest = int(self.shard_bytes * (1 - spread))
        if self.samples_per_shard * SAMPLE_MIN_BYTES > smallest:
            raise ValueError(
                f"samples_per_shard should leave each sample at least {SAMPLE_MIN_BYTES} bytes "
                f"(a tar header and a block) of the smallest shard, {smallest} bytes, but got "
                f"samples_per_shard={self.samples_per_shard}; describe larger shards or fewer "
                f"samples"
            )

    def sizes(self) -> ShardSizes:
        """Each shard's sample count and size."""
        counts = np.full(self.shards, self.samples_per_shard, dtype=np.int64)
        sizes = np.full(self.shards, self.shard_bytes, dtype=np.int64)
        if self.spread:
            rng = np.random.default_rng(self.seed)
            draw = rng.uniform(1 - self.spread, 1 + self.spread, self.shards)
            sizes = np.maximum(1, (self.shard_bytes * draw).astype(np.int64))
        return ShardSizes(
            counts, sizes, None, 0, 0, lambda shard: _equal_samples(shard, counts, sizes)
        )


def _equal_samples(shard: int, counts: I64, sizes: I64) -> ShardInfo:
    """A synthetic shard's assumed layout: equal samples back to back (NOTE [ plan inputs ]).

    Examples:
        >>> info = _equal_samples(0, np.array([4]), np.array([4096]))
        >>> [m[0][1] for m in info.members], info.size  # each data offset, after its header
        ([512, 1536, 2560, 3584], 4096)
    """
    n, size = int(counts[shard]), int(sizes[shard])
    bounds = np.arange(n + 1, dtype=np.int64) * size // n
    offsets = bounds[:-1] + 512
    members = PackedMembers(
        ["x"] * n, offsets.tolist(), (bounds[1:] - offsets).tolist(), list(range(n + 1))
    )
    name = f"synthetic-{shard}"
    return ShardInfo(name, name, ("",) * n, members, size=size)


@dataclass(frozen=True)
class ShardSizes:
    """What a plan knows of the shards: counts and sizes, and the index it read them from."""

    counts: I64
    sizes: I64
    #: The shards' names (``None``: synthetic).
    names: list[str] | None
    #: Bytes of the set index files a rank fetches once (0: none).
    set_index_bytes: int
    #: Bytes the shards' index took in this process while indexing (0: not measured).
    index_memory: int
    #: A shard's samples' offsets, for the byte ranges of a shard read in part (``None``:
    #: not known; NOTE [ plan inputs ]).
    info: Callable[[int], ShardInfo] | None = None
    #: Set index files a rank fetches once (one a folder of remote shards that has one).
    set_index_files: int = 0


def _read_set_index(path: str) -> bytes:
    """The bytes of the set index ``path``, refusing anything but a bounded regular file."""
    try:
        stat = os.stat(path)
    except OSError as exn:
        raise FileNotFoundError(
            f"set_index should be an existing file, but got set_index={path!r} ({exn.strerror})"
        ) from None
    if not S_ISREG(stat.st_mode):
        raise ValueError(
            f"set_index should be a regular file, but got set_index={path!r}, which is a "
            f"FIFO, a device, a socket or a folder; pass a {SET_INDEX_NAME} file"
        )
    if stat.st_size > SET_INDEX_LIMIT:
        raise ValueError(
            f"set_index should be at most {SET_INDEX_LIMIT} bytes, but got set_index={path!r} "
            f"of {stat.st_size} bytes; it is no set index: rebuild it with python -m "
            f"detsamplers index"
        )
    with open(path, "rb") as handle:
        data = handle.read(SET_INDEX_LIMIT + 1)
    if len(data) != stat.st_size:
        raise ValueError(f"set_index={path!r} changed while it was read; read it again")
    return data


def shard_sizes(
    urls: str | Sequence[str] | None,
    set_index: str | None,
    synthetic: SyntheticShards | None,
    index_dir: str | None,
    options: RemoteOptions | None = None,
) -> ShardSizes:
    """The shards' counts and sizes from exactly one kind of input (NOTE [ plan inputs ])."""
    given = [name for name, v in (("urls", urls), ("synthetic", synthetic)) if v is not None]
    if set_index is None and not given:
        raise ValueError("plan_run needs urls, set_index or synthetic, but got none of them")
    if synthetic is not None:
        if not isinstance(synthetic, SyntheticShards):
            raise TypeError(
                f"synthetic should be a SyntheticShards, but got {type(synthetic).__name__}"
            )
        if urls is not None or set_index is not None:
            raise ValueError("synthetic should be given alone, but got urls or set_index too")
        return synthetic.sizes()
    expanded: list[str] | None = None
    if urls is not None:
        if not isinstance(urls, str | Sequence) or isinstance(urls, bytes):
            raise TypeError(f"urls should be a str or a list of str, but got {type(urls).__name__}")
        expanded = expand_urls(urls if isinstance(urls, str) else list(urls))
    if set_index is not None:
        if not isinstance(set_index, str | os.PathLike):
            raise TypeError(f"set_index should be a path, but got {type(set_index).__name__}")
        path = os.fspath(set_index)
        folder = os.path.dirname(os.path.abspath(path))
        data = _read_set_index(path)
        entries, embedded = decode_set_indexes(data, folder)
        held: list[bytes | None] = [None] * len(entries) if embedded is None else [*embedded]
        by_name = {e[0]: (e, x) for e, x in zip(entries, held, strict=True)}
        if expanded is not None:
            theirs = {os.path.dirname(os.path.abspath(u)) for u in expanded}
            names = {e[0] for e in entries}
            if theirs != {folder} or not {os.path.basename(u) for u in expanded} <= names:
                raise ValueError(
                    f"set_index should lie in the folder of urls and list their shards, but got "
                    f"set_index={path!r} for shards in {sorted(theirs)}; pass that folder's "
                    f"{SET_INDEX_NAME}"
                )
            wanted = [os.path.basename(u) for u in expanded]
            entries = [by_name[name][0] for name in wanted]
        counts = np.array([e[3] for e in entries], dtype=np.int64)
        sizes = np.array([e[1] for e in entries], dtype=np.int64)
        file = os.path.join(folder, SET_INDEX_NAME)

        def info(shard: int) -> ShardInfo:  # as from_set_indexes builds it
            (name, size, version, count), index = by_name[entries[shard][0]]
            url = os.path.join(folder, name)
            lazy = (
                RemoteLazyIndex(url, count, size, version, RemoteOptions())
                if index is None
                else EmbeddedIndex(index, url, count, size, version, file)
            )
            return ShardInfo(url, url, lazy.keys, lazy.members, size, version)

        return ShardSizes(counts, sizes, [e[0] for e in entries], len(data), 0, info, 1)
    assert expanded is not None
    import tracemalloc

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    infos = index_shards(expanded, index_dir, progress=False, options=options)
    used = max(0, tracemalloc.get_traced_memory()[0] - before)
    if started:
        tracemalloc.stop()
    counts = np.array([len(i) for i in infos], dtype=np.int64)
    sizes = np.array(
        [i.size if i.size >= 0 else os.path.getsize(i.path) for i in infos], dtype=np.int64
    )
    sized = [replace(i, size=int(s)) for i, s in zip(infos, sizes, strict=True)]
    # Each rank's source fetches the set index of each folder of remote shards once.
    remote = {u.rsplit("/", 1)[0] + "/" for u in expanded if is_remote(u)}
    found = [set_index_size(f, options or RemoteOptions()) for f in sorted(remote)]
    found = [size for size in found if size]
    urls_seen = [i.url for i in infos]
    return ShardSizes(counts, sizes, urls_seen, sum(found), used, sized.__getitem__, len(found))
