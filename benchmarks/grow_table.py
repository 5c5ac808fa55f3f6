"""The cost of growth: indices/s and seek time of a grown shuffle against a plain one.

Run ``python benchmarks/grow_table.py`` (N = 1e6 final records; or ``--quick`` for CI, N =
1e5, a few seconds). Each chain is shuffle → repeat → shard → batch (32) → skip, rank 0.

a. Per-rank indices/s reading ``N`` positions of the stream, build included; the rows of
   one world size alternate in order (pairs), median of the runs, and the ratio to *plain*:

   - *plain*: ``ReproducibleShuffleSampler`` over the final ``N`` records, from position
     ``N`` (its pass 1);
   - *growing pass*: ``GrowingShuffleSampler`` grown from ``N/2`` to ``N`` at position
     ``N/4`` (a quarter of pass 0 read), read from the growth on: every position goes
     through the second permutation, and two thirds of them through the first too;
   - *3 growths in the pass*: grown at ``N/8``, ``N/4`` and ``3N/8`` (from ``N/2`` to
     ``2N/3``, ``5N/6``, ``N``), read from the last growth on (up to four permutations
     a position);
   - *after growth*: the grown shuffle of the second row, in a later pass (an ordinary
     pass of ``N`` plus a bisection over the eras).

b. Time to the first batch after a seek to global position 1e12 of 1e9 records, build
   included, median of 9 fresh chains: plain, and with 10 and 1,000 growths of 1e6
   records each recorded, one every 1e8 positions (the history is validated and laid out
   once at build, O(G); a block then bisects it, O(log G)).

The load average is printed with the figures: the machine is shared, so compare the
ratios within a table, not the absolute figures between runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import torch.utils.data as tud
from _common import BATCH, load_average

import detsamplers as ds

SEED = 0
SEEK = 10**12


def chain(shuffle: Any, world: int, skip: int) -> Iterable[list[int]]:
    shard = ds.DistributedSampler(ds.RepeatSampler(shuffle), num_workers=world, rank=0)
    return ds.SkipBatchSampler(tud.BatchSampler(shard, BATCH, drop_last=False), skip)


def grown(final: int, initial: int, growth: list[tuple[int, int]]) -> Any:
    return ds.GrowingShuffleSampler(range(final), SEED, initial_length=initial, growth=growth)


def rows(n: int) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each row's shuffle builder and its first global position."""
    half = n // 2
    three = [(n // 8, n // 2 + n // 6), (n // 4, n // 2 + n // 3), (3 * n // 8, n)]
    return {
        "plain": (lambda: ds.ReproducibleShuffleSampler(range(n), SEED), n),
        "growing pass": (lambda: grown(n, half, [(n // 4, n)]), n // 4),
        "3 growths in the pass": (lambda: grown(n, half, three), 3 * n // 8),
        "after growth": (lambda: grown(n, half, [(n // 4, n)]), 2 * n),
    }


def indices_per_second(build: Callable[[], Any], start: int, world: int, n: int) -> float:
    began = time.perf_counter()
    batches = chain(build(), world, start // (BATCH * world))
    count = sum(len(b) for b in islice(batches, n // (BATCH * world)))
    return count / (time.perf_counter() - began)


def seek_ms(build: Callable[[], Any]) -> float:
    began = time.perf_counter()
    next(iter(chain(build(), 8, SEEK // (BATCH * 8))))
    return (time.perf_counter() - began) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 1e5, fewer runs (CI)")
    args = parser.parse_args()
    n, runs = (100_000, 3) if args.quick else (1_000_000, 7)
    print(f"load average at start: {load_average()}")
    print(f"a. indices/s per rank, N={n:,} final records, B={BATCH}, median of {runs} pairs")
    print(f"{'W':>3}  {'row':<24}  {'M indices/s':>11}  {'vs plain':>8}")
    table = rows(n)
    for world in (1, 4):
        figures: dict[str, list[float]] = {name: [] for name in table}
        for run in range(runs):
            order = list(table.items())
            for name, (build, start) in order if run % 2 == 0 else order[::-1]:
                figures[name].append(indices_per_second(build, start, world, n))
        base = statistics.median(figures["plain"])
        for name, values in figures.items():
            median = statistics.median(values)
            print(f"{world:>3}  {name:<24}  {median / 1e6:>11.2f}  {median / base:>7.2f}x")
    billion, step = 10**9, 10**6
    history = [(i * 10**8, billion + i * step) for i in range(1, 1001)]
    seeks = {
        "plain": lambda: ds.ReproducibleShuffleSampler(range(billion + 1000 * step), SEED),
        "10 growths": lambda: grown(billion + 10 * step, billion, history[:10]),
        "1,000 growths": lambda: grown(billion + 1000 * step, billion, history),
    }
    print()
    print("b. first batch after a seek to position 1e12 (W=8), ms, median of 9")
    times: dict[str, list[float]] = {name: [] for name in seeks}
    for run in range(9):
        for name, build in seeks.items() if run % 2 == 0 else list(seeks.items())[::-1]:
            times[name].append(seek_ms(build))
    for name, values in times.items():
        print(f"     {name:<24}  {statistics.median(values):>8.2f} ms")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
