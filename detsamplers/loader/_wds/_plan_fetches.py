"""What a node's cache spends on each shard in a plan: whole, or the byte ranges it fetches.

NOTE [ planned fetches ]
A run plan (NOTE [ run plan ]) counts a node's downloads with the reader's own decision
of what to fetch: :func:`node_fetches`, called for each rank ``[r]`` with the world size
and the grid's origin exactly as the source calls it, says which shards the rank reads
only in part and, through ``NodeFetches.byte_ranges`` on the shard's ``ShardInfo`` (NOTE
[ plan inputs ]), which byte ranges of them it fetches. For each node and shard:

- a shard no rank of the node reads in part costs its whole download: its size, in
  ``ceil(size / download_step(read_ahead))`` requests (``download_ranges``);
- a shard its ranks read in part costs what ``ShardCache._write_range`` fetches: the
  ranks' ranges written one after another (rank order, each rank's largest first, as the
  reader pins them), each copying what the range files already written hold and fetching
  the rest, each stretch fetched one request per ``download_step(read_ahead)`` bytes. The
  bytes are the union of the ranges whatever the order; the requests may differ by one a
  stretch when another order cuts a stretch across a step boundary (never with ranges under
  a step), and two ranks fetching the same bytes at the same moment fetch them twice;
- a shard one rank of the node reads whole and another in part (the tail's samples when
  ``W`` does not divide the epoch, NOTE [ node fetches ]) costs its whole download, as if
  the whole one came first. Which ranks read a shard is then taken over the planned
  epochs, whole epochs (a model in a started epoch); with ``W`` dividing the samples each
  sample has one rank, so a rank reads every epoch the shards it lists and no other rank of
  its node reads them. A node's cost of a shard is counted in the first epoch it reads it.

The first batch of a reader (``first_batch_whole``) fetches a cold shard its rank reads in
part as its ranges, like the reader; its cost is counted the same way over the node's
readers' choices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from .read._node_fetches import NodeFetches
from .shard._shard_info import ShardInfo

__all__ = ["Spans", "node_costs", "ranged_cost", "rank_spans"]

Spans = tuple[tuple[int, int], ...]
#: Shards' offsets kept while ranks are walked in order (each can be a shard of 1e4 samples).
_INFOS_KEPT = 256


def ranged_cost(writes: Sequence[Spans], step: int) -> tuple[int, int]:
    """Bytes and requests of writing ``writes``' ranges in turn, copying what is written.

    Each range fetches its stretches no earlier range covers, one request per ``step``
    bytes of each (NOTE [ planned fetches ]).

    Examples:
        >>> ranged_cost([((0, 10), (20, 30)), ((5, 25),)], step=4)  # 10 + 10, then 10-20
        (30, 9)
    """
    done: list[tuple[int, int]] = []
    sent, requests = 0, 0
    for spans in writes:
        for low, high in spans:
            at = low
            for begin, end in sorted(done):
                if end <= at or begin >= high:
                    continue
                if begin > at:
                    sent += begin - at
                    requests += -(-(begin - at) // step)
                at = max(at, end)
            if at < high:
                sent += high - at
                requests += -(-(high - at) // step)
            done.append((low, high))
    return sent, requests


def rank_spans(
    fetches: Sequence[NodeFetches | None], info: Callable[[int], ShardInfo] | None
) -> list[dict[int, Spans]]:
    """Each rank's byte ranges per shard it reads in part, largest first (as the reader pins).

    A shard absent is fetched whole by the rank (``byte_ranges`` gave ``None``). A shard's
    offsets are looked up once for the ranks that share it (neighbours share the shard
    where their parts meet, and most ranks the few shards of the tail).
    """
    if info is not None:
        info = functools.lru_cache(maxsize=_INFOS_KEPT)(info)
    out: list[dict[int, Spans]] = []
    for mine in fetches:
        spans: dict[int, Spans] = {}
        if mine is not None and mine.partial:
            if info is None:
                raise ValueError("the plan needs the shards' offsets to count byte ranges")
            for shard in mine.partial:
                got = mine.byte_ranges(shard, info(shard))
                if got is not None:
                    spans[shard] = tuple(sorted(got, key=lambda span: span[0] - span[1]))
        out.append(spans)
    return out


def node_costs(
    spans: list[dict[int, Spans]],
    readers: Sequence[set[int]] | None,
    per_node: int,
    step: int,
) -> list[dict[int, tuple[int, int]]]:
    """Each node's bytes and requests of the shards it fetches as ranges (NOTE [ planned fetches ]).

    A shard absent costs its whole download. ``readers[r]``: the shards rank ``r`` reads in
    the planned epochs (``None``: each rank reads the shards it lists, and no other rank of
    its node reads them: one rank a node, or a world size dividing the samples).
    """
    out = []
    for node in range(len(spans) // per_node):
        ranks = range(node * per_node, (node + 1) * per_node)
        costs: dict[int, tuple[int, int]] = {}
        for shard in sorted({s for r in ranks for s in spans[r]}):
            reading = [r for r in ranks if shard in (spans[r] if readers is None else readers[r])]
            if not reading or any(shard not in spans[r] for r in reading):
                continue  # read whole by one of them (or by no rank): the whole download
            costs[shard] = ranged_cost([spans[r][shard] for r in reading], step)
        out.append(costs)
    return out
