"""The first batch after a mid-epoch resume: each framework's default against our route.

What each framework does with a loader when it resumes deep in an epoch, measured on the
data side only (the framework's own start-up is the same either way), from building the
resumed loader to its first batch:

- Accelerate ``skip_first_batches`` (also what the HF Trainer's ``resume_from_checkpoint``
  calls on its prepared loader): a loader rebuilt around a batch sampler that iterates the
  skipped batches' indices and discards them; over our loader the batch sampler takes the
  count over and seeks (NOTE [ accelerate skip ]);
- Accelerate with ``use_stateful_dataloader=True``: ``load_state_dict`` on the prepared
  ``StatefulDataLoader``, which fast-forwards a torch sampler by the batches yielded, and
  our batch sampler's state, which it loads (one process: on several, ours stays out of
  ``prepare``, registered for checkpointing: the same ``load_state_dict``);
- the HF Trainer: its default (Accelerate's skip on a prepared torch loader) against our
  recipe (``ignore_data_skip=True``, the loader's state loaded);
- Lightning: torchdata's ``StatefulDataLoader`` (its route to a resumable loader)
  fast-forwards the sampler; ours is the loader's ``load_state_dict``, which Lightning's
  checkpoint calls.

Run::

    python benchmarks/framework_resume_table.py           # 4M records, batch 32, 90% in
    python benchmarks/framework_resume_table.py --quick   # 400k records
"""

from __future__ import annotations

import argparse
import os
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


def torch_loader(dataset: Indices, batch_size: int) -> Any:
    generator = torch.Generator().manual_seed(1)
    return tud.DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)


def our_loader(dataset: Indices, batch_size: int, **kwargs: Any) -> Any:
    data = DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=1)
    return data.get_data_loader(repeat=True, **kwargs)


def accelerate_skip(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate import skip_first_batches

    return lambda: skip_first_batches(torch_loader(dataset, batch_size), skip)


def accelerate_skip_ours(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate import skip_first_batches

    return lambda: skip_first_batches(our_loader(dataset, batch_size), skip)


def hf_trainer_skip(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate import skip_first_batches
    from accelerate.data_loader import prepare_data_loader

    def make() -> Any:
        prepared = prepare_data_loader(torch_loader(dataset, batch_size), num_processes=1)
        return skip_first_batches(prepared, skip)

    return make


def stateful_state(loader: Any, skip: int) -> Any:
    batches = iter(loader)
    for _ in range(skip):
        next(batches)
    return loader.state_dict()


def accelerate_stateful(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate.data_loader import prepare_data_loader

    def prepared() -> Any:
        loader = torch_loader(dataset, batch_size)
        return prepare_data_loader(loader, num_processes=1, use_stateful_dataloader=True)

    first = prepared()
    state = stateful_state(first.base_dataloader, skip)

    def make() -> Any:
        loader = prepared()
        loader.load_state_dict(state)
        return loader

    return make


def accelerate_stateful_ours(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from accelerate.data_loader import prepare_data_loader

    def prepared() -> Any:
        loader = our_loader(dataset, batch_size)
        return prepare_data_loader(loader, num_processes=1, use_stateful_dataloader=True)

    state = prepared().base_dataloader.state_dict()
    state["_index_sampler_state"] = our_loader(dataset, batch_size, skip=skip).state_dict()

    def make() -> Any:
        loader = prepared()
        loader.load_state_dict(state)
        return loader

    return make


def lightning_stateful(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    from torchdata.stateful_dataloader import StatefulDataLoader

    generator = torch.Generator().manual_seed(1)
    first = StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
    state = stateful_state(first, skip)

    def make() -> Any:
        loader = StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True)
        loader.load_state_dict(state)
        return loader

    return make


def ours(dataset: Indices, batch_size: int, skip: int) -> Callable[[], Any]:
    state = our_loader(dataset, batch_size, skip=skip).state_dict()

    def make() -> Any:
        loader = our_loader(dataset, batch_size)
        loader.load_state_dict(state)
        return loader

    return make


ROWS = [
    ("Accelerate skip_first_batches", accelerate_skip, accelerate_skip_ours),
    ("Accelerate use_stateful_dataloader", accelerate_stateful, accelerate_stateful_ours),
    ("HF Trainer resume_from_checkpoint", hf_trainer_skip, ours),
    ("Lightning ckpt_path (StatefulDataLoader)", lightning_stateful, ours),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400k records (CI)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = 400_000 if args.quick else 4_000_000
    batch_size = 32
    skip = int(0.9 * records) // batch_size
    dataset = Indices(records)
    print(
        f"first batch after a resume at batch {skip:,} of {records // batch_size:,} "
        f"({records:,} records, batch {batch_size}, best of {args.repeats}; "
        f"1-min load {os.getloadavg()[0]:.2f})"
    )
    print(f"| {'framework, resume':<42} | {'default (s)':>11} | {'ours (s)':>9} | {'ratio':>7} |")
    print(f"|{'-' * 44}|{'-' * 12}:|{'-' * 10}:|{'-' * 8}:|")
    for name, default, our_route in ROWS:
        try:
            times = [
                first_batch_seconds(build(dataset, batch_size, skip), args.repeats)
                for build in (default, our_route)
            ]
        except ImportError as error:
            print(f"| {name:<42} | skipped ({error}) |")
            continue
        ratio = times[0] / times[1]
        print(f"| {name:<42} | {times[0]:>11.4f} | {times[1]:>9.4f} | {ratio:>6.0f}x |")


if __name__ == "__main__":
    main()
