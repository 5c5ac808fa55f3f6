"""Time to the first batch after a resume that changes the batch size, against one that does not.

Run ``python benchmarks/resume_table.py`` (N = 1e6; or ``--quick`` for CI, N = 1e5, a few
seconds). A run saved rank 0's loader state on 2 ranks x 64 records a batch, in the
middle of its fourth epoch (an odd number of batches in, so that the sample position is
not a multiple of the new global batch). Each row builds a fresh
``get_data_loader(repeat=True)`` for rank 0 of the new world, loads that state (or passes
``skip_samples=``), and times from the build to the first batch in hand:

- *same grid*: 2 ranks x 64, loading the state at its position;
- *batch 96, 1 rank*: a changed global batch (128 to 96), loading the state at its sample;
- *batch 96, skip_samples*: the same resume through ``skip_samples=`` instead of a state;
- *batch 48, 4 ranks*: another world size and batch size (global 192).

The dataset is trivial (``__getitem__`` returns its index), so the figures are the cost
of the chain and the loader, not of reading data. With ``num_workers=2`` the time includes
starting the workers. Median of many runs without workers (300, or 50 with ``--quick``)
and of 15 (5) with them, rows alternating in order, after one warm-up run of each row.

The third table times the trial loop's data step at a batch-size schedule switch
(NOTE [ batch size schedule ]): ``MapData.build`` of the trainer at the sample reached,
with the new per-slot batch size (64 to 96 on 2 ranks, global 128 to 192), to the first
batch in hand, against the same build with an unchanged size, as an unchanged resume
does; rank 0, rows alternating, medians as above.

The second table gives the cost of ``seeding="record"`` (NOTE [ per-batch seeding ]):
microseconds a batch of 64 without workers, once the first batch has come, seeding the
global RNGs once a batch against once a record.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

from _common import Trivial, load_average

from detsamplers.loader import DataLoader
from detsamplers.trial._data import MapData

SEED = 5


def saved_state(dataset: Trivial, batches: int) -> dict[str, Any]:
    """Rank 0's loader state after ``batches`` global batches on 2 ranks x 64."""
    loader = DataLoader(dataset, batch_size=64, shuffle=True, seed=SEED)
    train = loader.get_data_loader(True, batches, 2, 0)
    state: dict[str, Any] = train.batch_sampler.state_dict()  # type: ignore[union-attr]
    return state


def resume(
    dataset: Trivial, state: dict[str, Any], size: int, world: int, workers: int, by_state: bool
) -> Callable[[], Any]:
    def run() -> Any:
        loader = DataLoader(dataset, batch_size=size, shuffle=True, seed=SEED, num_workers=workers)
        if by_state:
            train = loader.get_data_loader(True, 0, world, 0)
            train.batch_sampler.load_state_dict(state)  # type: ignore[union-attr]
        else:
            train = loader.get_data_loader(True, 0, world, 0, skip_samples=state["samples"])
        iterator = iter(train)
        first = next(iterator)
        del iterator
        return first

    return run


def rebuild(dataset: Trivial, samples: int, per_slot: int, workers: int) -> Callable[[], Any]:
    """The trainer's rebuild of rank 0 of 2 at ``samples`` with ``per_slot`` a batch."""

    def run() -> Any:
        loader = DataLoader(dataset, batch_size=64, shuffle=True, seed=SEED, num_workers=workers)
        iterator = iter(MapData(loader).build(samples, 2, 0, per_slot))
        first = next(iterator)
        del iterator
        return first

    return run


def first_batch_ms(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def per_batch_us(dataset: Trivial, seeding: str, count: int) -> float:
    loader = DataLoader(dataset, batch_size=64, shuffle=True, seed=SEED, seeding=seeding)
    iterator = iter(loader.get_data_loader(True))
    next(iterator)
    start = time.perf_counter()
    for _ in islice(iterator, count):
        pass
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller dataset, fewer runs (CI)")
    args = parser.parse_args()
    length, count = (100_000, 300) if args.quick else (1_000_000, 3_000)
    runs_by_workers = {0: 50, 2: 5} if args.quick else {0: 300, 2: 15}
    dataset = Trivial(length)
    batches = (3 * length + length // 2) // 128 | 1
    state = saved_state(dataset, batches)
    rows = [
        ("same grid (2 x 64)", 64, 2, True),
        ("batch 96, 1 rank", 96, 1, True),
        ("batch 96, skip_samples", 96, 1, False),
        ("batch 48, 4 ranks", 48, 4, True),
    ]
    print(
        f"N={length:,}: resumed at sample {state['samples']:,} (global batch {batches:,} of "
        f"128); load average {load_average()}"
    )
    print(
        f"{'num_workers':>11}  {'runs':>4}  {'resume':<24}  {'first batch (ms)':>16}"
        f"  {'vs same grid':>12}"
    )
    for workers, runs in runs_by_workers.items():
        for _, size, world, by_state in rows:  # warm-up: imports, caches, key schedules
            first_batch_ms(resume(dataset, state, size, world, workers, by_state))
        times: dict[str, list[float]] = {name: [] for name, *_ in rows}
        for run in range(runs):
            order = rows if run % 2 == 0 else rows[::-1]
            for name, size, world, by_state in order:
                times[name].append(
                    first_batch_ms(resume(dataset, state, size, world, workers, by_state))
                )
        base = statistics.median(times[rows[0][0]])
        for name, *_ in rows:
            median = statistics.median(times[name])
            print(f"{workers:>11}  {runs:>4}  {name:<24}  {median:>16.3f}  {median / base:>11.2f}x")
    print()
    print("schedule switch in the trial loop (rank 0 of 2), first batch after the rebuild")
    switch_rows = [("unchanged (64 a rank)", 64), ("switch to 96 a rank", 96)]
    for workers, runs in runs_by_workers.items():
        for _, per_slot in switch_rows:  # warm-up
            first_batch_ms(rebuild(dataset, state["samples"], per_slot, workers))
        switch_times: dict[str, list[float]] = {name: [] for name, _ in switch_rows}
        for run in range(runs):
            for name, per_slot in switch_rows if run % 2 == 0 else switch_rows[::-1]:
                run_once = rebuild(dataset, state["samples"], per_slot, workers)
                switch_times[name].append(first_batch_ms(run_once))
        base = statistics.median(switch_times[switch_rows[0][0]])
        for name, _ in switch_rows:
            median = statistics.median(switch_times[name])
            print(f"{workers:>11}  {runs:>4}  {name:<24}  {median:>16.3f}  {median / base:>11.2f}x")
    print()
    print(f"seeding, B=64, num_workers=0: us a batch over {count:,} batches, median of 3")
    figures = {
        seeding: statistics.median(per_batch_us(dataset, seeding, count) for _ in range(3))
        for seeding in ("batch", "record")
    }
    for seeding, figure in figures.items():
        print(f"  seeding={seeding!r:<9} {figure:>8.1f} us a batch")
    extra = (figures["record"] - figures["batch"]) / 63
    print(f"  per-record seeding adds {extra:.1f} us a record")


if __name__ == "__main__":
    main()
