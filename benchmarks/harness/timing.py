"""Rates, time to a first batch, peak memory, medians, caps and extrapolation."""

from __future__ import annotations

import ctypes
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.fmt import fmt_time
from harness.table import Cell

Batches = Iterable[Sequence[int]]
T = TypeVar("T")


def median(values: Sequence[float]) -> float:
    """The median as a float."""
    return float(statistics.median(values))


def drain(batches: Batches, budget: int, deadline: float) -> int:
    """Iterate until ``budget`` indices or the deadline (checked every 16 batches)."""
    done = 0
    for i, batch in enumerate(batches):
        done += len(batch)
        if done >= budget:
            break
        if not i & 15 and time.perf_counter() > deadline:
            break
    return done


def measure_rate(make: Callable[[], Batches], budget: int, cap: float, repeats: int) -> Cell:
    """Indices per second while iterating ``make()`` (built inside the timed region).

    A run stops at ``budget`` indices or after ``cap`` seconds ("capped": the rate over what
    was done); the median of up to ``repeats`` runs, one when a run takes over ``cap / 3``.
    """
    rates: list[float] = []
    runs: list[dict[str, float]] = []
    capped = False
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        done = drain(make(), budget, start + cap)
        elapsed = time.perf_counter() - start
        rates.append(done / elapsed)
        runs.append({"indices": done, "seconds": elapsed})
        capped = done < budget
        if capped or elapsed > cap / 3:
            break
    return Cell("capped" if capped else "ok", median(rates), rates, extra={"runs": runs})


@dataclass
class FirstBatch:
    """Build and first-batch times of a chain (medians), and optionally its RSS growth."""

    build: float
    first: float
    total: float
    samples: list[tuple[float, float]]
    rss: int | None = None

    def cell(self) -> Cell:
        """The total (build + first batch) as a cell, with every run's total."""
        return Cell("ok", self.total, [b + f for b, f in self.samples])


def _first_batch(build: Callable[[], Batches], size: int | None) -> tuple[float, float]:
    t0 = time.perf_counter()
    chain = build()
    t1 = time.perf_counter()
    batch = next(iter(chain))
    t2 = time.perf_counter()
    if size is not None and len(batch) != size:
        raise RuntimeError(f"first batch has {len(batch)} indices, expected {size}")
    return t1 - t0, t2 - t1


def time_first_batch(
    build: Callable[[], Batches],
    repeats: int,
    cap: float,
    *,
    rss: bool = False,
    size: int | None = None,
) -> FirstBatch:
    """Time ``build()`` and ``next(iter(...))``; with ``rss``, one more run for the RSS.

    The first run warms the caches up (a ``gc.collect()`` evicts them, which alone triples
    detsamplers' sub-millisecond times) and is dropped, unless it took more than a third
    of the cap: then it is the only run. ``size``, when given, is checked against the
    first batch's length.
    """
    gc.collect()
    samples = [_first_batch(build, size)]
    if sum(samples[0]) <= cap / 3:
        samples = [_first_batch(build, size) for _ in range(repeats)]
    grown = None
    if rss:  # a run of its own: the probe hands memory back to the OS, slowing the run
        gc.collect()
        probe = RssProbe()
        _first_batch(build, size)
        grown = probe.growth()
    return FirstBatch(
        build=median([b for b, _ in samples]),
        first=median([f for _, f in samples]),
        total=median([b + f for b, f in samples]),
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


def rss_peak(op: Callable[[], object]) -> tuple[int | None, float]:
    """The peak RSS growth of ``op()`` in bytes (None off Linux), and its run time."""
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
    """A "skipped" cell when the estimate exceeds the cap, else None."""
    if estimate is not None and estimate > cap:
        return Cell(
            "skipped",
            note=f"> cap (est. {fmt_time(estimate)})",
            extra={"estimate_seconds": estimate, "cap_seconds": cap},
        )
    return None


def alternating(names: Sequence[str], rounds: int) -> list[list[str]]:
    """``rounds`` orders of ``names``, each rotated by one: every peer goes first in turn.

    Examples:
        >>> alternating(["a", "b", "c"], 4)
        [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b'], ['a', 'b', 'c']]
    """
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(rounds)] if n else []


def interleaved(
    ops: dict[str, Callable[[], T]], rounds: int, *, warm: bool = False
) -> dict[str, list[T]]:
    """Call every op ``rounds`` times, alternating which goes first; each op's results.

    Each op returns one measurement (a time or a rate); ``gc.collect()`` runs before each.
    Interleaving spreads the load of a shared machine over all peers alike. With ``warm``,
    an untimed call precedes each kept one: ``gc.collect()`` and the other peers' runs
    evict the caches, which alone makes a sub-millisecond operation ten times slower.
    """
    out: dict[str, list[T]] = {name: [] for name in ops}
    for order in alternating(list(ops), rounds):
        for name in order:
            gc.collect()
            if warm:
                ops[name]()
            out[name].append(ops[name]())
    return out
