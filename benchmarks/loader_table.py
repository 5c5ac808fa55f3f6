"""Samples/s of detsamplers.loader against a plain torch DataLoader (issue 3's figure).

Run ``python benchmarks/loader_table.py`` (N = 1e6; or ``--quick`` for CI, N = 1e5,
under 30 s; ``--bookkeeping-only`` for the last tables alone). Both loaders read the
same trivial map-style dataset (``__getitem__`` returns its index) with batch size 32 and
torch's default collate. Ours is
``get_data_loader(repeat=True)`` with ``shuffle=True`` (a keyed permutation plus per-batch
seeding of torch, numpy and random; with workers, small batches come back by value);
torch's is ``DataLoader(shuffle=True)``.

Each run times one epoch from ``iter()`` to its last batch: torch draws its whole
permutation (``randperm(N).tolist()``, about 1.3 us a batch here) when the first batch is
asked for, and workers start then too, so leaving the first batch out would leave that
work out. The "after the first batch" columns leave it out anyway, for comparison with
older figures. The table gives the median of several runs, alternating which loader goes
first. The last columns give the CPU time a batch of the main process and of the workers
(all of them, reaped after the epoch), from ``getrusage``. Epochs of only a few hundred
batches understate detsamplers: its first blocks of indices are small (a quick first batch
after a seek), about 1 ms in all before the blocks reach full size, paid once per
``iter()`` of the endless training stream, not per epoch.

The last table is the cost of the exact state (NOTE [ handed batches ]): the same loader,
with and without the iterators' count of the batches handed out, in paired segments
(alternating which goes first): the main process's CPU time a batch and the throughput.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import resource
import statistics
import time
import timeit
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud
from _common import Trivial

from detsamplers.loader import DataLoader, _lean
from detsamplers.loader._batches import Handed
from detsamplers.loader._handed import HandedMulti
from detsamplers.loader._seeding import positioned_batch, seed_globals


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def epoch_rates(loader: Any, batches: int, batch_size: int) -> tuple[float, ...]:
    """Samples/s over ``batches`` batches from ``iter()``, and after the first batch; then
    the CPU microseconds a batch of the main process and of the workers (reaped at the end).
    """
    main_cpu, workers_cpu = (
        _cpu_seconds(resource.RUSAGE_SELF),
        _cpu_seconds(resource.RUSAGE_CHILDREN),
    )
    start = time.perf_counter()
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter()
    # Count what arrived: a loader that ends early must not be credited with more.
    done = 1 + sum(1 for _ in islice(iterator, batches - 1))
    end = time.perf_counter()
    main_cpu = _cpu_seconds(resource.RUSAGE_SELF) - main_cpu
    del iterator  # shuts the workers down, so that their CPU time is counted
    gc.collect()
    workers_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - workers_cpu
    return (
        done * batch_size / (end - start),
        (done - 1) * batch_size / (end - first),
        main_cpu / done * 1e6,
        workers_cpu / done * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a shorter epoch, fewer runs (CI)")
    parser.add_argument(
        "--bookkeeping-only", action="store_true", help="only the exact state's cost tables"
    )
    args = parser.parse_args()
    batch_size = 32
    length, runs = (100_000, 3) if args.quick else (1_000_000, 5)
    batches = length // batch_size
    dataset = Trivial(length)
    if args.bookkeeping_only:
        batch_micros = print_bookkeeping(dataset, batch_size, quick=args.quick)
        print_isolated_bookkeeping(batch_micros, quick=args.quick)
        return
    print(f"N={length:,}, B={batch_size}: one epoch ({batches:,} batches) a run, median of {runs}")
    print(
        f"{'num_workers':>11}  {'torch (samples/s)':>18}  {'detsamplers':>12}  {'ratio':>5}"
        f"  {'after the first batch: torch':>28}  {'detsamplers':>12}  {'ratio':>5}"
        f"  {'CPU us a batch, main/workers: torch':>35}  {'detsamplers':>11}"
    )
    for workers in (0, 2):
        theirs: list[tuple[float, ...]] = []
        mine: list[tuple[float, ...]] = []
        for run in range(runs):
            ours = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
            loaders = {
                "torch": tud.DataLoader(
                    dataset, batch_size=batch_size, shuffle=True, num_workers=workers
                ),
                "ours": ours.get_data_loader(repeat=True),
            }
            order = ["torch", "ours"] if run % 2 == 0 else ["ours", "torch"]
            for name in order:
                result = epoch_rates(loaders.pop(name), batches, batch_size)
                (theirs if name == "torch" else mine).append(result)
        base = [statistics.median(r[i] for r in theirs) for i in range(4)]
        ds = [statistics.median(r[i] for r in mine) for i in range(4)]
        print(
            f"{workers:>11}  {base[0]:>18,.0f}  {ds[0]:>12,.0f}  {ds[0] / base[0]:>4.2f}x"
            f"  {base[1]:>28,.0f}  {ds[1]:>12,.0f}  {ds[1] / base[1]:>4.2f}x"
            f"  {f'{base[2]:.0f}/{base[3]:.0f}':>35}  {f'{ds[2]:.0f}/{ds[3]:.0f}':>11}"
        )
    print_costs(dataset, batch_size, quick=args.quick)
    batch_micros = print_bookkeeping(dataset, batch_size, quick=args.quick)
    print_isolated_bookkeeping(batch_micros, quick=args.quick)


class _PlainSingle(_lean._Unannotated, _lean._SINGLE):  # type: ignore[misc, valid-type]
    """The loader's in-process iterator without the count of batches handed out."""


class _PlainMulti(_lean._Unannotated, _lean._MULTI):  # type: ignore[misc, valid-type]
    """The loader's worker iterator without the count of batches handed out."""


class Uncounted(_lean.LeanDataLoader):
    """The same loader (seeded fetch, no profiler span) without the exact-state bookkeeping."""

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return _PlainSingle(self)
        self.check_worker_number_rationality()
        return _PlainMulti(self)


def _segment(iterator: Any, count: int) -> tuple[float, float]:
    """Wall and main-process CPU seconds to take ``count`` batches from ``iterator``."""
    wall, cpu = time.perf_counter(), _cpu_seconds(resource.RUSAGE_SELF)
    for _ in islice(iterator, count):
        pass
    return time.perf_counter() - wall, _cpu_seconds(resource.RUSAGE_SELF) - cpu


def print_bookkeeping(dataset: Trivial, batch_size: int, *, quick: bool) -> float:
    """The exact state's cost: the loader with and without it, in paired segments.

    Both loaders run side by side (their iterators and workers stay up), and segments of
    each alternate, so that the machine's state is shared by every pair. The figure is the
    median over pairs of the difference (CPU time of the main process, where the
    bookkeeping runs) and of the throughput ratio.

    Returns:
        The median time a batch of the loader with workers, without the bookkeeping (us).
    """
    pairs = 15 if quick else 41
    segment = {0: 1_000 if quick else 5_000, 2: 300 if quick else 2_000}
    print(f"\nThe exact state's bookkeeping, B={batch_size}: {pairs} paired segments")
    for workers in (0, 2):
        iterators = {}
        for counted in (True, False):
            data = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
            loader = data.get_data_loader(repeat=True, loader_class=None if counted else Uncounted)
            iterators[counted] = iter(loader)
            _segment(iterators[counted], segment[workers])  # warm: workers up, blocks full
        cpu, ratios, walls = [], [], []
        for pair in range(pairs):
            runs = {}
            for counted in (True, False) if pair % 2 == 0 else (False, True):
                runs[counted] = _segment(iterators[counted], segment[workers])
            cpu.append((runs[True][1] - runs[False][1]) / segment[workers] * 1e6)
            ratios.append(runs[False][0] / runs[True][0])
            walls.append(runs[False][0] / segment[workers] * 1e6)
        del iterators
        gc.collect()
        print(
            f"  num_workers={workers}: main-process CPU {statistics.median(cpu):+.2f} us a batch "
            f"(a batch takes {statistics.median(walls):.1f} us without it), throughput "
            f"{statistics.median(ratios):.3f}x of the loader without it "
            f"(pairs {min(ratios):.3f} to {max(ratios):.3f})"
        )
    return statistics.median(walls)


class _Received:
    """torch's worker iterator reduced to what the bookkeeping touches: results in order."""

    def __init__(self, batch: Any) -> None:
        self._sampler_iter = itertools.repeat(batch)
        self._rcvd_idx = 0

    def _next_index(self) -> Any:
        return next(self._sampler_iter)

    def _next_data(self) -> Any:
        self._rcvd_idx += 1
        return None


class _CountedReceived(HandedMulti, _Received):
    pass


def print_isolated_bookkeeping(batch_micros: float, *, quick: bool) -> None:
    """The bookkeeping's own CPU time a batch, with everything else taken out."""
    number = 20_000 if quick else 200_000
    batch = positioned_batch(list(range(32)), 0, 0, 1, 0)
    plain, counted = _Received(batch), _CountedReceived(batch)
    counted._handed, counted._sent = Handed(0), deque()

    def step(iterator: Any) -> Callable[[], Any]:
        def call() -> Any:
            iterator._next_index()
            return iterator._next_data()

        return call

    cost = _per_call(step(counted), number) - _per_call(step(plain), number)
    print(
        f"  the worker iterator's bookkeeping alone (_next_index + _next_data): {cost:+.2f} us "
        f"a batch, {cost / batch_micros:.2%} of a batch with 2 workers ({batch_micros:.1f} us)"
    )


def _per_call(call: Callable[[], Any], number: int) -> float:
    """Microseconds a call, the best of 5 repeats."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def _per_batch(batches: Any, count: int) -> float:
    """Microseconds a batch to iterate ``count`` batches, once the first has come."""
    iterator = iter(batches)
    next(iterator)
    start = time.perf_counter()
    for _ in islice(iterator, count):
        pass
    return (time.perf_counter() - start) / count * 1e6


def print_costs(dataset: Trivial, batch_size: int, *, quick: bool) -> None:
    """Where a batch's time goes without workers: each piece timed on its own, in-process."""
    number = 2_000 if quick else 20_000
    indices = list(range(batch_size))
    ours = DataLoader(dataset, batch_size=batch_size, shuffle=True).get_data_loader(True)
    theirs = tud.DataLoader(dataset, batch_size=batch_size, shuffle=True)
    key = 0x9E3779B97F4A7C15

    def span() -> None:
        with torch.autograd.profiler.record_function("span"):
            pass

    def restore() -> None:
        np.random.set_state(np.random.get_state())
        random.setstate(random.getstate())
        torch.default_generator.set_state(torch.default_generator.get_state())

    start = time.perf_counter()
    torch.randperm(len(dataset)).tolist()
    randperm = (time.perf_counter() - start) / (len(dataset) // batch_size) * 1e6
    rows = [
        ("torch's whole batch (DataLoader, no workers)", _per_batch(theirs, number)),
        ("detsamplers' whole batch (get_data_loader)", _per_batch(ours, number)),
        ("default_collate of the batch", _per_call(lambda: tud.default_collate(indices), number)),
        ("torch's profiler span (record_function)", _per_call(span, number)),
        ("torch's batch sampler", _per_batch(theirs.batch_sampler, number)),
        ("  + its randperm(N).tolist(), spread over the epoch", randperm),
        ("detsamplers' batch sampler", _per_batch(ours.batch_sampler, number)),
        ("seeding torch", _per_call(lambda: torch.default_generator.manual_seed(key), number)),
        ("seeding numpy", _per_call(lambda: np.random.seed(key & 0xFFFFFFFF), number)),
        ("seeding random", _per_call(lambda: random.seed(key), number)),
        (
            "seed_globals (all three, as the loader does)",
            _per_call(lambda: seed_globals(key), number),
        ),
        ("saving and restoring the three states (not done)", _per_call(restore, number // 10)),
    ]
    print(f"\nPer-batch costs without workers, B={batch_size}: us a batch, best of 5")
    for name, micros in rows:
        print(f"  {name:<52}  {micros:>7.2f}")


if __name__ == "__main__":
    main()
