"""The first batch after a mid-epoch resume: each framework's default against our loader's.

What each framework does with a plain loader when it resumes deep in an epoch, measured on
the data side only (the framework's own start-up is the same either way):

- Accelerate (``accelerator.skip_first_batches``) and the HF Trainer (which calls it on
  ``resume_from_checkpoint``): a loader rebuilt around a batch sampler that iterates the
  skipped batches' indices and discards them;
- Lightning with torchdata's ``StatefulDataLoader`` (its route to a resumable loader):
  ``load_state_dict`` fast-forwards the sampler by the batches already yielded;
- ours: ``load_state_dict`` on the loader ``get_data_loader(repeat=True)`` returns, which
  seeks in O(1).

Run::

    python benchmarks/framework_resume_table.py           # 4M records, batch 32, 90% in
    python benchmarks/framework_resume_table.py --quick   # 400k records
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.data as tud

from detsamplers.loader import DataLoader


class Indices(tud.Dataset[int]):
    """``length`` records, each its own index: loading costs nothing, seeking is all."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


def first_batch_seconds(make: Callable[[], Any], repeats: int) -> float:
    """The best of ``repeats`` times from building the resumed loader to its first batch."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        next(iter(make()))
        best = min(best, time.perf_counter() - started)
    return best


def accelerate_skip(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate import skip_first_batches

    def make() -> Any:
        generator = torch.Generator().manual_seed(1)
        loader = tud.DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
        return skip_first_batches(loader, skip)

    return make


def stateful_replay(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from torchdata.stateful_dataloader import StatefulDataLoader

    generator = torch.Generator().manual_seed(1)
    first = StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
    batches = iter(first)
    for _ in range(skip):
        next(batches)
    state = first.state_dict()

    def make() -> Any:
        loader = StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True)
        loader.load_state_dict(state)
        return loader

    return make


def ours(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    data = DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=1)
    skipped: Any = data.get_data_loader(repeat=True, skip=skip)  # typed as torch's DataLoader
    state = skipped.state_dict()

    def make() -> Any:
        loader: Any = data.get_data_loader(repeat=True)
        loader.load_state_dict(state)
        return loader

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400k records (CI)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = 400_000 if args.quick else 4_000_000
    batch_size = 32
    skip = int(0.9 * records) // batch_size
    dataset = Indices(records)
    rows = [
        ("Accelerate skip_first_batches (also HF Trainer)", accelerate_skip),
        ("Lightning via StatefulDataLoader load_state_dict", stateful_replay),
        ("detsamplers loader load_state_dict", ours),
    ]
    print(
        f"first batch after a resume at batch {skip:,} of {records // batch_size:,} "
        f"({records:,} records, batch {batch_size}, best of {args.repeats})"
    )
    print(f"{'resume':<52} {'seconds':>10}")
    for name, build in rows:
        try:
            make = build(dataset, batch_size, skip)
        except ImportError as error:
            print(f"{name:<52} {'skipped':>10}  ({error})")
            continue
        print(f"{name:<52} {first_batch_seconds(make, args.repeats):>10.4f}")


if __name__ == "__main__":
    main()
