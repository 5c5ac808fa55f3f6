"""A plot of a run plan across world sizes: bytes and cost per node against the world size.

NOTE [ plan plot ]
``python -m detsamplers plan ... --plot out.png`` plans the same run (NOTE [ run plan ]) on
several clusters of the given ranks a node: the node counts ``1, 2, 4, ...`` up to the one
given, and that one, keeping those whose world size divides ``parts`` (with parts on). Each
plan is a :class:`RunPlan`, the one computation; the plot only draws its figures: per
world size, the mean and largest bytes a node downloads over the run (shards and index
files) on the left axis, and the cost per node (``RunPlan.cost`` over the nodes, with a
network) on the right. matplotlib is the optional extra ``plot``; without it the command
says how to install it, and the plan itself needs none of it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ._plan_report import RunPlan

__all__ = ["node_counts", "save_plot", "sweep"]


def node_counts(nodes: int, per_node: int, parts: int) -> list[int]:
    """The node counts a plot plans: powers of two up to ``nodes``, and ``nodes``.

    With ``parts`` on, only those whose world size (``n * per_node``) divides it.

    Examples:
        >>> node_counts(12, 1, 0)
        [1, 2, 4, 8, 12]
        >>> node_counts(12, 2, 16)  # 24 ranks do not divide 16 parts
        [1, 2, 4, 8]
    """
    counts = sorted({1 << k for k in range(nodes.bit_length()) if 1 << k <= nodes} | {nodes})
    return [n for n in counts if parts <= 1 or parts % (n * per_node) == 0]


def sweep(plan: Callable[[int], RunPlan], nodes: int, per_node: int, parts: int) -> list[RunPlan]:
    """``plan(n)`` for each node count of :func:`node_counts`."""
    return [plan(n) for n in node_counts(nodes, per_node, parts)]


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise ImportError(
            "plot needs matplotlib, but it is not installed; install the plot extra from "
            "the clone (pip install -c constraints.txt -e '.[plot]') or pip install matplotlib"
        ) from None
    matplotlib.use("Agg")  # a file, never a window
    return importlib.import_module("matplotlib.pyplot")


def save_plot(plans: list[RunPlan], path: str | os.PathLike[str]) -> None:
    """Draw bytes (mean and largest) and cost per node against the world size into ``path``.

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
        ValueError: ``plans`` is empty.
    """
    if not plans:
        raise ValueError("plans should hold at least one plan, but got none")
    plt = _pyplot()
    worlds = [p.world_size for p in plans]
    per_node = [[sum(n.shard_bytes) + n.index_bytes for n in p.nodes] for p in plans]
    figure, left = plt.subplots(figsize=(7, 4.5))
    left.plot(worlds, [sum(b) / len(b) / 1e9 for b in per_node], "o-", label="mean GB a node")
    left.plot(worlds, [max(b) / 1e9 for b in per_node], "s--", label="largest GB a node")
    left.set_xscale("log", base=2)
    left.set_xlabel("world size (ranks)")
    left.set_ylabel("GB downloaded per node, whole run")
    handles, labels = left.get_legend_handles_labels()
    costs = [p.cost() for p in plans]
    if all(c is not None for c in costs):
        right = left.twinx()
        right.plot(
            worlds,
            [c / len(p.nodes) for c, p in zip(costs, plans, strict=True) if c is not None],
            "^:",
            color="tab:red",
            label="cost a node",
        )
        right.set_ylabel("cost per node")
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    left.legend(handles, labels, loc="best")
    first = plans[0]
    left.set_title(
        f"plan: {first.shard_count} shards ({first.dataset_bytes / 1e9:.1f} GB), "
        f"{first.epochs} epochs"
    )
    figure.tight_layout()
    figure.savefig(os.fspath(path), format="png")
    plt.close(figure)
