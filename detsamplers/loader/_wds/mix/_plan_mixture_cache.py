"""A mixture plan's node caches: what each node's folder holds, and a resume from cold or warm.

NOTE [ mixture plan cache ]
The mixture's plan (NOTE [ mixture plan ]) keeps one :class:`NodeCache` a node: per shard,
the byte ranges the node's cache folder holds. Nothing is dropped, so a pass is settled
shard by shard (the order does not matter) and the figures are exact (against nginx's log).
Under a ``cache_limit`` below a node's shards the plan walks the readers' pins instead
(NOTE [ mixture plan pins ]): a replay that pinned only the batch being read was measured
10 to 15 times off the real reader, whose prefetch keeps each rank's working set pinned.

A resume at ``resume_at`` on ``resume_nodes * resume_ranks_per_node`` ranks reads the rest
of the pass of ``resume_at`` with the batch size of its segment, each resumed loader's
origin ``resume_at mod (B W')`` as ``skip_samples=resume_at`` sets it; it is planned from
cold caches (``RunPlan.resume``) and from warm ones (``RunPlan.resume_warm``: node ``n``
holds what node ``n`` of the run held at ``resume_at``; a node beyond
the run's starts cold).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._plan_fetches import Spans, ranged_cost

__all__ = [
    "NodeCache",
    "Phase",
    "check_world",
    "copy_caches",
    "segments",
    "settle_pass",
]

I64 = npt.NDArray[np.int64]


class NodeCache:
    """What one node's cache folder holds, per shard the byte ranges written (NOTE above).

    Args:
        step: The bytes of one download request (``download_step``).

    Examples:
        >>> cache = NodeCache(step=1 << 20)
        >>> [cache.fetch(s, [((0, 100),)]) for s in range(3)]
        [(100, 1), (100, 1), (100, 1)]
        >>> cache.fetch(0, [((0, 150),)]), sorted(cache.held), cache.high_water
        ((50, 1), [0, 1, 2], 350)
    """

    def __init__(self, step: int) -> None:
        self.step = step
        self.held: dict[int, list[tuple[int, int]]] = {}
        self.used = 0
        self.high_water = 0

    def covers(self, shard: int, spans: Spans) -> bool:
        """Whether the folder holds every range of ``spans`` of ``shard``."""
        held = self.held.get(shard, [])
        return all(any(a <= low and high <= b for a, b in held) for low, high in spans)

    def fetch(self, shard: int, writes: Sequence[Spans]) -> tuple[int, int]:
        """Bytes and requests of writing ``writes`` after what the folder holds of ``shard``."""
        before = tuple(self.held.get(shard, ()))
        base = ranged_cost([before], self.step) if before else (0, 0)
        total = ranged_cost([before, *writes] if before else list(writes), self.step)
        sent, requests = total[0] - base[0], total[1] - base[1]
        self.held.setdefault(shard, []).extend(span for spans in writes for span in spans)
        self.used += sent
        self.high_water = max(self.high_water, self.used)
        return sent, requests


def copy_caches(caches: Sequence[NodeCache], nodes: int, step: int) -> list[NodeCache]:
    """``nodes`` caches: node ``n`` a copy of ``caches[n]`` (a warm resume), the others cold."""
    out = [copy.deepcopy(cache) for cache in caches[:nodes]]
    out += [NodeCache(step) for _ in range(nodes - len(out))]
    for cache in out:  # the figures count from the resume on
        cache.high_water = cache.used
    return out


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
    origin, _, world, per_node = grid
    a, b = span
    readers: list[dict[int, set[int]]] = [{} for _ in caches]  # per node, shard: its ranks
    for low in range(a, b, chunk):
        positions = np.arange(low, min(low + chunk, b), dtype=np.int64)
        shards = locate(positions)
        ranks = (positions - origin) % world
        for shard, rank in set(zip(shards.tolist(), ranks.tolist(), strict=True)):
            readers[rank // per_node].setdefault(shard, set()).add(rank)
    out = []
    for node, cache in enumerate(caches):
        got = [0, 0, 0]
        mine = readers[node]
        for shard in sorted(mine):
            writes = writes_of(shard, sorted(mine[shard]))
            if all(cache.covers(shard, w) for w in writes):
                continue
            sent, requests = cache.fetch(shard, writes)
            got[0] += 1
            got[1] += sent
            got[2] += requests
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
