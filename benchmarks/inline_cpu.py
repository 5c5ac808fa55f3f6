"""Main-process CPU a batch: batches sent back by value or in one storage, against torch's way.

Run ``python benchmarks/inline_cpu.py`` (or ``--quick`` for CI, about a minute). A torch
``DataLoader`` with two workers reads a trivial dataset (each record its index) in batches
of 8; its collate builds a dict of five int64 tensors of ``(8, width)``. The rows compare
torch's way (each tensor moved to shared memory, one file-descriptor handshake each) with
:class:`~detsamplers.loader._inline.InlineCollate` around the same collate (NOTE [ inline
batches ]): under 1 MiB the batch travels by value, above it in one shared storage. The
loader is the plain torch one in both rows, so only the way batches cross differs.

Each figure is the median of several runs (the two ways alternating) of the CPU time
(user plus system, ``getrusage``) the main process spends a batch, after a warm-up of a
few batches, and the workers' CPU time a batch (reaped when the loader is deleted). The
machine's load changes these figures: compare rows from the same run only.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
from collections.abc import Callable
from functools import partial
from itertools import islice
from typing import Any

import torch
import torch.utils.data as tud

from detsamplers.loader._inline import InlineCollate

_KEYS = ("input_ids", "labels", "positions", "documents", "mask")


class Indices(tud.Dataset[int]):
    """Record ``i`` is ``i``: the batch's cost is all in the collate and the trip back."""

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, index: int) -> int:
        return index


def collate(width: int, indices: list[int]) -> dict[str, torch.Tensor]:
    """Five ``(len(indices), width)`` int64 tensors, as a token collate gives."""
    return {key: torch.full((len(indices), width), indices[0]) for key in _KEYS}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def cpu_a_batch(collate_fn: Callable[[Any], Any], batches: int) -> tuple[float, float]:
    """Microseconds of main-process and of worker CPU a batch, over ``batches`` batches."""
    loader = tud.DataLoader(Indices(), batch_size=8, num_workers=2, collate_fn=collate_fn)
    workers = _cpu(resource.RUSAGE_CHILDREN)
    iterator = iter(loader)
    for _ in islice(iterator, 8):  # workers started, first batches in flight
        pass
    main = _cpu(resource.RUSAGE_SELF)
    done = sum(1 for _ in islice(iterator, batches))
    main = _cpu(resource.RUSAGE_SELF) - main
    del iterator  # shuts the workers down, so that their CPU time is counted
    gc.collect()
    workers = _cpu(resource.RUSAGE_CHILDREN) - workers
    return main / done * 1e6, workers / (done + 8) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer batches and runs (CI)")
    args = parser.parse_args()
    batches, runs = (50, 3) if args.quick else (300, 5)
    print(f"two workers, batches of 8 records, {batches} batches a run, median of {runs} runs")
    print(
        f"{'MB a batch':>10}  {'main CPU us a batch: torch':>26}  {'inline':>8}  {'ratio':>5}"
        f"  {'worker CPU us a batch: torch':>28}  {'inline':>8}"
    )
    for width in (16, 2048, 32768):
        plain = partial(collate, width)
        ways: dict[str, Callable[[Any], Any]] = {"torch": plain, "inline": InlineCollate(plain)}
        results: dict[str, list[tuple[float, float]]] = {"torch": [], "inline": []}
        for run in range(runs):
            for name in ("torch", "inline") if run % 2 == 0 else ("inline", "torch"):
                results[name].append(cpu_a_batch(ways[name], batches))
        torch_main, inline_main = (statistics.median(r[0] for r in results[n]) for n in ways)
        torch_work, inline_work = (statistics.median(r[1] for r in results[n]) for n in ways)
        size = len(_KEYS) * 8 * width * 8 / 1e6
        print(
            f"{size:>10.3f}  {torch_main:>26.0f}  {inline_main:>8.0f}"
            f"  {inline_main / torch_main:>4.2f}x  {torch_work:>28.0f}  {inline_work:>8.0f}"
        )


if __name__ == "__main__":
    main()
