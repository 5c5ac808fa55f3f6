"""``python -m detsamplers plan --weights ...``: the plan of a ``WebDatasetMix`` run.

NOTE [ mixture plan command ]
With ``--weights`` (one a shard set) the ``plan`` command plans a mixture: each positional
URL pattern is one shard set, and :func:`detsamplers.loader.plan_mixture` (NOTE [ mixture
plan ]) is called with the cluster, the order arguments, ``--parts``, ``--epochs`` (passes
of the sets' samples), the network model and, with ``--batch-schedule POSITION:SIZE ...``,
a batch-size schedule (the first segment from position 0), ``--cache-limit`` (NOTE
[ mixture plan pins ]) and a resume (``--resume-at`` on ``--resume-nodes`` x
``--resume-ranks-per-node``, NOTE [ mixture plan cache ]). Instead
of URL patterns, the single source's synthetic flags describe the sets (``--shards``,
``--shard-bytes``, ``--samples-per-shard``, ``--spread``: one value each for every set, or
one a set; NOTE [ synthetic mixture plan ]), or ``--set-index`` one local file a set (NOTE
[ mixture plan set index ]). The table and ``--json`` are the
single source's; with ``--bandwidth``, each node's first batch time and the cost too.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._cli_plan_synthetic import synthetic_sets
from ._cli_storage import storage_options


def add_mixture_arguments(plan: Any) -> None:
    """The mixture's arguments of ``plan``."""
    plan.add_argument(
        "--weights", type=float, nargs="+", default=None,
        help="a WebDatasetMix: one weight per shard set (each URL pattern is one set)",
    )  # fmt: skip
    plan.add_argument(
        "--batch-schedule", nargs="+", default=None, metavar="POSITION:SIZE",
        help="with --weights: batch-size segments, the first from position 0",
    )  # fmt: skip


def _schedule(values: list[str]) -> list[tuple[int, int]]:
    out = []
    for value in values:
        at, sep, size = value.partition(":")
        if not sep or not at.isdigit() or not size.isdigit():
            raise ValueError(
                f"--batch-schedule should hold POSITION:SIZE pairs of integers, but got "
                f"{value!r}; pass --batch-schedule 0:8 100000:16 for example"
            )
        out.append((int(at), int(size)))
    return out


def run_mixture(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``plan`` for a mixture; the exit status (2 for an argument refused)."""
    from .loader import Network, plan_mixture

    try:
        network = None
        if args.bandwidth is not None:
            network = Network(
                args.bandwidth, args.rtt, args.requests_per_second, args.price_per_gb,
                args.price_per_1000_gets,
            )  # fmt: skip
        batch: Any = args.batch_size
        if args.batch_schedule is not None:
            batch = _schedule(args.batch_schedule)
        synthetic = synthetic_sets(args)
        urls = None if synthetic or args.set_index else args.urls
        if args.set_index and args.urls:  # NOTE [ mixture plan set index ]
            raise ValueError(
                f"--set-index should be given without URL patterns (one file a set), but got "
                f"both --set-index {' '.join(args.set_index)} and {' '.join(args.urls)}"
            )
        plan = plan_mixture(
            urls, args.weights, synthetic=synthetic, set_index=args.set_index, nodes=args.nodes,
            ranks_per_node=args.ranks_per_node,
            num_workers=args.num_workers, batch_size=batch, seed=args.seed,
            shuffle_shards=not args.no_shuffle_shards, shuffle_window=args.shuffle_window,
            shuffle_block_shards=args.shuffle_block_shards, parts=args.parts,
            epochs=args.epochs, cache_limit=args.cache_limit, resume_at=args.resume_at,
            resume_nodes=args.resume_nodes, resume_ranks_per_node=args.resume_ranks_per_node,
            network=network, index_dir=args.index_dir,
            storage_options=storage_options(args.storage_option, args.endpoint_url, args.urls),
        )  # fmt: skip
    except (TypeError, ValueError, FileNotFoundError) as exn:
        parser.error(f"plan: {exn}")
    if args.json:
        json.dump(plan.as_dict(), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(plan.table())
    return 0
