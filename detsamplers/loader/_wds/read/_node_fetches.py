"""``node_fetches``: which byte ranges of which shards a node fetches into its cache.

NOTE [ node fetches ]
With ``parts = C`` under the law of NOTE [ fixed part cover ], a rank of a world size ``W``
dividing ``C`` reads the parts ``u ≡ o_0 + r (mod W)`` (``o_0`` the grid's origin) in
every epoch, and those parts cover the same samples of the run's fixed sequence every
epoch: the slots ``sigma(u)`` of NOTE [ rank-local parts ], ``[sigma(u) m, (sigma(u) + 1)
m)``, plus some of the last ``N mod C`` samples (the *tail*), which the ranks read in turn:
offset ``o >= C m`` of epoch ``e`` is read by the rank ``≡ e N + o - o_0 (mod W)``, so over
all epochs rank ``r`` reads the tail samples ``o ≡ o_0 + r (mod g)``, ``g = gcd(N, W)``
(those of its epoch's residue in each epoch; all of them every epoch when ``W`` divides
``N``). A node's parts start
and end inside shards, so a shard at either end of a run is read only in part by the node;
downloading it whole made each of ``n`` nodes pull up to ``2 n`` shards too many per run
(1.28x to 1.40x of a node's share at 4 nodes of 16 or 32 shards).

:func:`node_fetches` is the one decision, a pure function of the order, the world size,
the node's ranks and the origin (no I/O): for each shard a node reads only in part, the
sample ranges it reads in any epoch (merged across its ranks when they touch; a window
shuffle widens each to whole windows, since it permutes samples within ``shuffle_window``
samples of a shard); every other shard the node reads is read whole and fetched whole as
before (NOTE [ shard cache ]). :meth:`NodeFetches.byte_ranges` turns a shard's sample
ranges into byte ranges: each from the tar header of the first member of its first sample
to the end of the last member of its last. A node's ranges in a shard are one run of its
parts (a shard at a run's end), plus, in the shard(s) holding the tail, its tail samples:
one range each, ``ceil((N mod C) / g)`` at most in all. Ranges of a shard less than
``RANGE_GAP`` (1 MiB) apart are then fetched as one, the bytes between included: a request
costs about as long as 1 MiB takes to arrive (S3: some 10 ms to the first byte, 100 MB/s
after), and the tail's samples lie a few samples apart (the other ranks' between). One range
a tail sample was 272 requests for 8,192 samples over 720 parts on 4 ranks of one node,
each a wait on moto's S3: epoch 1 read 3,294 and 3,469 samples/s there, 19,914 and 24,740
with the ranges merged (41 to 46 requests, 1.00x of the data). The price is on
separate nodes: each fetches the whole tail, so 4 nodes of one rank were served 1.10x of
the data over nginx in 41 requests, against 0.99x in 306. All of a shard's ranges
are fetched when the reader first needs the shard (by the prefetch, NOTE [ shard
prefetch ]), the largest first; a read outside them (a state of another world size)
fetches its own bytes. Each
range is fetched once a node, into a ranged file of the cache (requests: one a range, in
``read_ahead`` steps), and the ranges are the same every epoch, so epoch 2 downloads
nothing. A window shuffle costs more: 16-sample windows against 34-sample parts, 4
nodes fetch 1.11x the data over nginx (tests/webdataset/test_wds_node_fetches.py).
``None`` (no ranges: every shard whole) is the answer for an
order without parts, a world size not dividing ``C``, parts larger than the epoch (``m =
0``), or the earlier law (``part_shards="epoch"``).

The reader calls it once per reader (``ranks`` its own rank: the ranks of a node share the
cache folder, where a rank's ranged file copies the bytes another's already holds and
fetches only the rest, so the node's bytes are the union over its ranks; merged ranges of
different ranks overlap). A read outside the planned range (a
state resumed on another world size reading a cached range file of the earlier one) is
fetched then, only its missing bytes (NOTE [ shard cache ]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..index._shard_index_file import resolved
from ..order._shard_order import ShardOrder
from ..shard._packed_members import PackedMembers
from ..shard._shard_info import ShardInfo
from ..shard._tar_walk import BLOCK

__all__ = ["RANGE_GAP", "NodeFetches", "node_fetches", "sample_bytes"]

Ranges = tuple[tuple[int, int], ...]

#: A node's byte ranges of a shard closer than this are fetched as one (NOTE [ node fetches ]).
RANGE_GAP = 1 << 20


@dataclass(frozen=True)
class NodeFetches:
    """The shards a node reads only in part, and which of their samples (NOTE [ node fetches ]).

    Attributes:
        partial: Shard number to the sample ranges ``(start, stop)`` the node reads in it,
            sorted and disjoint; a shard absent is read whole, or not at all.
    """

    partial: dict[int, Ranges]

    def byte_ranges(self, shard: int, info: ShardInfo) -> tuple[tuple[int, int], ...] | None:
        """The byte ranges ``[start, stop)`` of ``shard`` the node fetches (``None``: whole).

        Examples:
            >>> fetches = NodeFetches({0: ((1, 2),)})
            >>> info = ShardInfo("u", "u", ("a", "b"), [[["x", 512, 3]], [["x", 1536, 5]]],
            ...     size=3072)
            >>> fetches.byte_ranges(0, info), fetches.byte_ranges(1, info)
            (((1024, 1541),), None)
        """
        ranges = self.partial.get(shard)
        if ranges is None:
            return None
        spans = [sample_bytes(info, start, stop) for start, stop in ranges]
        known = [span for span in spans if span is not None]
        if len(known) < len(spans):  # the whole shard after all
            return None
        return _merge(known, RANGE_GAP)  # ranges closer than RANGE_GAP: one request


def sample_bytes(info: ShardInfo, start: int, stop: int) -> tuple[int, int] | None:
    """The bytes of samples ``[start, stop)`` of ``info``, the first tar header included.

    ``None`` when the samples have no members or the span is the whole shard.

    Examples:
        >>> info = ShardInfo("u", "u", ("a",), [[["x", 512, 3]]], size=1024)
        >>> sample_bytes(info, 0, 1)  # from its header to its end, not the end blocks
        (0, 515)
    """
    members = resolved(info.members)
    low, high = -1, -1
    if isinstance(members, PackedMembers):
        first, last = int(members.starts[start]), int(members.starts[stop])
        if last > first:
            offsets, sizes = members.offsets[first:last], members.sizes[first:last]
            low = int(np.min(offsets))
            high = int(np.max(np.asarray(offsets) + np.asarray(sizes)))
    else:
        for parts in members[start:stop]:
            for _, offset, size in parts:
                low = offset if low < 0 else min(low, offset)
                high = max(high, offset + size)
    if low < 0:
        return None
    low = max(0, low - BLOCK)
    if low == 0 and high >= info.size:
        return None
    return low, high


def _merge(ranges: list[tuple[int, int]], gap: int = 1) -> Ranges:
    """``ranges`` sorted, those less than ``gap`` apart joined (1: overlapping or touching).

    Examples:
        >>> _merge([(9, 12), (0, 4), (4, 6)]), _merge([(9, 12), (0, 4)], gap=6)
        (((0, 6), (9, 12)), ((0, 12),))
    """
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if out and low - out[-1][1] < gap:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return tuple(out)


def node_fetches(
    order: ShardOrder, world_size: int, ranks: Sequence[int], origin: int = 0
) -> NodeFetches | None:
    """The shards the node of ``ranks`` reads only in part, every epoch (NOTE [ node fetches ]).

    Args:
        order: The source's order (its parts, shard order and window shuffle).
        world_size: ``W``, the ranks of the run.
        ranks: The node's ranks (one rank a node: ``[rank]``).
        origin: Where the grid of global batches starts (NOTE [ shard stream split ]).

    Returns:
        ``None`` when every shard a rank reads is read whole (no parts, ``W`` not dividing
        ``C``, ``m = 0``, the earlier law); else the partly read shards' sample ranges.

    Examples:
        >>> order = ShardOrder([4, 4, 4], seed=0, shuffle_shards=False, shuffle_window=0,
        ...     parts=4)  # parts of 3 samples: [0, 3), [3, 6), [6, 9), [9, 12)
        >>> node_fetches(order, world_size=2, ranks=[0]).partial  # slots 0 and 1
        {1: ((0, 2),)}
        >>> node_fetches(order, world_size=3, ranks=[0]) is None  # 3 does not divide 4
        True
    """
    deal = order.parts
    if deal is None or not order.rotate or deal.size == 0 or deal.parts % world_size:
        return None
    count, size = deal.parts, deal.size
    owned = np.concatenate(
        [np.arange((origin + r) % world_size, count, world_size) for r in ranks]
    ).astype(np.int64)
    slots = np.unique(deal.slot(owned))
    wanted = [(int(s) * size, (int(s) + 1) * size) for s in slots]
    step = math.gcd(order.total, world_size)  # the tail's samples of each rank, any epoch
    tail = np.arange(count * size, order.total, dtype=np.int64)
    residues = np.asarray([(origin + r) % step for r in ranks], dtype=np.int64)
    mine = tail[np.isin(tail % step, residues)]
    wanted += [(int(x), int(x) + 1) for x in mine]
    shards, starts = order.shard_order(0), order.shard_starts(0)  # kept by the order
    per: dict[int, list[tuple[int, int]]] = {}
    for low, high in _merge(wanted):
        first = int(np.searchsorted(starts, low, side="right")) - 1
        last = int(np.searchsorted(starts, high, side="left"))
        begin_slot, end_slot = max(first, 0), min(last, len(shards))
        # a shard strictly inside the range is read whole: only its two ends can be partial
        ends = (begin_slot, end_slot - 1) if end_slot - begin_slot > 2 else ()
        for slot in ends or range(begin_slot, end_slot):
            begin, end = int(starts[slot]), int(starts[slot + 1])
            if end <= begin:
                continue
            shard = int(shards[slot])
            within = (max(low, begin) - begin, min(high, end) - begin)
            if within[1] > within[0]:
                per.setdefault(shard, []).append(within)
    window = order.window
    partial: dict[int, Ranges] = {}
    for shard, pieces in per.items():
        total = int(order.counts[shard])
        if window:
            widen = [
                (a // window * window, min(total, -(-b // window) * window)) for a, b in pieces
            ]
            pieces = [(a, min(total, b)) for a, b in widen]
        merged = _merge(pieces)
        if merged != ((0, total),):  # touching ranges merged: (0, 2), (2, 3) is (0, 3)
            partial[shard] = merged
    return NodeFetches(partial)
