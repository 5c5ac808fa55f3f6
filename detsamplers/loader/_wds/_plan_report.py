"""``RunPlan`` and ``NodePlan``: a run plan's figures, its totals, its table and its JSON.

NOTE [ plan report ]
A plan (NOTE [ run plan ]) is kept as plain data: per node, one entry per epoch of the
shards, bytes and requests its cache downloads, plus its index fetches, cache high-water
mark, evictions and first batch (and, under a ``cache_limit``, the most shards and bytes
pinned at once: when that working set exceeds the limit, the folder grows past it, and
the table and JSON say so, NOTE [ planned pins ]). Totals are sums of these, never
computed elsewhere:
``total_bytes`` and ``total_requests`` over every node and epoch, the egress of each epoch
over the dataset's bytes, the cache a node needs (the largest high-water mark), and the
cost under the plan's :class:`Network`. The terminal table shows the 8 nodes that download
most (all of them when there are 8 or fewer); ``as_dict`` is what ``--json`` prints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ._plan_inputs import Network

__all__ = ["NodePlan", "RunPlan"]


@dataclass
class NodePlan:
    """One node's downloads (NOTE [ run plan ]); lists hold one entry per epoch."""

    node: int
    shards: list[int] = field(default_factory=list)
    shard_bytes: list[int] = field(default_factory=list)
    shard_requests: list[int] = field(default_factory=list)
    index_bytes: int = 0
    index_requests: int = 0
    high_water: int = 0
    evictions: int = 0
    working_set_shards: int = 0
    working_set_bytes: int = 0
    first_batch_bytes: int = 0
    first_batch_requests: int = 0
    first_batch_seconds: float | None = None


@dataclass
class RunPlan:
    """A run's plan: per node, and in total (NOTE [ run plan ]).

    ``resume`` holds, for a resume, one :class:`NodePlan` per node of the new cluster
    (one entry: the rest of the epoch), caches cold; ``resume_warm`` the same from the
    run's caches as they were then (a mixture's plan); ``method`` says how the shards were
    found.

    Examples:
        >>> from detsamplers.loader import Network, SyntheticShards, plan_run
        >>> plan = plan_run(synthetic=SyntheticShards(10, 10**9, 100), nodes=1, batch_size=4,
        ...     network=Network(bandwidth=1e9, price_per_gb=0.05))
        >>> plan.total_bytes(), round(plan.cost() or 0, 2), plan.method
        (10000000000, 0.5, 'intervals')
    """

    world_size: int
    epochs: int
    samples: int
    shard_count: int
    dataset_bytes: int
    method: str
    nodes: list[NodePlan]
    order_bytes_per_rank: int
    state_bytes_per_rank: int
    index_memory_per_rank: int
    network: Network | None = None
    resume: list[NodePlan] | None = None
    resume_warm: list[NodePlan] | None = None
    cache_limit: int | None = None

    def over_limit(self) -> list[str]:
        """A line per node whose pinned working set takes its folder past ``cache_limit``."""
        limit = self.cache_limit
        if limit is None:
            return []
        return [
            f"node {n.node}: the working set of {n.working_set_shards} shards "
            f"({n.working_set_bytes} bytes) exceeds cache_limit={limit}: the folder grows to "
            f"about {n.high_water} bytes"
            for n in self.nodes
            if n.high_water > limit
        ]

    def total_bytes(self) -> int:
        """Bytes every node downloads over the run: shards and index files."""
        return sum(sum(n.shard_bytes) + n.index_bytes for n in self.nodes)

    def total_requests(self) -> int:
        """Requests every node makes over the run."""
        return sum(sum(n.shard_requests) + n.index_requests for n in self.nodes)

    def cost(self) -> float | None:
        """The run's egress and request cost under :attr:`network` (``None``: no network)."""
        if self.network is None:
            return None
        return (
            self.total_bytes() / 1e9 * self.network.price_per_gb
            + self.total_requests() / 1000 * self.network.price_per_1000_gets
        )

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-able data (``--json``), with its totals."""
        out = asdict(self)
        out["network"] = None if self.network is None else asdict(self.network)
        epochs = [sum(n.shard_bytes[e] for n in self.nodes) for e in range(self.epochs)]
        out["totals"] = {
            "bytes": self.total_bytes(),
            "requests": self.total_requests(),
            "bytes_per_epoch": epochs,
            "egress_over_dataset": [b / self.dataset_bytes for b in epochs],
            "cache_needed": max(n.high_water for n in self.nodes),
            "cost": self.cost(),
            "over_limit": self.over_limit(),
        }
        return out

    def table(self) -> str:
        """A table for the terminal: every node (or the 8 that download most), then totals."""
        rows = sorted(self.nodes, key=lambda n: -sum(n.shard_bytes))[:8]
        rows.sort(key=lambda n: n.node)
        head = ["node", "shards e0", "MB e0", "GETs e0", "MB later", "cache MB", "evicted"]
        head.append("1st batch s")
        lines = [head]
        for n in rows:
            later = sum(n.shard_bytes[1:]) / 1e6
            first = "-" if n.first_batch_seconds is None else f"{n.first_batch_seconds:.3f}"
            lines.append(
                [
                    str(n.node),
                    str(n.shards[0]),
                    f"{n.shard_bytes[0] / 1e6:.1f}",
                    str(n.shard_requests[0] + n.index_requests),
                    f"{later:.1f}",
                    f"{n.high_water / 1e6:.1f}",
                    str(n.evictions),
                    first,
                ]
            )
        widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
        text = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in lines]
        totals = self.as_dict()["totals"]
        shown = "" if len(rows) == len(self.nodes) else f" (the {len(rows)} heaviest shown)"
        text.append(
            f"{len(self.nodes)} nodes{shown}, {self.world_size} ranks, {self.shard_count} "
            f"shards ({self.dataset_bytes / 1e9:.3f} GB), {self.epochs} epochs [{self.method}]"
        )
        ratio = ", ".join(f"{r:.3f}x" for r in totals["egress_over_dataset"])
        text.append(f"egress per epoch over the dataset: {ratio}")
        text.append(
            f"total: {totals['bytes'] / 1e9:.3f} GB in {totals['requests']} requests; cache "
            f"needed per node {totals['cache_needed'] / 1e6:.1f} MB"
        )
        text.append(
            f"per rank: order {self.order_bytes_per_rank} B, state {self.state_bytes_per_rank} "
            f"B, index {self.index_memory_per_rank} B"
        )
        text.extend(totals["over_limit"])
        if totals["cost"] is not None:
            text.append(f"cost: {totals['cost']:.4f}")
        if self.resume is not None:
            worst = max(self.resume, key=lambda n: n.shard_bytes[0])
            text.append(
                f"resume: {len(self.resume)} nodes download "
                f"{sum(n.shards[0] for n in self.resume)} shards, "
                f"{sum(n.shard_bytes[0] for n in self.resume) / 1e9:.3f} GB to the epoch's end "
                f"(at most {worst.shard_bytes[0] / 1e6:.1f} MB on node {worst.node})"
            )
        if self.resume_warm is not None:
            text.append(
                f"resume from warm caches: {sum(n.shards[0] for n in self.resume_warm)} shards, "
                f"{sum(n.shard_bytes[0] for n in self.resume_warm) / 1e9:.3f} GB"
            )
        return "\n".join(text)
