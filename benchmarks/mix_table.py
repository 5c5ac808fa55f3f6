"""Tables for MixSampler: throughput against the plain chain and the peers, seek, shares.

How to run (from the repository root)::

    .venv/bin/python benchmarks/mix_table.py --quick    # < 1 min; `make bench-quick` runs it
    .venv/bin/python benchmarks/mix_table.py --plot docs/mix.png    # the docs' figures

The peers are optional (the ``compare`` extra installs them): grain's
``MapDataset.mix`` and HF datasets' ``interleave_datasets``; a peer that cannot be imported
gets a "not installed" line. Speed is reported, never asserted.

The mixture is three components with weights 0.6, 0.25, 0.15 and lengths 2e6, 6e5, 4e5,
each shuffled with its own seed; quick mode takes components a tenth as long and fewer,
shorter samples.

a. Per-rank indices/s, batches of 32, rank 0 of W, build included, median of paired
   runs (the cells of one W alternate, so load drifts hit all of them alike):

   - "plain": ``make_batch_sampler(range(sum of lengths), "training", 0, W, 0, 32)``;
   - "mix": ``make_mixed_batch_sampler(ranges, weights, 0, W, 0, 32)``; target >= 0.7x plain;
   - "grain": ``MapDataset.mix([MapDataset.range(n).shuffle(seed=k)], weights)``, rank 0's
     slice ``[0::W]``, read with ``ds[i]`` (its random access, what a sampler does);
   - "HF": ``interleave_datasets([Dataset.from_dict({"i": arange(n)})], probabilities=
     weights, seed=0, stopping_strategy="first_exhausted")``, ``shard(W, 0,
     contiguous=False)``, ``iter(batch_size=32)`` over the numpy-formatted column. Its
     build (the whole interleaving, sampled up front) is timed once and left out of its
     cells; the other cells include theirs.

   The peers differ in what they promise: grain's interleaving is a fixed pattern of the
   integer proportions (no seed) over a finite mixture that ends when the first component
   runs out; HF samples the component of every row up front with numpy and materialises
   the index mapping (O(length) memory and build time).
b. Time to the first batch after a seek to mixture position 1e12 of three components of
   1e9 records each: ``make_mixed_batch_sampler(..., skip=1e12 / (32 W))``, build and
   ``next(iter())`` timed separately, median of 5 fresh chains. Target < 5 ms. grain's
   ``mix(...).repeat()[1e12]`` is timed alongside; HF cannot address a position beyond
   its materialised mapping.
c. Realised shares over 1e6 positions (quick: 2e4) against the weights: the largest
   deviation, in items, of a component's count in a window from ``P w_k``, for aligned
   windows of the mixture's ``P`` (20 here) and of 1000 positions, and for every sliding
   window of ``P`` positions; and the whole run's share. For grain and HF the same
   windows are read from their streams.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import torch
from _common import BATCH, cpu_model, fmt_ratio, fmt_time, load_average, usable_cpus

import detsamplers as ds

os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
WEIGHTS = [0.6, 0.25, 0.15]
SEEK_POSITION = 10**12
TARGET_SECONDS = 5e-3
TARGET_RATIO = 0.7


@dataclass(frozen=True)
class Settings:
    mode: str
    lengths: tuple[int, ...]
    workers: tuple[int, ...]
    budget: int
    peer_budget: int
    repeats: int
    share_positions: int


LENGTHS = (2_000_000, 600_000, 400_000)
#: Quick mode only proves the script runs: components a tenth as long (HF's build, which
#: materialises the whole interleaving, is most of its time) and fewer, shorter samples.
QUICK = Settings("quick", tuple(n // 10 for n in LENGTHS), (1, 64), 2**18, 2**13, 3, 2 * 10**4)
FULL = Settings("full", LENGTHS, (1, 8, 64), 2**21, 2**16, 7, 10**6)


def optional(name: str) -> ModuleType | None:
    try:
        module = importlib.import_module(name)
    except Exception:  # any import failure means "not installed" here
        return None
    return module


def consume(batches: Iterator[Any], budget: int) -> int:
    done = 0
    for batch in batches:
        done += len(batch)
        if done >= budget:
            break
    return done


# -- the cells of table a -----------------------------------------------------------------


def run_plain(lengths: tuple[int, ...], world: int, budget: int) -> int:
    chain = ds.make_batch_sampler(range(sum(lengths)), "training", 0, world, 0, BATCH)
    return consume(iter(chain), budget)


def run_mix(lengths: tuple[int, ...], world: int, budget: int) -> int:
    ranges = [range(n) for n in lengths]
    chain = ds.make_mixed_batch_sampler(ranges, WEIGHTS, 0, world, 0, BATCH)
    return consume(iter(chain), budget)


def grain_mixture(grain: ModuleType, lengths: tuple[int, ...]) -> Any:
    parts = [grain.MapDataset.range(n).shuffle(seed=k) for k, n in enumerate(lengths)]
    return grain.MapDataset.mix(parts, WEIGHTS)


def run_grain(grain: ModuleType, lengths: tuple[int, ...], world: int, budget: int) -> int:
    mixture = grain_mixture(grain, lengths)[0::world]
    count = min(budget, len(mixture))
    _ = [mixture[i] for i in range(count)]
    return count


def hf_mixture(hf: ModuleType, lengths: tuple[int, ...], tagged: bool = False) -> Any:
    parts = []
    for k, n in enumerate(lengths):
        columns = {"i": np.arange(n)}
        if tagged:
            columns["c"] = np.full(n, k)
        parts.append(hf.Dataset.from_dict(columns))
    return hf.interleave_datasets(
        parts, probabilities=WEIGHTS, seed=0, stopping_strategy="first_exhausted"
    )


def run_hf(mixture: Any, world: int, budget: int) -> int:
    shard = mixture.shard(num_shards=world, index=0, contiguous=False).with_format("numpy")
    return consume((b["i"] for b in shard.iter(batch_size=BATCH)), budget)


def timed(run: Callable[[], int]) -> float:
    gc.collect()
    start = time.perf_counter()
    done = run()
    return done / (time.perf_counter() - start)


def _show(rate: dict[str, float], name: str) -> str:
    return f"{rate[name] / 1e6:>8.3g} M" if name in rate else f"{'not installed':>10}"


def _ratio(rate: dict[str, float], name: str) -> str:
    return fmt_ratio(rate["mix"] / rate[name]) if name in rate else "-"


def table_a(settings: Settings, grain: ModuleType | None, hf: ModuleType | None) -> list[str]:
    lines = [
        "a. Per-rank indices/s (rank 0 of W, batches of 32, build included)",
        f"   {'W':>4}  {'plain':>10}  {'mix':>10}  {'mix/plain':>9}  "
        f"{'grain':>10}  {'mix/grain':>9}  {'HF':>10}  {'mix/HF':>8}",
    ]
    hf_built, hf_seconds = None, 0.0
    if hf is not None:
        start = time.perf_counter()
        hf_built = hf_mixture(hf, settings.lengths)
        hf_seconds = time.perf_counter() - start
    for world in settings.workers:
        cells: dict[str, Callable[[], int]] = {
            "plain": partial(run_plain, settings.lengths, world, settings.budget),
            "mix": partial(run_mix, settings.lengths, world, settings.budget),
        }
        if grain is not None:
            cells["grain"] = partial(
                run_grain, grain, settings.lengths, world, settings.peer_budget
            )
        if hf_built is not None:
            cells["HF"] = partial(run_hf, hf_built, world, settings.peer_budget)
        for run in cells.values():  # warm-up
            run()
        samples: dict[str, list[float]] = {name: [] for name in cells}
        for _ in range(settings.repeats):
            for name, run in cells.items():
                samples[name].append(timed(run))
        rate = {name: statistics.median(values) for name, values in samples.items()}

        show = partial(_show, rate)
        ratio = partial(_ratio, rate)
        lines.append(
            f"   {world:>4}  {show('plain'):>10}  {show('mix'):>10}  {ratio('plain'):>9}  "
            f"{show('grain'):>10}  {ratio('grain'):>9}  {show('HF'):>10}  {ratio('HF'):>8}"
        )
    lines.append(
        f"   target: mix/plain >= {TARGET_RATIO}; median of {settings.repeats} paired runs"
    )
    if hf_built is not None:
        lines.append(
            f"   HF's build (from_dict + interleave_datasets, {sum(settings.lengths):,} rows) "
            f"took {fmt_time(hf_seconds)} once and is outside its cells"
        )
    return lines


# -- table b: seek --------------------------------------------------------------------------


def table_b(grain: ModuleType | None) -> list[str]:
    lines = [
        "b. Seek to mixture position 1e12 of three components of 1e9 records (median of 5)",
        f"   {'W':>4}  {'build':>10}  {'first batch':>12}  {'total':>10}  target < 5 ms",
    ]
    ranges = [range(10**9)] * 3
    for world in (1, 8):
        skip = SEEK_POSITION // (BATCH * world)
        builds, firsts = [], []
        for _ in range(6):
            gc.collect()
            start = time.perf_counter()
            chain = ds.make_mixed_batch_sampler(ranges, WEIGHTS, 0, world, 0, BATCH, skip)
            built = time.perf_counter()
            next(iter(chain))
            done = time.perf_counter()
            builds.append(built - start)
            firsts.append(done - built)
        build, first = statistics.median(builds[1:]), statistics.median(firsts[1:])
        lines.append(
            f"   {world:>4}  {fmt_time(build):>10}  {fmt_time(first):>12}  "
            f"{fmt_time(build + first):>10}"
        )
    if grain is None:
        lines.append("   grain: not installed")
    else:
        times = []
        for _ in range(6):
            start = time.perf_counter()
            repeated = grain_mixture(grain, (10**9,) * 3).repeat()
            _ = [repeated[SEEK_POSITION + i] for i in range(BATCH)]
            times.append(time.perf_counter() - start)
        lines.append(
            f"   grain mix(...).repeat(), 32 items at 1e12, build included: "
            f"{fmt_time(statistics.median(times[1:]))}"
        )
    lines.append("   HF interleave_datasets: no seek past its materialised index mapping")
    return lines


# -- table c: shares ------------------------------------------------------------------------


def deviations(component: np.ndarray, window: int, sliding: bool = False) -> float:
    """The largest |count of k in a window - window * w_k| over windows and components."""
    worst = 0.0
    for k, weight in enumerate(WEIGHTS):
        hits = (component == k).astype(np.int64)
        if sliding:
            cumulative = np.concatenate([[0], np.cumsum(hits)])
            counts = cumulative[window:] - cumulative[:-window]
        else:
            usable = len(hits) // window * window
            counts = hits[:usable].reshape(-1, window).sum(axis=1)
        worst = max(worst, float(np.abs(counts - window * weight).max()))
    return worst


def streams(
    settings: Settings, grain: ModuleType | None, hf: ModuleType | None
) -> dict[str, np.ndarray]:
    count = settings.share_positions
    mixture = ds.MixSampler.from_datasets([range(n) for n in settings.lengths], WEIGHTS, 0)
    out = {"mix": mixture.locate(np.arange(count, dtype=np.int64))[0]}
    if grain is not None:
        parts = [
            grain.MapDataset.range(n).map(lambda _, k=k: k) for k, n in enumerate(settings.lengths)
        ]
        tagged = grain.MapDataset.mix(parts, WEIGHTS)
        out["grain"] = np.asarray([tagged[i] for i in range(min(count, len(tagged)))])
    if hf is not None:
        small = tuple(n // 2 for n in settings.lengths) if count <= 10**5 else settings.lengths
        mixture_hf = hf_mixture(hf, small, tagged=True).with_format("numpy")
        out["HF"] = np.asarray(mixture_hf.select(range(min(count, len(mixture_hf))))["c"])
    return out


def table_c(sample: dict[str, np.ndarray], window: int) -> list[str]:
    lines = [
        f"c. Realised shares over {len(sample['mix']):,} positions against weights {WEIGHTS}",
        f"   largest deviation in items from P w_k (P = {window} positions, the mixture's window)",
        f"   {'':>6}  {'windows of P':>12}  {'of 1000':>8}  {'sliding P':>10}  shares",
    ]
    for name, component in sample.items():
        shares = np.bincount(component, minlength=3) / len(component)
        lines.append(
            f"   {name:>6}  {deviations(component, window):>12.2f}  "
            f"{deviations(component, 1000):>8.2f}  {deviations(component, window, True):>10.2f}  "
            f"{', '.join(f'{s:.4f}' for s in shares)}"
        )
    return lines


def plot(path: str, sample: dict[str, np.ndarray]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no PNG written")
        return
    block = 100
    figure, axes = plt.subplots(1, 1, figsize=(8, 3.6))
    axes.axhline(WEIGHTS[0], color="black", linewidth=0.8, linestyle="--", label="weight 0.6")
    for name, component in sample.items():
        usable = min(len(component), 20_000) // block * block
        share = (component[:usable] == 0).reshape(-1, block).mean(axis=1)
        wide = name == "mix"
        axes.plot(
            np.arange(len(share)) * block,
            share,
            label=name,
            linewidth=2.5 if wide else 1,
            zorder=3 if wide else 2,
        )
    axes.set_xlabel("mixture position")
    axes.set_ylabel(f"share of component 0 per {block} positions")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument("--plot", help="save the shares plot to this PNG")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    grain = optional("grain")
    hf = optional("datasets")
    print(
        f"MixSampler tables ({settings.mode}); {platform.platform()}, {cpu_model()}, "
        f"{usable_cpus()} CPUs, load {load_average()}; Python {sys.version.split()[0]}, "
        f"torch {torch.__version__}, numpy {np.__version__}; "
        f"grain {getattr(grain, '__version__', 'not installed') if grain else 'not installed'}, "
        f"datasets {hf.__version__ if hf else 'not installed'}; lengths {settings.lengths}"
    )
    for line in table_a(settings, grain, hf):
        print(line)
    for line in table_b(grain):
        print(line)
    sample = streams(settings, grain, hf)
    window = ds.MixSampler([range(n) for n in settings.lengths], WEIGHTS, 0).window
    for line in table_c(sample, window):
        print(line)
    print(f"load average at the end: {load_average()}")
    if args.plot:
        plot(args.plot, sample)


if __name__ == "__main__":
    main()
