"""Which shards each node of a planned run reads in an epoch, found three exact ways.

NOTE [ plan shard sets ]
The plan (NOTE [ run plan ]) needs, per node and epoch, the set of shards the node's ranks
read. Rank ``r`` of ``W`` reads the positions ``o + k W + r`` (NOTE [ shard stream split ],
``o`` the grid's origin); node ``n`` holds the ranks ``[n L, (n + 1) L)``. Three ways, all
exact, the fastest that applies chosen by :func:`epoch_sets`:

- ``parts = C`` that ``W`` divides (the fixed part cover, NOTE [ fixed part cover ]): part
  ``u`` is read by rank ``(u - o) mod W`` and covers slot ``sigma(u)`` of the run's fixed
  sequence, the same shards every epoch, plus the ``N mod C`` samples past ``C m``, located:
  ``O(C + S)``;
- no parts and no block shuffle: a shard's run of the epoch's sequence is read by a cyclic
  range of ranks, so of nodes, in closed form per shard: ``O(S)`` a node;
- otherwise every position of the epoch is located, a chunk at a time
  (``ShardOrder.locate``): ``O(N)``, in the order the node first uses each shard.

A property test checks the first two against the third. A mixture's plan builds its own
sets and hands them to the same replay and fetch counting (the seam: a list per node of
each epoch's shards).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from .order._shard_order import ShardOrder

__all__ = ["Cluster", "epoch_sets", "interval_sets", "located_sets", "parts_sets"]

I64 = npt.NDArray[np.int64]
#: Positions located at once by the general path.
_CHUNK = 1 << 20


class Cluster:
    """A world of ``nodes * per_node`` ranks starting at ``start`` (the grid's origin found)."""

    def __init__(self, nodes: int, per_node: int, batch_size: int, start: int) -> None:
        self.nodes, self.per_node, self.batch_size = nodes, per_node, batch_size
        self.world = nodes * per_node
        self.start = start
        self.origin = start % (batch_size * self.world)

    def node_of(self, positions: I64) -> I64:
        out: I64 = (positions - self.origin) % self.world // self.per_node
        return out


def _sorted_unique(keys: I64) -> I64:
    """``np.unique(keys)`` by a sort: numpy's hashed unique is many times slower on these keys."""
    keys = np.sort(keys)
    out: I64 = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    return out


def parts_sets(order: ShardOrder, epoch: int, cluster: Cluster, total: int) -> list[I64]:
    """Each node's shards in a whole epoch with parts that the world size divides.

    Vectorized over the parts: each part's run of slots, from its first shard to its last,
    is expanded at once, then the ``(node, shard)`` pairs are deduplicated and cut by node.
    """
    deal = order.parts
    assert deal is not None
    counts = order.counts
    sequence = order.shard_order(epoch)
    starts = np.concatenate([[0], np.cumsum(counts[sequence])]).astype(np.int64)
    parts, size = deal.parts, deal.size
    tail = np.arange(parts * size, total, dtype=np.int64) + epoch * total
    tail = tail[tail >= cluster.start]
    tail_shards, _ = order.locate(tail)
    nodes, shards = [cluster.node_of(tail)], [tail_shards]
    if size:
        u = np.arange(parts, dtype=np.int64)
        low = deal.slot(u) * size
        first = np.searchsorted(starts, low, side="right") - 1
        last = np.searchsorted(starts, low + size - 1, side="right") - 1
        lengths = last - first + 1  # each part's run of slots: C / W short runs a rank
        ends = np.cumsum(lengths)
        slots = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(
            first - ends + lengths, lengths
        )
        covered = sequence[slots]
        owners = np.repeat((u - cluster.origin) % cluster.world // cluster.per_node, lengths)
        read = counts[covered] > 0  # a shard with no samples is not read
        nodes.append(owners[read])
        shards.append(covered[read])
    width = len(counts)
    keys = _sorted_unique(np.concatenate(nodes) * width + np.concatenate(shards))
    cuts = np.searchsorted(keys, np.arange(cluster.nodes + 1, dtype=np.int64) * width)
    return [keys[a:b] - n * width for n, (a, b) in enumerate(itertools.pairwise(cuts))]


def interval_sets(order: ShardOrder, epoch: int, cluster: Cluster, total: int) -> list[I64]:
    """Each node's shards in an epoch without parts or a block shuffle: a node range a shard."""
    sequence = order.shard_order(epoch)
    starts = np.concatenate([[0], np.cumsum(order.counts[sequence])]).astype(np.int64)
    low = np.maximum(starts[:-1], cluster.start - epoch * total)
    high = starts[1:]
    base = epoch * total - cluster.origin
    world, per, nodes = cluster.world, cluster.per_node, cluster.nodes
    # z = p - o runs over [base + low, base + high): ranks z mod W from the first one on,
    # cyclically, so nodes n0 to n1 (mod nodes), or all once the run wraps around.
    count = high - low
    first_rank = (base + low) % world
    n0 = first_rank // per
    n1 = (first_rank + np.maximum(count, 1) - 1) % world // per
    span = (n1 - n0) % nodes
    every = (count >= world) | ((n1 == n0) & (count > per))
    nonempty = count > 0
    out = []
    for node in range(nodes):
        hit = nonempty & (every | ((node - n0) % nodes <= span))
        out.append(sequence[hit])
    return out


def located_sets(
    order: ShardOrder, epoch: int, cluster: Cluster, total: int, progress: Any
) -> list[I64]:
    """Each node's shards in an epoch in the order it first uses them: every position located."""
    shard_count = len(order.counts)
    first = np.full(cluster.nodes * shard_count, -1, dtype=np.int64)
    begin = max(cluster.start, epoch * total)
    for low in range(begin, (epoch + 1) * total, _CHUNK):
        positions = np.arange(low, min(low + _CHUNK, (epoch + 1) * total), dtype=np.int64)
        shards, _ = order.locate(positions)
        keys = cluster.node_of(positions) * shard_count + shards
        unique, where = np.unique(keys, return_index=True)
        new = first[unique] < 0
        first[unique[new]] = positions[where[new]]
        if progress is not None:
            progress.update(len(positions))
    out = []
    for node in range(cluster.nodes):
        mine = first[node * shard_count : (node + 1) * shard_count]
        used = np.flatnonzero(mine >= 0)
        out.append(used[np.argsort(mine[used], kind="stable")].astype(np.int64))
    return out


def epoch_sets(
    order: ShardOrder, epoch: int, cluster: Cluster, total: int, ordered: bool, progress: Any
) -> tuple[list[I64], str]:
    """Each node's shards in epoch ``epoch`` by the fastest exact way (NOTE [ run plan ])."""
    whole = cluster.start <= epoch * total
    deal = order.parts
    divides = deal is not None and deal.parts % cluster.world == 0
    if not ordered and whole and divides and order.rotate:
        return parts_sets(order, epoch, cluster, total), "parts"
    if not ordered and deal is None and order.blocks is None:
        return interval_sets(order, epoch, cluster, total), "intervals"
    return located_sets(order, epoch, cluster, total, progress), "located"
