"""One rank of the two-node test: read an epoch of remote shards through this node's cache.

Started by two torchrun agents (``--nnodes=2``, a c10d rendezvous on 127.0.0.1), each with
its own ``--cache`` folder, as two machines would be::

    torchrun --nnodes=2 --nproc_per_node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=t -m two_nodes --urls URLS --cache DIR --out DIR

With ``--skip-samples S --steps K`` the rank reads ``K`` batches of the repeating stream
from position ``S`` (``S = N``: the second epoch, as a run restarted on the same nodes).
"""

from __future__ import annotations

import argparse
import json
import os
from itertools import islice

from detsamplers.loader import WebDatasetSource


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--urls", "--cache", "--out", "--index-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--parts", type=int, default=48)
    parser.add_argument("--skip-samples", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    later = args.skip_samples > 0
    source = WebDatasetSource(
        args.urls, seed=0, batch_size=8, world_size=world, rank=rank, repeat=later,
        skip_samples=args.skip_samples, decode=(), map=lambda s: int(s["cls"]),
        parts=args.parts, cache_dir=args.cache, index_dir=args.index_dir,
        shuffle_block_shards=2,
    )  # fmt: skip
    batches = islice(source, args.steps) if later else source
    labels = [int(x) for batch in batches for x in batch]
    name = f"rank-{rank}-from-{args.skip_samples}.json"
    with open(os.path.join(args.out, name), "w") as out:
        json.dump({"labels": labels, "cache": args.cache, "rank": rank}, out)


if __name__ == "__main__":
    main()
