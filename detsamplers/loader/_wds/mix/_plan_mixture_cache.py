"""A mixture plan's node caches: a cache limit with the cache's eviction rule, and a resume.

NOTE [ mixture plan cache ]
The mixture's plan (NOTE [ mixture plan ]) keeps one :class:`NodeCache` a node: per shard,
the byte ranges the node's cache folder holds. Without ``cache_limit`` nothing is dropped
and a pass is settled shard by shard (the order does not matter). With a limit the pass
is replayed in the order the node's readers reach their shards, batch by batch (global
batch ``(p - o) // (B W)``, NOTE [ shard stream split ]), each (batch, shard) once, in
the order of its first sample in the batch, and :meth:`NodeCache.fetch` calls the rule
``ShardCache._evict`` calls (``evict_until``, NOTE [ shard cache ]): before a download of
``n`` bytes would take the folder past the limit, the least recently pinned shards go
first, skipping the pinned ones (the shards of the batch being read, pinned before this
one), and with only pinned shards left the folder grows past the limit. A shard is pinned
again, so made the most recent, by every batch that reads it (the reader unpins a batch's
shards once read).

Exact, against nginx's log, for a reader without its prefetch thread and one rank a node,
when the first batch of each reader does not evict (the first batch downloads its cold
shards at once, in no fixed order, so their recency is the order the downloads end: a
shard of it that no later batch pins again before an eviction may be dropped out of the
plan's order; seen once in about ten runs of 2 nodes with parts under a load of 18). The
prefetch thread pins up to ``prefetch`` shards ahead and keeps a shard pinned from its
first batch to its last, so with it the victims can differ (a model there, as the single
source's replay is); ranks of a node are merged batch by batch; a shard the node holds as
several range files is dropped whole.

A resume at ``resume_at`` on ``resume_nodes * resume_ranks_per_node`` ranks reads the rest
of the pass of ``resume_at`` with the batch size of its segment, each resumed loader's
origin ``resume_at mod (B W')`` as ``skip_samples=resume_at`` sets it; it is planned from
cold caches (``RunPlan.resume``) and from warm ones (``RunPlan.resume_warm``: node ``n``
holds what node ``n`` of the run held at ``resume_at``, with its evictions; a node beyond
the run's starts cold).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...._errors import check_int
from .._plan_fetches import Spans, ranged_cost
from ..read._node_cache import evict_until

__all__ = [
    "NodeCache",
    "Phase",
    "check_cache_limit",
    "check_world",
    "copy_caches",
    "segments",
    "settle_pass",
]

I64 = npt.NDArray[np.int64]


class NodeCache:
    """What one node's cache folder holds, per shard the byte ranges written (NOTE above).

    Args:
        limit: Bytes the folder may hold (``None``: no limit).
        step: The bytes of one download request (``download_step``).

    Examples:
        >>> cache = NodeCache(limit=250, step=1 << 20)
        >>> [cache.fetch(s, [((0, 100),)]) for s in range(3)]
        [(100, 1), (100, 1), (100, 1)]
        >>> sorted(cache.held), cache.evictions, cache.high_water
        ([1, 2], 1, 200)
    """

    def __init__(self, limit: int | None, step: int) -> None:
        self.limit = limit
        self.step = step
        self.held: dict[int, list[tuple[int, int]]] = {}
        self.bytes: dict[int, int] = {}  # what the folder holds of each shard
        self.pinned_at: dict[int, int] = {}  # when each shard was last pinned (its mtime)
        self.used = 0
        self.high_water = 0
        self.evictions = 0
        self.clock = 0  # pins so far: the recency order of the folder's modification times
        self.batch = -1  # where the global batch being read starts
        self.pinned: set[int] = set()  # its shards pinned so far

    def covers(self, shard: int, spans: Spans) -> bool:
        """Whether the folder holds every range of ``spans`` of ``shard``."""
        held = self.held.get(shard, [])
        return all(any(a <= low and high <= b for a, b in held) for low, high in spans)

    def touch(self, shard: int) -> None:
        """A read pins ``shard``: it becomes the most recently used."""
        self.clock += 1
        self.pinned_at[shard] = self.clock

    def fetch(
        self, shard: int, writes: Sequence[Spans], pinned: Collection[int] = ()
    ) -> tuple[int, int]:
        """Bytes and requests of writing ``writes`` after what the folder holds of ``shard``.

        Before the download, least recently pinned shards other than ``shard`` and
        ``pinned`` are dropped until it fits the limit (or none is left to drop).
        """
        before = tuple(self.held.get(shard, ()))
        base = ranged_cost([before], self.step) if before else (0, 0)
        total = ranged_cost([before, *writes] if before else list(writes), self.step)
        sent, requests = total[0] - base[0], total[1] - base[1]
        if self.limit is not None and self.used + sent > self.limit:
            keep = {shard, *pinned}

            def drop(victim: int) -> bool:
                if victim in keep:
                    return False
                del self.bytes[victim], self.held[victim], self.pinned_at[victim]
                return True

            order = sorted(self.bytes, key=self.pinned_at.__getitem__)
            victims = [(victim, self.bytes[victim]) for victim in order]
            self.used, gone = evict_until(victims, self.used, sent, self.limit, drop)
            self.evictions += gone
        self.held.setdefault(shard, []).extend(span for spans in writes for span in spans)
        self.bytes[shard] = self.bytes.get(shard, 0) + sent
        self.touch(shard)
        self.used += sent
        self.high_water = max(self.high_water, self.used)
        return sent, requests


def copy_caches(
    caches: Sequence[NodeCache], nodes: int, limit: int | None, step: int
) -> list[NodeCache]:
    """``nodes`` caches: node ``n`` a copy of ``caches[n]`` (a warm resume), the others cold."""
    out = [copy.deepcopy(cache) for cache in caches[:nodes]]
    out += [NodeCache(limit, step) for _ in range(nodes - len(out))]
    for cache in out:  # the figures count from the resume on
        cache.evictions, cache.high_water = 0, cache.used
        cache.batch, cache.pinned = -1, set()  # the resumed loaders read nothing yet
    return out


def check_cache_limit(cache_limit: Any, sizes: I64) -> int | None:
    """``cache_limit`` checked: ``None`` or at least the largest shard's bytes."""
    if cache_limit is None:
        return None
    cache_limit = check_int("cache_limit", cache_limit, minimum=1)
    largest = int(sizes.max())
    if cache_limit < largest:
        raise ValueError(
            f"cache_limit should hold at least the largest shard, {largest} bytes, but got "
            f"cache_limit={cache_limit}; raise it (a few shards per reader at least)"
        )
    return int(cache_limit)


def check_world(parts: Sequence[int], world: int, name: str, how: str) -> None:
    """Refuse a world size that divides none of the sets' part counts (when there are parts).

    Examples:
        >>> check_world([12, 0], 5, "resume's", "resume_nodes * resume_ranks_per_node")
        Traceback (most recent call last):
        ...
        ValueError: parts should hold a part count the resume's world size 5 ...
    """
    counts = [c for c in parts if c > 1]
    if counts and all(c % world for c in counts):
        raise ValueError(
            f"parts should hold a part count the {name} world size {world} ({how}) divides, "
            f"but got parts={list(parts)}: every rank would read from every part; pass a "
            f"world size that divides one of them"
        )


def settle_pass(
    locate: Callable[[I64], I64],
    caches: Sequence[NodeCache],
    span: tuple[int, int],
    grid: tuple[int, int, int, int],
    writes_of: Callable[[int, list[int]], list[Spans]],
    chunk: int,
) -> list[tuple[int, int, int]]:
    """Each node's downloads over positions ``span = (a, b)`` of one pass: shards, bytes, GETs.

    ``grid`` is the origin, the positions of a global batch (``B W``), the world size and
    the ranks a node; ``writes_of(shard, ranks)`` the ranges a node writes of ``shard`` for
    those of its ranks reading it (NOTE [ mixture plan cache ]).
    """
    origin, global_batch, world, per_node = grid
    a, b = span
    readers: list[dict[int, set[int]]] = [{} for _ in caches]  # per node, shard: its ranks
    events: list[list[tuple[int, int]]] = [[] for _ in caches]  # per node: (batch, shard)
    limited = any(cache.limit is not None for cache in caches)
    for low in range(a, b, chunk):
        positions = np.arange(low, min(low + chunk, b), dtype=np.int64)
        shards = locate(positions)
        ranks = (positions - origin) % world
        for shard, rank in set(zip(shards.tolist(), ranks.tolist(), strict=True)):
            readers[rank // per_node].setdefault(shard, set()).add(rank)
        if limited:  # each node's (batch, shard) in the order of its first sample
            batches = (positions - origin) // global_batch
            key = np.stack([ranks // per_node, batches, shards])
            _, first = np.unique(key, axis=1, return_index=True)
            for i in np.sort(first).tolist():
                at = origin + int(batches[i]) * global_batch  # the batch's first position
                events[int(ranks[i]) // per_node].append((at, int(shards[i])))
    out = []
    for node, cache in enumerate(caches):
        got = [0, 0, 0]
        mine = readers[node]
        if cache.limit is None:
            order = [(0, s) for s in sorted(mine)]
        else:
            order = list(dict.fromkeys(events[node]))
        for batch, shard in order:
            if batch != cache.batch:  # a stretch may end inside a batch: the cache keeps it
                cache.batch, cache.pinned = batch, set()
            writes = writes_of(shard, sorted(mine[shard]))
            if all(cache.covers(shard, w) for w in writes):
                cache.touch(shard)
            else:
                sent, requests = cache.fetch(shard, writes, cache.pinned)
                got[0] += 1
                got[1] += sent
                got[2] += requests
            cache.pinned.add(shard)
        out.append((got[0], got[1], got[2]))
    return out


class Phase:
    """A stretch ``[low, high)`` the plan replays on one cluster into ``out`` (NOTE above).

    ``caches`` makes the stretch's node caches when it starts (a warm resume copies the
    run's as they are then); ``resumed``: its loaders are built at ``low``.
    """

    def __init__(
        self,
        low: int,
        high: int,
        cluster: tuple[int, int],
        out: list[Any],
        caches: Callable[[], list[NodeCache]],
        resumed: bool = False,
    ) -> None:
        self.low, self.high = low, high
        self.resumed = resumed
        self.nodes, self.per_node = cluster
        self.out = out
        self.make = caches
        self.made: list[NodeCache] | None = None

    def caches(self) -> list[NodeCache]:
        """The stretch's caches, made once."""
        if self.made is None:
            self.made = self.make()
        return self.made


def segments(
    schedule: Sequence[tuple[int, int]], end: int, phases: Sequence[Phase]
) -> list[tuple[tuple[int, int], int, Phase, int]]:
    """Each phase's batch-size segments within it: ``((low, size), high, phase, built)``.

    ``built`` is where the segment's loaders were built: the segment's start, or the
    phase's for a resume (the grid's origin is ``built mod (size W)``).

    Examples:
        >>> run, again = Phase(0, 100, (1, 1), [], list), Phase(20, 60, (2, 1), [], list, True)
        >>> [(s, h, b) for s, h, _, b in segments([(0, 8), (40, 4)], 100, [run])]
        [((0, 8), 40, 0), ((40, 4), 100, 40)]
        >>> [(s, h, b) for s, h, _, b in segments([(0, 8), (40, 4)], 100, [again])]
        [((20, 8), 40, 20), ((40, 4), 60, 40)]
    """
    bounds = [*[a for a, _ in schedule[1:]], end]
    out = []
    for phase in phases:
        for (first, size), last in zip(schedule, bounds, strict=True):
            low, high = max(first, phase.low), min(last, phase.high)
            if low < high:
                built = low if phase.resumed else first
                out.append(((low, size), high, phase, built))
    return out
