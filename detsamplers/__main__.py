"""``python -m detsamplers``: the demo, index, inspect, bench, tokens and plan commands.

``demo`` is the pause-and-resume demonstration (see ``make demo``); ``index`` writes the
index files of webdataset shards (NOTE [ index file format ]) and, per folder, their set
index (NOTE [ set index ]); ``--endpoint-url`` and ``--storage-option KEY=VALUE`` reach
the fsspec filesystem, as ``storage_options`` do for ``WebDatasetSource``; ``inspect``
reports what a checkpoint or saved state holds (NOTE [ inspect ]); ``bench`` measures a
user's own pipeline (NOTE [ bench ]); ``tokens`` builds a token corpus and prints its
statistics (NOTE [ tokens command ]); ``plan`` computes what a run will download per node
(NOTE [ plan command ]).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


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
    demo.add_argument("--pause-at", type=int, default=20, help="global batch to stop at (20)")
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
    index.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec filesystem argument, as WebDatasetSource's storage_options (repeat "
        "it; a VALUE that parses as JSON is that JSON, e.g. anon=true)",
    )
    index.add_argument(
        "--endpoint-url",
        default=None,
        help="the S3 endpoint (MinIO, moto, ...; storage_options client_kwargs.endpoint_url) "
        "or, for gs:// URLs, the GCS endpoint (an emulator; storage_options endpoint_url)",
    )
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
        storage = _storage_options(parser, args.storage_option, args.endpoint_url, args.urls)
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


def _storage_options(
    parser: argparse.ArgumentParser,
    pairs: list[str],
    endpoint_url: str | None,
    urls: Sequence[str] = (),
) -> dict[str, Any]:
    """``--storage-option KEY=VALUE`` and ``--endpoint-url`` as ``storage_options``.

    The endpoint is gcsfs's ``endpoint_url`` for ``gs://`` URLs, else s3fs's
    ``client_kwargs.endpoint_url`` (gcsfs ignores ``client_kwargs``: the index would be
    read from Google's servers instead of the endpoint named).
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            parser.error(
                f"--storage-option should be KEY=VALUE, but got {pair!r}; for example "
                "--storage-option anon=true"
            )
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    if endpoint_url is not None and any(u.lower().startswith(("gs://", "gcs://")) for u in urls):
        options["endpoint_url"] = endpoint_url
    elif endpoint_url is not None:
        client = options.get("client_kwargs")
        if client is not None and not isinstance(client, dict):
            parser.error(f"--storage-option client_kwargs should be a JSON object, got {client!r}")
        options["client_kwargs"] = {**(client or {}), "endpoint_url": endpoint_url}
    return options


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
