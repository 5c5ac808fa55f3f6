"""A 1,024-GPU plan beside Mosaic's and litdata's assignment rules, computed from their code.

Run ``python benchmarks/plan_rules.py`` (about a minute). The cluster is docs/plan.md's:
128 nodes of 8 ranks, 8 DataLoader workers a rank, 1e5 synthetic shards of about 256 MiB
(``SyntheticShards(100_000, 256 << 20, 1000, spread=0.2)``, 1e8 samples), 10 epochs,
$0.09 per GB. The peers are not run: their rules are re-stated here from their code, on the
same shard sizes, and only the rule that says which shards a node reads is computed (a node
downloads every shard it reads whole, once, with the caches at their defaults):

- Mosaic streaming, ``streaming/base/shuffle/py1e.py`` ``get_shuffle_py1e`` (the default
  ``shuffle_algo``): one shard order for the run (``np.random.default_rng(seed)``), cut
  into ``num_canonical_nodes`` sample ranges, fixed across epochs (only the order inside a
  range changes); ``streaming/base/partition/orig.py`` ``get_partitions_orig``: canonical
  node ``c`` holds samples ``[c N // C, (c + 1) N // C)``, and with ``C`` equal to the
  physical nodes (``StreamingDataset``'s default for py1e) node ``n`` is canonical node
  ``n``. ``cache_limit`` defaults to none: epoch 2 on downloads nothing.
- litdata 0.2.76, ``src/litdata/streaming/shuffle.py``
  ``FullShuffle.get_chunks_and_intervals_per_workers`` with more than one node: epoch 1's
  chunk order is ``RandomState([seed, 1])``'s permutation (``_global_assign``), then
  ``src/litdata/utilities/shuffle.py``
  ``_associate_chunks_and_intervals_to_workers``: each rank takes, in that order,
  ``(N // batch_size) // W`` batches of items (the last rank the rest), spread over its
  workers, so node ``n`` reads a contiguous run of it. ``max_cache_size`` defaults to
  ``"100GB"`` (``StreamingDataset.__init__``), below what a node reads here: the node's
  share does not fit, so each later epoch is assigned anew (``seed_shift`` the epoch), and at
  least the node's share less 100 GB is downloaded again each epoch (a lower bound; the
  exact figure depends on its eviction order, not computed here).

tests/webdataset/test_wds_plan_peers.py runs the peers' own code on small clusters and
checks that :func:`mosaic_sets` and :func:`litdata_sets` give the shards it assigns.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from detsamplers.loader import Network, SyntheticShards, plan_run

NODES, PER_NODE, WORKERS, BATCH, EPOCHS, PARTS = 128, 8, 8, 32, 10, 8192
PRICE = 0.09


def contiguous_rule(counts: np.ndarray, order: np.ndarray, cuts: np.ndarray) -> list[np.ndarray]:
    """Per node, the shards of ``order`` whose samples meet ``[cuts[n], cuts[n + 1])``."""
    starts = np.concatenate([[0], np.cumsum(counts[order])])
    out = []
    for low, high in itertools.pairwise(cuts):
        first = np.searchsorted(starts, low, side="right") - 1
        last = np.searchsorted(starts, high - 1, side="right") - 1
        out.append(order[first : last + 1])
    return out


def mosaic_sets(counts: np.ndarray, nodes: int, seed: int = 9176) -> list[np.ndarray]:
    """Each node's shards under Mosaic's py1e order and orig partition (its default seed)."""
    order = np.arange(len(counts))
    np.random.default_rng(seed).shuffle(order)
    total = int(counts.sum())
    return contiguous_rule(counts, order, np.arange(nodes + 1) * total // nodes)


def litdata_sets(
    counts: np.ndarray, nodes: int, per_node: int, batch: int, seed: int = 42
) -> list[np.ndarray]:
    """Each node's chunks in litdata's first epoch with more than one node (its default seed)."""
    order = np.random.RandomState([seed, 1]).permutation(len(counts))
    total = int(counts.sum())
    per_rank = (total // batch) // (nodes * per_node) * batch
    cuts = np.arange(nodes + 1) * per_rank * per_node
    cuts[-1] = total
    return contiguous_rule(counts, order, cuts)


def figures(name: str, sets: list[np.ndarray], sizes: np.ndarray, later: str) -> None:
    egress = sum(int(sizes[s].sum()) for s in sets)
    cache = max(int(sizes[s].sum()) for s in sets)
    total = int(sizes.sum())
    print(
        f"| {name} | {egress / total:.4f}x | {later} | {cache / 1e9:.1f} GB | "
        f"${egress / 1e9 * PRICE:,.0f} (epoch 1, egress only) |"
    )


def main() -> None:
    source = SyntheticShards(100_000, 256 << 20, 1000, spread=0.2).sizes()
    sizes, counts = source.sizes, source.counts
    network = Network(bandwidth=12.5e9, rtt=0.02, price_per_gb=PRICE, price_per_1000_gets=0.0004)
    began = time.perf_counter()
    plan = plan_run(
        synthetic=SyntheticShards(100_000, 256 << 20, 1000, spread=0.2), nodes=NODES,
        ranks_per_node=PER_NODE, num_workers=WORKERS, batch_size=BATCH, parts=PARTS,
        epochs=EPOCHS, network=network,
    )  # fmt: skip
    took = time.perf_counter() - began
    totals = plan.as_dict()["totals"]
    ratios = totals["egress_over_dataset"]
    print(f"plan_run: {took:.1f} s")
    print("| rule | epoch 1 egress | epochs 2-10 | cache per node | cost |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| detsamplers, parts={PARTS} | {ratios[0]:.4f}x | {sum(ratios[1:]):.4f}x in all | "
        f"{totals['cache_needed'] / 1e9:.1f} GB | ${totals['cost']:,.0f} (10 epochs, GETs too) |"
    )
    figures("Mosaic py1e", mosaic_sets(counts, NODES), sizes, "0x")
    sets = litdata_sets(counts, NODES, PER_NODE, BATCH)
    share = max(int(sizes[s].sum()) for s in sets)
    floor = sum(max(0, int(sizes[s].sum()) - 100 * 10**9) for s in sets) / int(sizes.sum())
    figures("litdata FullShuffle", sets, sizes, f">= {floor:.2f}x each (100 GB cache)")
    print(f"litdata: largest node share {share / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
