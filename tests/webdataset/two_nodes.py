"""One rank of the two-node test: read one epoch of remote shards through this node's cache.

Started by two torchrun agents (``--nnodes=2``, a c10d rendezvous on 127.0.0.1), each with
its own ``--cache`` folder, as two machines would be::

    torchrun --nnodes=2 --nproc_per_node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=t -m two_nodes --urls URLS --cache DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import os

from detsamplers.loader import WebDatasetSource


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--urls", "--cache", "--out", "--index-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--parts", type=int, default=48)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    source = WebDatasetSource(
        args.urls, seed=0, batch_size=8, world_size=world, rank=rank, repeat=False,
        decode=(), map=lambda s: int(s["cls"]), parts=args.parts, cache_dir=args.cache,
        index_dir=args.index_dir, shuffle_block_shards=2,
    )  # fmt: skip
    labels = [int(x) for batch in source for x in batch]
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as out:
        json.dump({"labels": labels, "cache": args.cache}, out)


if __name__ == "__main__":
    main()
