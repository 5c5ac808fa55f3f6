"""``CachedReader``: read samples from the node's shard cache, prefetching the shards to come.

NOTE [ shard prefetch ]
A process reading remote shards through the cache (NOTE [ shard cache ]) knows which
shards its next batches need: the order is a pure function of the position (NOTE [ shard
stream order ]), and a DataLoader worker's batches are ``t0 + w, t0 + w + K, ...`` (NOTE
[ shard stream split ]). So :meth:`CachedReader.follow` hands a background thread the
shards of those batches, in order; the thread pins them (downloading the absent ones, up
to ``_DOWNLOADS`` at once) while at most ``prefetch`` pinned or pinning shards lie beyond
the batch being read, and at most ``BATCHES_AHEAD`` batches ahead (NOTE [ planned pins ]
holds these rules, which ``plan_run`` replays). The first batch's
shards go to a pool of their own (``_DOWNLOADS`` more threads): the first batch fetches
them too, so those tasks mostly wait on its locks, and the shards of later batches do not
queue behind them but start while the first batch's downloads run, so that a shard first
needed a few dozen batches in is on disk before then. (With them held back until the
first batch's shards were pinned, 4 ranks over moto waited 1-3 times an epoch at its
end; starting 1 of them early still waited about as often, and starting up to
``_DOWNLOADS`` did not make the first batch after a resume measurably slower:
docs/webdataset-performance.md.) A batch reads a
pinned shard with ``os.pread`` at the offsets of the index; a shard the thread has not
reached yet is pinned by the reading thread itself (a prefetch too short): that is a
*wait* on the network, counted in the cache's ``stats.waits`` and ``stats.waited``
(seconds) for every batch after a reader's first. A shard is unpinned once the plan no
longer needs it after the batch just read.

The first batch a reader reads (a start, a resume) fetches the shards it needs that are
neither pinned nor in the folder all at once (up to ``_RANGED_THREADS`` requests in
flight), so that it waits about as long as the slowest of them, not their sum:

- a shard no larger than ``read_ahead`` is downloaded whole into the cache: that is one
  request, as a range of it would be, and the batches after the first need it too;
- a larger one, when there are more such shards than ``prefetch``, is not waited for
  whole: the batch's samples in it are read by ranged requests of their own bytes (at the
  version indexed, NOTE [ remote reads ]) while the thread downloads it whole for the
  batches after it. With parts, a batch draws from ``min(B, C / W)`` parts, so without
  this the first batch would wait for that many large shards (with ``parts=720`` on one
  rank, every shard); it costs at most one batch's bytes more per reader start;
- within ``prefetch`` shards, the large ones are downloaded whole too.

Memory per process: one download range (``read_ahead`` bytes) per download in flight (at
most ``2 * _DOWNLOADS`` in the thread, ``_RANGED_THREADS`` for a first batch), the samples of
the batch being read, and a file descriptor plus a few dict entries per pinned shard.
The pinned shards are the batch's working set (its shards: ``C / W`` parts' worth at most,
or the block of a block shuffle) plus ``prefetch``; nothing is kept per shard of the
dataset or per part. Disk: the node's pinned shards, within ``cache_limit`` otherwise.

NOTE [ cached reads ]
Through a warm cache reading is CPU alone (a few microseconds a sample), so a batch after
the first does per sample only what the sample needs: the batch takes its shards' pinned
descriptors under the lock once; a pinned shard's index is resolved once (``_View``:
its keys and, when its members lie in tar order, checked once per decoded index, the
packed members and their int64 columns), and a sample is then one ``os.pread`` from its
first member to the end of its last, each member a slice of it (NOTE [ one way to read a
sample ]): the bytes a sample-by-sample read gives. A run of a batch's samples that are a
shard's next ones in neighbouring slots (tar order, a part's stretch) is one ``os.pread``
from the first's first member to the last's end, at most ``_RUN_BYTES``, cut the same
way. A batch's samples of one shard are read and cut by one call (:func:`.read_samples`:
with the kernel, one C call that calls ``os.pread`` and builds the dicts, no lock taken
per sample; its Python loop is the reference), so a batch of 64 samples from 31 shards
(``parts=720`` on one rank) costs 31 calls, not 64 trips through the reader's methods and
its lock. A shard whose members are not in tar order is read sample by sample as before.
The cached copy is the version indexed (its file name holds the URL, size and ETag; its
size is checked once downloaded), so, as for a remote shard read by ranges, the tar
headers are read only with the first sample read of each shard pinned (NOTE [ set index
]); a copy shorter than its index is an error naming the file. The views add one small
tuple and three int64 arrays of its members per pinned shard (and per shard the first
batch read by ranges, until the reader closes).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, NoReturn, cast

import numpy as np

from ...._native import kernel
from ..index._shard_index_file import resolved
from ..remote._remote_reads import RemoteShard
from ..shard._packed_members import PackedMembers
from ..shard._shard_info import ShardInfo
from ..shard._tar_walk import BLOCK
from ._node_cache import ShardCache
from ._node_fetches import NodeFetches
from ._pin_walk import released, shards_ahead, walk_waits
from ._sample_span import Columns, cut_sample, members_of, read_samples, verify_span

__all__ = ["CachedReader", "first_batch_whole"]

#: Requests in flight at once for a reader's first batch.
_RANGED_THREADS = 16
#: Whole-shard downloads the prefetch keeps in flight at once for the batches after the
#: first (and as many for the first batch's shards).
_DOWNLOADS = 4
#: A run of a shard's next samples read with one ``pread`` spans at most this many bytes.
_RUN_BYTES = 8 << 20


class _View(NamedTuple):
    """A pinned shard's index, resolved once: ``packed`` when its members lie in tar order.

    ``columns``: then its int64 columns, for :func:`read_samples` (``None`` otherwise);
    ``compiled``: with the kernel, the arguments its ``read_samples`` takes after ``fd`` and
    ``base``, up to the url (empty otherwise).
    """

    info: ShardInfo
    keys: Sequence[str]
    members: Sequence[list[Any]]
    packed: PackedMembers | None
    columns: Columns | None
    compiled: tuple[Any, ...]


def first_batch_whole(
    cold: Sequence[int],
    sizes: Sequence[int],
    prefetch: int,
    read_ahead: int,
    partial: Collection[int] = (),
) -> set[int]:
    """The cold shards a reader's first batch fetches into the cache (NOTE [ shard prefetch ]).

    ``cold`` are the first batch's shards neither pinned nor cached, ``sizes`` their
    sizes, ``partial`` the shards the node fetches as byte ranges (NOTE [ node fetches ]).
    Within ``prefetch`` shards, every one; beyond, those of at most ``read_ahead``
    bytes and those in ``partial`` (fetched as their ranges): the batch's samples in the
    others are read by ranges of their own (and the shards downloaded whole by the prefetch
    for the batches after it). A pure function: :class:`CachedReader` and ``plan_run``
    both call it.

    Examples:
        >>> sorted(first_batch_whole([3, 5], [10, 99], prefetch=8, read_ahead=50))
        [3, 5]
        >>> sorted(first_batch_whole([3, 5], [10, 99], prefetch=1, read_ahead=50))
        [3]
        >>> sorted(first_batch_whole([3, 5], [10, 99], prefetch=1, read_ahead=50, partial={5}))
        [3, 5]
    """
    few = len(cold) <= prefetch
    return {
        s for s, size in zip(cold, sizes, strict=True) if few or size <= read_ahead or s in partial
    }


class CachedReader:
    """Read samples by (shard, index) from whole shards in a :class:`ShardCache`.

    Samples are the dicts the remote reader gives (``__key__``, ``__url__`` with the
    shard's URL, one ``bytes`` entry per suffix), byte for byte.

    Args:
        shards: The indexed shards (remote ones).
        cache: The node's cache.
        prefetch: Shards the prefetch thread may pin beyond the batch being read.
        fetches: The shards this node reads only in part (NOTE [ node fetches ]): each is
            fetched as its byte range, not whole (``None``: every shard whole).
    """

    def __init__(
        self,
        shards: Sequence[ShardInfo],
        cache: ShardCache,
        prefetch: int,
        fetches: NodeFetches | None = None,
    ) -> None:
        self.shards = shards
        self.cache = cache
        self.prefetch = prefetch
        self.fetches = fetches
        cache.ranges = cache.ranges or fetches is not None
        #: A shard's planned byte ranges, the one to pin first leading (None: whole).
        self.spans: dict[int, tuple[tuple[int, int], ...] | None] = {}
        self.pins: dict[int, int] = {}
        #: The shard offset at byte 0 of each pinned file and its end (absent: a whole shard).
        self.bases: dict[int, tuple[int, int]] = {}
        self.batch_fds: dict[int, int] = {}  # the batch being read's descriptors
        #: Other ranges of a pinned shard, pinned when a sample in them is read.
        self.extra: dict[int, list[tuple[int, int, int]]] = {}
        self.fetching: set[int] = set()  # shards the prefetch is pinning (downloading)
        self.first: dict[int, int] = {}  # the plan's first batch needing a pinned shard
        self.last: dict[int, int] = {}  # its last batch needing it, as far as walked
        self.done = -1  # the plan's batches read so far, minus one
        self.walked = -1
        self.views: dict[int, _View] = {}  # the pinned shards' lookups (reading thread only)
        #: Pinned shards whose first sample read had its tar headers checked (NOTE [ set index ]).
        self.checked: set[int] = set()
        self.closed = False
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def follow(self, plan: Iterator[Sequence[int]]) -> None:
        """Prefetch the shards of the batches to come: ``plan`` yields each one's shards."""
        self.thread = threading.Thread(
            target=self._run, args=(plan,), daemon=True, name="shard-prefetch"
        )
        self.thread.start()

    def _ahead(self) -> int:
        return shards_ahead(itertools.chain(self.pins, self.fetching), self.first, self.done)

    def _run(self, plan: Iterator[Sequence[int]]) -> None:
        downloads = min(_DOWNLOADS, self.prefetch)
        # The first batch's shards have a pool of their own: the first batch fetches them
        # too (its downloads and these wait on one lock per shard), so they must not hold
        # up the shards of the batches after it (NOTE [ shard prefetch ]).
        firsts = ThreadPoolExecutor(max_workers=downloads, thread_name_prefix="first-shards")
        pool = ThreadPoolExecutor(max_workers=downloads, thread_name_prefix="shard-download")
        zero: set[int] = set()
        try:
            for batch, shards in enumerate(plan):
                with self.lock:
                    while not self.closed and (
                        walk_waits(batch, self.done, self._ahead(), self.prefetch)
                        or sum(1 for s in self.fetching if s not in zero) >= downloads
                    ):
                        self.lock.wait()
                    if self.closed:
                        return
                    self.walked = batch
                    for shard in dict.fromkeys(shards):
                        self.last[shard] = batch
                        if shard not in self.pins and shard not in self.fetching:
                            self.first[shard] = batch
                            self.fetching.add(shard)
                            if batch == 0:
                                zero.add(shard)
                            (firsts if batch == 0 else pool).submit(self._download, shard)
        except Exception:  # the reading thread pins the shard itself, and raises
            pass
        finally:
            for each in (firsts, pool):
                each.shutdown(wait=False, cancel_futures=self.closed)

    def _spans(self, shard: int) -> tuple[tuple[int, int], ...] | None:
        """The byte ranges of ``shard`` this node fetches, the largest first (``None``: whole).

        NOTE [ node fetches ]: the largest is pinned with the shard, the others when read.
        """
        if self.fetches is None:
            return None
        if shard not in self.spans:
            spans = self.fetches.byte_ranges(shard, self.shards[shard])
            if spans is not None:
                spans = tuple(sorted(spans, key=lambda span: span[0] - span[1]))
            self.spans[shard] = spans
        return self.spans[shard]

    def _cached(self, shard: int) -> bool:
        spans = self._spans(shard)
        return self.cache.has(self.shards[shard], spans[0] if spans else None)

    def _pin(self, shard: int) -> tuple[int, int, int, list[tuple[int, int, int]]]:
        """Pin ``shard``'s bytes this node fetches (NOTE [ node fetches ]).

        Returns a descriptor, its first and end offsets, and the plan's other ranges of the
        shard, each pinned the same way.
        """
        info = self.shards[shard]
        spans = self._spans(shard)
        if spans is None:
            return self.cache.pin(info), 0, info.size, []
        fd, base, end = self.cache.pin_range(info, *spans[0])
        extra: list[tuple[int, int, int]] = []
        if base or end < info.size:
            for span in spans[1:]:
                other, low, high = self.cache.pin_range(info, *span)
                extra.append((low, high, other))
        return fd, base, end, extra

    def _download(self, shard: int) -> None:
        """Pin ``shard`` for the batches to come (in a download thread of the prefetch)."""
        try:
            pinned = self._pin(shard)
        except Exception:  # the reading thread pins the shard itself, and raises
            with self.lock:
                self.fetching.discard(shard)
                self.lock.notify_all()
            return
        self._hold(shard, *pinned)

    def _hold(
        self, shard: int, fd: int, base: int, end: int, extra: list[tuple[int, int, int]]
    ) -> None:
        with self.lock:
            self.fetching.discard(shard)
            if self.closed or shard in self.pins:
                self.cache.unpin(fd)
                for _, _, other in extra:
                    self.cache.unpin(other)
            else:
                self.pins[shard] = fd
                if base or end < self.shards[shard].size:
                    self.bases[shard] = (base, end)
                if extra:
                    self.extra[shard] = extra
            self.lock.notify_all()

    def _at(self, shard: int, start: int, end: int) -> tuple[int, int]:
        """A pinned descriptor holding bytes ``[start, end)`` of ``shard``, and its base.

        A read past the pinned range (another world size's range file) fetches a range
        covering both, copying what the folder holds (NOTE [ shard cache ]).
        """
        fd = self.batch_fds.get(shard)
        if fd is None:
            fd = self.batch_fds[shard] = self._fd(shard)
        with self.lock:
            base, stop = self.bases.get(shard, (0, self.shards[shard].size))
        if base <= start and end <= stop:
            return fd, base
        with self.lock:
            held = list(self.extra.get(shard, ()))
        for low, high, other in held:
            if low <= start and end <= high:
                return other, low
        # Another range of the plan, or one it did not foresee (a state of another world
        # size): fetched now, what the folder lacks of it only (NOTE [ shard cache ]).
        info = self.shards[shard]
        spans = self._spans(shard) or ()
        span = next((s for s in spans if s[0] <= start and end <= s[1]), (start, end))
        other, low, high = self.cache.pin_range(info, *span)
        with self.lock:
            self.extra.setdefault(shard, []).append((low, high, other))
        return other, low

    def _fd(self, shard: int) -> int:
        with self.lock:
            fd = self.pins.get(shard)
        if fd is None:
            waits = self.done >= 0 and not self._cached(shard)
            started = time.perf_counter()
            self._hold(shard, *self._pin(shard))
            if waits:  # a batch after the first waits on a download (NOTE [ shard prefetch ])
                self.cache.stats.waits += 1
                self.cache.stats.waited += time.perf_counter() - started
            with self.lock:
                fd = self.pins[shard]
        return fd

    def read(self, shard: int, index: int) -> dict[str, Any]:
        """The sample ``index`` of shard ``shard`` (numbered as in the URL list)."""
        return self.read_many([shard], [index])[0]

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """The samples ``(shards[i], indexes[i])``, in that order: one batch of the plan."""
        first = self._first_batch(shards, indexes) if self.done == -1 else {}
        with self.lock:  # the batch's pinned shards, in one round trip (NOTE [ cached reads ])
            pins = self.pins
            fds = {shard: pins[shard] for shard in set(shards) if shard in pins}
        self.batch_fds = fds
        out: list[dict[str, Any]] = [{}] * len(indexes)
        groups: dict[int, list[int]] = {}  # each shard's slots, in the batch's order
        for i, shard in enumerate(shards):
            if i in first:
                out[i] = first[i]
            else:
                groups.setdefault(shard, []).append(i)
        for shard, slots in groups.items():
            fd = fds.get(shard)
            if fd is None:  # not pinned yet: pin it now (a wait, unless it is in the folder)
                fd = fds[shard] = self._fd(shard)
            while slots and shard not in self.checked:  # its first sample: with the headers
                out[slots[0]] = self._read(shard, indexes[slots[0]], fd)
                slots = slots[1:]
            if not slots:
                continue
            view = self.views.get(shard) or self._view(shard)
            if kernel is not None and view.compiled and shard not in self.bases:
                # :func:`.read_samples`' compiled call, made here: one a shard of the batch
                got = kernel.read_samples(
                    os.pread, fd, 0, *view.compiled, indexes, slots, out, _RUN_BYTES
                )
                if got >= 0:
                    self._short(view.info)
            else:
                self._read_slots(shard, fd, indexes, slots, out)
        with self.lock:
            self.done += 1
            following = self.thread is not None
            for shard in released(self.pins, self.last, self.done, self.walked, following):
                # released as ``plan_run`` replays it (NOTE [ planned pins ])
                self.cache.unpin(self.pins.pop(shard))
                self.first.pop(shard, None)
                self.views.pop(shard, None)
                self.bases.pop(shard, None)
                for _, _, other in self.extra.pop(shard, ()):
                    self.cache.unpin(other)
                self.checked.discard(shard)
            self.lock.notify_all()
        return out

    def _first_batch(self, shards: Sequence[int], indexes: Sequence[int]) -> dict[int, Any]:
        """The first batch's shards not cached yet, fetched concurrently (see the NOTE).

        Returns the samples read by ranges; the shards downloaded whole are pinned.
        """
        with self.lock:
            pinned = set(self.pins)
        cold = [
            i for i, shard in enumerate(shards) if shard not in pinned and not self._cached(shard)
        ]
        cold_shards = list(dict.fromkeys(shards[i] for i in cold))
        if not cold_shards:
            return {}
        sizes = [self.shards[s].size for s in cold_shards]
        # A shard this node reads in part is fetched as its ranges (NOTE [ node fetches ]).
        partial = {s for s in cold_shards if self._spans(s) is not None}
        read_ahead = self.cache.options.read_ahead
        whole = first_batch_whole(cold_shards, sizes, self.prefetch, read_ahead, partial)
        ranged = [i for i in cold if shards[i] not in whole]
        streams = {
            shard: RemoteShard(info.url, info.size, info.version, self.cache.options)
            for shard in {shards[i] for i in ranged}
            for info in [self.shards[shard]]
        }

        def download(shard: int) -> None:
            self._hold(shard, *self._pin(shard))

        def fetch(i: int) -> dict[str, Any]:
            return self._sample(shards[i], indexes[i], streams[shards[i]])

        threads = min(_RANGED_THREADS, len(whole) + len(ranged))
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="first-batch") as pool:
            downloads = [pool.submit(download, shard) for shard in cold_shards if shard in whole]
            got = dict(zip(ranged, pool.map(fetch, ranged), strict=True))
            for done in downloads:
                done.result()
        return got

    def _view(self, shard: int) -> _View:
        """What reading ``shard``'s samples needs, looked up once while it is pinned."""
        view = self.views.get(shard)
        if view is None:
            info = self.shards[shard]
            keys, members = resolved(info.keys), resolved(info.members)
            packed = members if isinstance(members, PackedMembers) and members.ordered else None
            columns = None
            if packed is not None:
                arrays = packed.arrays or {}
                starts, offsets, sizes = (
                    cast(Sequence[int], np.asarray(arrays.get(n, getattr(packed, n)), np.int64))
                    for n in ("starts", "offsets", "sizes")
                )
                columns = Columns(starts, offsets, sizes, packed.suffixes)
            compiled: tuple[Any, ...] = ()
            kinds = (list, tuple)
            if columns and isinstance(keys, kinds) and isinstance(columns.suffixes, kinds):
                compiled = (*columns[:3], keys, columns.suffixes, info.url)
            view = _View(info, keys, members, packed, columns, compiled)
            self.views[shard] = view
        return view

    def _read(self, shard: int, index: int, fd: int) -> dict[str, Any]:
        """The sample ``index`` of the pinned ``shard`` (open as ``fd``): one ``pread``."""
        view = self.views.get(shard) or self._view(shard)
        packed = view.packed
        if packed is None:
            return self._sample(shard, index)
        keys = view.keys
        if not 0 <= index < len(keys):
            raise IndexError(f"sample {index} of {len(keys)} in shard {view.info.url!r}")
        sample: dict[str, Any] = {"__key__": keys[index], "__url__": view.info.url}
        starts = packed.starts
        low, high = starts[index], starts[index + 1]
        if high > low:  # the members lie in tar order: the first starts, the last ends
            offsets, sizes, suffixes = packed.offsets, packed.sizes, packed.suffixes
            start, end = offsets[low], offsets[high - 1] + sizes[high - 1]
            if shard not in self.checked:  # its first sample read: with the tar headers
                return self._sample(shard, index)
            fd, base = self._at(shard, start, end)
            data = os.pread(fd, end - start, start - base)
            if len(data) != end - start:
                self._short(view.info)
            cut_sample(sample, data, start, suffixes, offsets, sizes, range(low, high))
        return sample

    def _read_slots(
        self, shard: int, fd: int, indexes: Sequence[int], slots: list[int], out: list[Any]
    ) -> None:
        """Fill ``out[i]`` for the ``slots`` of the pinned, checked ``shard`` (open as ``fd``).

        One :func:`read_samples` call (NOTE [ cached reads ]): a sample, or a run of the
        shard's next samples in neighbouring slots, is one ``os.pread``. A shard pinned as
        ranges of it reads through :meth:`_at`; one whose members are not in tar order,
        sample by sample.
        """
        view = self.views.get(shard) or self._view(shard)
        if view.columns is None:
            for i in slots:
                out[i] = self._sample(shard, indexes[i])
            return
        if shard in self.bases or shard in self.extra:  # range files: the one holding each span

            def pread(_: int, size: int, offset: int) -> bytes:
                held, base = self._at(shard, offset, offset + size)
                return os.pread(held, size, offset - base)

            got = read_samples(pread, fd, 0, view.columns, view.keys, view.info.url, indexes,
                               slots, out, _RUN_BYTES)  # fmt: skip
        else:
            got = read_samples(os.pread, fd, 0, view.columns, view.keys, view.info.url, indexes,
                               slots, out, _RUN_BYTES)  # fmt: skip
        if got >= 0:
            self._short(view.info)

    def _sample(self, shard: int, index: int, stream: RemoteShard | None = None) -> dict[str, Any]:
        view = self._view(shard)
        info, keys, members = view.info, view.keys, view.members
        if not 0 <= index < len(keys):
            raise IndexError(f"sample {index} of {len(keys)} in shard {info.url!r}")
        sample: dict[str, Any] = {"__key__": keys[index], "__url__": info.url}
        parts = members[index]
        if parts:
            found = members_of(keys[index], parts)
            start = min(found.offsets)
            end = max(o + n for o, n in zip(found.offsets, found.sizes, strict=True))
            checking = shard not in self.checked  # NOTE [ set index ]: once per shard pinned
            if checking:
                start = max(0, start - BLOCK)
            if stream is not None:
                data = stream.fetch(start, end)
            else:
                fd, base = self._at(shard, start, end)
                data = os.pread(fd, end - start, start - base)
            if len(data) != end - start:
                self._short(info)
            if checking:
                self._verify(shard, data, start, found, stream is None)
                self.checked.add(shard)
            rows = range(len(parts))
            cut_sample(sample, data, start, found.suffixes, found.offsets, found.sizes, rows)
        return sample

    def _verify(self, shard: int, data: bytes, start: int, found: Any, cached: bool) -> None:
        """Check ``data``'s tar headers; a cached copy that fails is named in the error."""
        info = self.shards[shard]
        try:
            verify_span(info, data, start, found)
        except ValueError as exn:
            if not cached:
                raise
            span = self.bases.get(shard)
            path = self.cache.path(info) if span is None else self.cache.range_path(info, *span)
            raise ValueError(
                f"{exn}; the bytes were read from the cached copy {path!r}, which does not hold "
                f"what the index says: if the shard did not change, delete {path!r} to "
                "download it again"
            ) from None

    def _short(self, info: ShardInfo) -> NoReturn:
        raise ValueError(
            f"shard {info.url!r}: its cached copy is shorter than the index says; "
            f"delete {self.cache.path(info)!r} to download it again"
        )

    def close(self) -> None:
        """Stop prefetching and release every pin."""
        with self.lock:
            self.closed = True
            for fd in self.pins.values():
                self.cache.unpin(fd)
            self.pins.clear()
            self.first.clear()
            self.last.clear()
            self.views.clear()
            self.bases.clear()
            for held in self.extra.values():
                for _, _, other in held:
                    self.cache.unpin(other)
            self.extra.clear()
            self.checked.clear()
            self.lock.notify_all()
