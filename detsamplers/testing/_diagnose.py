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
  torch, numpy or ``random``): it reads the global RNG; called again and again under the
  same seed, on a fresh dataset, up to as many times as the check's straight run fetched
  records: it keeps state between calls if the second call differs, and has a warm-up
  (state that changes only during the first calls) if a later one does; the same index in
  two builds of the dataset: the factory draws its contents (a split or permutation taken
  from the global RNG);
- around those calls, the places state may hide in (NOTE [ watched attributes ]): the
  dataset's attributes, its class's, and the module globals ``__getitem__`` names; a class
  attribute or global that changes outlives the dataset, so it is named even when the
  records no longer change (a class-level counter past its warm-up, used up by the
  uninterrupted run);
- ``collate_fn`` likewise (reads the global RNG, keeps a generator of its own, a warm-up,
  a class attribute or global it changes);
- ``worker_init_fn``: called under two global seeds, it leaves the same state behind,
  so it reseeds the workers to a constant.

Each probe is a hypothesis about the user's code, named as a *likely* cause; a probe
that raises is skipped. Global RNG draws are harmless in a ``detsamplers.loader``
DataLoader, which seeds them per batch, unless the batch size or world size changes
under ``seeding="batch"``, and the message says which applies.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

import numpy as np
import torch

from ._compare import first_difference
from ._watch import Change, Watch

__all__ = ["likely_causes"]

_GENERATORS = ("torch", "numpy", "random")
_MOST_CALLS = 512  # the repeat probe's bound: at most this many calls of __getitem__

Differ = Callable[[Any, Any], bool]


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


def _differ(a: Any, b: Any, equal: Callable[[Any, Any], bool] | None = None) -> bool:
    try:
        return first_difference(a, b, equal=equal) is not None
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


def _which_generators(fetch: Callable[[], Any], differ: Differ) -> list[str]:
    """The global generators whose seed changes what ``fetch`` returns."""
    named = []
    _seed(1, 1, 1)
    base = fetch()
    for k, name in enumerate(_GENERATORS):
        seeds = [1, 1, 1]
        seeds[k] = 2
        _seed(*seeds)
        if differ(base, fetch()):
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


def _repeat(fetch: Callable[[], Any], calls: int, differ: Differ) -> tuple[Any, int | None]:
    """The first result, and the first call (2..calls) that differs from it, if any."""
    _seed(1, 1, 1)
    first = fetch()
    for call in range(2, calls + 1):
        _seed(1, 1, 1)
        if differ(first, fetch()):
            return first, call
    return first, None


def _changed(changes: list[Change], who: str) -> str:
    if not changes:
        return ""
    named = "; ".join(
        change.describe()
        + (", shared by every loader built in the process" if change.shared else "")
        for change in changes
    )
    return f"; {who} changed {named}"


def _state_cause(
    subject: str, owner: str, who: str, call: int | None, changes: list[Change], pure: str
) -> str | None:
    """Name a warm-up, or a counter that outlives ``owner`` (or None).

    ``subject`` is what returned the results (``Warm[3]``), ``who`` the function that
    changed the watched places, ``pure`` the fix (``__getitem__ a function of ...``).
    """
    if call is not None and call > 2:
        return (
            f"{owner} changes during a warm-up: {subject} returned the same on its first "
            f"{call - 1} calls and something else on call {call}, under the same RNG state "
            f"(a counter that stops, statistics or a cache gathered over the first calls)"
            f"{_changed(changes, who)}; a resumed run starts the warm-up over; make {pure}, "
            "or save that state in the checkpoint"
        )
    shared = [change for change in changes if change.shared]
    if call is None and shared:
        return (
            f"{who} changes {'; '.join(c.describe() for c in shared)}, which outlives "
            f"{owner}: every loader built in this process shares it (the uninterrupted run "
            "moved it first), while a restarted process starts it over; make "
            f"{pure}, or keep that state on {owner} and save it in the checkpoint"
        )
    return None


def _dataset_causes(
    loader: Any, build: Callable[[], Any], changed_grid: bool, calls: int, differ: Differ
) -> list[str]:
    dataset = _inner_dataset(loader)
    indices = _first_indices(loader, 1)
    if dataset is None or not indices or not indices[0]:
        return []
    watch = Watch(dataset, getattr(type(dataset), "__getitem__", dataset))
    try:  # every probe below calls __getitem__: put back what they moved
        return _dataset_probes(loader, indices[0][0], watch, build, changed_grid, calls, differ)
    finally:
        watch.put_back()


def _dataset_probes(
    loader: Any,
    index: int,
    watch: Watch,
    build: Callable[[], Any],
    changed_grid: bool,
    calls: int,
    differ: Differ,
) -> list[str]:
    causes = []
    dataset = _inner_dataset(loader)
    name = type(dataset).__name__
    once, call = _repeat(lambda: dataset[index], calls, differ)
    changes = watch.changes()
    pure = "__getitem__ a function of the index (and the RNG state) alone"
    if call == 2:
        causes.append(
            f"the dataset keeps state between calls: {name}[{index}] "
            "returned different records on two calls under the same RNG state (a counter, "
            "a cache filled in order, an iterator, an epoch attribute set from outside)"
            f"{_changed(changes, '__getitem__')}; make {pure}, or save that state in the "
            "checkpoint"
        )
        return causes
    found = _state_cause(
        f"{name}[{index}]", "the dataset", f"{name}.__getitem__", call, changes, pure
    )
    if found is not None and call is not None:
        return [found]  # a warm-up: the records changed
    generators = _which_generators(lambda: dataset[index], differ)
    seeded, per_record = _per_batch_seeded(loader)
    if generators and not seeded:
        causes.append(
            f"{name}.__getitem__ draws from the global RNG "
            f"({', '.join(generators)}), which a resumed process does not restore and each "
            "worker seeds its own way; use detsamplers.loader.DataLoader, which seeds it "
            "per batch from (seed, position), or draw from a generator keyed by the index"
        )
    elif generators and changed_grid and not per_record:
        causes.append(
            f"{name}.__getitem__ draws from the global RNG "
            f"({', '.join(generators)}), which the loader seeds per batch: the draws depend "
            "on which records share a batch, and the resume changed the batch size or world "
            "size; pass DataLoader(seeding='record') to seed each record from its sample "
            "position"
        )
    _seed(1, 1, 1)
    other = _inner_dataset(build())
    if other is not None and not causes:
        _seed(1, 1, 1)
        if differ(once, other[index]):
            causes.append(
                f"two builds of the dataset hold different records at index {index}: the "
                "factory draws its contents (a split, subset or permutation taken from the "
                "global RNG, a shuffle outside the chain); fix its seed, or shuffle with "
                "detsamplers.loader.DataLoader(shuffle=True, seed=...)"
            )
    # A shared counter the records did not show: a hypothesis after the ones they did.
    return causes if found is None else [*causes, found]


def _collate_causes(loader: Any, calls: int, differ: Differ) -> list[str]:
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

    name = getattr(collate, "__name__", type(collate).__name__)
    watch = Watch(collate, collate if inspect.isfunction(collate) else type(collate).__call__)
    try:
        _, call = _repeat(fetch, max(2, calls // max(1, len(records)) + 1), differ)
        changes = watch.changes()
    finally:
        watch.put_back()
    if call == 2:
        return [
            f"collate_fn ({name}) keeps state "
            "between calls or draws from a generator of its own, whose position a resumed "
            f"run does not restore{_changed(changes, 'it')}; do random augmentation in "
            "__getitem__ of a detsamplers.loader.DataLoader, or key the draws by the batch's "
            "indices"
        ]
    pure = "collate_fn a function of its records (and the RNG state) alone"
    found = _state_cause(name, f"collate_fn ({name})", name, call, changes, pure)
    if found is not None:
        return [found]
    generators = _which_generators(fetch, differ)
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


def likely_causes(
    build: Callable[[], Any],
    *,
    workers: bool,
    changed_grid: bool,
    calls: int = 2,
    equal: Callable[[Any, Any], bool] | None = None,
) -> list[str]:
    """The likely causes of a mismatch, most specific first (NOTE [ mismatch diagnosis ]).

    Args:
        build: Builds rank 0's loader with ``num_workers=0`` (probes run in-process).
        workers: Whether a run that differed used worker processes.
        changed_grid: Whether the resume changed the batch size or world size.
        calls: Records the check's straight run fetched on rank 0: the repeat probe calls
            ``dataset[i]`` up to this many times (at most 512), to find a warm-up.
        equal: The check's comparison of leaves of the user's own types.
    """
    calls = max(2, min(calls, _MOST_CALLS))

    def differ(a: Any, b: Any) -> bool:
        return _differ(a, b, equal)

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
            lambda: _dataset_causes(loader, build, changed_grid, calls, differ),
            lambda: _collate_causes(loader, calls, differ),
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
