"""One rank of the two-node mixture test: read a pass of two remote shard sets with parts.

Started by two torchrun agents (``--nnodes=2``, a c10d rendezvous on 127.0.0.1), each with
its own ``--cache`` folder, as two machines would be::

    torchrun --nnodes=2 --nproc_per_node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=t -m mix_two_nodes --urls A --urls B \\
        --sizes 640 400 --steps 49 --cache DIR --out DIR --index-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os

from detsamplers.loader import WebDatasetMix


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", action="append", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True)
    parser.add_argument("--steps", type=int, required=True)
    for name in ("--cache", "--out", "--index-dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    source = WebDatasetMix(
        args.urls, args.sizes, seed=0, batch_size=8, world_size=world, rank=rank,
        decode=(), map=lambda s: int(s["cls"]), parts=8, cache_dir=args.cache, prefetch=1,
        index_dir=args.index_dir, shuffle_block_shards=2,
    )  # fmt: skip
    iterator = iter(source)
    labels = [int(x) for _ in range(args.steps) for x in next(iterator)]
    iterator.close()
    present = [os.path.exists(source.cache.path(info)) for info in source.shards]  # type: ignore[union-attr]
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as out:
        json.dump({"rank": rank, "labels": labels, "present": present}, out)


if __name__ == "__main__":
    main()
