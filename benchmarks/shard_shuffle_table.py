"""Cross-shard shuffles of webdataset shards: how well they mix, and what they cost to read.

How to run (from the repository root)::

    .venv/bin/python benchmarks/shard_shuffle_table.py --quick   # ~1 min; `make bench-quick`
    .venv/bin/python benchmarks/shard_shuffle_table.py --mosaic /tmp/mosaic

Mosaic streaming's shuffles (py1e, py1br) are measured when its package files can be found:
in this interpreter, in ``.venv-mosaic`` at the repository root, or in the venv or
site-packages folder given with ``--mosaic`` (``python3 -m venv /tmp/mosaic &&
/tmp/mosaic/bin/pip install --no-deps mosaicml-streaming``: the shuffle modules need only
numpy). Only ``streaming/base/shuffle/py1s.py``, ``py1e.py`` and ``py1br.py`` are loaded,
under empty parent packages, because ``import streaming`` loads its vision module and
torchvision, which fails against the CPU torch here. Otherwise a line says Mosaic is skipped.

a. Quality, on one epoch's global order of ``S`` shards of ``c`` samples (full: 64 x 1,000;
   quick: 16 x 250), sample ids numbered shard after shard, over many seeds:

   - "ours, window w": ``WebDatasetSource(shuffle_window=w)`` (shards permuted, samples
     permuted within windows of ``w`` of one shard; ``w = c``: whole shards);
   - "ours, k shards": ``WebDatasetSource(shuffle_block_shards=k)`` (NOTE [ shard block
     shuffle ]); both through the source's own order (``ShardOrder.locate`` of every
     position, what a batch of one on one rank reads);
   - "webdataset, buffer b": the stages of ``wds.WebDataset(urls, shardshuffle=S,
     seed=s).shuffle(b, seed=s)``, webdataset's own ``filters.shuffle`` over the shard list
     and then over the samples, with the shards' samples expanded in memory instead of read
     from tar files (the script checks once that this gives the real pipeline's order on
     real shards);
   - "Mosaic py1e / py1br, block B": ``get_shuffle_py1e(sizes, 1, seed, 0, B)`` (one
     canonical node: the order one rank with one worker reads), ``B = k c`` samples;
   - "numpy uniform": ``Generator.permutation(S c)``, the reference.

   Columns: the bucketed positional and lag-1 chi-squares and the adjacent-pair correlation
   of ``benchmarks/shuffle_quality.py`` (uniform means: about 961 and 225, and 0); then, over
   the batches of 64 consecutive samples: the share of adjacent pairs from one shard
   ("same-shard", uniform: about ``1 / S``) and the mean number of distinct shards. The
   chi-squares count samples as if they landed independently; a shard's samples move
   together in every shuffle here but numpy's, so over few seeds the positional statistic
   mostly measures that clumping, and the lag-1 statistic how local the order stays.
b. Throughput, local shards (full: 64 x 1,000 tiny PNGs; quick: 8 x 500), batch 64,
   decode and map as in webdataset_table.py, one epoch, main process (and 2 workers in full
   mode), median of alternating runs: tar order (the default, and the ratios' base), the
   window shuffle, the block shuffle, and the real ``wds.WebDataset(...).shuffle(b)``.
   "jumps/sample" counts the reads that are not the next sample of the shard read just
   before (a seek in a file, a new range request over HTTP).
c. Reads alone (``k = 8`` shards of ``c`` samples, each sample read once, no decode): tar
   order and at random within one shard through a ``ShardReader``, and at random among the
   ``k`` shards through the block shuffle's ``ShardReaders`` (``2 k`` open) and through one
   ``ShardReader`` that swaps its open shard at each jump.
d. Over loopback HTTP (``benchmarks/_http_server.py`` in another process, logging each
   range request; full: 8 shards of 500 samples, quick: 4 of 100), one epoch each of tar
   order, the window shuffle and the block shuffle: samples/s, and the range requests and
   shard bytes the server sent per sample.

Figures are measured on a shared machine: the load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import functools
import glob
import importlib
import importlib.metadata
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import webdataset as wds
from harness.machine import machine_info, machine_line
from shuffle_quality import adjacent_correlation, bucketed_chi2, lag1_chi2
from torch.utils.data import default_collate
from webdataset_http_table import served
from webdataset_table import BATCH, ours, rate, to_pair, write

from detsamplers.loader._wds.index._index_shards import index_shards
from detsamplers.loader._wds.index._remote_index import write_index
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read._block_reader import ShardReaders
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions
from detsamplers.loader._wds.remote._urls import expand_urls

I64 = npt.NDArray[np.int64]
Order = Callable[[int, int], I64]  # (n, seed) -> the epoch's sample ids, as shuffle_quality
ROOT = Path(__file__).resolve().parent.parent


# --- the shuffles under test, each a function (seed) -> sample ids of epoch 0 ------------


def ours_order(counts: list[int], **options: int) -> Callable[[int], I64]:
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    total = sum(counts)

    def order(seed: int) -> I64:
        shard_order = ShardOrder(
            counts,
            seed,
            shuffle_shards=True,
            shuffle_window=options.get("window", 0),
            shuffle_block_shards=options.get("blocks", 0),
        )
        shards, samples = shard_order.locate(np.arange(total, dtype=np.int64))
        out: I64 = firsts[shards] + samples
        return out

    return order


def webdataset_order(counts: list[int], buffer: int) -> Callable[[int], I64]:
    """webdataset's shard shuffle and sample buffer shuffle (its filters), samples in memory."""
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()

    def expand(shards: Iterator[dict[str, Any]]) -> Iterator[int]:
        for shard in shards:
            index = int(shard["url"])
            yield from range(firsts[index], firsts[index] + counts[index])

    def order(seed: int) -> I64:
        pipeline = wds.DataPipeline(
            wds.SimpleShardList([str(i) for i in range(len(counts))]),
            wds.filters.shuffle(len(counts), seed=seed),
            expand,
            wds.filters.shuffle(buffer, seed=seed),
        )
        return np.fromiter(pipeline, dtype=np.int64, count=sum(counts))

    return order


def check_webdataset_model(folder: str, buffer: int) -> None:
    """The in-memory stages give the real pipeline's order on real tar shards."""
    counts = [5, 9, 4, 7]
    pattern = os.path.join(folder, "check-%d.tar")
    label = 0
    for shard, n in enumerate(counts):
        with wds.ShardWriter(pattern, maxcount=n, verbose=0, start_shard=shard) as sink:
            for _ in range(n):
                sink.write({"__key__": f"{label:04d}", "cls": label})
                label += 1
    urls = os.path.join(folder, "check-{0..3}.tar")
    real = wds.WebDataset(urls, shardshuffle=len(counts), seed=7, empty_check=False)
    got = [int(s["__key__"]) for s in real.shuffle(buffer, seed=7)]
    expected = webdataset_order(counts, buffer)(7).tolist()
    # The in-memory model names shards "0".."3" where the real list has paths; both are
    # shuffled by a Random(7) over 4 items, so the orders agree.
    assert got == expected, (got, expected)


def find_mosaic(extra: list[str]) -> tuple[dict[str, Any], str]:
    """Mosaic's shuffle functions and a description, or ({}, why not)."""
    folders = []
    spec = importlib.util.find_spec("streaming")  # finds the package, runs nothing
    if spec is not None and spec.submodule_search_locations:
        folders.append(str(Path(next(iter(spec.submodule_search_locations))).parent))
    for given in [*extra, str(ROOT / ".venv-mosaic")]:
        folders.extend(sorted(glob.glob(os.path.join(given, "lib", "python*", "site-packages"))))
        folders.append(given)
    for site in folders:
        shuffle_dir = os.path.join(site, "streaming", "base", "shuffle")
        if not os.path.exists(os.path.join(shuffle_dir, "py1e.py")):
            continue
        for name, path in (
            ("streaming", os.path.join(site, "streaming")),
            ("streaming.base", os.path.join(site, "streaming", "base")),
            ("streaming.base.shuffle", shuffle_dir),
        ):
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
        py1e = importlib.import_module("streaming.base.shuffle.py1e")
        py1br = importlib.import_module("streaming.base.shuffle.py1br")
        versions = [
            d.version
            for d in importlib.metadata.distributions(path=[site])
            if d.metadata["Name"] == "mosaicml-streaming"
        ]
        found = f"mosaicml-streaming {versions[0] if versions else '?'} from {site}"
        return {"py1e": py1e.get_shuffle_py1e, "py1br": py1br.get_shuffle_py1br}, found
    return {}, (
        "Mosaic skipped: no streaming/base/shuffle/py1e.py found (pass --mosaic VENV after "
        "`python3 -m venv VENV && VENV/bin/pip install --no-deps mosaicml-streaming`)"
    )


def mosaic_order(function: Any, counts: list[int], block: int) -> Callable[[int], I64]:
    sizes = np.asarray(counts, dtype=np.int64)

    def order(seed: int) -> I64:
        return np.asarray(function(sizes, 1, seed, 0, block), dtype=np.int64)

    return order


def numpy_order(total: int) -> Callable[[int], I64]:
    return lambda seed: np.random.default_rng(seed).permutation(total).astype(np.int64)


# --- batch statistics ---------------------------------------------------------------------


def batch_mixing(order: Callable[[int], I64], counts: list[int], seeds: int) -> tuple[float, float]:
    """Share of same-shard adjacent pairs within batches, and mean distinct shards per batch."""
    shard_of = np.repeat(np.arange(len(counts)), counts)
    same, distinct = [], []
    for seed in range(seeds):
        shards = shard_of[order(seed)]
        usable = len(shards) // BATCH * BATCH
        batches = shards[:usable].reshape(-1, BATCH)
        same.append(float((batches[:, 1:] == batches[:, :-1]).mean()))
        distinct.append(float(np.mean([len(np.unique(b)) for b in batches])))
    return statistics.mean(same), statistics.mean(distinct)


class Cached:
    """An order as ``shuffle_quality``'s ``(n, seed)`` function, each seed computed once."""

    def __init__(self, order: Callable[[int], I64], total: int) -> None:
        self.order, self.total, self.seen = order, total, dict[int, I64]()

    def __call__(self, n: int, seed: int) -> I64:
        assert n == self.total
        if seed not in self.seen:
            self.seen[seed] = self.order(seed)
        return self.seen[seed]


def quality_rows(
    rows: list[tuple[str, Callable[[int], I64]]], counts: list[int], seeds: int
) -> None:
    total = sum(counts)
    lag_seeds = max(2, seeds // 5)
    print(
        f"\na. quality: {len(counts)} shards of {counts[0]:,} samples, epoch 0; positional "
        f"chi-square (32 x 32, uniform ~961) over {seeds} seeds, lag-1 chi-square (16 x 16, "
        f"uniform ~225), adjacent correlation and batch statistics (batch {BATCH}) over "
        f"{lag_seeds} seeds"
    )
    print(
        f"{'shuffle':<28} {'positional':>10} {'lag-1':>10} {'adj. corr':>10} "
        f"{'same-shard':>10} {'shards/batch':>12} {'s/seed':>7}"
    )
    for name, order in rows:
        start = time.perf_counter()
        cached = Cached(order, total)

        positional = bucketed_chi2(cached, total, seeds)
        per_seed = (time.perf_counter() - start) / seeds
        lag1 = lag1_chi2(cached, total, lag_seeds)
        corr = adjacent_correlation(cached, total, lag_seeds)
        same, distinct = batch_mixing(functools.partial(cached, total), counts, lag_seeds)
        print(
            f"{name:<28} {positional:>10,.0f} {lag1:>10,.0f} {corr:>+10.4f} "
            f"{same:>10.1%} {distinct:>12.1f} {per_seed:>7.3f}"
        )


# --- throughput -----------------------------------------------------------------------------


def jumps_per_sample(counts: list[int], **options: int) -> float:
    """Reads that are not the next sample of the shard read just before, per sample."""
    order = ShardOrder(counts, 0, True, options.get("window", 0), options.get("blocks", 0))
    shards, samples = order.locate(np.arange(sum(counts), dtype=np.int64))
    following = (shards[1:] == shards[:-1]) & (samples[1:] == samples[:-1] + 1)
    return float(1 - following.mean())


def plain_shuffled(urls: str, shards: int, buffer: int) -> Any:
    return (
        wds.WebDataset(urls, shardshuffle=shards, seed=0, empty_check=False)
        .shuffle(buffer, seed=0)
        .decode()
        .map(to_pair)
        .batched(BATCH, collation_fn=default_collate)
    )


def throughput_rows(
    folder: str,
    shards: int,
    per_shard: int,
    ks: tuple[int, ...],
    workers: tuple[int, ...],
    runs: int,
) -> None:
    total = shards * per_shard
    urls = write(folder, shards, per_shard)
    ours(urls)  # index once
    counts = [per_shard] * shards
    cases: list[tuple[str, Callable[[], Any], float | None]] = [
        ("ours, tar order", lambda: ours(urls, repeat=False), jumps_per_sample(counts)),
        (
            f"ours, window {per_shard}",
            lambda: ours(urls, repeat=False, shuffle_window=per_shard),
            jumps_per_sample(counts, window=per_shard),
        ),
    ]
    for k in ks:
        cases.append(
            (
                f"ours, {k} shards",
                functools.partial(ours, urls, repeat=False, shuffle_block_shards=k),
                jumps_per_sample(counts, blocks=k),
            )
        )
    cases.append(
        (f"webdataset, buffer {per_shard}", lambda: plain_shuffled(urls, shards, per_shard), None)
    )
    print(
        f"\nb. throughput: {shards} local shards of {per_shard:,} samples, batch {BATCH}, one "
        f"epoch, median of {runs} alternating runs (samples/s; ratio to tar order, the default)"
    )
    print(
        f"{'shuffle':<28} {'num_workers':>11} {'samples/s':>10} {'ratio':>6} {'jumps/sample':>13}"
    )
    for n_workers in workers:
        rates: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for run in range(runs):
            ordered = cases if run % 2 == 0 else cases[::-1]
            for name, make, _ in ordered:
                rates[name].append(rate(make, n_workers, total, 1))
        base = statistics.median(rates[cases[0][0]])
        for name, _, jumps in cases:
            mine = statistics.median(rates[name])
            jump_text = "-" if jumps is None else f"{jumps:.3f}"
            print(f"{name:<28} {n_workers:>11} {mine:>10,.0f} {mine / base:>5.2f}x {jump_text:>13}")


def read_rows(folder: str, k: int, per_shard: int, runs: int) -> None:
    """Microseconds per read: in tar order, at random in one shard, at random among ``k``."""
    os.makedirs(os.path.join(folder, "reads"))
    urls = write(os.path.join(folder, "reads"), k, per_shard)
    infos = index_shards(expand_urls(urls), progress=False)
    rng = np.random.default_rng(0)
    tar = [(s, i) for s in range(k) for i in range(per_shard)]
    within = [(s, int(i)) for s in range(k) for i in rng.permutation(per_shard)]
    among = [(int(x) // per_shard, int(x) % per_shard) for x in rng.permutation(k * per_shard)]
    cases: list[tuple[str, list[tuple[int, int]], Callable[[], Any]]] = [
        ("tar order, 1 open", tar, lambda: ShardReader(infos)),
        ("random within a shard, 1 open", within, lambda: ShardReader(infos)),
        (f"random among {k}, {2 * k} open", among, lambda: ShardReaders(infos, 2 * k)),
        (f"random among {k}, 1 open", among, lambda: ShardReader(infos)),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for run in range(runs):
        for name, order, make in cases if run % 2 == 0 else cases[::-1]:
            reader = make()
            start = time.perf_counter()
            for shard, index in order:
                reader.read(shard, index)
            times[name].append((time.perf_counter() - start) / len(order) * 1e6)
            reader.close()
    print(
        f"\nc. reads: {k} local shards of {per_shard:,} samples, each sample read once through "
        f"the readers (no decode), median of {runs} alternating runs"
    )
    print(f"{'reads':<32} {'us/read':>8}")
    for name, _, _ in cases:
        print(f"{name:<32} {statistics.median(times[name]):>8.1f}")


def http_rows(folder: str, size: tuple[int, int], ks: tuple[int, ...]) -> None:
    """One epoch over loopback HTTP: samples/s, range requests and bytes per sample."""
    shards, per_shard = size
    root = os.path.join(folder, "http")
    os.makedirs(root)
    local = write(root, shards, per_shard)
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "_http_server.py"), root],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        urls = f"{base}/{os.path.basename(local)}"
        for url in expand_urls(urls):
            write_index(url, RemoteOptions(), out=root)
        total = shards * per_shard
        options: list[tuple[str, dict[str, int]]] = [
            ("ours, tar order", {}),
            (f"ours, window {per_shard}", {"shuffle_window": per_shard}),
        ]
        options += [(f"ours, {k} shards", {"shuffle_block_shards": k}) for k in ks]
        print(
            f"\nd. over loopback HTTP: {shards} shards of {per_shard:,} samples, one epoch, "
            f"batch {BATCH}, main process, one run each (tar order's bytes/sample is about "
            "a sample's size)"
        )
        print(f"{'shuffle':<28} {'samples/s':>10} {'requests/sample':>16} {'bytes/sample':>13}")
        for name, kwargs in options:
            source = ours(urls, repeat=False, **kwargs)
            served(base)
            start = time.perf_counter()
            seen = sum(len(batch[1]) for batch in source)
            elapsed = time.perf_counter() - start
            assert seen == total, (seen, total)
            gets = [(a, b) for path, a, b in served(base) if path.endswith(".tar")]
            sent = sum(b - a for a, b in gets)
            print(
                f"{name:<28} {total / elapsed:>10,.0f} {len(gets) / total:>16.3f} "
                f"{sent / total:>13,.0f}"
            )
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few seeds (CI)")
    parser.add_argument(
        "--mosaic",
        action="append",
        default=[],
        metavar="DIR",
        help="a venv or site-packages folder holding mosaicml-streaming (repeatable)",
    )
    parser.add_argument(
        "--part",
        action="append",
        choices=["a", "b", "c", "d"],
        help="run only these parts (repeatable; default: all)",
    )
    args = parser.parse_args()
    workers: tuple[int, ...]
    if args.quick:
        shards, per_shard, seeds, ks = 16, 250, 20, (2, 4, 8)
        io_shards, io_per_shard, workers, runs = 8, 500, (0,), 1
    else:
        shards, per_shard, seeds, ks = 64, 1000, 100, (2, 4, 8)
        io_shards, io_per_shard, workers, runs = 64, 1000, (0, 2), 3
    info = machine_info({"webdataset": importlib.metadata.version("webdataset")})
    print(machine_line(info))
    mosaic, found = find_mosaic(args.mosaic)
    print(found)
    counts = [per_shard] * shards
    total = shards * per_shard
    rows: list[tuple[str, Callable[[int], I64]]] = [
        ("numpy uniform", numpy_order(total)),
        (f"ours, window {per_shard}", ours_order(counts, window=per_shard)),
    ]
    rows += [(f"ours, {k} shards", ours_order(counts, blocks=k)) for k in ks]
    for buffer in (per_shard, 4 * per_shard):
        rows.append((f"webdataset, buffer {buffer:,}", webdataset_order(counts, buffer)))
    for name, function in mosaic.items():
        for k in (ks[1], ks[-1]):
            block = k * per_shard
            rows.append((f"Mosaic {name}, block {block:,}", mosaic_order(function, counts, block)))
    with tempfile.TemporaryDirectory() as folder:
        parts = set(args.part or "abcd")
        if "a" in parts:
            check_webdataset_model(folder, buffer=6)
            quality_rows(rows, counts, seeds)
        if "b" in parts:
            throughput_rows(folder, io_shards, io_per_shard, ks, workers, runs)
        if "c" in parts:
            read_rows(folder, ks[-1], io_per_shard, 1 if args.quick else 7)
        if "d" in parts:
            http_rows(folder, (4, 100) if args.quick else (8, 500), ks[:2])
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
