"""A mixture plan under a ``cache_limit``: its readers' pins walked on one dry cache a node.

NOTE [ mixture plan pins ]
With the node cache a rank of a :class:`WebDatasetMix` reads every shard set through one
:class:`CachedReader` (NOTE [ mixture readers ]), whose prefetch walk pins the shards of
the rank's batches in the mixture's order, and every rank of a node pins into the node's
one folder (NOTE [ shard cache ]). So the mixture's plan under a limit is the single
source's replay (NOTE [ planned pins ]) fed with the mixture's batches: one
:class:`DryReader` per reader (rank, or DataLoader worker) over the batches its loader
reads, each batch's shards located with the mixture's order (``LaneOrder`` or
``MixOrder``), and one :class:`PinnedCache` a node (a :class:`DryCache`, so
``evict_until``, the folder's own rule), shared by every set's shards and kept across
the batch-size schedule's segments, while each segment's readers are new (a switch
builds new loaders). :func:`replay_segment` runs them in lockstep.

A shard a node reads whole costs its bytes; one its ranks read in part (NOTE [ mixture
fetches ]) costs the byte ranges they fetch (``ranged_cost``), and is one entry of the
folder of those bytes (the real folder holds a file per range). A download counts in the
pass it happens in: a walk's pin in the pass of the batch read before it (the walk runs
while the trainer steps on that batch), a pin of the batch being read in that batch's.
The readers stop at the end of their stretch (the run's, or a resume's), and their walks
pin what the rules let them past it: that is downloaded too, in the last pass, a shard
read in part costing the ranges of the node's ranks that read it there. At a segment's end
its readers close, releasing their pins, as a switch closes the old loaders. A warm
resume copies each run cache, unpinned, as it was when the run's readers had read every
batch that starts before ``resume_at``; a folder the run left past the limit evicts on
the resume's first download, so the copy's high-water mark starts at most at the limit.

What timing decides, the replay cannot know (NOTE [ planned pins ]: downloads in flight,
ranks of a node not in lockstep, the walk past the run's end); a node's ranged shard whose
ranges change with a schedule switch is counted held. Without an eviction none of this
matters, so ``plan_mixture`` replays only when a node's shards exceed the limit, and
otherwise returns the plan without one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._plan_fetches import Spans, ranged_cost
from .._plan_report import NodePlan
from ..order._rank_batches import rank_positions
from ..read._pin_walk import BATCHES_AHEAD, ChunkedBatches, DryCache, DryReader, lockstep

__all__ = ["PinnedCache", "node_costs", "replay_segment", "warm_copies"]

I64 = npt.NDArray[np.int64]


class PinnedCache(DryCache):
    """A node's :class:`DryCache`, answering what the plan's first batches ask of a cache.

    Examples:
        >>> cache = PinnedCache(limit=20)
        >>> cache.pin(3, 10), cache.covers(3, ((0, 10),)), cache.covers(4, ((0, 10),))
        (True, True, False)
    """

    def covers(self, shard: int, spans: Spans) -> bool:
        """Whether the folder holds ``shard`` (the bytes the node fetches of it)."""
        return shard in self.folder


def warm_copies(caches: Sequence[PinnedCache], nodes: int, limit: int) -> list[PinnedCache]:
    """``nodes`` caches: node ``n`` holds what ``caches[n]`` holds, unpinned; the others cold.

    Examples:
        >>> run = PinnedCache(limit=20)
        >>> run.pin(1, 10)
        True
        >>> [sorted(c.folder) for c in warm_copies([run], 2, 20)], run.pins
        ([[1], []], {1: 1})
    """
    out = []
    for cache in caches[:nodes]:
        warm = copy.copy(cache)
        warm.folder = copy.copy(cache.folder)
        warm.pins, warm.pinned_bytes = {}, 0
        # the resume's own growth: a folder the run left past the limit evicts on its first
        # download (the run's plan reports that growth already)
        warm.high_water, warm.evictions, warm.over_limit = min(warm.used, limit), 0, 0
        warm.working_set = (0, 0)
        out.append(warm)
    return out + [PinnedCache(limit) for _ in range(nodes - len(out))]


class _MixBatches(ChunkedBatches):
    """One reader's ``batches``, each its shards at positions in ``span``, a chunk at a time."""

    def __init__(
        self,
        locate: Callable[[I64], I64],
        batches: range,
        grid: tuple[int, int, int, int],
        span: tuple[int, int],
    ) -> None:
        super().__init__(batches)
        self.locate, self.grid, self.span = locate, grid, span

    def locate_chunk(self, batches: range) -> list[list[int]]:
        size, world, rank, origin = self.grid
        low, high = self.span
        every = [rank_positions(b, size, world, rank, None, origin) for b in batches]
        located = self.locate(np.concatenate(every)).reshape(len(batches), size)
        return [
            shards[(positions >= low) & (positions < high)].tolist()
            for positions, shards in zip(every, located, strict=True)
        ]


def _nothing(batch: int, shard: int) -> None:
    pass


class _TimedReader(DryReader):
    """A :class:`DryReader` that says whether it is reading (else its walk pins)."""

    reading = False

    def read(self) -> None:
        self.reading = True
        try:
            super().read()
        finally:
            self.reading = False


def replay_segment(
    locate: Callable[[I64], I64],
    caches: Sequence[PinnedCache],
    span: tuple[int, int],
    grid: tuple[int, int, int, int],
    readers: tuple[int, int],
    cost: Callable[[int, int], tuple[int, int]],
    out: Sequence[NodePlan],
    passes: tuple[int, int, int],
    snapshot: tuple[int, Callable[[], None]] | None = None,
    last: bool = False,
) -> None:
    """Replay one segment's readers on their nodes' caches, adding the downloads to ``out``.

    Args:
        locate: The mixture's shard of each global position.
        caches: One :class:`PinnedCache` a node.
        span: The segment's positions ``[low, high)``.
        grid: The origin, the batch size, the world size and the ranks a node.
        readers: DataLoader workers per rank (0: the main process) and ``prefetch``.
        cost: ``cost(node, shard)``: the bytes and requests of the node's download of it.
        out: One :class:`NodePlan` a node, its lists one entry per pass.
        passes: The run's start, the positions of a pass and the passes.
        snapshot: ``(at, take)``: ``take()`` is called once, when every batch starting
            before ``at`` is read (a warm resume's copy); the caller calls it if the
            segment ends first.
        last: The segment ends its stretch: the readers stop there, their walks pinning
            what they may of the batches after it (counted in the last pass).
    """
    low, high = span
    origin, size, world, per_node = grid
    workers, prefetch = readers
    start, total, epochs = passes
    every = size * world
    first, stop = (low - origin) // every, -(-(high - origin) // every)
    step = max(workers, 1)
    dry: list[DryReader] = []
    for node, cache in enumerate(caches):
        plan = out[node]

        def downloaded(batch: int, shard: int, node: int = node, plan: NodePlan = plan) -> None:
            at = max(origin + batch * every, low)
            pass_ = min((at - start) // total, epochs - 1)
            sent, requests = cost(node, shard)
            plan.shards[pass_] += 1
            plan.shard_bytes[pass_] += sent
            plan.shard_requests[pass_] += requests

        def size_of(shard: int, node: int = node) -> int:
            return cost(node, shard)[0]

        for rank in range(node * per_node, (node + 1) * per_node):
            for worker in range(step):
                mine = range(first + worker, stop, step)
                reads = len(mine)
                if last:  # the walk's reach past the end
                    mine = range(first + worker, stop + (BATCHES_AHEAD + 1) * step, step)
                reach = high if not last else int(np.iinfo(np.int64).max)
                batches = _MixBatches(locate, mine, (size, world, rank, origin), (low, reach))

                reader = _TimedReader(batches, prefetch, cache, size_of, _nothing, reads)

                def at_batch(
                    i: int, s: int, mine: range = mine, f: Any = downloaded, r: Any = reader
                ) -> None:  # a read's own pin: its batch; a walk's: the batch read before it
                    f(mine[i if r.reading else max(r.done, 0)], s)

                reader.downloaded = at_batch
                dry.append(reader)

    taken = False

    def before(read: int) -> None:  # the batches read so far: first .. first + read * step - 1
        nonlocal taken
        if (
            snapshot is not None
            and not taken
            and origin + (first + read * step) * every >= snapshot[0]
        ):
            taken = True
            snapshot[1]()

    lockstep(dry, before if snapshot is not None else None)
    for closed in dry:  # the segment's loaders close: their pins go (a switch's new ones pin)
        for shard in closed.pins:
            closed.cache.unpin(shard)
        closed.pins.clear()
    for plan, cache in zip(out, caches, strict=True):
        plan.high_water = max(plan.high_water, cache.high_water)
        ws = (plan.working_set_shards, plan.working_set_bytes)
        plan.working_set_shards, plan.working_set_bytes = max(ws, cache.working_set, key=_second)


def _second(pair: tuple[int, int]) -> int:
    return pair[1]


def node_costs(
    locate: Callable[[I64], I64],
    span: tuple[int, int],
    grid: tuple[int, int, int, int],
    nodes: int,
    writes_of: Callable[[int, list[int]], list[Spans]],
    step: int,
    chunk: int,
    reach: int = 0,
) -> Callable[[int, int], tuple[int, int]]:
    """``cost(node, shard)``: what a node's download of ``shard`` costs in ``span``.

    With several ranks a node, the ranks of each node that read each shard are found
    once, a chunk of positions at a time (one rank a node: that rank); the cost is the byte
    ranges they write (``writes_of``), in ``step`` requests. A shard only the walk past
    the span's end pins (``reach`` positions past it) costs the ranges of the ranks that
    read it there.
    """
    origin, _, world, per_node = grid
    readers: list[dict[int, set[int]]] = [{} for _ in range(nodes)]
    after: list[dict[int, set[int]]] = [{} for _ in range(nodes)]
    stretches = ((span[0], span[1], readers), (span[1], span[1] + reach, after))
    for first, last, found in stretches if per_node > 1 else ():
        for low in range(first, last, chunk):
            positions = np.arange(low, min(low + chunk, last), dtype=np.int64)
            shards = locate(positions)
            ranks = (positions - origin) % world
            for shard, rank in set(zip(shards.tolist(), ranks.tolist(), strict=True)):
                found[rank // per_node].setdefault(shard, set()).add(rank)
    known: dict[tuple[int, int], tuple[int, int]] = {}

    def cost(node: int, shard: int) -> tuple[int, int]:
        got = known.get((node, shard))
        if got is None:
            mine = readers[node].get(shard) or after[node].get(shard)
            ranks = sorted(mine or {node * per_node})
            got = known[node, shard] = ranged_cost(writes_of(shard, ranks), step)
        return got

    return cost
