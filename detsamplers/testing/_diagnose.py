"""Likely causes of a resume mismatch, found by probing the user's pipeline in-process.

NOTE [ mismatch diagnosis ]
Once the checker has found a batch that differs, it probes the pieces of the pipeline
one at a time, under global RNG states it sets and then puts back:

- the static check (``check_reproducible``): torch's ``RandomSampler``, a chain that
  shards before it shuffles, an ``IterableDataset`` without state;
- the order: two loaders built under different global seeds yield other indices, so
  a shuffle is drawn outside the chain (``shuffle=True`` in torch's DataLoader, a
  ``RandomSampler``, a permutation drawn in the factory);
- the records: ``dataset[i]`` under two global seeds (one generator at a time, to name
  torch, numpy or ``random``): it reads the global RNG; twice under the same seed: it
  keeps state between calls; the same index in two builds of the dataset: the factory
  draws its contents (a split or permutation taken from the global RNG);
- ``collate_fn`` likewise (reads the global RNG, or keeps a generator of its own);
- ``worker_init_fn``: called under two global seeds, it leaves the same state behind,
  so it reseeds the workers to a constant.

Each probe is a hypothesis about the user's code, named as a *likely* cause; a probe
that raises is skipped. Global RNG draws are harmless in a ``detsamplers.loader``
DataLoader, which seeds them per batch, unless the batch size or world size changes
under ``seeding="batch"``, and the message says which applies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

import numpy as np
import torch

from ._compare import first_difference

__all__ = ["likely_causes"]

_GENERATORS = ("torch", "numpy", "random")


@contextmanager
def _kept_rng() -> Iterator[None]:
    """Put the global RNGs back as they were after probing."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def _seed(torch_seed: int, numpy_seed: int, random_seed: int) -> None:
    torch.manual_seed(torch_seed)
    np.random.seed(numpy_seed)
    random.seed(random_seed)


def _differ(a: Any, b: Any) -> bool:
    try:
        return first_difference(a, b) is not None
    except TypeError:
        return False


def _inner_dataset(loader: Any) -> Any:
    """The user's dataset (unwrapped from the seeding view, NOTE [ seeded fetch ])."""
    from ..loader._fetch import SeededView

    dataset = getattr(loader, "dataset", None)
    return dataset.dataset if isinstance(dataset, SeededView) else dataset


def _per_batch_seeded(loader: Any) -> tuple[bool, bool]:
    """Whether the loader seeds the global RNGs per batch, and per record."""
    from ..loader._batches import LoaderBatchSampler

    sampler = getattr(loader, "batch_sampler", None)
    if not isinstance(sampler, LoaderBatchSampler):
        return False, False
    return True, sampler.record_seed is not None


def _first_indices(loader: Any, count: int = 2) -> list[list[int]]:
    sampler = getattr(loader, "batch_sampler", None)
    if sampler is None:
        return []
    return [list(batch) for batch in islice(iter(sampler), count)]


def _which_generators(fetch: Callable[[], Any]) -> list[str]:
    """The global generators whose seed changes what ``fetch`` returns."""
    named = []
    _seed(1, 1, 1)
    base = fetch()
    for k, name in enumerate(_GENERATORS):
        seeds = [1, 1, 1]
        seeds[k] = 2
        _seed(*seeds)
        if _differ(base, fetch()):
            named.append(name)
    return named


def _order_cause(build: Callable[[], Any]) -> str | None:
    _seed(11, 11, 11)
    first = _first_indices(build())
    _seed(12, 12, 12)
    second = _first_indices(build())
    if first and second and first != second:
        return (
            "the order depends on the global RNG: a shuffle outside the detsamplers chain "
            f"(two loaders built and iterated under different global seeds start with "
            f"indices {first[0][:6]} and {second[0][:6]}): shuffle=True in torch's DataLoader, "
            "a RandomSampler, or a permutation drawn in the factory; shuffle with "
            "detsamplers.loader.DataLoader(shuffle=True, seed=...) or "
            "ReproducibleShuffleSampler(sampler, seed)"
        )
    return None


def _dataset_causes(loader: Any, build: Callable[[], Any], changed_grid: bool) -> list[str]:
    dataset = _inner_dataset(loader)
    indices = _first_indices(loader, 1)
    if dataset is None or not indices or not indices[0]:
        return []
    index = indices[0][0]
    causes = []
    _seed(1, 1, 1)
    once = dataset[index]
    _seed(1, 1, 1)
    again = dataset[index]
    if _differ(once, again):
        causes.append(
            f"the dataset keeps state between calls: {type(dataset).__name__}[{index}] "
            "returned different records on two calls under the same RNG state (a counter, "
            "a cache filled in order, an iterator, an epoch attribute set from outside); "
            "make __getitem__ a function of the index (and the RNG state) alone, or save "
            "that state in the checkpoint"
        )
        return causes
    generators = _which_generators(lambda: dataset[index])
    seeded, per_record = _per_batch_seeded(loader)
    if generators and not seeded:
        causes.append(
            f"{type(dataset).__name__}.__getitem__ draws from the global RNG "
            f"({', '.join(generators)}), which a resumed process does not restore and each "
            "worker seeds its own way; use detsamplers.loader.DataLoader, which seeds it "
            "per batch from (seed, position), or draw from a generator keyed by the index"
        )
    elif generators and changed_grid and not per_record:
        causes.append(
            f"{type(dataset).__name__}.__getitem__ draws from the global RNG "
            f"({', '.join(generators)}), which the loader seeds per batch: the draws depend "
            "on which records share a batch, and the resume changed the batch size or world "
            "size; pass DataLoader(seeding='record') to seed each record from its sample "
            "position"
        )
    _seed(1, 1, 1)
    other = _inner_dataset(build())
    if other is not None and not causes:
        _seed(1, 1, 1)
        if _differ(once, other[index]):
            causes.append(
                f"two builds of the dataset hold different records at index {index}: the "
                "factory draws its contents (a split, subset or permutation taken from the "
                "global RNG, a shuffle outside the chain); fix its seed, or shuffle with "
                "detsamplers.loader.DataLoader(shuffle=True, seed=...)"
            )
    return causes


def _collate_causes(loader: Any) -> list[str]:
    collate = getattr(loader, "collate_fn", None)
    collate = getattr(collate, "collate_fn", collate)  # detsamplers' InlineCollate
    dataset = _inner_dataset(loader)
    indices = _first_indices(loader, 1)
    if collate is None or dataset is None or not indices:
        return []
    _seed(1, 1, 1)
    records = [dataset[i] for i in indices[0]]

    def fetch() -> Any:
        return collate(list(records))

    _seed(1, 1, 1)
    once = fetch()
    _seed(1, 1, 1)
    if _differ(once, fetch()):
        return [
            f"collate_fn ({getattr(collate, '__name__', type(collate).__name__)}) keeps state "
            "between calls or draws from a generator of its own, whose position a resumed "
            "run does not restore; do random augmentation in __getitem__ of a "
            "detsamplers.loader.DataLoader, or key the draws by the batch's indices"
        ]
    generators = _which_generators(fetch)
    seeded, _ = _per_batch_seeded(loader)
    if generators and not seeded:
        return [
            f"collate_fn draws from the global RNG ({', '.join(generators)}), which a "
            "resumed process does not restore; move the random augmentation into "
            "__getitem__ of a detsamplers.loader.DataLoader, which seeds it per batch"
        ]
    return []


def _worker_init_cause(loader: Any) -> str | None:
    init = getattr(loader, "worker_init_fn", None)
    if init is None:
        return None

    def after(seed: int) -> list[float]:
        _seed(seed, seed, seed)
        init(0)
        return [torch.rand(()).item(), float(np.random.rand()), random.random()]

    first, second = after(21), after(22)
    reseeded = [name for name, a, b in zip(_GENERATORS, first, second, strict=True) if a == b]
    if reseeded:
        return (
            f"worker_init_fn reseeds the global RNG ({', '.join(reseeded)}) to a value of its "
            "own: every worker of every fresh loader restarts the same stream, so a record's "
            "draws depend on which worker fetches it and on where the run resumed; remove "
            "the reseeding (torch seeds each worker) or use detsamplers.loader.DataLoader, "
            "which seeds every batch from (seed, position)"
        )
    return None


def _static_cause(loader: Any) -> str | None:
    from .._errors import ReproducibilityError
    from ..loader import check_reproducible

    try:
        check_reproducible(loader)
    except ReproducibilityError as error:
        return str(error)
    except TypeError:
        return None
    return None


def likely_causes(build: Callable[[], Any], *, workers: bool, changed_grid: bool) -> list[str]:
    """The likely causes of a mismatch, most specific first (NOTE [ mismatch diagnosis ]).

    Args:
        build: Builds rank 0's loader with ``num_workers=0`` (probes run in-process).
        workers: Whether a run that differed used worker processes.
        changed_grid: Whether the resume changed the batch size or world size.
    """
    causes: list[str] = []
    probes: list[Callable[[], Any]] = []
    with _kept_rng():
        try:
            loader = build()
        except Exception:
            return []
        probes = [
            lambda: _static_cause(loader),
            lambda: _order_cause(build),
            lambda: _dataset_causes(loader, build, changed_grid),
            lambda: _collate_causes(loader),
        ]
        if workers:  # the most specific cause when worker processes were involved
            probes.insert(0, lambda: _worker_init_cause(loader))
        for probe in probes:
            try:
                found = probe()
            except Exception:
                continue
            if isinstance(found, str):
                found = [found]
            for cause in found or []:
                if cause not in causes:
                    causes.append(cause)
    return causes
