"""Samples/s of detsamplers.loader against a plain torch DataLoader (issue 3's figure).

Run ``python benchmarks/loader_table.py`` (or ``--quick`` for CI, under 30 s). Both
loaders read the same trivial map-style dataset (``__getitem__`` returns its index) with
batch size 32 and torch's default collate; ours is ``get_data_loader(repeat=True)`` with
``shuffle=True`` (a keyed permutation plus per-batch seeding of torch, numpy and random),
torch's is ``DataLoader(shuffle=True)``. The table gives the median of several timed runs.
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


def rate(loader: Any, batches: int, batch_size: int) -> float:
    iterator = iter(loader)
    next(iterator)  # exclude worker start-up
    start = time.perf_counter()
    # Count what arrived: a finite loader (torch's, past one epoch) would stop early.
    done = sum(1 for _ in islice(iterator, batches))
    return done * batch_size / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer batches and runs (CI)")
    args = parser.parse_args()
    batch_size, length = 32, 1_000_000
    batches, runs = (300, 3) if args.quick else (3000, 5)
    dataset = Trivial(length)
    print(f"B={batch_size}, {batches} batches per run, median of {runs} runs")
    print(f"{'num_workers':>11}  {'torch (samples/s)':>18}  {'detsamplers (samples/s)':>23}  ratio")
    for workers in (0, 2):
        ours_rates, torch_rates = [], []
        for _ in range(runs):
            ours = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
            theirs = tud.DataLoader(
                dataset, batch_size=batch_size, shuffle=True, num_workers=workers
            )
            torch_rates.append(rate(theirs, batches, batch_size))
            ours_rates.append(rate(ours.get_data_loader(repeat=True), batches, batch_size))
        base, mine = statistics.median(torch_rates), statistics.median(ours_rates)
        print(f"{workers:>11}  {base:>18,.0f}  {mine:>23,.0f}  {mine / base:.2f}x")


if __name__ == "__main__":
    main()
