"""WebDatasetMix against a single WebDatasetSource on the same local shards (issue 14).

Run ``python benchmarks/webdataset_mix_table.py`` (or ``--quick`` for CI, a few seconds).
It writes two shard sets once with ``webdataset.ShardWriter`` (full mode: 20 and 10
shards of 2,000 samples of a tiny PNG plus a label), then measures:

1. samples/s of ``N`` samples (``N`` the two sets' total), decoding with webdataset's
   default decoder, mapping each sample to ``(png bytes, label)`` and batching 64: a
   ``WebDatasetSource`` over all the shards of both sets, a 2-way ``WebDatasetMix`` of the
   sets with weights ``[0.7, 0.3]``, and the same mixture reading through one shared
   shard reader (what it would cost without a reader per set); in the main process and
   with 2 DataLoader workers. The cells of one row run in alternation, ``runs`` times;
   each ratio is the median of the paired ratios.
2. the time to resume mid epoch 3 (position ``2.5 N``): build the source, load the state
   and yield the first batch, median of ``runs``.
3. the pickled size of the mixture after a few batches (what a ``spawn`` DataLoader worker
   receives), with its window of 10 and with ``window=1024``: as pickled now, without the
   mixture's arrangement tables, and with them (each segment's whole ``__dict__``, as it
   was pickled before); then the time of the first batch of the unpickled copy, which
   rebuilds the arrangements it uses, against the next batch of the original, median of
   ``runs``; and the pickled size of the single source after as many batches (its shard
   index is what both carry).
4. the CPU time of ``state_dict()`` after each batch (what a loader that saves its state
   per batch pays, and a checkpoint every step) with ``parts`` of 8, 64 and 720: the
   single source against the mixture, whose ``mixture`` progress sums every lane's
   counts (NOTE [ mixture lanes ]); ``time.process_time`` over the batches of ``runs``
   rounds that alternate the two, median per call.

The 1-minute load average is printed before and after: read the rates as ratios.
"""

from __future__ import annotations

import argparse
import copyreg
import io
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from itertools import islice
from typing import Any

import webdataset as wds
from harness.machine import load_average
from harness.samples import PNG

from detsamplers._mix import _Segment
from detsamplers.loader import WebDataLoader, WebDatasetMix, WebDatasetSource
from detsamplers.loader._wds.read._shard_reader import ShardReader

BATCH = 64
WEIGHTS = [0.7, 0.3]


def to_pair(sample: dict[str, Any]) -> tuple[bytes, int]:
    return sample["png"], int(sample["cls"])


def write(folder: str, name: str, shards: int, per_shard: int) -> list[str]:
    pattern = os.path.join(folder, f"{name}-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i in range(shards * per_shard):
            sink.write({"__key__": f"{name}{i:08d}", "png": PNG, "cls": i})
    return [os.path.join(folder, f"{name}-{s:06d}.tar") for s in range(shards)]


OPTIONS: dict[str, Any] = {"seed": 0, "batch_size": BATCH, "decode": (), "map": to_pair}


class SharedReaderMix(WebDatasetMix):
    """The mixture reading every set through one reader: one open shard for all sets."""

    def _reader(self) -> ShardReader:
        return ShardReader(self.shards, self.remote)


def rate(make: Callable[[], WebDatasetSource], workers: int, total: int) -> float:
    start = time.perf_counter()
    source = make()
    batches: Any = WebDataLoader(source, num_workers=workers) if workers else source
    seen = sum(len(batch[1]) for batch in islice(batches, total // BATCH))
    assert seen == total // BATCH * BATCH, seen
    return seen / (time.perf_counter() - start)


def resume_time(make: Callable[[], WebDatasetSource], position: int, runs: int) -> float:
    state = {**make().state_dict(), "position": position}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        source = make()
        source.load_state_dict(state)
        next(iter(source))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class _WithTables(pickle.Pickler):
    """Pickles each mixture segment with its whole ``__dict__``, tables included."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _Segment):
            return copyreg.__newobj__, (_Segment,), obj.__dict__  # type: ignore[attr-defined]
        return NotImplemented


def pickle_sizes(make: Callable[[], WebDatasetSource], runs: int) -> str:
    """Pickled bytes without and with the tables; the unpickled copy's first batch time."""
    source = make()
    for batch in range(3):
        source.batch_at(batch)
    data = pickle.dumps(source)
    buffer = io.BytesIO()
    _WithTables(buffer).dump(source)
    first, again = [], []
    for i in range(runs):
        copy = pickle.loads(data)
        start = time.perf_counter()
        copy.batch_at(3 + i)
        first.append(time.perf_counter() - start)
        start = time.perf_counter()
        source.batch_at(3 + i)
        again.append(time.perf_counter() - start)
    return (
        f"{len(data) / 1e3:,.1f} kB (with the tables {buffer.tell() / 1e6:,.2f} MB); "
        f"first batch unpickled {statistics.median(first) * 1000:.2f} ms, "
        f"original {statistics.median(again) * 1000:.2f} ms"
    )


def state_cost(make: Callable[[], WebDatasetSource], batches: int) -> list[float]:
    """CPU seconds of ``state_dict()`` after each of ``batches`` batches of a fresh source."""
    source, times = make(), []
    for _ in islice(source, batches):
        start = time.process_time()
        source.state_dict()
        times.append(time.process_time() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples and runs (CI)")
    args = parser.parse_args()
    shards, per_shard, runs = ((4, 2), 250, 1) if args.quick else ((20, 10), 2000, 5)
    batches = 20 if args.quick else 200
    with tempfile.TemporaryDirectory() as folder:
        sets = [write(folder, name, n, per_shard) for name, n in zip("ab", shards, strict=True)]
        total = sum(shards) * per_shard
        makers: dict[str, Callable[[], WebDatasetSource]] = {
            "single": lambda: WebDatasetSource(sets[0] + sets[1], **OPTIONS),
            "mix": lambda: WebDatasetMix(sets, WEIGHTS, **OPTIONS),
            "mix, 1 reader": lambda: SharedReaderMix(sets, WEIGHTS, **OPTIONS),
        }
        for make in makers.values():
            make()  # index the shards once
        print(
            f"{sys.platform}, {os.cpu_count()} CPUs, load {load_average()} at the start; "
            f"sets of {shards[0]} and {shards[1]} shards of {per_shard:,} samples, "
            f"weights {WEIGHTS}, batch {BATCH}, {runs} paired runs"
        )
        print(
            f"{'num_workers':>11}  {'single (samples/s)':>18}  {'mix':>9}  {'mix/single':>10}"
            f"  {'mix, 1 reader':>13}  {'1 reader/mix':>12}"
        )
        for workers in (0, 2):
            cells: dict[str, list[float]] = {name: [] for name in makers}
            for _ in range(runs):
                for name, make in makers.items():
                    cells[name].append(rate(make, workers, total))
            single, mixed, shared = (cells[name] for name in makers)
            ratio = statistics.median(m / s for m, s in zip(mixed, single, strict=True))
            reader = statistics.median(r / m for r, m in zip(shared, mixed, strict=True))
            print(
                f"{workers:>11}  {statistics.median(single):>18,.0f}  "
                f"{statistics.median(mixed):>9,.0f}  {ratio:>10.2f}  "
                f"{statistics.median(shared):>13,.0f}  {reader:>12.2f}"
            )
        position = 2 * total + total // 2  # mid epoch 3 of the single source
        single_resume = resume_time(makers["single"], position, runs)
        mix_resume = resume_time(makers["mix"], position, runs)
        print(
            f"resume at sample {position:,}, first batch included: single "
            f"{single_resume * 1000:.1f} ms, mix {mix_resume * 1000:.1f} ms"
        )
        one_source = makers["single"]()
        for batch in range(3):
            one_source.batch_at(batch)
        print(f"pickled single source: {len(pickle.dumps(one_source)) / 1e3:,.1f} kB")
        for window in (None, 1024):
            sizes = pickle_sizes(
                partial(WebDatasetMix, sets, WEIGHTS, window=window, **OPTIONS), runs
            )
            print(f"pickled mixture, window {window or 10}: {sizes}")
        print(f"state_dict() after each of {batches} batches, CPU ms per call (median):")
        print(f"{'parts':>7}  {'single':>7}  {'mix':>7}")
        for parts in (8, 64, 720):
            state_makers: dict[str, Callable[[], WebDatasetSource]] = {
                "single": partial(WebDatasetSource, sets[0] + sets[1], parts=parts, **OPTIONS),
                "mix": partial(WebDatasetMix, sets, WEIGHTS, parts=parts, **OPTIONS),
            }
            costs: dict[str, list[float]] = {name: [] for name in state_makers}
            for round_ in range(runs):
                for name in sorted(state_makers, reverse=round_ % 2 == 1):  # alternate
                    costs[name] += state_cost(state_makers[name], batches)
            single_ms, mix_ms = (statistics.median(costs[n]) * 1000 for n in state_makers)
            print(f"{parts:>7}  {single_ms:>7.3f}  {mix_ms:>7.3f}")
        print(f"load average at the end: {load_average()}")


if __name__ == "__main__":
    main()
