"""Samples/s of detsamplers.loader against a plain torch DataLoader (issue 3's figure).

Run ``python benchmarks/loader_table.py`` (N = 1e6; or ``--quick`` for CI, N = 1e5,
under 30 s). Both loaders read the same trivial map-style dataset (``__getitem__`` returns
its index) with batch size 32 and torch's default collate. Ours is
``get_data_loader(repeat=True)`` with ``shuffle=True`` (a keyed permutation plus per-batch
seeding of torch, numpy and random; with workers, small batches come back by value);
torch's is ``DataLoader(shuffle=True)``.

Each run times one epoch from ``iter()`` to its last batch: torch draws its whole
permutation (``randperm(N).tolist()``, about 1.3 us a batch here) when the first batch is
asked for, and workers start then too, so leaving the first batch out would leave that
work out. The "after the first batch" columns leave it out anyway, for comparison with
older figures. The table gives the median of several runs, alternating which loader goes
first. Epochs of only a few hundred batches understate detsamplers: its first blocks of
indices are small (a quick first batch after a seek), about 1 ms in all before the blocks
reach full size, paid once per ``iter()`` of the endless training stream, not per epoch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from itertools import islice
from typing import Any

import torch.utils.data as tud
from _common import Trivial

from detsamplers.loader import DataLoader


def epoch_rates(loader: Any, batches: int, batch_size: int) -> tuple[float, float]:
    """Samples/s over ``batches`` batches from ``iter()``, and after the first batch."""
    start = time.perf_counter()
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter()
    # Count what arrived: a loader that ends early must not be credited with more.
    done = 1 + sum(1 for _ in islice(iterator, batches - 1))
    end = time.perf_counter()
    return done * batch_size / (end - start), (done - 1) * batch_size / (end - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a shorter epoch, fewer runs (CI)")
    args = parser.parse_args()
    batch_size = 32
    length, runs = (100_000, 3) if args.quick else (1_000_000, 5)
    batches = length // batch_size
    dataset = Trivial(length)
    print(f"N={length:,}, B={batch_size}: one epoch ({batches:,} batches) a run, median of {runs}")
    print(
        f"{'num_workers':>11}  {'torch (samples/s)':>18}  {'detsamplers':>12}  {'ratio':>5}"
        f"  {'after the first batch: torch':>28}  {'detsamplers':>12}  {'ratio':>5}"
    )
    for workers in (0, 2):
        theirs_rates: list[tuple[float, float]] = []
        ours_rates: list[tuple[float, float]] = []
        for run in range(runs):
            ours = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
            loaders = {
                "torch": tud.DataLoader(
                    dataset, batch_size=batch_size, shuffle=True, num_workers=workers
                ),
                "ours": ours.get_data_loader(repeat=True),
            }
            order = ["torch", "ours"] if run % 2 == 0 else ["ours", "torch"]
            for name in order:
                result = epoch_rates(loaders[name], batches, batch_size)
                (theirs_rates if name == "torch" else ours_rates).append(result)
        base = [statistics.median(r[i] for r in theirs_rates) for i in (0, 1)]
        mine = [statistics.median(r[i] for r in ours_rates) for i in (0, 1)]
        print(
            f"{workers:>11}  {base[0]:>18,.0f}  {mine[0]:>12,.0f}  {mine[0] / base[0]:>4.2f}x"
            f"  {base[1]:>28,.0f}  {mine[1]:>12,.0f}  {mine[1] / base[1]:>4.2f}x"
        )


if __name__ == "__main__":
    main()
