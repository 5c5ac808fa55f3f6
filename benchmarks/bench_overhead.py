"""The cost of ``python -m detsamplers bench``'s measurement against benchmarks/' own loop.

``bench`` times a cell with :func:`detsamplers._cli_bench.measure`; the scripts here time
with ``harness.timing.drain`` (a bare ``for`` that adds ``len(batch)``). On the same
pipelines, in alternating rounds, this prints both rates in samples per CPU second of
this process (the machine is shared: wall time varies more between rounds than the
effect measured) and the overhead of ``measure`` (the median of the per-round ratios,
with the lowest and highest):

1. detsamplers' training chain, rank 0 of 4, batches of 32 over 1e6 records;
2. ``detsamplers.loader.DataLoader`` over a trivial dataset, ``num_workers=0``, batches
   of 32.

    python benchmarks/bench_overhead.py           # 15 rounds
    python benchmarks/bench_overhead.py --quick   # 3 rounds
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from _common import BATCH, Trivial, ds_chain, load_average, usable_cpus
from harness.timing import drain

from detsamplers._cli_bench import measure
from detsamplers.loader import DataLoader


def harness_rate(make: Callable[[], Iterable[Any]], batches: int) -> float:
    cpu = time.process_time()
    done = drain(make(), batches * BATCH, time.perf_counter() + 60.0)
    return done / (time.process_time() - cpu)


def bench_rate(make: Callable[[], Iterable[Any]], batches: int) -> float:
    cpu = time.process_time()
    row = measure(make, batches - 1)  # the batches after the first, and the first
    samples = int(row["samples"]) + int(row["first_records"])
    return samples / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter cells")
    args = parser.parse_args()
    rounds = 3 if args.quick else 15
    loader = DataLoader(Trivial(1_000_000), batch_size=BATCH, shuffle=True)
    cases: list[tuple[str, Callable[[], Iterable[Any]], int]] = [
        ("chain, rank 0 of 4, N=1e6", lambda: ds_chain(1_000_000, 4), 200_000),
        ("DataLoader, num_workers=0", lambda: loader.get_data_loader(repeat=True), 20_000),
    ]
    if args.quick:
        cases = [(name, make, batches // 20) for name, make, batches in cases]
    print(f"bench's measure() against benchmarks/' drain(), {rounds} alternating rounds; "
          f"{usable_cpus()} cpus, load average {load_average()}")  # fmt: skip
    print(f"{'pipeline':<28} {'drain (samples/cpu s)':>22} {'measure':>12} {'overhead':>9}  range")
    for name, make, batches in cases:
        ours, theirs, ratios = [], [], []
        for _ in range(rounds):
            a = harness_rate(make, batches)
            b = bench_rate(make, batches)
            theirs.append(a)
            ours.append(b)
            ratios.append(1 - b / a)
        spread = f"{min(ratios):+.1%} .. {max(ratios):+.1%}"
        print(f"{name:<28} {statistics.median(theirs):>22,.0f} {statistics.median(ours):>12,.0f} "
              f"{statistics.median(ratios):>+8.1%}  {spread}")  # fmt: skip


if __name__ == "__main__":
    main()
