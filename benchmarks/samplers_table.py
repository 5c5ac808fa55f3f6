"""Side-by-side tables: detsamplers against torch's and Determined's samplers.

How to run (from the repository root)::

    .venv/bin/python benchmarks/samplers_table.py --quick    # < 60 s; `make test` runs it
    .venv/bin/python benchmarks/samplers_table.py            # the full figures, for the docs
    .venv/bin/python benchmarks/samplers_table.py --json figures.json --plot figures.png
    PYTHONPATH=. /path/to/venv-with-determined/bin/python benchmarks/samplers_table.py

Determined (``determined==0.38.1``) is optional: when ``determined.pytorch.samplers`` cannot
be imported its columns say "not installed". ``--plot`` needs matplotlib; without it the
script says so and writes no PNG. Speed is reported, never asserted: the script exits 0
unless something raises.

Every table starts with the machine (platform, CPUs, load, Python/torch/numpy versions).
"detsamplers" is ``make_batch_sampler(range(N), "training", shuffle_seed=0,
num_workers=W, rank=0, batch_size=32, skip=...)``; "torch" is
``BatchSampler(torch.utils.data.DistributedSampler(range(N), num_replicas=W, rank=0,
shuffle=True, seed=0), 32, False)``; "Determined" is Determined's own chain
``SkipBatchSampler(BatchSampler(DistributedSampler(RepeatSampler(
ReproducibleShuffleSampler(SequentialSampler(range(N)), 0)), W, 0), 32, False), skip)``.
This process always plays rank 0 of W.

a. Per-rank throughput: indices yielded per second on rank 0, batches of 32, N = 1e6,
   for several world sizes W. torch is re-iterated with ``set_epoch`` each epoch. A cell
   stops at a budget of indices or at a time cap, whichever comes first, and reports the
   rate over what was done (``*`` marks a cell stopped by the cap); the median of up to 3
   runs (one when a run takes more than a third of the cap). Chain construction is inside
   the timed region.
b1. Seek cost of detsamplers: the chain is built with ``skip = epochs * N / (32 W)``
   batches (W = 1) and ``next(iter(chain))`` is timed, split into build and first batch,
   with the extra memory of build + first batch: the tracemalloc peak and the peak RSS
   growth (``/proc/self/status`` VmHWM after resetting it through ``/proc/self/clear_refs``).
   The issue's targets at N = 1e9 are < 5 ms and < 50 MB.
b2. The same seek against the peers. torch has no skip: it resumes at an epoch boundary
   with ``set_epoch(epochs)`` (all positions here are epoch boundaries). Peers that would
   materialise N indices (N = 1e9: 8 GB and more) are not run; Determined skips by
   iterating, O(position), so a cell whose estimated time (extrapolated from the previous
   positions) exceeds the cap is not run either.
b3. Time to the first batch after resume against N, at a fixed relative position: the
   middle of epoch 3 (counting from 0), i.e. after 3.5 N records, W = 1, build included.
   detsamplers and Determined skip ``3.5 N / 32`` batches; torch resumes as a training loop
   (or torchdata's ``StatefulDistributedSampler``) does: ``set_epoch(3)``, ``iter()`` (its
   ``randperm(N)``, turned into a list) and ``islice`` past the first N/2 indices of the
   epoch. Cells that would materialise more than 1e8 indices (torch, Determined) are not
   run, nor Determined cells whose time, extrapolated from the smaller N, exceeds the cap.
c. Time to the first batch from position 0, N = 1e6, build included, per W. The target
   is detsamplers no slower than torch.
d1. Peak memory (tracemalloc) of building a bare shuffle and taking its first index, per N:
   detsamplers' and Determined's ``ReproducibleShuffleSampler(SequentialSampler(range(N)),
   0)`` and torch's ``DistributedSampler(range(N), num_replicas=1, rank=0, shuffle=True)``.
   tracemalloc sees numpy and Python allocations but not torch's tensor storage, so the
   torch column leaves out its ``randperm`` tensor (8 N bytes while it is turned into a
   list); d2 counts it.
d2. The same as d1, as the peak RSS growth of an untraced run, after glibc's
   ``malloc_trim`` (a lower bound when the allocator reuses memory the process holds).

Ratios are detsamplers over the peer: for rates above 1 means detsamplers is faster, for
times and memory below 1 means detsamplers takes less ("1/160" = 160 times less).

Method: ``time.perf_counter``; short measurements take the median of 3 runs after an
untimed warm-up run (a single run when one takes more than a third of the cap);
``gc.collect()`` before each cell, the collector left on as in a training loop. The
machine is shared and noisy: read the figures as orders of magnitude and ratios, not to
the last digit.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import platform
import statistics
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud
from _common import BATCH, cpu_model, ds_chain, fmt_ratio, fmt_time, load_average, usable_cpus

import detsamplers as ds

#: N for the throughput and first-batch tables (a and c).
N_SMALL = 10**6
#: The issue's targets for a seek at N = 1e9.
TARGET_SECONDS = 5e-3
TARGET_BYTES = 50 * 10**6
#: Above this N, peers that materialise every index (a Python list or a tensor of N
#: indices) are not run: at 1e9 that is 8 GB for torch's tensor alone.
MATERIALISE_LIMIT = 10**8
#: Table b3 resumes in the middle of this epoch (counting from 0).
RESUME_EPOCH = 3

Batches = Iterable[list[int]]


@dataclass(frozen=True)
class Settings:
    """What one mode measures, and its time caps in seconds."""

    mode: str
    #: World sizes W of tables a and c.
    workers: tuple[int, ...]
    #: Indices per throughput sample (table a).
    budget: int
    #: Time cap of one throughput sample (table a).
    rate_cap: float
    #: Longest single timed operation (tables b2 and c); longer ones are estimated, not run.
    op_cap: float
    #: Longest single traced run (table d).
    memory_cap: float
    #: N and positions (in epochs) of table b.
    seek_sizes: tuple[int, ...]
    seek_epochs: tuple[int, ...]
    #: N of table d.
    memory_sizes: tuple[int, ...]
    #: N of table b3 (resume at a fixed relative position).
    resume_sizes: tuple[int, ...]
    repeats: int = 3


QUICK = Settings(
    mode="quick",
    workers=(1, 64),
    budget=2**20,
    rate_cap=2.0,
    op_cap=2.0,
    memory_cap=5.0,
    seek_sizes=(10**9, 10**6),
    seek_epochs=(0, 1, 10, 100),
    memory_sizes=(10**3, 10**4, 10**5, 10**6),
    resume_sizes=(10**3, 10**6, 10**9),
)
FULL = Settings(
    mode="full",
    workers=(1, 8, 64, 1024),
    budget=2**22,
    rate_cap=5.0,
    op_cap=5.0,
    memory_cap=60.0,
    seek_sizes=(10**9, 10**6),
    seek_epochs=(0, 1, 10, 100),
    memory_sizes=(10**3, 10**4, 10**5, 10**6, 10**7),
    resume_sizes=tuple(10**k for k in range(3, 10)),
)


@dataclass
class Cell:
    """One measured (or not measured) figure.

    ``status`` is "ok", "capped" (stopped at the time cap, the value covers what was
    done), "skipped" (not run; ``note`` says why) or "not installed".
    """

    status: str
    value: float | None = None
    samples: list[float] = field(default_factory=list)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.value is not None and self.status in ("ok", "capped")


@dataclass
class Table:
    """A rendered table plus the raw figures behind it."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str]
    records: list[dict[str, Any]]


@dataclass(frozen=True)
class Peer:
    """An optional comparison library."""

    name: str
    module: ModuleType | None
    status: str


# -- formatting ----------------------------------------------------------------------------


def fmt_rate(per_second: float) -> str:
    for scale, unit in ((1e9, "G/s"), (1e6, "M/s"), (1e3, "k/s")):
        if per_second >= scale:
            return f"{per_second / scale:.3g} {unit}"
    return f"{per_second:.3g} /s"


def fmt_bytes(size: float) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def fmt_n(n: int) -> str:
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else str(n)


def show(cell: Cell, fmt: Callable[[float], str]) -> str:
    if not cell.measured:
        return cell.note or cell.status
    assert cell.value is not None
    return fmt(cell.value) + ("*" if cell.status == "capped" else "")


def show_ratio(ours: Cell, theirs: Cell) -> str:
    """``ours / theirs``, or "-" when either is missing or zero (below resolution)."""
    if ours.measured and theirs.measured and ours.value and theirs.value:
        return fmt_ratio(ours.value / theirs.value)
    return "-"


def render(table: Table, machine: str) -> str:
    widths = [len(h) for h in table.headers]
    for row in table.rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    out = [f"Table {table.key}. {table.title}", machine, "", line(table.headers)]
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in table.rows)
    for note in table.notes:
        out.extend(textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(out)


# -- the machine and the peers -----------------------------------------------------------


def machine_info(determined: Peer) -> dict[str, str]:
    usable, load = usable_cpus(), load_average()
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "cpus_usable": usable,
        "load_1min": load,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "detsamplers": ds.__version__,
        "determined": determined.status,
    }


def machine_line(info: dict[str, str]) -> str:
    return (
        f"machine:  {info['platform']}, {info['cpu']}, {info['cpu_count']} CPUs "
        f"({info['cpus_usable']} usable), load {info['load_1min']}\n"
        f"software: python {info['python']}, torch {info['torch']}, numpy {info['numpy']}, "
        f"detsamplers {info['detsamplers']}, determined {info['determined']}"
    )


def load_determined() -> Peer:
    """Determined's samplers if importable; a missing package is "not installed"."""
    try:
        module = importlib.import_module("determined.pytorch.samplers")
    except ModuleNotFoundError:
        return Peer("Determined", None, "not installed")
    except Exception as exc:  # a broken install is reported, never fatal
        return Peer("Determined", None, f"not importable ({type(exc).__name__}: {exc})")
    try:
        version = importlib.metadata.version("determined")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    return Peer("Determined", module, version)


def not_installed() -> Cell:
    return Cell("not installed", note="not installed")


# -- the chains under test -----------------------------------------------------------------


def ds_first_batch(n: int, world: int, skip: int) -> list[int]:
    return next(iter(ds_chain(n, world, skip)))


def torch_sampler(n: int, world: int) -> tud.DistributedSampler[int]:
    dataset: Any = range(n)  # torch types it as a Dataset; it only needs len()
    return tud.DistributedSampler(dataset, num_replicas=world, rank=0, shuffle=True, seed=0)


def torch_chain(n: int, world: int, epoch: int = 0) -> Batches:
    sampler = torch_sampler(n, world)
    sampler.set_epoch(epoch)
    return tud.BatchSampler(sampler, BATCH, drop_last=False)


def torch_epochs(n: int, world: int) -> Iterator[list[int]]:
    """torch's chain as a training loop drives it: ``set_epoch(e)`` then a full pass."""
    sampler = torch_sampler(n, world)
    batches = tud.BatchSampler(sampler, BATCH, drop_last=False)
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        yield from batches


def torch_resume(n: int, world: int, epoch: int, offset: int) -> Iterator[list[int]]:
    """torch resumed mid-epoch: ``set_epoch``, ``iter`` (its randperm), skip ``offset`` indices.

    A generator, so that all of the work happens in ``next()``: this is how torchdata's
    ``StatefulDistributedSampler`` resumes (``islice(iter, yielded, None)``).
    """
    sampler = torch_sampler(n, world)
    sampler.set_epoch(epoch)
    indices = itertools.islice(iter(sampler), offset, None)
    while batch := list(itertools.islice(indices, BATCH)):
        yield batch


def resume_skip(n: int) -> int:
    """Batches before the middle of epoch ``RESUME_EPOCH`` (W = 1)."""
    return (RESUME_EPOCH * n + n // 2) // BATCH


def det_chain(det: ModuleType, n: int, world: int, skip: int = 0) -> Batches:
    shuffle = det.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0)
    shard = det.DistributedSampler(det.RepeatSampler(shuffle), world, 0)
    batches: Batches = det.SkipBatchSampler(tud.BatchSampler(shard, BATCH, False), skip)
    return batches


def first_index(sampler: Iterable[int]) -> int:
    return next(iter(sampler))


def ds_shuffle_first(n: int) -> int:
    return first_index(ds.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0))


def torch_shuffle_first(n: int) -> int:
    return first_index(torch_sampler(n, 1))


def det_shuffle_first(det: ModuleType, n: int) -> int:
    return first_index(det.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0))


# -- measuring -----------------------------------------------------------------------------


def _status_bytes(name: str) -> int | None:
    """A ``/proc/self/status`` field in bytes (VmRSS, VmHWM), or None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for text in f:
                if text.startswith(name + ":"):
                    return int(text.split()[1]) * 1024
    except OSError:
        return None
    return None


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_MALLOC_TRIM = _load_malloc_trim()


class RssProbe:
    """Peak RSS growth over a region: resets VmHWM (Linux >= 4.0) and reads it after.

    Free heap memory is first handed back to the OS (glibc's ``malloc_trim``), so that the
    region's allocations show up as growth rather than reuse. Where the peak cannot be
    reset, it falls back to the growth of VmRSS, which misses memory freed before the end
    of the region.
    """

    def __init__(self) -> None:
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)
        self.before = _status_bytes("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            self.peak_field = "VmHWM"
        except OSError:
            self.peak_field = "VmRSS"

    def growth(self) -> int | None:
        after = _status_bytes(self.peak_field)
        if self.before is None or after is None:
            return None
        return max(0, after - self.before)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _drain(batches: Batches, budget: int, deadline: float) -> int:
    """Iterate until ``budget`` indices or the deadline (checked every 16 batches)."""
    done = 0
    for i, batch in enumerate(batches):
        done += len(batch)
        if done >= budget:
            break
        if not i & 15 and time.perf_counter() > deadline:
            break
    return done


def measure_rate(make: Callable[[], Batches], s: Settings) -> Cell:
    """Indices per second while iterating ``make()`` (built inside the timed region)."""
    rates: list[float] = []
    runs: list[dict[str, float]] = []
    capped = False
    for _ in range(s.repeats):
        gc.collect()
        start = time.perf_counter()
        done = _drain(make(), s.budget, start + s.rate_cap)
        elapsed = time.perf_counter() - start
        rates.append(done / elapsed)
        runs.append({"indices": done, "seconds": elapsed})
        capped = done < s.budget
        if capped or elapsed > s.rate_cap / 3:
            break
    return Cell("capped" if capped else "ok", _median(rates), rates, extra={"runs": runs})


@dataclass
class FirstBatch:
    """Build and first-batch times of a chain (medians), and optionally its RSS growth."""

    build: float
    first: float
    total: float
    samples: list[tuple[float, float]]
    rss: int | None = None


def _first_batch(build: Callable[[], Batches]) -> tuple[float, float]:
    t0 = time.perf_counter()
    chain = build()
    t1 = time.perf_counter()
    batch = next(iter(chain))
    t2 = time.perf_counter()
    if len(batch) != BATCH:
        raise RuntimeError(f"first batch has {len(batch)} indices, expected {BATCH}")
    return t1 - t0, t2 - t1


def time_first_batch(
    build: Callable[[], Batches], repeats: int, cap: float, *, rss: bool = False
) -> FirstBatch:
    """Time ``build()`` and ``next(iter(...))``; with ``rss``, one more run for the RSS.

    The first run warms the caches up (a ``gc.collect()`` evicts them, which alone triples
    detsamplers' sub-millisecond times) and is dropped, unless it took more than a third
    of the cap: then it is the only run.
    """
    gc.collect()
    samples = [_first_batch(build)]
    if sum(samples[0]) <= cap / 3:
        samples = [_first_batch(build) for _ in range(repeats)]
    grown = None
    if rss:  # a run of its own: the probe hands memory back to the OS, slowing the run
        gc.collect()
        probe = RssProbe()
        _first_batch(build)
        grown = probe.growth()
    return FirstBatch(
        build=_median([b for b, _ in samples]),
        first=_median([f for _, f in samples]),
        total=_median([b + f for b, f in samples]),
        samples=samples,
        rss=grown,
    )


def traced_peak(op: Callable[[], object]) -> tuple[int, float]:
    """The tracemalloc peak of ``op()`` in bytes, and its (traced, slower) run time."""
    gc.collect()
    tracemalloc.start()
    try:
        start = time.perf_counter()
        op()
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, elapsed


def rss_peak(op: Callable[[], object]) -> tuple[int | None, float]:
    gc.collect()
    probe = RssProbe()
    start = time.perf_counter()
    op()
    elapsed = time.perf_counter() - start
    return probe.growth(), elapsed


def extrapolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """Estimate the time at ``x`` from measured ``(x, seconds)`` points (linear)."""
    if len(points) >= 2:
        (x0, y0), (x1, y1) = points[-2], points[-1]
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        return y1 + slope * (x - x1)
    if len(points) == 1 and points[0][0] > 0:
        return points[0][1] * x / points[0][0]
    return None


def over_cap(estimate: float | None, cap: float) -> Cell | None:
    if estimate is not None and estimate > cap:
        return Cell(
            "skipped",
            note=f"> cap (est. {fmt_time(estimate)})",
            extra={"estimate_seconds": estimate, "cap_seconds": cap},
        )
    return None


def materialises(n: int) -> Cell:
    return Cell(
        "skipped",
        note="skipped: materialises N",
        extra={"reason": f"would hold {fmt_bytes(8 * n)}+ of indices"},
    )


def determined_skip_cell(
    det: Peer, n: int, skip: int, points: list[tuple[float, float]], x: float, s: Settings
) -> Cell:
    """Determined's build + first batch after ``skip`` batches, unless it would exceed the cap.

    ``points`` holds the ``(x, seconds)`` already measured along this row of the grid; the
    new one is appended, and the next cell extrapolates from them.
    """
    if det.module is None:
        return not_installed()
    if n > MATERIALISE_LIMIT:
        return materialises(n)
    capped = over_cap(extrapolate(points, x), s.op_cap)
    if capped is not None:
        return capped
    timing = time_first_batch(partial(det_chain, det.module, n, 1, skip), s.repeats, s.op_cap)
    points.append((x, timing.total))
    return Cell("ok", timing.total, [b + f for b, f in timing.samples])


def warm_up(det: Peer) -> None:
    """First calls pay for lazy imports, numpy/torch dispatch caches and thread pools."""
    next(iter(ds_chain(1000, 2, 5)))
    next(iter(torch_chain(1000, 2)))
    ds_shuffle_first(1000)
    torch_shuffle_first(1000)
    if det.module is not None:
        next(iter(det_chain(det.module, 1000, 2, 5)))


# -- the tables ------------------------------------------------------------------------------


def table_throughput(s: Settings, det: Peer) -> Table:
    headers = ["W", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for world in s.workers:
        ours = measure_rate(partial(ds_chain, N_SMALL, world), s)
        theirs = measure_rate(partial(torch_epochs, N_SMALL, world), s)
        if det.module is None:
            dets = not_installed()
        else:
            dets = measure_rate(partial(det_chain, det.module, N_SMALL, world), s)
        rows.append(
            [
                str(world),
                show(ours, fmt_rate),
                show(theirs, fmt_rate),
                show(dets, fmt_rate),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
            ]
        )
        records.append(
            {
                "world_size": world,
                "n": N_SMALL,
                "unit": "indices/s",
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"indices/s yielded on rank 0 of W (batches of {BATCH}, N = {fmt_n(N_SMALL)}), "
        f"chain built inside the timed region; budget {s.budget:,} indices or "
        f"{s.rate_cap:g} s per run, median of up to {s.repeats} runs.",
        "* = stopped at the time cap: the rate over what was done. "
        "ds/peer above 1 = detsamplers yields more indices per second.",
    ]
    title = "Per-rank throughput (indices/s, higher is better)"
    return Table("a", title, headers, rows, notes, records)


def table_seek(s: Settings) -> Table:
    headers = [
        "N",
        "epochs",
        "skip (batches)",
        "build",
        "first batch",
        "total",
        "tracemalloc peak",
        "RSS peak growth",
        "target",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for n in s.seek_sizes:
        for epochs in s.seek_epochs:
            skip = epochs * n // BATCH
            timing = time_first_batch(partial(ds_chain, n, 1, skip), s.repeats, s.op_cap, rss=True)
            peak, _ = traced_peak(partial(ds_first_batch, n, 1, skip))
            extra = max(peak, timing.rss or 0)
            met = timing.total < TARGET_SECONDS and extra < TARGET_BYTES
            rows.append(
                [
                    fmt_n(n),
                    str(epochs),
                    f"{skip:,}",
                    fmt_time(timing.build),
                    fmt_time(timing.first),
                    fmt_time(timing.total),
                    fmt_bytes(peak),
                    "n/a" if timing.rss is None else fmt_bytes(timing.rss),
                    "met" if met else "MISSED",
                ]
            )
            records.append(
                {
                    "n": n,
                    "epochs": epochs,
                    "skip": skip,
                    "build_seconds": timing.build,
                    "first_batch_seconds": timing.first,
                    "total_seconds": timing.total,
                    "samples_build_first": timing.samples,
                    "tracemalloc_peak_bytes": peak,
                    "rss_peak_growth_bytes": timing.rss,
                    "target_met": met,
                }
            )
    notes = [
        "detsamplers, W = 1: build make_batch_sampler(..., skip) then next(iter(chain)); "
        f"skip = epochs * N / {BATCH}. Median of {s.repeats} runs.",
        "Memory is that of build + first batch, each measured in a run of its own: the "
        "tracemalloc peak and the peak RSS growth.",
        f"target (from the issue, for N = 1e9): total < {fmt_time(TARGET_SECONDS)} and "
        f"extra memory < {fmt_bytes(TARGET_BYTES)}.",
    ]
    title = "Time to the first batch after a skip: detsamplers (lower is better)"
    return Table("b1", title, headers, rows, notes, records)


def table_seek_peers(s: Settings, det: Peer, seek: Table) -> Table:
    headers = ["N", "epochs", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for n in s.seek_sizes:
        det_points: list[tuple[float, float]] = []
        for epochs in s.seek_epochs:
            skip = epochs * n // BATCH
            mine = next(r for r in seek.records if r["n"] == n and r["epochs"] == epochs)
            ours = Cell("ok", mine["total_seconds"])
            if n > MATERIALISE_LIMIT:
                theirs = materialises(n)
            else:
                timing = time_first_batch(partial(torch_chain, n, 1, epochs), s.repeats, s.op_cap)
                theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
            dets = determined_skip_cell(det, n, skip, det_points, epochs, s)
            rows.append(
                [
                    fmt_n(n),
                    str(epochs),
                    show(ours, fmt_time),
                    show(theirs, fmt_time),
                    show(dets, fmt_time),
                    show_ratio(ours, theirs),
                    show_ratio(ours, dets),
                ]
            )
            records.append(
                {
                    "n": n,
                    "epochs": epochs,
                    "skip": skip,
                    "unit": "seconds",
                    "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
                }
            )
    notes = [
        "Build + first batch at the position, W = 1 (detsamplers from table b1). torch "
        "resumes at an epoch boundary with set_epoch(epochs) and pays a randperm(N) per "
        "epoch; Determined iterates every skipped batch, O(position).",
        "Not run: peers that would materialise N = 1e9 indices (8 GB+), and Determined "
        f"cells whose time, extrapolated from the earlier positions, exceeds the "
        f"{s.op_cap:g} s cap. ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch after a skip: against the peers (lower is better)"
    return Table("b2", title, headers, rows, notes, records)


def table_resume_sizes(s: Settings, det: Peer) -> Table:
    headers = [
        "N",
        "skip (batches)",
        "detsamplers",
        "torch",
        "Determined",
        "ds/torch",
        "ds/Determined",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    det_points: list[tuple[float, float]] = []
    for n in s.resume_sizes:
        skip = resume_skip(n)
        mine = time_first_batch(partial(ds_chain, n, 1, skip), s.repeats, s.op_cap)
        ours = Cell("ok", mine.total, [b + f for b, f in mine.samples])
        if n > MATERIALISE_LIMIT:
            theirs = materialises(n)
        else:
            timing = time_first_batch(
                partial(torch_resume, n, 1, RESUME_EPOCH, n // 2), s.repeats, s.op_cap
            )
            theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        dets = determined_skip_cell(det, n, skip, det_points, n, s)
        rows.append(
            [
                fmt_n(n),
                f"{skip:,}",
                show(ours, fmt_time),
                show(theirs, fmt_time),
                show(dets, fmt_time),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
            ]
        )
        records.append(
            {
                "n": n,
                "skip": skip,
                "epoch": RESUME_EPOCH + 0.5,
                "unit": "seconds",
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"Build + first batch in the middle of epoch {RESUME_EPOCH} (after 3.5 N records), "
        f"W = 1; median of {s.repeats} runs after a warm-up run (one run when it takes more "
        f"than {s.op_cap / 3:.2g} s). detsamplers and Determined skip the batches; torch "
        f"calls set_epoch({RESUME_EPOCH}), draws its randperm(N) and islices past N/2 indices.",
        f"Not run: torch and Determined above N = {fmt_n(MATERIALISE_LIMIT)}: they hold every "
        "index of the epoch (at 1e9, 8 GB for torch's tensor and some 36 GB for its list of "
        "Python ints); Determined cells whose time, extrapolated from the smaller N, exceeds "
        f"the {s.op_cap:g} s cap. ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch after resume, against N (lower is better)"
    return Table("b3", title, headers, rows, notes, records)


def table_first_batch(s: Settings, det: Peer) -> Table:
    headers = [
        "W",
        "ds build",
        "ds first batch",
        "detsamplers",
        "torch",
        "Determined",
        "ds/torch",
        "ds/Determined",
        "target",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for world in s.workers:
        mine = time_first_batch(partial(ds_chain, N_SMALL, world), s.repeats, s.op_cap)
        ours = Cell("ok", mine.total, [b + f for b, f in mine.samples])
        timing = time_first_batch(partial(torch_chain, N_SMALL, world), s.repeats, s.op_cap)
        theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        if det.module is None:
            dets = not_installed()
        else:
            timing = time_first_batch(
                partial(det_chain, det.module, N_SMALL, world), s.repeats, s.op_cap
            )
            dets = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        assert theirs.value is not None
        met = mine.total <= theirs.value
        rows.append(
            [
                str(world),
                fmt_time(mine.build),
                fmt_time(mine.first),
                show(ours, fmt_time),
                show(theirs, fmt_time),
                show(dets, fmt_time),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
                "met" if met else "MISSED",
            ]
        )
        records.append(
            {
                "world_size": world,
                "n": N_SMALL,
                "unit": "seconds",
                "ds_build_seconds": mine.build,
                "ds_first_batch_seconds": mine.first,
                "target_met": met,
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"Build + next(iter(chain)) at position 0, rank 0 of W, N = {fmt_n(N_SMALL)}; "
        f"median of {s.repeats} runs. target: detsamplers no slower than torch. "
        "ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch from position 0 (lower is better)"
    return Table("c", title, headers, rows, notes, records)


def _memory_cells(
    s: Settings, ops: dict[str, Callable[[int], object] | None]
) -> list[dict[str, tuple[Cell, Cell]]]:
    """For each N: each sampler's (tracemalloc peak, RSS peak growth) cells."""
    out: list[dict[str, tuple[Cell, Cell]]] = [{} for _ in s.memory_sizes]
    for name, op in ops.items():
        points: list[tuple[float, float]] = []
        for i, n in enumerate(s.memory_sizes):
            if op is None:
                out[i][name] = (not_installed(), not_installed())
                continue
            capped = over_cap(extrapolate(points, n), s.memory_cap)
            if capped is not None:
                out[i][name] = (capped, capped)
                continue
            rss, seconds = rss_peak(partial(op, n))  # first: tracemalloc's tables stay mapped
            peak, traced_seconds = traced_peak(partial(op, n))
            points.append((n, traced_seconds))
            traced = Cell("ok", peak, extra={"traced_seconds": traced_seconds})
            grown = (
                Cell("skipped", note="n/a")
                if rss is None
                else Cell("ok", rss, extra={"seconds": seconds})
            )
            out[i][name] = (traced, grown)
    return out


def tables_memory(s: Settings, det: Peer) -> list[Table]:
    ops: dict[str, Callable[[int], object] | None] = {
        "detsamplers": ds_shuffle_first,
        "torch": torch_shuffle_first,
        "determined": None if det.module is None else partial(det_shuffle_first, det.module),
    }
    cells = _memory_cells(s, ops)
    headers = ["N", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    tables: list[Table] = []
    for which, key, title, note in (
        (
            0,
            "d1",
            "Peak memory of a shuffle's first index: tracemalloc (lower is better)",
            "tracemalloc does not see torch's tensor storage (the 8 N bytes of randperm's "
            "result while it is turned into a list); d2 counts it.",
        ),
        (
            1,
            "d2",
            "Peak memory of a shuffle's first index: RSS growth (lower is better)",
            "Peak RSS growth of an untraced run (VmHWM reset before it): a lower bound when "
            "the allocator reuses memory the process already holds. RSS moves by pages: figures "
            "below about 100 kB are noise.",
        ),
    ):
        rows: list[list[str]] = []
        records: list[dict[str, Any]] = []
        for n, by_name in zip(s.memory_sizes, cells, strict=True):
            row = {name: pair[which] for name, pair in by_name.items()}
            rows.append(
                [
                    fmt_n(n),
                    show(row["detsamplers"], fmt_bytes),
                    show(row["torch"], fmt_bytes),
                    show(row["determined"], fmt_bytes),
                    show_ratio(row["detsamplers"], row["torch"]),
                    show_ratio(row["detsamplers"], row["determined"]),
                ]
            )
            records.append({"n": n, "unit": "bytes", "cells": row})
        notes = [
            "Build ReproducibleShuffleSampler(SequentialSampler(range(N)), 0) (torch: "
            "DistributedSampler(range(N), 1, 0, shuffle=True)) and take its first index.",
            note,
            f"Not run: cells whose traced time, extrapolated from smaller N, exceeds "
            f"{s.memory_cap:g} s. ds/peer below 1 = detsamplers uses less.",
        ]
        tables.append(Table(key, title, headers, rows, notes, records))
    return tables


# -- output ----------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, Cell):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def write_json(
    path: Path, s: Settings, info: dict[str, str], tables: list[Table], wall: float
) -> None:
    payload = {
        "settings": asdict(s),
        "machine": info,
        "wall_seconds": wall,
        "tables": [
            {
                "key": t.key,
                "title": t.title,
                "headers": t.headers,
                "rows": t.rows,
                "notes": t.notes,
                "records": _jsonable(t.records),
            }
            for t in tables
        ],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def matplotlib_missing() -> str | None:
    if importlib.util.find_spec("matplotlib") is None:
        return (
            f"--plot: matplotlib is not importable from {sys.executable}; no PNG is written "
            "(pip install matplotlib, or run with a Python that has it)."
        )
    return None


def _series(
    records: list[dict[str, Any]], x_key: str, name: str
) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for record in records:
        cell: Cell = record["cells"][name]
        if cell.measured and cell.value:
            xs.append(record[x_key])
            ys.append(cell.value)
    return xs, ys


def write_plot(path: Path, tables: list[Table], machine: str) -> None:
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    by_key = {t.key: t for t in tables}
    names = {"detsamplers": "detsamplers", "torch": "torch", "determined": "Determined"}
    colors = {"detsamplers": "C0", "torch": "C1", "determined": "C2"}
    panels = [
        ("a", "world_size", "a. per-rank throughput, N=1e6", "W", "indices/s"),
        ("b2", "epochs", "b2. first batch after skipping N x epochs, W=1", "epochs", "seconds"),
        ("b3", "n", "b3. first batch after resume mid-epoch 3, W=1", "N", "seconds"),
        ("c", "world_size", "c. first batch from position 0, N=1e6", "W", "seconds"),
        ("d1", "n", "d1. tracemalloc peak, shuffle's first index", "N", "bytes"),
        ("d2", "n", "d2. RSS peak growth, shuffle's first index", "N", "bytes"),
    ]
    fig, axes = plt.subplots(3, 2, figsize=(12, 13))
    for ax, (key, x_key, title, x_label, y_label) in zip(axes.flat, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        table = by_key.get(key)
        if table is None:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            continue
        groups: list[tuple[str, list[dict[str, Any]]]] = [("", table.records)]
        if key == "b2":
            sizes = sorted({r["n"] for r in table.records}, reverse=True)
            groups = [(f", N={fmt_n(n)}", [r for r in table.records if r["n"] == n]) for n in sizes]
        for (suffix, records), style in zip(groups, itertools.cycle(["-", "--", ":"])):
            for name, label in names.items():
                xs, ys = _series(records, x_key, name)
                if xs:
                    ax.plot(xs, ys, style, marker="o", color=colors[name], label=label + suffix)
        if key == "b2":  # epoch 0 has no place on a log axis: symlog is linear on [0, 1]
            ax.set_xscale("symlog", linthresh=1)
        else:
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(machine, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark detsamplers against torch's and Determined's samplers.",
        epilog="The module docstring explains each table.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller grids and 2 s caps, < 60 s in total"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    parser.add_argument(
        "--plot", type=Path, metavar="PATH", help="save a PNG here (needs matplotlib)"
    )
    parser.add_argument(
        "--tables",
        default="abcd",
        help="which tables to run, a subset of 'abcd' (default: all)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.tables) - set("abcd")
    if unknown or not args.tables:
        parser.error(f"--tables takes letters from 'abcd', got {args.tables!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick else FULL
    plot_problem = matplotlib_missing() if args.plot else None
    if plot_problem:
        print(plot_problem, file=sys.stderr)
    started = time.perf_counter()
    det = load_determined()
    info = machine_info(det)
    machine = machine_line(info)
    warm_up(det)
    tables: list[Table] = []

    def emit(table: Table) -> None:
        tables.append(table)
        print(render(table, machine), end="\n\n", flush=True)

    if "a" in args.tables:
        emit(table_throughput(settings, det))
    if "b" in args.tables:
        seek = table_seek(settings)
        emit(seek)
        emit(table_seek_peers(settings, det, seek))
        emit(table_resume_sizes(settings, det))
    if "c" in args.tables:
        emit(table_first_batch(settings, det))
    if "d" in args.tables:
        for table in tables_memory(settings, det):
            emit(table)
    wall = time.perf_counter() - started
    load = machine_info(det)["load_1min"]
    print(f"{settings.mode} mode: {wall:.1f} s wall time, load {load} at the end")
    if args.json:
        write_json(args.json, settings, info, tables, wall)
        print(f"raw figures written to {args.json}")
    if args.plot:
        if plot_problem:
            print(plot_problem, file=sys.stderr)
        else:
            write_plot(args.plot, tables, machine)
            print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
