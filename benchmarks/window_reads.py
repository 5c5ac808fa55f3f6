"""Bytes read per epoch and samples/s of local shards, in tar order and with ``shuffle_window``.

Run ``python benchmarks/window_reads.py`` (or ``--quick`` for CI, about 30 s). It writes
16 shards of 2,000 samples (``--quick``: 8 of 500), each sample 2 to 8 KB of random bytes
and a label, into a temporary folder, then reads whole epochs of a ``WebDatasetSource``
(batch size 64, ``decode=()``, ``collate_fn=len``, ``repeat=False``, ``num_workers=0``)
with ``shuffle_window`` 0 (tar order), 16, 256 and 2,000. A window shuffles the samples
inside runs of that many consecutive samples of a shard, so an epoch should still read
each shard's bytes about once: the table gives the bytes the process read per epoch
(``rchar`` of ``/proc/self/io``, Linux: files and pipes, page-cache hits included)
beside the shards' size, and the samples/s. One warm-up epoch first (the index scan);
then the median of several epochs, the windows taken in turn.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from detsamplers.loader import ShardWriter, WebDatasetSource

WINDOWS = (0, 16, 256, 2000)


def write_shards(folder: Path, shards: int, per_shard: int) -> str:
    """``shards`` tar files of ``per_shard`` samples of 2-8 KB; their brace URL."""
    rng = random.Random(0)
    with ShardWriter(str(folder / "s-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i in range(shards * per_shard):
            sink.write({"__key__": f"{i:08d}", "bin": rng.randbytes(rng.randint(2048, 8192)),
                        "cls": str(i % 10).encode()})  # fmt: skip
    return str(folder / f"s-{{000000..{shards - 1:06d}}}.tar")


def read_bytes() -> int:
    """What this process has read so far (``rchar``), or -1 where /proc has no io file."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("rchar"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def epoch(urls: str, window: int) -> tuple[int, float, int]:
    """Samples, seconds and bytes read of one epoch."""
    source = WebDatasetSource(urls, seed=0, batch_size=64, decode=(), collate_fn=len,
                              repeat=False, shuffle_window=window)  # fmt: skip
    before, start = read_bytes(), time.perf_counter()
    samples = sum(source)
    return samples, time.perf_counter() - start, read_bytes() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, smaller shards (CI)")
    args = parser.parse_args()
    shards, per_shard, runs = (8, 500, 3) if args.quick else (16, 2000, 5)
    with tempfile.TemporaryDirectory() as folder:
        urls = write_shards(Path(folder), shards, per_shard)
        size = sum(p.stat().st_size for p in Path(folder).glob("*.tar"))
        total = shards * per_shard
        print(f"{shards} shards, {total:,} samples, {size / 1e6:.1f} MB; median of {runs} epochs;"
              f" load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(
            f"{'shuffle_window':>14}  {'samples/s':>10}  {'MB read an epoch':>16}  {'x shards':>8}"
        )
        epoch(urls, 0)  # the index scan, once
        results: dict[int, list[tuple[int, float, int]]] = {w: [] for w in WINDOWS}
        for _ in range(runs):
            for window in WINDOWS:
                results[window].append(epoch(urls, window))
        for window in WINDOWS:
            done = results[window]
            if any(n != total for n, _, _ in done):
                raise RuntimeError(f"shuffle_window={window} read {done[0][0]} of {total}")
            rate = statistics.median(n / s for n, s, _ in done)
            read = statistics.median(b for _, _, b in done)
            print(f"{window:>14}  {rate:>10,.0f}  {read / 1e6:>16.1f}  {read / size:>8.2f}")


if __name__ == "__main__":
    main()
