"""``WebDatasetSource``: webdataset tar shards as an exactly resumable stream of batches.

The source ties the pieces of this package together: the URLs are expanded
(:mod:`.remote._urls`) and indexed (:mod:`.index._index_shards`, NOTE [ shard index ]), positions
are mapped to samples (:mod:`.order._shard_order`, NOTE [ shard stream order ]) and split across
ranks and workers (:mod:`.order._rank_batches`, NOTE [ shard stream split ]), samples are read
(:mod:`.read._shard_reader`), decoded (:mod:`._decode`) and collated, and the state is checked on
load (:mod:`._source_state`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch.utils.data as tud
from torch.utils.data import default_collate

from ..._errors import check_int
from ..._seeds import stream_keys
from .._seeding import batch_key, record_base, seed_globals
from ._source_options import source_options
from ._source_parts import adopt_parts, set_parts
from ._source_state import STATE_VERSION, check_state, summarize_counts
from .index._index_shards import index_shards
from .order._located_batches import located_batches
from .order._rank_batches import BatchShape, pass_batches, rank_batches, rank_positions
from .order._shard_order import ShardOrder
from .read._block_reader import ShardReaders
from .read._cache_reader import CachedReader
from .read._node_cache import ShardCache
from .read._node_fetches import node_fetches
from .read._sample_reader import SampleReader
from .read._shard_reader import ShardReader
from .shard._shard_info import ShardInfo
from .shard._small_fields import unpack_samples

__all__ = ["WebDatasetSource"]

#: Local shards a reader keeps open at most (parts and block shuffles read among several).
_OPEN_SHARDS = 64


class WebDatasetSource(tud.IterableDataset[Any]):
    """webdataset tar shards as a reproducible stream of batches that resumes at any batch.

    The order (NOTE [ shard stream order ]): each epoch reads the shards in a keyed
    permutation of ``(seed, epoch)``, optionally shuffling samples within windows of each
    shard, or across blocks of several shards (NOTE [ shard block shuffle ]); then repeat;
    then the split across ranks and DataLoader workers (NOTE [ shard stream split ]); then
    batch. Each sample is a dict as webdataset yields it
    (``__key__``, ``__url__``, one raw ``bytes`` entry per suffix, and ``__local_path__``
    for a local shard),
    passed through ``decode`` and then ``map``; each batch is ``collate_fn`` of its samples.
    Shards are indexed once and the index cached (NOTE [ shard index ]).

    Args:
        urls: Uncompressed ``.tar`` shards: a path (a str or ``os.PathLike``) or fsspec URL
            (``https://...``, ``s3://...``), a brace pattern such as
            ``"data-{000000..000099}.tar"``, or a sequence of these. Remote shards are read
            by byte ranges (NOTE [ remote reads ]).
        seed: Keys the shard, window and block shuffles and the per-batch RNG seeding.
        batch_size: Samples per batch on each rank, a positive integer.
        world_size: Number of ranks (``torch.distributed`` world size).
        rank: This rank, in ``[0, world_size)``.
        decode: webdataset's ``.decode(*args)`` arguments: an image spec string such as
            ``"rgb8"``, a handler, a sequence of these, or an ``autodecode.Decoder``.
        map: A function applied to each decoded sample, like webdataset's ``.map(f)``.
        collate_fn: Turns a list of samples into a batch (torch's ``default_collate``,
            also when None).
        shuffle_shards: Permute the shards each epoch.
        shuffle_window: Shuffle samples within consecutive windows of this many samples
            of each shard (0: keep tar order).
        shuffle_block_shards: Shuffle samples across blocks of this many consecutive
            shards of each epoch's order, so a batch mixes that many shards (0 or 1: off;
            not with ``shuffle_window``). Each worker keeps up to twice this many shards
            open, and reads jump among them (NOTE [ shard block shuffle ]).
        repeat: Stream epochs forever (training); ``False`` gives one pass (validation).
        drop_last: With ``repeat=False``, drop the last partial global batch.
        skip: Global batches to skip before the first one (O(1): nothing is read).
        skip_samples: Samples (of every rank) to skip before that, ``repeat=True`` only;
            any count, not only a multiple of the global batch (NOTE [ shard stream
            split ]).
        index_dir: Where to cache shard indexes (default: next to local shards, and
            ``$XDG_CACHE_HOME/detsamplers/shard-index`` for remote ones).
        storage_options: Arguments of the fsspec filesystem of remote shards.
        timeout: Seconds a remote read may wait to connect or for the next bytes before
            it is retried.
        retries: Retries of a remote read after a transient failure, with backoff.
        read_ahead: Bytes per remote range request (memory: two blocks per reader).
        seeding: ``"batch"`` seeds the global RNGs once before ``decode``/``map`` run on
            a batch, from the batch's first position on its rank; ``"record"`` seeds them
            before each sample from ``(seed, its global position)``, so a sample's draws
            are the same after a resume that changes the batch size or the world size
            (NOTE [ per-batch seeding ]), at one seeding per sample.
        parts: Deal each epoch to this many contiguous parts of its sample sequence
            (0: off), so that a rank of a world size dividing it reads only its parts'
            shards (NOTE [ rank-local parts ]), the same shards every epoch (NOTE [ fixed
            part cover ]). ``None`` (default): 0, for local and remote shards alike, so
            the same files give the same order wherever they live, and a state loaded
            later brings its own (NOTE [ parts chosen at load ]).
        cache_dir: Download remote shards whole, once per node, into this folder shared
            by the node's ranks and workers (NOTE [ shard cache ]; local shards are read
            in place). ``None`` (default): no cache, except with ``parts`` over remote
            shards, which use ``$XDG_CACHE_HOME/detsamplers/shards`` (the log says so
            once); ``False``: never, remote shards are read by byte ranges. The order is
            the same either way.
        cache_limit: Bytes the cache's shards may take (``None``: no limit in a
            ``cache_dir`` of your own, 64 GiB in the default folder); the least
            recently used unpinned shards are deleted first.
        prefetch: Shards each process downloads ahead of the batch it reads
            (NOTE [ shard prefetch ]).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or a shard is compressed, truncated or
            corrupt, or changed since its index file was written (the message names it).
        FileNotFoundError: a shard does not exist (the message names it).
        OSError: a remote shard could not be read within ``retries`` (it is named).

    Determinism:
        A batch's samples and the draws ``decode``/``map`` make from torch, numpy and
        ``random`` depend only on the arguments and the batch's position: not on
        ``num_workers``, prefetching or where the run resumed.

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%02d.tar"), maxcount=3, verbose=0) as w:
        ...     for i in range(5):
        ...         w.write({"__key__": f"k{i}", "cls": str(i).encode()})
        >>> source = WebDatasetSource(
        ...     os.path.join(folder, "s-{00..01}.tar"), seed=0, batch_size=2, repeat=False,
        ...     decode=(), map=lambda s: s["cls"], shuffle_shards=False)
        >>> [batch.tolist() for batch in source]
        [[0, 1], [2, 3], [4]]
        >>> source.load_state_dict({**source.state_dict(), "position": 2})
        >>> [batch.tolist() for batch in source]
        [[2, 3], [4]]
    """

    parts: int
    part_shards: str
    #: Whether ``load_state_dict`` takes a state's parts law (NOTE [ parts chosen at load ]).
    adopts_parts = True
    cache: ShardCache | None
    _order: ShardOrder
    _config: dict[str, Any]
    _fingerprint: str

    def __init__(
        self,
        urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        seed: int,
        batch_size: int,
        world_size: int = 1,
        rank: int = 0,
        decode: Any = None,
        map: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = default_collate,
        shuffle_shards: bool = True,
        shuffle_window: int = 0,
        shuffle_block_shards: int = 0,
        repeat: bool = True,
        drop_last: bool = False,
        skip: int = 0,
        skip_samples: int = 0,
        index_dir: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        read_ahead: int = 4 << 20,
        seeding: str = "batch",
        parts: int | None = None,
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        cache_limit: int | None = None,
        prefetch: int = 8,
    ) -> None:
        options = source_options(  # checked and grouped (NOTE [ source options ])
            urls,
            seed=seed,
            batch_size=batch_size,
            world_size=world_size,
            rank=rank,
            decode=decode,
            map=map,
            collate_fn=collate_fn,
            shuffle_shards=shuffle_shards,
            shuffle_window=shuffle_window,
            shuffle_block_shards=shuffle_block_shards,
            repeat=repeat,
            drop_last=drop_last,
            skip=skip,
            skip_samples=skip_samples,
            index_dir=index_dir,
            storage_options=storage_options,
            timeout=timeout,
            retries=retries,
            read_ahead=read_ahead,
            seeding=seeding,
            parts=parts,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            prefetch=prefetch,
        )
        batches, stages, order, storage = (
            options.batches,
            options.stages,
            options.order,
            options.storage,
        )
        self.remote = storage.remote
        shards = self._index(storage.urls, storage.index_dir, batches.rank == 0)
        total = sum(len(s) for s in shards)
        if total == 0:
            raise ValueError(
                f"urls should name shards with samples, but all {len(shards)} of them are empty"
            )
        self.shards = shards
        self.seed = batches.seed
        self.batch_size = batches.batch_size
        self.world_size = batches.world_size
        self.rank = batches.rank
        self.decoder = stages.decoder
        self.map = stages.map
        self.collate_fn = stages.collate_fn
        self.shuffle_shards = order.shuffle_shards
        self.shuffle_window = order.shuffle_window
        self.shuffle_block_shards = (
            order.shuffle_block_shards if order.shuffle_block_shards > 1 else 0
        )
        self.repeat = order.repeat
        self.drop_last = order.drop_last
        self.seeding = batches.seeding
        self._record_base = record_base(batches.seed)
        self.num_samples = total
        self._counts = [len(s) for s in shards]
        self.prefetch = storage.prefetch
        self.cache_dir, self.cache_limit = storage.cache_dir, storage.cache_limit
        #: ``parts=None``: chosen here and from a state loaded (NOTE [ parts chosen at load ]).
        self.parts_auto = order.parts is None
        set_parts(self, 0 if order.parts is None else order.parts, "run")
        if not order.repeat and order.skip > self._pass_batches():
            raise ValueError(
                f"skip should be at most the {self._pass_batches()} batches of a pass with "
                f"repeat=False, but got skip={order.skip}"
            )
        self._origin = 0
        self._seek(order.skip_samples + order.skip * self.global_batch)

    def _index(self, urls: list[str], index_dir: str | None, progress: bool) -> list[ShardInfo]:
        """The shards' indexes (a hook: a plan's synthetic mixture describes them instead)."""
        return index_shards(urls, index_dir, progress=progress, options=self.remote)

    @property
    def global_batch(self) -> int:
        """Samples per step over all ranks, ``batch_size * world_size``."""
        return self.batch_size * self.world_size

    @property
    def origin(self) -> int:
        """Where the batch grid starts, below one global batch (NOTE [ shard stream split ])."""
        return self._origin

    def _seek(self, position: int) -> None:
        """Continue at global ``position``; the grid starts at its remainder modulo ``G``."""
        self.position = position
        self._origin = position % self.global_batch if self.repeat else 0

    def for_rank(
        self,
        *,
        world_size: int,
        rank: int,
        skip: int = 0,
        skip_samples: int = 0,
        batch_size: int | None = None,
    ) -> WebDatasetSource:
        """A copy of this source for ``rank`` of ``world_size``, starting at global batch ``skip``.

        ``skip_samples`` (``repeat=True`` only) starts it at that sample first, whatever
        the global batch (NOTE [ shard stream split ]). ``batch_size`` replaces the
        per-rank batch size (``None``: keep it), as a batch-size schedule does.

        The shards, their index, the order and the stages are shared: nothing is re-read.
        The trial loop uses it to build the user's source for the run (NOTE [ trial data ]).

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     for i in range(8):
            ...         w.write({"__key__": f"k{i}", "cls": b"0"})
            >>> source = WebDatasetSource(os.path.join(folder, "s-0.tar"), seed=0,
            ...     batch_size=2, shuffle_shards=False, collate_fn=list)
            >>> odd = source.for_rank(world_size=2, rank=1, skip=1)
            >>> odd.state_dict()["position"], [s["__key__"] for s in next(iter(odd))]
            (4, ['k5', 'k7'])
        """
        world_size = check_int("world_size", world_size, minimum=1)
        rank = check_int("rank", rank, minimum=0, below=world_size, below_name="world_size")
        skip = check_int("skip", skip, minimum=0)
        skip_samples = check_int("skip_samples", skip_samples, minimum=0)
        if skip_samples and not self.repeat:
            raise ValueError(
                f"skip_samples should be 0 with repeat=False, but got skip_samples="
                f"{skip_samples}: a validation pass is never resumed mid-way"
            )
        if batch_size is not None:
            batch_size = check_int("batch_size", batch_size, minimum=1)
        out = copy.copy(self)
        out.world_size, out.rank = world_size, rank
        if batch_size is not None:
            out.batch_size = batch_size
        if not out.repeat and skip > out._pass_batches():
            raise ValueError(
                f"skip should be at most the {out._pass_batches()} batches of a pass with "
                f"repeat=False, but got skip={skip}"
            )
        out._seek(skip_samples + skip * out.global_batch)
        return out

    def locate(self, positions: Sequence[int]) -> list[tuple[int, int]]:
        """The ``(shard, sample index in it)`` of each global position; nothing is read.

        Shards are numbered in the order of the URLs (NOTE [ shard stream order ]).

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), maxcount=2, verbose=0) as w:
            ...     for i in range(3):
            ...         w.write({"__key__": f"k{i}", "cls": b"0"})
            >>> WebDatasetSource(os.path.join(folder, "s-{0..1}.tar"), seed=0, batch_size=1,
            ...     shuffle_shards=False).locate([0, 2, 3])
            [(0, 0), (1, 0), (0, 0)]
        """
        shards, samples = self._order.locate(np.asarray(positions, dtype=np.int64))
        return list(zip(shards.tolist(), samples.tolist(), strict=True))

    def _pass_batches(self) -> int:
        """Global batches in a pass with ``repeat=False`` (the last may be partial)."""
        return pass_batches(self.num_samples, self.global_batch, self.drop_last)

    def __len__(self) -> int:
        """Batches this rank yields in a full pass (``repeat=False`` only)."""
        if self.repeat:
            raise TypeError(
                "len() of a WebDatasetSource with repeat=True is undefined: it streams "
                "forever; count steps in the training loop, or use repeat=False"
            )
        return rank_batches(
            self.num_samples, self.batch_size, self.world_size, self.rank, self.drop_last
        )

    def _positions(self, batch: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        return rank_positions(batch, *self._shape())

    def _end(self) -> int | None:
        """The batch a pass ends before (``None``: never), for this rank."""
        return None if self.repeat else len(self)

    def _stage(self, sample: dict[str, Any]) -> Any:
        out: Any = sample
        if self.decoder is not None:
            out = self.decoder(out)
        if self.map is not None:
            out = self.map(out)
        return out

    def _apply(self, samples: list[dict[str, Any]], key: int) -> list[Any]:
        seed_globals(key)
        decoder, fn = self.decoder, self.map
        each = getattr(decoder, "each", None)  # PlannedDecoder: the batch's plan found once
        if each is not None:  # sample by sample, as _stage does
            return list(each(samples)) if fn is None else [fn(s) for s in each(samples)]
        if decoder is not None and fn is not None:
            return [fn(decoder(s)) for s in samples]
        return [self._stage(s) for s in samples]

    def _seeded(self, sample: dict[str, Any], key: int) -> Any:
        seed_globals(key)
        return self._stage(sample)

    def _reader(self) -> SampleReader:
        """A reader of the shards, one per process or DataLoader worker.

        With the block shuffle, a :class:`ShardReaders` keeping the block's shards open;
        with the cache, a :class:`CachedReader` (NOTE [ shard cache ]).
        """
        if self.cache is not None:
            fetches = node_fetches(self._order, self.world_size, [self.rank], self._origin)
            return CachedReader(self.shards, self.cache, self.prefetch, fetches)
        if self.shuffle_block_shards or self.parts:
            # With parts a rank reads C / W parts in turn (NOTE [ rank-local parts ]).
            cursors = max(1, self.parts // self.world_size) * max(1, self.shuffle_block_shards)
            capacity = min(2 * cursors, len(self.shards), _OPEN_SHARDS)
            return ShardReaders(self.shards, capacity, self.remote)
        return ShardReader(self.shards, self.remote, self.shuffle_window)

    def batch_at(self, batch: int, reader: SampleReader | None = None) -> Any:
        """Build this rank's batch number ``batch`` (counted from position 0).

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     for i in range(4):
            ...         w.write({"__key__": f"k{i}", "cls": b"0"})
            >>> source = WebDatasetSource(os.path.join(folder, "s-0.tar"), seed=0,
            ...     batch_size=2, shuffle_shards=False, collate_fn=list)
            >>> [s["__key__"] for s in source.batch_at(3)]
            ['k2', 'k3']
        """
        return self._batch(batch, reader, *self._order.locate(self._positions(batch)))

    def _batch(self, batch: int, reader: SampleReader | None, *at: Any) -> Any:
        """:meth:`batch_at` with the batch's shards and sample indexes, ``at``, located."""
        shards, samples = at
        own = reader is None
        reader = reader or self._reader()
        try:
            items = unpack_samples(reader.read_many(shards.tolist(), samples.tolist()))
        finally:
            if own:
                reader.close()
        return self.collate_fn(self._transform(items, shards, batch))

    def _record_keys(self, batch: int) -> list[int]:
        """The RNG seed of each sample of this rank's batch ``batch`` (``seeding="record"``)."""
        keys: list[int] = stream_keys(self._record_base, self._positions(batch)).tolist()
        return keys

    def _batch_key(self, batch: int) -> int:
        """The RNG seed of this rank's batch ``batch`` (``seeding="batch"``)."""
        return batch_key(self.seed, self._origin + batch * self.global_batch + self.rank)

    def _transform(self, items: list[dict[str, Any]], shards: Any, batch: int) -> list[Any]:
        """``decode`` then ``map`` on the samples of batch ``batch``, read from ``shards``.

        The RNGs are seeded first (NOTE [ per-batch seeding ]): once for the batch, or
        before each sample with ``seeding="record"``.
        """
        if self.decoder is None and self.map is None:
            return items
        if self.seeding == "record":
            keys = self._record_keys(batch)
            return [self._seeded(item, key) for item, key in zip(items, keys, strict=True)]
        return self._apply(items, self._batch_key(batch))

    def _begin(self) -> int:
        """The first batch of the next pass (a finished validation pass starts over)."""
        end = self._end()
        first = (self.position - self._origin) // self.global_batch
        if end is not None and first >= end:
            self.position, first = 0, 0
        return first

    def iter_worker(self, worker_id: int, num_workers: int) -> Iterator[Any]:
        """The batches DataLoader worker ``worker_id`` of ``num_workers`` yields.

        Worker ``w`` yields the batches ``t0 + w, t0 + w + K, ...`` of this rank
        (NOTE [ shard stream split ]); torch's DataLoader interleaves them back in order.
        ``num_workers=0`` is the main process, like ``num_workers=1``.

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     for i in range(5):
            ...         w.write({"__key__": f"k{i}", "cls": b"0"})
            >>> source = WebDatasetSource(os.path.join(folder, "s-0.tar"), seed=0,
            ...     batch_size=1, shuffle_shards=False, repeat=False,
            ...     collate_fn=lambda b: b[0]["__key__"])
            >>> list(source.iter_worker(1, 2))
            ['k1', 'k3']
        """
        num_workers = check_int("num_workers", num_workers, minimum=0)
        worker_id = check_int(
            "worker_id", worker_id, minimum=0, below=max(num_workers, 1), below_name="num_workers"
        )
        step = max(num_workers, 1)
        end = self._end()
        batch = self._begin() + worker_id
        reader = self._reader()
        reader.follow(self._plan(batch, step, end))  # NOTE [ sample readers ]
        try:  # NOTE [ batches located together ]
            for at in located_batches(self._order, self._shape(), batch, step, end):
                yield self._batch(batch, reader, *at)
                batch += step
        finally:
            reader.close()

    def _shape(self) -> BatchShape:
        """This rank's batches' shape, as :func:`rank_positions` takes it after the batch."""
        limit = None if self.repeat else self.num_samples
        return BatchShape(self.batch_size, self.world_size, self.rank, limit, self._origin)

    def _plan(self, batch: int, step: int, end: int | None) -> Iterator[list[int]]:
        """The shards of this rank's batches ``batch, batch + step, ...`` (for the prefetch)."""
        for shards, _ in located_batches(self._order.fork(), self._shape(), batch, step, end):
            yield shards.tolist()

    def __iter__(self) -> Iterator[Any]:
        """Yield this rank's batches from the current position (see :meth:`iter_worker`).

        In the main process each batch handed out advances :attr:`position`, so
        :meth:`state_dict` is exact when iterating directly or with ``num_workers=0``; in a
        worker process use :class:`WebDataLoader`, which tracks it in the main process.
        """
        info = tud.get_worker_info()
        if info is not None:
            yield from self.iter_worker(info.id, info.num_workers)
            return
        batch = self._begin()
        for item in self.iter_worker(0, 1):
            batch += 1
            self.position = self._origin + batch * self.global_batch
            yield item

    def state_dict(self) -> dict[str, Any]:
        """The resume state: a global position, plus what it must be checked against.

        ``position`` is the global sample position after the last batch handed out in
        this process (``t * batch_size * world_size``), the same on every rank;
        ``counts`` summarizes the shards' sample counts in a fixed size, so that a shard
        rewritten since is named on load (NOTE [ counts summary ]); ``fingerprint``
        hashes ``config`` and the shard names.

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     w.write({"__key__": "k", "cls": b"0"})
            >>> state = WebDatasetSource(os.path.join(folder, "s-0.tar"), seed=3,
            ...     batch_size=2, skip=5).state_dict()
            >>> state["position"], state["counts"]["samples"], state["config"]["seed"]
            (10, 1, 3)
        """
        return {
            "version": STATE_VERSION,
            "position": self.position,
            "fingerprint": self._fingerprint,
            "config": dict(self._config),
            "counts": dict(self._summary()),
        }

    def _summary(self) -> dict[str, Any]:
        """The counts' summary, computed once (NOTE [ counts summary ])."""
        summary: dict[str, Any] | None = getattr(self, "_counts_summary", None)
        if summary is None:
            summary = self._counts_summary = summarize_counts(self._counts)
        return summary

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume at the state's position: the next ``iter()`` opens the right shard there.

        A source built with ``parts=None`` takes the state's ``parts`` first, and any
        source resumes a state of the earlier parts law in its order (NOTE [ parts chosen
        at load ]); a refused state leaves the source as it was.

        Raises:
            TypeError: ``state_dict`` is not a mapping.
            ValueError: a key is missing, the version is unknown, or, with ``repeat=False``,
                the position is not a multiple of ``batch_size * world_size``
                (NOTE [ shard stream split ]).
            ReproducibilityError: a shard's sample count, the shard list or the
                configuration changed since the state was saved (the message names it).
        """
        before = (self.parts, self.part_shards)
        adopt_parts(self, state_dict)  # NOTE [ parts chosen at load ]
        try:
            position = check_state(
                state_dict,
                config=self._config,
                fingerprint=self._fingerprint,
                paths=[s.path for s in self.shards],
                counts=self._counts,
                global_batch=None if self.repeat else self.global_batch,
                end=None if self.repeat else self._pass_batches() * self.global_batch,
                summary=self._summary(),
            )
        except Exception:  # a refused state leaves the source as it was
            if (self.parts, self.part_shards) != before:
                set_parts(self, *before)
            raise
        self._seek(position)
