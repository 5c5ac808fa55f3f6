"""Shuffle quality of the part block shuffle against Mosaic streaming's ``py1e`` (issue 23).

Run ``python benchmarks/part_shuffle_quality.py`` (or ``--quick``). For a dataset of
``S`` shards of ``c`` samples (sample ids in shard order), it builds one epoch's order on
one rank for several seeds (100; 3 with ``--quick``) and prints the statistics
``docs/shuffle-quality.md`` uses for the permutations, each computed on one seed's order
and given as its mean over the seeds plus or minus its standard error: the bucketed
positional chi-square (32 x 32, mean about 961 for a uniform shuffle), the lag-1
chi-square (16 x 16, about 225) and the adjacent correlation (0), plus
what the order costs to read: the shards held at once (the mean over the epoch of the
shards between their first and last read; the memory a cache needs) and the mean distinct
shards in a batch of 64.

Rows: ours, ``ShardOrder`` with ``parts=C`` and ``shuffle_block_shards=k`` (epoch 1, where
the parts' layout of NOTE [ fixed part cover ] applies; and the earlier law, whose parts
were cut from each epoch's shard order, ``part_shards="epoch"``); Mosaic 0.13's
``py1e`` (``get_shuffle("py1e", ...)`` then ``get_partitions("orig", ...)`` for one node,
rank and worker, as ``StreamingDataset`` orders them), with ``num_canonical_nodes`` and
``shuffle_block_size`` chosen to hold about as many shards. Mosaic's rows run in
``.venv-mosaic`` (``make mosaic``); without it they are left out.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
HERE = os.path.dirname(os.path.abspath(__file__))
MOSAIC = os.path.join(HERE, "..", ".venv-mosaic", "bin", "python")
MOSAIC_STAMP = os.path.join(HERE, "..", ".venv-mosaic", ".installed")


def ours(shards: int, per_shard: int, seed: int, parts: int, k: int, law: str = "run") -> I64:
    """Epoch 1 of our order (``law``: ``part_shards``, NOTE [ fixed part cover ])."""
    from detsamplers.loader._wds.order._shard_order import ShardOrder

    order = ShardOrder([per_shard] * shards, seed, True, 0, k, parts=parts, part_shards=law)
    total = shards * per_shard
    shard, sample = order.locate(np.arange(total, 2 * total, dtype=np.int64))
    out: I64 = shard * per_shard + sample
    return out


def py1e(shards: int, per_shard: int, seed: int, nodes: int, block: int) -> I64:
    sys.path.insert(0, os.path.join(HERE, "peers"))
    sys.path.insert(0, HERE)
    from peers.mosaic_streaming import streaming_base

    streaming_base()
    get_partitions = importlib.import_module("streaming.base.partition").get_partitions
    get_shuffle = importlib.import_module("streaming.base.shuffle").get_shuffle

    sizes = np.full(shards, per_shard, dtype=np.int64)
    ids = get_shuffle("py1e", sizes, nodes, seed, 0, block)
    total = shards * per_shard
    where = get_partitions("orig", total, nodes, 1, 1, 1, 64, 0).reshape(-1)
    out: I64 = ids[where[where >= 0]].astype(np.int64)
    return out


def _chi2(observed: npt.NDArray[np.float64], expected: Any) -> float:
    return float(((observed - expected) ** 2 / expected).sum())


def stats(orders: list[I64], shards: int, per_shard: int) -> dict[str, float]:
    """The statistics of each seed's order, then their mean and standard error over seeds.

    Each chi-square is one seed's: pooling the counts of all seeds into one table, as
    ``shuffle_quality.py`` does for permutations, weighs an order's fixed structure (its
    rotation through parts) more the more seeds there are, so its figure moved by a fifth
    from one batch of 20 seeds to the next here; a mean over seeds with its standard error
    says how far apart two rows really are.
    """
    n = shards * per_shard
    position = np.arange(n) * 32 // n
    expected = np.outer(np.bincount(position), np.bincount(position)) / n
    per: dict[str, list[float]] = {"positional": [], "lag1": [], "corr": [], "held": []}
    distinct = []
    for order in orders:
        assert sorted(order.tolist()) == list(range(n))
        positional = np.zeros((32, 32))
        np.add.at(positional, (position, order * 32 // n), 1)
        per["positional"].append(_chi2(positional, expected))
        bucket = order * 16 // n
        lag = np.zeros((16, 16))
        np.add.at(lag, (bucket[:-1], bucket[1:]), 1)
        per["lag1"].append(_chi2(lag, lag.sum() / 256))
        per["corr"].append(float(np.corrcoef(order[:-1], order[1:])[0, 1]))
        shard = order // per_shard
        first = np.full(shards, n)
        last = np.zeros(shards, dtype=np.int64)
        np.minimum.at(first, shard, np.arange(n))
        np.maximum.at(last, shard, np.arange(n))
        per["held"].append(float((last - first + 1).sum()) / n)
        batches = shard[: n // 64 * 64].reshape(-1, 64)
        distinct.append(np.mean([len(set(b.tolist())) for b in batches]))
    out = {"distinct": float(np.mean(distinct))}
    for name, values in per.items():
        out[name] = float(np.mean(values))
        out[f"{name}_se"] = float(np.std(values, ddof=1) / np.sqrt(len(values)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds (CI)")
    parser.add_argument("--mosaic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mosaic:  # in .venv-mosaic: print py1e's orders
        spec = json.loads(args.mosaic)
        orders = [
            py1e(spec["shards"], spec["per_shard"], seed, spec["nodes"], spec["block"]).tolist()
            for seed in range(spec["seeds"])
        ]
        print(json.dumps(orders))
        return
    shards, per_shard = 128, 500
    seeds = 3 if args.quick else 100
    rows: list[tuple[str, list[I64]]] = []
    for parts, k in ((64, 2), (64, 4), (16, 4), (16, 8)):
        for law in ("run", "epoch"):
            name = f"ours, parts={parts}, shuffle_block_shards={k}"
            rows.append(
                (
                    name if law == "run" else f"{name}, earlier law (part_shards=epoch)",
                    [ours(shards, per_shard, seed, parts, k, law) for seed in range(seeds)],
                )
            )
    if os.path.exists(MOSAIC_STAMP):
        for nodes, block in ((64, 1000), (64, 2000), (16, 4000), (16, 8000)):
            spec = {"shards": shards, "per_shard": per_shard, "nodes": nodes, "block": block}
            done = subprocess.run(
                [MOSAIC, __file__, "--mosaic", json.dumps({**spec, "seeds": seeds})],
                capture_output=True,
                text=True,
                timeout=900,
                check=True,
            )
            orders = [np.asarray(o, dtype=np.int64) for o in json.loads(done.stdout)]
            rows.append((f"Mosaic py1e, {nodes} canonical nodes, block {block}", orders))
    else:
        print("# .venv-mosaic is absent (make mosaic): Mosaic's rows are left out")
    print(f"# {shards} shards of {per_shard} samples, one rank, {seeds} seeds")
    print(
        "| order | shards held at once | distinct shards per batch of 64 |"
        " positional chi2 (~961) | lag-1 chi2 (~225) | adjacent corr. (0) |"
    )
    print("|---|---|---|---|---|---|")
    for name, orders in rows:
        s: dict[str, Any] = stats(orders, shards, per_shard)
        print(
            f"| {name} | {s['held']:.1f} | {s['distinct']:.1f}"
            f" | {s['positional']:,.0f} ± {s['positional_se']:,.0f}"
            f" | {s['lag1']:,.0f} ± {s['lag1_se']:,.0f} | {s['corr']:+.4f} ± {s['corr_se']:.4f} |"
        )


if __name__ == "__main__":
    main()
