"""Tables for MixSampler: throughput against the plain chain and the peers, seek, shares.

How to run (from the repository root)::

    .venv/bin/python benchmarks/mix_table.py --quick    # < 1 min; `make bench-quick` runs it
    .venv/bin/python benchmarks/mix_table.py --plot docs/mix.png --json /tmp/mix.json

The peers are optional (the ``compare`` extra installs them): grain's
``MapDataset.mix`` and HF datasets' ``interleave_datasets``; a peer that cannot be imported
gets a "not installed" cell and a line saying what to install. Speed is reported, never
asserted. Every table header gives the load average at its start and end (the harness in
``benchmarks/harness/``): on a shared machine, read the ratios within one table.

The mixture is three components with weights 0.6, 0.25, 0.15 and lengths 2e6, 6e5, 4e5,
each shuffled with its own seed; quick mode takes components a tenth as long and fewer,
shorter samples.

a. Per-rank indices/s, batches of 32, rank 0 of W, build included: each cell is the median
   of paired runs, the cells of one W alternating which goes first (``interleaved``), so
   load drifts hit all of them alike; a run stops at its budget or at the time cap (*):

   - "plain": ``make_batch_sampler(range(sum of lengths), "training", 0, W, 0, 32)``
     (shuffle → repeat → shard → batch);
   - "mix": ``make_mixed_batch_sampler(ranges, weights, 0, W, 0, 32)``; target >= 0.7x plain;
   - "mix, numpy": the same with the compiled kernel off (NOTE [ compiled mixture kernel ]),
     what an install without a C compiler runs; the same stream;
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
   ``next(iter())`` timed separately (``time_first_batch``: median of 5 fresh chains after
   an untimed one). Target < 5 ms. grain's ``mix(...).repeat()`` is timed alongside (build,
   then its 32 items at 1e12); HF cannot address a position beyond its materialised mapping.
c. Realised shares over 1e6 positions (quick: 2e4) against the weights: the largest
   deviation, in items, of a component's count in a window from ``P w_k``, for aligned
   windows of the mixture's ``P`` (20 here) and of 1000 positions, and for every sliding
   window of ``P`` positions; and the whole run's share. For grain and HF the same
   windows are read from their streams. The plot (``--plot``) shows component 0's share per
   100 positions over the first 20,000.
d. The same question paired in one process, in CPU time: each round times the plain chain,
   the mixture and the mixture with the kernel off (as in a), the order reversed every
   round; the medians of the per-round ratios and their range. CPU time and pairing make it
   steadier than a's wall-clock medians on a shared machine.
e. The sampler's own work per block of 16,384 positions of rank 0 (``records`` of the
   positions ``r, r + W, ...``, before batching): the mixture compiled and in numpy, and the
   plain chain (shuffle → repeat); consecutive blocks, best of several alternating rounds,
   CPU time.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from harness.cli import Run, main_guard, parser, run
from harness.fmt import fmt_rate, fmt_time
from harness.machine import version
from harness.output import pyplot, save
from harness.table import Cell, Table, not_installed, show, show_ratio, skipped
from harness.timing import Batches, interleaved, measure_rate, median, time_first_batch

import detsamplers as ds
from detsamplers import _native
from detsamplers._source import as_node

os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
BATCH = 32
WEIGHTS = [0.6, 0.25, 0.15]
SEEK_POSITION = 10**12
TARGET_SECONDS = 5e-3
TARGET_RATIO = 0.7
#: Positions per block of the plot, and the positions it shows.
PLOT_BLOCK, PLOT_POSITIONS = 100, 20_000
#: The peers' pip distributions, whose versions head the tables.
PEERS = ("grain", "datasets")


@dataclass(frozen=True)
class Settings:
    lengths: tuple[int, ...]
    workers: tuple[int, ...]
    budget: int
    peer_budget: int
    cap: float
    rounds: int
    share_positions: int
    pairs: int
    blocks: int


LENGTHS = (2_000_000, 600_000, 400_000)
#: Quick mode only proves the script runs: components a tenth as long (HF's build, which
#: materialises the whole interleaving, is most of its time) and fewer, shorter samples.
QUICK = Settings(tuple(n // 10 for n in LENGTHS), (1, 64), 2**18, 2**13, 1.5, 3, 2 * 10**4, 3, 10)
FULL = Settings(LENGTHS, (1, 8, 64), 2**21, 2**16, 6.0, 7, 10**6, 9, 400)


def optional(name: str) -> ModuleType | None:
    """The module, or None (printing what to install) when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except Exception:  # any import failure means "not installed" here
        print(f"skipping {name}: not installed (pip install {name})", flush=True)
        return None


# -- the pipelines of table a ---------------------------------------------------------------


def plain(lengths: tuple[int, ...], world: int) -> Batches:
    return ds.make_batch_sampler(range(sum(lengths)), "training", 0, world, 0, BATCH)


def mix(lengths: tuple[int, ...], world: int) -> Batches:
    ranges = [range(n) for n in lengths]
    return ds.make_mixed_batch_sampler(ranges, WEIGHTS, 0, world, 0, BATCH)


def mix_numpy(lengths: tuple[int, ...], world: int) -> Batches:
    """``mix`` on its numpy path: the compiled kernel is off while this run iterates."""
    kernel, _native.kernel = _native.kernel, None
    try:
        yield from mix(lengths, world)
    finally:  # the run's end closes the generator (CPython frees it when the run returns)
        _native.kernel = kernel


def grain_mixture(grain: ModuleType, lengths: tuple[int, ...]) -> Any:
    parts = [grain.MapDataset.range(n).shuffle(seed=k) for k, n in enumerate(lengths)]
    return grain.MapDataset.mix(parts, WEIGHTS)


def grain_batches(grain: ModuleType, lengths: tuple[int, ...], world: int) -> Batches:
    """Rank 0's slice of grain's mixture, read by random access, in batches."""
    mixture = grain_mixture(grain, lengths)[0::world]
    for start in range(0, len(mixture), BATCH):
        yield [mixture[i] for i in range(start, min(start + BATCH, len(mixture)))]


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


def hf_batches(mixture: Any, world: int) -> Batches:
    shard = mixture.shard(num_shards=world, index=0, contiguous=False).with_format("numpy")
    return (batch["i"] for batch in shard.iter(batch_size=BATCH))


def rate_op(make: Callable[[], Batches], budget: int, cap: float) -> Callable[[], Cell]:
    """One timed run of ``make()`` (built inside the timed region) as a cell."""
    return partial(measure_rate, make, budget, cap, 1)


def table_a(out: Run, settings: Settings, grain: ModuleType | None, hf: ModuleType | None) -> None:
    hf_built, hf_seconds = None, 0.0
    if hf is not None:
        start = time.perf_counter()
        hf_built = hf_mixture(hf, settings.lengths)
        hf_seconds = time.perf_counter() - start
    names = ["plain", "mix", "numpy", "grain", "HF"]
    compiled = _native.kernel is not None
    headers = ["W", "plain", "mix", "mix/plain", "mix, numpy", "numpy/plain"]
    headers += ["grain", "mix/grain", "HF", "mix/HF"]
    rows, records = [], []
    for world in settings.workers:
        budget, cap = settings.budget, settings.cap
        ops: dict[str, Callable[[], Cell]] = {
            "plain": rate_op(partial(plain, settings.lengths, world), budget, cap),
            "mix": rate_op(partial(mix, settings.lengths, world), budget, cap),
        }
        if compiled:
            ops["numpy"] = rate_op(partial(mix_numpy, settings.lengths, world), budget, cap)
        if grain is not None:
            make = partial(grain_batches, grain, settings.lengths, world)
            ops["grain"] = rate_op(make, settings.peer_budget, settings.cap)
        if hf_built is not None:
            make = partial(hf_batches, hf_built, world)
            ops["HF"] = rate_op(make, settings.peer_budget, settings.cap)
        for op in ops.values():  # warm-up: imports, caches, lazily built tables
            op()
        runs = interleaved(ops, settings.rounds)
        cells: dict[str, Cell] = {name: not_installed() for name in names}
        for name, results in runs.items():
            values = [c.value for c in results if c.value is not None]
            capped = any(c.status == "capped" for c in results)
            cells[name] = Cell("capped" if capped else "ok", median(values), values)
        mine = cells["mix"]
        rows.append(
            [
                str(world),
                *(show(cells[n], fmt_rate) for n in ("plain", "mix")),
                show_ratio(mine, cells["plain"]),
                show(cells["numpy"], fmt_rate) if compiled else "(mix)",
                show_ratio(cells["numpy"] if compiled else mine, cells["plain"]),
                show(cells["grain"], fmt_rate),
                show_ratio(mine, cells["grain"]),
                show(cells["HF"], fmt_rate),
                show_ratio(mine, cells["HF"]),
            ]
        )
        records.append({"world_size": world, "unit": "indices/s", "cells": cells})
    notes = [
        f"Indices/s on rank 0 of W, batches of {BATCH}, component lengths {settings.lengths}, "
        f"weights {WEIGHTS}; median of {settings.rounds} runs, the cells of a W alternating "
        f"which goes first; a run stops at {settings.budget:,} indices ({settings.peer_budget:,} "
        f"for the peers) or {settings.cap:g} s (* = stopped by the cap). Target: mix/plain >= "
        f"{TARGET_RATIO}.",
        f"mix: {_native.kernel_status()} (NOTE [ compiled mixture kernel ]); 'mix, numpy' is "
        "the same stream with the kernel off, the path of an install without a C compiler.",
    ]
    if hf_built is not None:
        notes.append(
            f"HF's build (from_dict + interleave_datasets, {sum(settings.lengths):,} rows) took "
            f"{fmt_time(hf_seconds)} once and is outside its cells; the others build inside."
        )
    title = "Per-rank indices/s of a 3-way mixture (higher is better)"
    out.emit(Table("mix-a", title, headers, rows, notes, records))


# -- tables d and e: paired CPU time, and the sampler's work per block ----------------------


def cpu_rate(make: Callable[[], Batches], budget: int) -> float:
    """Indices per CPU second while iterating ``make()`` (built inside) up to ``budget``."""
    start, done = time.process_time(), 0
    for batch in make():
        done += len(batch)
        if done >= budget:
            break
    return done / (time.process_time() - start)


def table_d(out: Run, settings: Settings) -> None:
    names = ["plain", "mix", "numpy"]
    makes = {"plain": plain, "mix": mix, "numpy": mix_numpy}
    headers = ["W", "plain", "mix/plain", "range", "numpy/plain", "range"]
    rows, records = [], []
    for world in settings.workers:
        rates: dict[str, list[float]] = {name: [] for name in names}
        for name in names:  # warm-up
            cpu_rate(partial(makes[name], settings.lengths, world), settings.budget)
        for round_ in range(settings.pairs):
            for name in names if round_ % 2 == 0 else names[::-1]:
                make = partial(makes[name], settings.lengths, world)
                rates[name].append(cpu_rate(make, settings.budget))
        mine = [m / p for m, p in zip(rates["mix"], rates["plain"], strict=True)]
        other = [m / p for m, p in zip(rates["numpy"], rates["plain"], strict=True)]
        rows.append(
            [
                str(world),
                fmt_rate(median(rates["plain"])),
                f"{median(mine):.3f}",
                f"{min(mine):.2f} to {max(mine):.2f}",
                f"{median(other):.3f}",
                f"{min(other):.2f} to {max(other):.2f}",
            ]
        )
        records.append({"world_size": world, "unit": "indices/CPU s", "rates": rates})
    notes = [
        f"Paired in one process: {settings.pairs} rounds of the plain chain, the mixture "
        f"({_native.kernel_status()}) and the mixture with the kernel off, "
        f"{settings.budget:,} indices each, chain built inside, CPU time, the order reversed "
        "every round; medians of the per-round ratios and their range.",
    ]
    title = "Mixture against the plain chain, paired, CPU time (higher is better)"
    out.emit(Table("mix-d", title, headers, rows, notes, records))


def table_e(out: Run, settings: Settings) -> None:
    size = 16_384
    shuffled = [
        ds.ReproducibleShuffleSampler(range(n), seed=k) for k, n in enumerate(settings.lengths)
    ]
    mixture = as_node(ds.MixSampler(shuffled, WEIGHTS, seed=0))
    chain = as_node(
        ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(sum(settings.lengths)), seed=0))
    )
    kernel = _native.kernel
    headers = ["W", "mix, compiled", "mix, numpy", "plain"]
    rows, records = [], []
    for world in settings.workers:
        blocks = [
            np.arange(b * world * size + 3, (b + 1) * world * size + 3, world, dtype=np.int64)
            for b in range(settings.blocks)
        ]
        best: dict[str, float] = {}
        ways = [("mix, compiled", mixture, kernel), ("mix, numpy", mixture, None)]
        ways.append(("plain", chain, kernel))
        for round_ in range(settings.rounds):
            for name, node, path in ways if round_ % 2 == 0 else ways[::-1]:
                _native.kernel = path
                try:
                    start = time.process_time()
                    for block in blocks:
                        node.records(block)
                    spent = (time.process_time() - start) / len(blocks)
                finally:
                    _native.kernel = kernel
                best[name] = min(best.get(name, spent), spent)
        if kernel is None:
            best["mix, compiled"] = float("nan")
        rows.append([str(world), *(fmt_time(best[name]) for name, _, _ in ways)])
        records.append({"world_size": world, "seconds_per_block": best})
    notes = [
        f"records() of {settings.blocks} consecutive blocks of {size:,} positions of rank 0 "
        f"(r, r + W, ...), best of {settings.rounds} alternating rounds, CPU time per block; "
        "plain: shuffle → repeat over the concatenation. mix, compiled: "
        f"{_native.kernel_status()}.",
    ]
    title = "The sampler's work per block of 16,384 positions (lower is better)"
    out.emit(Table("mix-e", title, headers, rows, notes, records))


# -- table b: seek ------------------------------------------------------------------------


def table_b(out: Run, settings: Settings, grain: ModuleType | None) -> None:
    ranges = [range(10**9)] * 3
    headers = ["pipeline", "W", "build", "first batch", "total", "< 5 ms"]
    rows, records = [], []
    for world in (1, 8):
        skip = SEEK_POSITION // (BATCH * world)

        def build(world: int = world, skip: int = skip) -> Batches:
            return ds.make_mixed_batch_sampler(ranges, WEIGHTS, 0, world, 0, BATCH, skip)

        timing = time_first_batch(build, 5, settings.cap, size=BATCH)
        ok = "yes" if timing.total < TARGET_SECONDS else "no"
        rows.append(
            [
                "mix",
                str(world),
                fmt_time(timing.build),
                fmt_time(timing.first),
                fmt_time(timing.total),
                ok,
            ]
        )
        records.append({"pipeline": "mix", "world_size": world, "cells": {"mix": timing.cell()}})
    if grain is None:
        rows.append(["grain", "1", "not installed", "-", "-", "-"])
        records.append({"pipeline": "grain", "world_size": 1, "cells": {"grain": not_installed()}})
    else:

        def grain_seek() -> Batches:
            repeated = grain_mixture(grain, (10**9,) * 3).repeat()
            positions = range(SEEK_POSITION, SEEK_POSITION + BATCH)
            return ([repeated[p] for p in positions] for _ in range(1))

        timing = time_first_batch(grain_seek, 5, settings.cap, size=BATCH)
        rows.append(
            [
                "grain",
                "1",
                fmt_time(timing.build),
                fmt_time(timing.first),
                fmt_time(timing.total),
                "yes" if timing.total < TARGET_SECONDS else "no",
            ]
        )
        records.append({"pipeline": "grain", "world_size": 1, "cells": {"grain": timing.cell()}})
    rows.append(["HF", "1", "cannot seek", "-", "-", "-"])
    records.append(
        {
            "pipeline": "HF",
            "world_size": 1,
            "cells": {"HF": skipped("cannot seek", reason="no position past its mapping")},
        }
    )
    notes = [
        "Seek to mixture position 1e12 of three components of 1e9 records: build the chain "
        "(mix: make_mixed_batch_sampler with skip = 1e12 / (32 W)), then its first batch; "
        "medians of 5 fresh builds after an untimed one. grain: MapDataset.mix(...).repeat() "
        "built, then its 32 items at 1e12 read one by one. HF interleave_datasets cannot "
        "address a position past its materialised index mapping.",
    ]
    title = "Time to the first batch after a seek to position 1e12 (lower is better)"
    out.emit(Table("mix-b", title, headers, rows, notes, records))


# -- table c: shares ----------------------------------------------------------------------


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
    """The component of each of the first positions of each mixture."""
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


def table_c(out: Run, settings: Settings, grain: ModuleType | None, hf: ModuleType | None) -> None:
    sample = streams(settings, grain, hf)
    window = ds.MixSampler([range(n) for n in settings.lengths], WEIGHTS, 0).window
    headers = ["mixture", f"windows of {window}", "of 1000", f"sliding {window}", "shares"]
    rows, records = [], []
    for name, component in sample.items():
        shares = (np.bincount(component, minlength=3) / len(component)).tolist()
        aligned, thousand = deviations(component, window), deviations(component, 1000)
        sliding = deviations(component, window, True)
        rows.append(
            [
                name,
                f"{aligned:.2f}",
                f"{thousand:.2f}",
                f"{sliding:.2f}",
                ", ".join(f"{s:.4f}" for s in shares),
            ]
        )
        usable = min(len(component), PLOT_POSITIONS) // PLOT_BLOCK * PLOT_BLOCK
        blocks = (component[:usable] == 0).reshape(-1, PLOT_BLOCK).mean(axis=1)
        records.append(
            {
                "mixture": name,
                "positions": len(component),
                "deviation_window": aligned,
                "deviation_1000": thousand,
                "deviation_sliding": sliding,
                "shares": shares,
                "share0_per_block": blocks.tolist(),
            }
        )
    notes = [
        f"The component of each of the first {settings.share_positions:,} positions; the "
        f"largest deviation, in items, of a component's count in a window from its weight "
        f"times the window ({WEIGHTS}), over aligned windows of the mixture's P = {window} and "
        f"of 1000 positions and every sliding window of {window}; and the whole run's shares.",
    ]
    title = "Realised shares against the weights (deviation in items, lower is closer)"
    out.emit(Table("mix-c", title, headers, rows, notes, records))


def plot(path: Path, tables: list[Table], machine: str) -> None:
    """Component 0's share per block of 100 positions, each mixture a line."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 1, figsize=(8, 3.8))
    axes.axhline(WEIGHTS[0], color="black", linewidth=0.8, linestyle="--", label="weight 0.6")
    shares = next(t for t in tables if t.key == "mix-c")
    for record, color in zip(shares.records, itertools.cycle(f"C{i}" for i in range(10))):
        wide = record["mixture"] == "mix"
        values = record["share0_per_block"]
        axes.plot(
            np.arange(len(values)) * PLOT_BLOCK,
            values,
            color=color,
            label=record["mixture"],
            linewidth=2.5 if wide else 1,
            zorder=3 if wide else 2,
        )
    axes.set_xlabel("mixture position")
    axes.set_ylabel(f"share of component 0 per {PLOT_BLOCK} positions")
    axes.legend(loc="lower right", fontsize=8)
    save(figure, path, machine)


def main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace = parser(
        "MixSampler against the plain chain, grain's MapDataset.mix and HF interleave_datasets.",
        "components a tenth as long, fewer and shorter runs (about a minute)",
    ).parse_args(argv)
    settings = QUICK if args.quick else FULL
    grain, hf = optional("grain"), optional("datasets")
    versions = {distribution: version(distribution) for distribution in PEERS}

    def body(out: Run) -> None:
        table_a(out, settings, grain, hf)
        table_b(out, settings, grain)
        table_c(out, settings, grain, hf)
        table_d(out, settings)
        table_e(out, settings)

    config = {"quick": args.quick, "lengths": settings.lengths, "weights": WEIGHTS}
    return run(args, versions, body, plot, config)


if __name__ == "__main__":
    main_guard(main)
