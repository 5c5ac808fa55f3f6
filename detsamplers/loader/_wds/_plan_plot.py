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

The path is checked before any plan is made (:func:`check_plot_path`): a directory, a file
that is not a regular one (a FIFO would block the write until something reads it, a
device), a folder that does not exist or a path that cannot be written is refused with an
error naming it; an error while writing names it too.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ._plan_report import RunPlan

__all__ = ["check_plot_path", "node_counts", "save_plot", "sweep"]


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


def check_plot_path(path: str | os.PathLike[str]) -> str:
    """The path a plot is written to, refused if it cannot take a PNG (NOTE [ plan plot ]).

    Only ``stat`` and ``access`` are called: a FIFO is never opened.

    Raises:
        ValueError: a directory, not a regular file, no folder, or not writable.

    Examples:
        >>> check_plot_path("/")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --plot should name a PNG file to write, but '/' is a directory; ...
    """
    name = os.fspath(path)
    if os.path.isdir(name):
        raise ValueError(
            f"--plot should name a PNG file to write, but {name!r} is a directory; pass a "
            f"file in it, such as {os.path.join(name, 'plan.png')!r}"
        )
    if os.path.lexists(name) and not os.path.isfile(name):
        raise ValueError(
            f"--plot should name a regular file, but {name!r} is not one (a FIFO, a socket, a "
            f"device or a broken link); pass a file path such as plan.png"
        )
    folder = os.path.dirname(os.path.abspath(name))
    if not os.path.isdir(folder):
        raise ValueError(
            f"--plot should be in an existing folder, but the folder of {name!r} is not one; "
            f"create it or pass another path"
        )
    if not os.access(name if os.path.exists(name) else folder, os.W_OK):
        raise ValueError(
            f"--plot should be a path that can be written, but {name!r} cannot be (permission "
            f"denied); pass a path you can write"
        )
    return name


def save_plot(plans: list[RunPlan], path: str | os.PathLike[str]) -> None:
    """Draw bytes (mean and largest) and cost per node against the world size into ``path``.

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
        ValueError: ``plans`` is empty, or ``path`` cannot take the PNG (the message names it).
    """
    if not plans:
        raise ValueError("plans should hold at least one plan, but got none")
    name = check_plot_path(path)
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
    try:
        figure.savefig(name, format="png")
    except OSError as error:
        raise ValueError(
            f"--plot should be a path that can be written, but writing {name!r} failed: "
            f"{error.strerror or error}; pass another path"
        ) from error
    finally:
        plt.close(figure)
