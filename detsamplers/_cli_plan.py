"""``python -m detsamplers plan``: what a run will download, per node, before it starts.

NOTE [ plan command ]
The command is :func:`detsamplers.loader.plan_run` (NOTE [ run plan ]) on the command
line: the shards as URLs, ``--set-index`` or a synthetic description (``--shards``,
``--shard-bytes``, ``--samples-per-shard``, ``--spread``), the cluster and the source's
order arguments, the cache limit and epochs, the remote filesystem's arguments for URLs
(``--endpoint-url``, ``--storage-option``, credentials from the environment as s3fs finds
them: NOTE [ command storage options ]), an optional resume (``--resume-at`` on
``--resume-nodes`` x ``--resume-ranks-per-node``), and an optional network model
(``--bandwidth`` in bytes/s per node with ``--rtt``, ``--requests-per-second``,
``--price-per-gb``, ``--price-per-1000-gets``). It prints a table, or the plan as JSON
with ``--json``, and with ``--plot out.png`` a plot of bytes and cost per node against
the world size (NOTE [ plan plot ]); an argument the library refuses is a usage error (exit
status 2) with the library's message, which names it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._cli_plan_mixture import add_mixture_arguments, run_mixture
from ._cli_storage import add_storage_arguments, storage_options


def add_parser(commands: Any) -> None:
    """Add the ``plan`` command to the CLI's subparsers."""
    plan = commands.add_parser(
        "plan",
        help="bytes, requests, cache and cost per node of a webdataset run, without reading it",
        description="Compute, with the reader's own order and cache decisions, what each node "
        "of a run downloads per epoch (shards, bytes, requests), its cache's high-water mark "
        "and evictions, a resume's downloads, and with --bandwidth the first batch's time and "
        "the cost.",
    )
    plan.add_argument("urls", nargs="*", help="shard paths or URLs (brace patterns too)")
    plan.add_argument(
        "--set-index", nargs="+", default=None,
        help="a local detsamplers-set.index.npz (with --weights: one a shard set)",
    )  # fmt: skip
    # one value, or with --weights one a shard set (one for all: the same for every set)
    plan.add_argument("--shards", type=int, nargs="+", default=None, help="synthetic: shards")
    plan.add_argument("--shard-bytes", type=int, nargs="+", default=None, help="synthetic: size")
    plan.add_argument("--samples-per-shard", type=int, nargs="+", default=None, help="samples")
    plan.add_argument("--spread", type=float, nargs="+", default=[0.0], help="size spread (0)")
    plan.add_argument("--nodes", type=int, required=True, help="nodes, one cache each")
    plan.add_argument("--ranks-per-node", type=int, default=1, help="ranks per node (1)")
    plan.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (0)")
    plan.add_argument("--batch-size", type=int, required=True, help="samples per rank's batch")
    plan.add_argument("--seed", type=int, default=0, help="the source's seed (0)")
    plan.add_argument("--no-shuffle-shards", action="store_true", help="shuffle_shards=False")
    plan.add_argument("--shuffle-window", type=int, default=0, help="the source's (0)")
    plan.add_argument("--shuffle-block-shards", type=int, default=0, help="the source's (0)")
    plan.add_argument("--parts", type=int, default=0, help="the source's parts (0: off)")
    plan.add_argument("--cache-limit", type=int, default=None, help="bytes per node's cache")
    plan.add_argument("--epochs", type=int, default=1, help="epochs to plan (1)")
    plan.add_argument("--resume-at", type=int, default=None, help="a resume's global position")
    plan.add_argument("--resume-nodes", type=int, default=None, help="nodes of the resume")
    plan.add_argument("--resume-ranks-per-node", type=int, default=None, help="its ranks a node")
    plan.add_argument("--index-dir", default=None, help="the source's index_dir, for URLs")
    add_storage_arguments(plan)  # NOTE [ command storage options ]
    plan.add_argument("--bandwidth", type=float, default=None, help="bytes/s per node")
    plan.add_argument("--rtt", type=float, default=0.0, help="seconds a round trip (0)")
    plan.add_argument("--requests-per-second", type=float, default=3500.0, help="per node")
    plan.add_argument("--price-per-gb", type=float, default=0.0, help="egress price of 1e9 B")
    plan.add_argument("--price-per-1000-gets", type=float, default=0.0, help="request price")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--progress", action="store_true", help="a progress bar on long plans")
    plan.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="also plan 1, 2, 4, ... nodes up to --nodes and save bytes and cost per node "
        "against the world size to this PNG (needs matplotlib: the plot extra)",
    )
    add_mixture_arguments(plan)  # NOTE [ mixture plan command ]


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``plan``; the exit status (2 for an argument refused)."""
    from .loader import Network, SyntheticShards, plan_run
    from .loader._wds.remote._urls import expand_urls

    if args.weights is not None:  # a WebDatasetMix: one URL pattern a shard set
        return run_mixture(parser, args)

    synthetic_args = (args.shards, args.shard_bytes, args.samples_per_shard)
    try:
        if args.plot is not None:  # before planning: a path that cannot take it fails now
            from .loader._wds._plan_plot import check_plot_path

            check_plot_path(args.plot)
        synthetic = None
        if any(a is not None for a in synthetic_args):
            if any(a is None for a in synthetic_args):
                raise ValueError(
                    "--shards, --shard-bytes and --samples-per-shard should be given together, "
                    "but got only some of them"
                )
            for name in ("shards", "shard_bytes", "samples_per_shard", "spread"):
                if len(getattr(args, name)) != 1:
                    flag = "--" + name.replace("_", "-")
                    raise ValueError(
                        f"{flag} should be one value without --weights, but got "
                        f"{flag} {' '.join(map(str, getattr(args, name)))}"
                    )
            synthetic = SyntheticShards(
                args.shards[0], args.shard_bytes[0], args.samples_per_shard[0], args.spread[0]
            )
        network = None
        if args.bandwidth is not None:
            network = Network(
                args.bandwidth,
                args.rtt,
                args.requests_per_second,
                args.price_per_gb,
                args.price_per_1000_gets,
            )
        urls = [shard for url in args.urls for shard in expand_urls(url)]  # brace patterns too
        if args.set_index is not None and len(args.set_index) != 1:
            raise ValueError(
                f"--set-index should be one file without --weights, but got --set-index "
                f"{' '.join(args.set_index)}; pass one, or one a set with --weights"
            )
        options: dict[str, Any] = dict(
            urls=urls or None,
            set_index=None if args.set_index is None else args.set_index[0],
            synthetic=synthetic,
            ranks_per_node=args.ranks_per_node,
            num_workers=args.num_workers,
            batch_size=args.batch_size,
            seed=args.seed,
            shuffle_shards=not args.no_shuffle_shards,
            shuffle_window=args.shuffle_window,
            shuffle_block_shards=args.shuffle_block_shards,
            parts=args.parts,
            cache_limit=args.cache_limit,
            epochs=args.epochs,
            resume_at=args.resume_at,
            resume_nodes=args.resume_nodes,
            resume_ranks_per_node=args.resume_ranks_per_node,
            network=network,
            index_dir=args.index_dir,
            storage_options=storage_options(args.storage_option, args.endpoint_url, args.urls),
            progress=args.progress,
        )
        plan = plan_run(nodes=args.nodes, **options)
        if args.plot is not None:
            from .loader._wds._plan_plot import save_plot, sweep

            again = {**options, "resume_at": None, "progress": False}
            plans = sweep(
                lambda n: plan if n == args.nodes else plan_run(nodes=n, **again),
                args.nodes,
                args.ranks_per_node,
                args.parts,
            )
            save_plot(plans, args.plot)
    except (TypeError, ValueError, FileNotFoundError, ImportError) as exn:
        parser.error(f"plan: {exn}")
    if args.json:
        json.dump(plan.as_dict(), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(plan.table())
    return 0
