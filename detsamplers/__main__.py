"""``python -m detsamplers``: the demo, index, inspect, bench, tokens and plan commands.

``demo`` is the pause-and-resume demonstration (see ``make demo``); ``index`` writes the
index files of webdataset shards (NOTE [ index file format ]) and, per folder, their set
index (NOTE [ set index ]); ``--endpoint-url`` and ``--storage-option KEY=VALUE`` reach
the fsspec filesystem, as ``storage_options`` do for ``WebDatasetSource`` (NOTE [ command
storage options ]); ``inspect``
reports what a checkpoint or saved state holds (NOTE [ inspect ]); ``bench`` measures a
user's own pipeline (NOTE [ bench ]); ``tokens`` builds a token corpus and prints its
statistics (NOTE [ tokens command ]); ``plan`` computes what a run will download per node
(NOTE [ plan command ]).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ._cli_storage import add_storage_arguments, storage_options


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run it; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m detsamplers")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train on 2 ranks, pause, resume on 1, and verify the global batches",
        description="Train a small model with torchrun (gloo on 127.0.0.1), stop it midway, "
        "resume it from its latest checkpoint on another world size, and check the result "
        "against an uninterrupted run. Exits 1 if a check fails.",
    )
    demo.add_argument("--ranks", type=int, default=2, help="ranks of the first run (2)")
    demo.add_argument(
        "--pause-at", type=int, default=20, help="batch after which a rank gets SIGTERM (20)"
    )
    demo.add_argument("--resume-ranks", type=int, default=1, help="ranks of the resume (1)")
    demo.add_argument("--batches", type=int, default=48, help="total global batches (48)")
    demo.add_argument("--num-workers", type=int, default=1, help="loader workers per rank (1)")
    demo.add_argument("--workdir", default=None, help="keep the runs here (default: temporary)")
    index = commands.add_parser(
        "index",
        help="write <shard>.index.npz for each webdataset shard, local or remote",
        description="Scan each shard once and write its index file (the byte ranges of its "
        "samples) next to it, or into --out to upload next to the shards. A "
        "WebDatasetSource reads these instead of scanning the shards.",
    )
    index.add_argument("urls", nargs="+", help="shard paths, fsspec URLs or brace patterns")
    index.add_argument("--out", default=None, help="write the files into this folder")
    index.add_argument("--timeout", type=float, default=60.0, help="remote stall timeout (60 s)")
    index.add_argument("--retries", type=int, default=5, help="remote retries (5)")
    add_storage_arguments(index)  # NOTE [ command storage options ]
    from . import _cli_bench, _cli_inspect, _cli_plan, _cli_tokens

    _cli_inspect.add_parser(commands)
    _cli_bench.add_parser(commands)
    _cli_tokens.add_parser(commands)
    _cli_plan.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "plan":
        return _cli_plan.run(parser, args)
    if args.command == "tokens":
        return _cli_tokens.run(parser, args)
    if args.command == "inspect":
        return _cli_inspect.run(parser, args)
    if args.command == "bench":
        return _cli_bench.run(parser, args)
    if args.command == "index":
        try:
            storage = storage_options(args.storage_option, args.endpoint_url, args.urls)
        except ValueError as error:
            parser.error(str(error))
        return _index(parser, args.urls, args.out, args.timeout, args.retries, storage)

    from .trial._demo import run_demo

    try:
        ok = run_demo(
            ranks=args.ranks,
            pause_at=args.pause_at,
            resume_ranks=args.resume_ranks,
            max_batches=args.batches,
            num_workers=args.num_workers,
            workdir=args.workdir,
        )
    except ValueError as error:
        parser.error(str(error))
    except FileNotFoundError as error:  # the demo trial, examples/demo_trial.py, is missing
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    except RuntimeError as error:  # a launch failed; its output is in the message
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    return 0 if ok else 1


def _index(
    parser: argparse.ArgumentParser,
    urls: list[str],
    out: str | None,
    timeout: float,
    retries: int,
    storage_options: dict[str, Any],
) -> int:
    from .loader._wds.index._remote_index import write_indexes
    from .loader._wds.remote._remote_reads import make_options
    from .loader._wds.remote._urls import expand_urls

    try:
        options = make_options(timeout, retries, 4 << 20, storage_options)
        shards = [shard for url in urls for shard in expand_urls(url)]
    except ImportError as error:  # webdataset is not installed: the message says how
        print(f"index failed: {error}", file=sys.stderr)
        return 1
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    try:
        written, sets = write_indexes(shards, options, out)
    except (OSError, ValueError) as error:
        print(f"index failed: {error}", file=sys.stderr)
        return 1
    for target, samples in written:
        print(f"{target}: {samples} samples")
    for target, count in sets:
        print(f"{target}: the set index of {count} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
