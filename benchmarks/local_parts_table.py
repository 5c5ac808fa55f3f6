"""Local shards read in the plain order against rank-local parts: why ``parts`` is no default.

How to run (from the repository root)::

    .venv/bin/python benchmarks/local_parts_table.py --quick   # ~20 s; `make bench-quick`
    .venv/bin/python benchmarks/local_parts_table.py

NOTE [ parts chosen at load ]: the default order is the plain one for local and remote
shards alike. This measures what the other choice, parts for every storage, would cost a
local reader: ``S`` shards of ``c`` samples of 1 KB (full: 64 x 1,500 and 1,000 x 100;
quick: 16 x 400) written to a temporary folder, one epoch read by ``WebDatasetSource(...,
batch_size=64, decode=(), collate_fn=len, repeat=False)`` in the main process, with
``parts=0`` and ``parts=720`` (``parts=24`` too in full mode) in alternating rounds; the
median samples/s of each, and its ratio to the plain order. With parts a batch draws each
sample from another part, so samples are read one by one rather than in runs of a shard.

Figures are measured on a shared machine: the load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import webdataset as wds
from harness.machine import load_average

from detsamplers.loader import WebDatasetSource


def write(folder: Path, shards: int, per_shard: int) -> str:
    """``shards`` tar shards of ``per_shard`` samples of 1 KB; their brace pattern."""
    folder.mkdir(parents=True)
    count = 0
    for shard in range(shards):
        with wds.TarWriter(str(folder / f"s-{shard:04d}.tar")) as sink:
            for _ in range(per_shard):
                sink.write({"__key__": f"k{count:07d}", "cls": count, "bin": os.urandom(1000)})
                count += 1
    return str(folder / f"s-{{0000..{shards - 1:04d}}}.tar")


def epoch(urls: str, parts: int) -> float:
    """Samples/s of one epoch's read with ``parts``."""
    source = WebDatasetSource(
        urls, seed=0, batch_size=64, decode=(), collate_fn=len, repeat=False, parts=parts
    )
    start = time.perf_counter()
    samples = sum(source)
    return samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one small set, 2 rounds")
    args = parser.parse_args()
    sets = [(16, 400)] if args.quick else [(64, 1500), (1000, 100)]
    laws = [0, 720] if args.quick else [0, 24, 720]
    rounds = 2 if args.quick else 3
    print(f"load average at start: {load_average()}")
    print("| shards x samples | parts | samples/s (median) | against parts=0 |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for shards, per_shard in sets:
            urls = write(Path(tmp) / f"{shards}x{per_shard}", shards, per_shard)
            epoch(urls, 0)  # warm the page cache and the index files
            rates: dict[int, list[float]] = {parts: [] for parts in laws}
            for _ in range(rounds):
                for parts in laws:
                    rates[parts].append(epoch(urls, parts))
            base = statistics.median(rates[0])
            for parts in laws:
                median = statistics.median(rates[parts])
                print(
                    f"| {shards} x {per_shard:,} | {parts} | {median:,.0f} | {median / base:.2f}x |"
                )
    print(f"load average at end: {load_average()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
