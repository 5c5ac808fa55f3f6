"""The prefetch's pin rules, and a dry replay of them that ``plan_run`` runs under a limit.

NOTE [ planned pins ]
A :class:`CachedReader` (NOTE [ shard prefetch ]) decides three things, each a pure
function here: whether its prefetch walk waits before pinning batch ``b``'s shards
(:func:`walk_waits`: ``b`` is more than ``BATCHES_AHEAD`` batches past the batch read, or
``prefetch`` pinned shards lie beyond the next one, :func:`shards_ahead`), and which shards
it unpins once a batch is read (:func:`released`: those whose last batch walked so far is
read, once the walk has moved past it). The cache deletes, before a download would take
the folder past the limit, the least recently pinned shards that no process pins
(:func:`evict_until`, NOTE [ shard cache ]).

Under a ``cache_limit`` below a node's shards, ``plan_run`` replays exactly these rules
with no byte read: one :class:`DryReader` per reader of the node (a rank, or a DataLoader
worker of one), on one :class:`DryCache` (its folder: per shard its bytes, in the order
of its last pin, and who pins it). The replay is *lockstep*: every reader walks as far as
the rules let it (downloads take no time), then each reads its next batch in turn, and
a batch's new shards download one after the other in the batch's order. What it models
and the real run decides by timing: a slow download lets the walk fall behind (fewer
pins, so another victim may go), up to ``_DOWNLOADS`` downloads of a walk run at once
(their recency is the order they end), the ranks of a node are not in lockstep, and the
run stops while its walk has pinned up to ``prefetch - 1`` plus a batch's shards past
its end (the plan stops at the end). docs/plan.md gives the gaps measured against nginx.
The replay reports the folder's high-water mark (above the limit when the pinned working
set exceeds it) and the largest working set pinned at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ._node_cache import evict_until

__all__ = [
    "BATCHES_AHEAD",
    "CHUNK",
    "Batches",
    "ChunkedBatches",
    "DryCache",
    "DryReader",
    "lockstep",
    "released",
    "shards_ahead",
    "walk_waits",
]


class Batches(Protocol):
    """A reader's batches, each its shards: a list, or one located a chunk at a time."""

    def __len__(self) -> int: ...

    def __getitem__(self, batch: int, /) -> Sequence[int]: ...


#: The prefetch walks at most this many batches past the one being read.
BATCHES_AHEAD = 256
#: Batches of a reader a plan's dry replay locates at once (more than ``BATCHES_AHEAD``).
CHUNK = 1024


class ChunkedBatches(ABC):
    """A reader's ``batches``, each its shards, located ``CHUNK`` batches at a time.

    The template of a plan's :class:`Batches`: a subclass says how a chunk of batches is
    located (:meth:`locate_chunk`), this class which chunk to locate and which to keep. A
    dry reader reads batch ``done + 1`` and walks at most ``BATCHES_AHEAD`` batches past
    it, fewer than a chunk, so only the chunk of the batch asked for and the one before it
    are kept: the memory is two chunks whatever the run's length.

    Examples:
        >>> class Tens(ChunkedBatches):
        ...     def locate_chunk(self, batches: range) -> list[list[int]]:
        ...         return [[b // 10, b % 10] for b in batches]
        >>> tens = Tens(range(0, 5000, 2))
        >>> len(tens), tens[3], tens[1024], tens[2047], sorted(tens.chunks)
        (2500, [0, 6], [204, 8], [409, 4], [0, 1])
        >>> tens[2048], sorted(tens.chunks)  # a third chunk: the first is dropped
        ([409, 6], [1, 2])
    """

    def __init__(self, batches: range) -> None:
        self.batches = batches
        self.chunks: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> list[int]:
        key = i // CHUNK
        chunk = self.chunks.get(key)
        if chunk is None:
            chunk = self.locate_chunk(self.batches[key * CHUNK : (key + 1) * CHUNK])
            self.chunks = {k: v for k, v in self.chunks.items() if k == key - 1}
            self.chunks[key] = chunk
        return chunk[i % CHUNK]

    @abstractmethod
    def locate_chunk(self, batches: range) -> list[list[int]]:
        """The shards of each of ``batches`` (the hook a plan's batches fill in)."""


def shards_ahead(held: Iterable[int], first: Mapping[int, int], done: int) -> int:
    """How many of the ``held`` shards are first needed after the next batch, ``done + 1``.

    Examples:
        >>> shards_ahead([3, 4, 5], {3: 0, 4: 1, 5: 2}, done=0)
        1
    """
    return sum(1 for shard in held if first.get(shard, -1) > done + 1)


def walk_waits(batch: int, done: int, ahead: int, prefetch: int) -> bool:
    """Whether the prefetch walk waits before pinning batch ``batch``'s shards.

    Examples:
        >>> walk_waits(3, 0, ahead=2, prefetch=2), walk_waits(3, 0, ahead=1, prefetch=2)
        (True, False)
    """
    return batch - done > BATCHES_AHEAD or ahead >= prefetch


def released(
    pins: Iterable[int], last: Mapping[int, int], done: int, walked: int, following: bool
) -> list[int]:
    """The pinned shards a reader unpins once batch ``done`` is read.

    A shard whose last batch walked so far is read goes once the walk is past ``done``
    (it might need it again otherwise); without a walk (``following`` false), at once.

    Examples:
        >>> released([1, 2], {1: 0, 2: 1}, done=0, walked=0, following=True)
        []
        >>> released([1, 2], {1: 0, 2: 1}, done=0, walked=1, following=True)
        [1]
    """
    return [
        shard
        for shard in pins
        if last.get(shard, -1) <= done and (not following or walked > done or shard not in last)
    ]


class DryCache:
    """A node's cache folder without bytes: per shard its size, least recently pinned first.

    Args:
        limit: Bytes the folder may hold (``None``: no limit).

    Examples:
        >>> cache = DryCache(limit=20)
        >>> [cache.pin(s, 10) for s in (0, 1)], cache.pin(2, 10), list(cache.folder)
        ([True, True], True, [0, 1, 2])
        >>> cache.high_water, cache.over_limit  # 0 and 1 pinned: the folder grows
        (30, 1)
        >>> cache.unpin(0); cache.pin(3, 10), list(cache.folder), cache.evictions
        (True, [1, 2, 3], 1)
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.folder: OrderedDict[int, int] = OrderedDict()
        self.pins: dict[int, int] = {}
        self.used = 0
        self.high_water = 0
        self.evictions = 0
        self.over_limit = 0
        self.pinned_bytes = 0
        #: The most shards, and bytes, pinned at once (the node's working set).
        self.working_set = (0, 0)

    def _evict(self, size: int, limit: int) -> int:
        """Delete unpinned shards from the folder's head until ``size`` more bytes fit.

        The folder is walked in place, from its least recently pinned shard, only as far
        as :func:`evict_until` goes (the victims are deleted after the walk): a download
        costs the pinned shards it passes plus those it deletes, not the shards held.
        """
        victims: list[int] = []

        def victim(shard: int) -> bool:
            if self.pins.get(shard):
                return False
            victims.append(shard)
            return True

        self.used, gone = evict_until(self.folder.items(), self.used, size, limit, victim)
        for shard in victims:
            del self.folder[shard]
        return gone

    def pin(self, shard: int, size: int) -> bool:
        """Pin ``shard`` (``size`` bytes), downloading it if absent; whether it was."""
        downloaded = shard not in self.folder
        if downloaded:
            if self.limit is not None:
                gone = self._evict(size, self.limit)
                self.evictions += gone
                self.over_limit += self.used + size > self.limit
            self.folder[shard] = size
            self.used += size
            self.high_water = max(self.high_water, self.used)
        else:
            self.folder.move_to_end(shard)
        self.pins[shard] = self.pins.get(shard, 0) + 1
        if self.pins[shard] == 1:
            self.pinned_bytes += self.folder[shard]
            if self.pinned_bytes > self.working_set[1]:
                self.working_set = (sum(1 for n in self.pins.values() if n), self.pinned_bytes)
        return downloaded

    def unpin(self, shard: int) -> None:
        """Release one pin of ``shard``."""
        self.pins[shard] -= 1
        if not self.pins[shard]:
            del self.pins[shard]
            self.pinned_bytes -= self.folder[shard]


class DryReader:
    """A reader's prefetch walk and reads over ``batches`` (each batch's shards), dry.

    ``downloaded(batch, shard)`` is called for each download the reader's pins cause. The
    reader reads the first ``reads`` batches (default: all); the walk may pin the rest (a
    stream read on past the run's end: what its walk pins before the run stops).
    """

    def __init__(
        self,
        batches: Batches,
        prefetch: int,
        cache: DryCache,
        size: Callable[[int], int],
        downloaded: Callable[[int, int], None],
        reads: int | None = None,
    ) -> None:
        self.batches, self.prefetch, self.cache = batches, prefetch, cache
        self.reads = len(batches) if reads is None else reads
        self.size, self.downloaded = size, downloaded
        self.pins: set[int] = set()
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.done = -1
        self.walked = -1

    def _pin(self, shard: int, batch: int) -> None:
        self.pins.add(shard)
        if self.cache.pin(shard, self.size(shard)):
            self.downloaded(batch, shard)

    def walk(self) -> None:
        """Pin the shards of the batches to come as far as :func:`walk_waits` lets it."""
        while self.walked + 1 < len(self.batches):
            batch = self.walked + 1
            ahead = shards_ahead(self.pins, self.first, self.done)
            if walk_waits(batch, self.done, ahead, self.prefetch):
                return
            self.walked = batch
            for shard in dict.fromkeys(self.batches[batch]):
                self.last[shard] = batch
                if shard not in self.pins:
                    self.first[shard] = batch
                    self._pin(shard, batch)

    def read(self) -> None:
        """Read the next batch (pinning a shard the walk missed), then unpin as the reader does."""
        batch = self.done + 1
        for shard in dict.fromkeys(self.batches[batch]):
            if shard not in self.pins:
                self._pin(shard, batch)
        self.done = batch
        for shard in released(self.pins, self.last, self.done, self.walked, True):
            self.pins.discard(shard)
            self.first.pop(shard, None)
            self.cache.unpin(shard)


def lockstep(readers: Sequence[DryReader], before: Callable[[int], None] | None = None) -> None:
    """Run a node's readers batch by batch: each walks, then each reads and walks again.

    ``before(step)``, if given, is called before the readers read their ``step``-th
    batches, and once more after the last (a mixture plan's warm copy of the caches).

    Examples:
        >>> got = []
        >>> cache = DryCache(limit=20)
        >>> reader = DryReader([[0, 1, 2], [0]], 1, cache, lambda s: 10,
        ...     lambda b, s: got.append(s))
        >>> lockstep([reader]); got, cache.evictions, cache.high_water  # 0 stays pinned
        ([0, 1, 2], 0, 30)
    """
    for reader in readers:
        reader.walk()
    steps = max((r.reads for r in readers), default=0)
    for step in range(steps):
        if before is not None:
            before(step)
        for reader in readers:
            if step < reader.reads:
                reader.read()
                reader.walk()
    if before is not None:
        before(steps)
