"""Which byte ranges of which shard sets' shards a node of a mixture fetches into its cache.

NOTE [ mixture fetches ]
A mixture with parts reads shard set ``k``'s own stream position ``t = Q L + u`` at lane
``u`` (NOTE [ mixture lanes ], ``L`` lanes, the ``lcm`` of the sets' parts ``C_k``), and a
rank ``r`` of a world size ``W`` dividing ``C_k`` reads the global positions ``p ≡ o_0 + r
(mod W)``, so the lanes ``u ≡ o_0 + r (mod W)`` (``W`` divides ``L``), so set ``k``'s
stream positions ``t ≡ o_0 + r (mod W)``: exactly the positions a single source over set
``k`` with the same ``parts``, world size and origin reads. Set ``k``'s partly read shards
are therefore what :func:`node_fetches` (NOTE [ node fetches ]) says for set ``k``'s own
order, its shards renumbered across the sets (set ``k``'s first shard is ``offsets[k]``).
A set whose ``C_k`` the world size does not divide, or without parts, is fetched whole, as
a single source's would be. The mixture reader and the mixture's plan both call
:func:`mixture_fetches`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..order._shard_order import ShardOrder
from ..read._node_fetches import NodeFetches, node_fetches

__all__ = ["mixture_fetches"]


def mixture_fetches(
    orders: Sequence[ShardOrder],
    offsets: Sequence[int],
    world_size: int,
    ranks: Sequence[int],
    origin: int = 0,
) -> NodeFetches | None:
    """The shards of every set the node of ``ranks`` reads only in part (NOTE [ mixture fetches ]).

    Args:
        orders: Each shard set's own order (the lanes' ``orders``).
        offsets: The number of each set's first shard across the sets.
        world_size: ``W``, the ranks of the run.
        ranks: The node's ranks (one rank a node: ``[rank]``).
        origin: Where the grid of global batches starts (NOTE [ shard stream split ]).

    Returns:
        ``None`` when no set is read in part; else every set's partly read shards' sample
        ranges, numbered across the sets.

    Examples:
        >>> orders = [ShardOrder([4, 4, 4], 0, False, 0, parts=4), ShardOrder([6], 1, False, 0)]
        >>> mixture_fetches(orders, [0, 3], world_size=2, ranks=[0]).partial
        {1: ((0, 2),)}
        >>> mixture_fetches(orders, [0, 3], world_size=3, ranks=[0]) is None
        True
    """
    partial: dict[int, tuple[tuple[int, int], ...]] = {}
    found = False
    for order, offset in zip(orders, offsets, strict=True):
        fetches = node_fetches(order, world_size, ranks, origin)
        if fetches is None:
            continue
        found = True
        partial.update({shard + int(offset): ranges for shard, ranges in fetches.partial.items()})
    return NodeFetches(partial) if found else None
