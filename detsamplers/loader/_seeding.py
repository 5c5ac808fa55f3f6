"""Per-batch RNG seeding: the draws inside ``__getitem__`` are a function of the position.

NOTE [ per-batch seeding ]
The batch sampler tags every batch with a number ``g`` and with the key
``batch_key(seed, g)``. Over a training stream (a sample grid, NOTE [ sample positions ])
``g`` is the sample position of the batch's first record, ``S + b B W + r`` for batch
``b`` on rank ``r`` of ``W``: batches hold disjoint samples, so their numbers differ on
every rank and across every resume, whatever batch size and world size each segment
used. Over any other chain (a user's ``batch_sampler``, a validation pass) it is
``b * W + r``. The batch is yielded as a
:class:`PositionedBatch`: a ``list`` that carries both through the DataLoader's index
queue to whichever process fetches it. The keys are the outputs of a SplitMix64 stream
keyed by ``derive(seed, "batch")`` (NOTE [ seed mixing ]), computed a block of batches at
a time. :func:`fetch_seeded`, which the loader's fetcher calls in place of torch's fetch
(NOTE [ seeded fetch ]), seeds torch's default CPU generator, numpy's global
``RandomState`` and ``random`` from the key and then calls the user's ``__getitem__`` for
each index in order (or the user's ``__getitems__``). The draws made
while fetching a batch therefore depend only on ``(seed, g, the indices)``: not on
``num_workers``, on which worker fetches the batch, on prefetching, or on how many batches
came before (a resume at any skip sees the same draws). They do depend on the batch
size and world size, which decide which records share a batch and its stream.

With ``DataLoader(seeding="record")`` the globals are seeded again before each record,
from ``record_key(seed, s)`` for the record's sample position ``s = g + j W`` (the batch
carries ``g`` and the stride ``W``): a record's draws are then a function of
``(seed, s)`` alone, identical after a resume that changes the batch size, the world size
or ``num_workers``. It costs one seeding per record instead of one per batch (about
13 us each, ``benchmarks/resume_table.py``), and calls ``__getitem__`` per record. It
applies where there are sample positions: training streams over ``batch_size``
(``repeat=True``); other batches are seeded per batch.

The process that fetches a batch, a worker or (with ``num_workers=0``) the main process,
is left in that batch's stream afterwards: the loader owns the global RNGs of the process
it fetches in, as torch's own workers do. In the main process, code between two batches (a
training step's dropout, say) therefore draws from the stream of the batch just fetched, a
function of ``(seed, g)`` too, so it is also reproducible after a resume. The states are
not saved and restored around each fetch: that costs 83 us a batch, five times torch's
whole batch on a trivial dataset (``benchmarks/loader_table.py``). Code that needs a
stream of its own should use a ``torch.Generator`` (or numpy's ``default_rng``), which no
loader touches.

Draws made by a ``collate_fn`` are not covered (they come after the fetch, from whatever
state the fetch left); do random augmentation in ``__getitem__``. CUDA generators are not
seeded (data loading runs on the CPU). A user's ``worker_init_fn`` still runs once per
worker, before any batch is seeded.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from .._seeds import derive, stream_key, stream_keys

__all__ = [
    "PositionedBatch",
    "batch_key",
    "batch_keys",
    "fetch_seeded",
    "positioned_batch",
    "record_base",
    "seed_globals",
]

_MASK32 = 0xFFFFFFFF


class PositionedBatch(list[int]):
    """A batch of dataset indices with its number, its fetch's RNG key and its stride.

    Build one with :func:`positioned_batch`. ``stride`` is the distance between the
    sample positions of consecutive records (the world size) over a training stream, 0
    where records have no sample positions. ``at`` is the batch's position in this
    rank's stream of batches (the batch sampler's position), which the loader counts as
    batches are handed out (NOTE [ handed batches ]); -1 where it is not known. ``epochs``
    is each record's epoch for a dataset that reads them (NOTE [ epoch-aware datasets ]),
    else None.

    Examples:
        >>> import pickle
        >>> batch = positioned_batch([4, 1], position=7, key=batch_key(0, 7), stride=2, at=3,
        ...                          epochs=[0, 1])
        >>> copy = pickle.loads(pickle.dumps(batch))
        >>> copy, copy.position, copy.key == batch_key(0, 7), copy.stride, copy.at, copy.epochs
        ([4, 1], 7, True, 2, 3, [0, 1])
    """

    __slots__ = ("at", "epochs", "key", "position", "stride")
    position: int
    key: int
    stride: int
    at: int
    epochs: list[int] | None

    def __reduce__(self) -> tuple[Any, ...]:
        # A module-level function pickles by name: about half the cost of a classmethod,
        # paid for every batch sent to a worker.
        return (
            positioned_batch,
            (list(self), self.position, self.key, self.stride, self.at, self.epochs),
        )


def positioned_batch(
    indices: Iterable[int],
    position: int,
    key: int,
    stride: int = 0,
    at: int = -1,
    epochs: list[int] | None = None,
) -> PositionedBatch:
    """The batch ``indices`` (copied) numbered ``position``, seeded by ``key``, at ``at``."""
    # list's own constructor, then the slots: no Python-level __init__ per batch.
    batch = PositionedBatch(indices)
    batch.position = position
    batch.key = key
    batch.stride = stride
    batch.at = at
    batch.epochs = epochs
    return batch


@lru_cache(maxsize=64)
def _batch_base(seed: int) -> int:
    return derive(seed, "batch")


def batch_key(seed: int, position: int) -> int:
    """The 64-bit key that seeds the fetch of the batch at global ``position``.

    Examples:
        >>> batch_key(0, 3) == batch_key(0, 3) != batch_key(1, 3)
        True
        >>> batch_key(0, 4) != batch_key(1, 3)
        True
    """
    return stream_key(_batch_base(seed), position)


def batch_keys(seed: int, positions: npt.NDArray[np.int64]) -> list[int]:
    """:func:`batch_key` for a block of global positions, vectorised.

    Examples:
        >>> import numpy as np
        >>> batch_keys(2, np.array([5, 9])) == [batch_key(2, 5), batch_key(2, 9)]
        True
    """
    keys: list[int] = stream_keys(_batch_base(seed), positions).tolist()
    return keys


def record_base(seed: int) -> int:
    """The base key of per-record seeding: record ``s`` gets ``stream_key(base, s)``.

    Examples:
        >>> record_base(0) != record_base(1) and record_base(0) != derive(0, "batch")
        True
    """
    return derive(seed, "record")


# Bound once: seeding runs for every batch, and random.seed's Python wrapper adds type
# checks for str and bytes seeds to each call. The C method below is what the wrapper
# calls for an int; the wrapper's other effect, clearing gauss_next, is kept.
_RANDOM: random.Random = random.seed.__self__  # type: ignore[attr-defined]
_seed_random = super(random.Random, _RANDOM).seed
_seed_numpy = np.random.seed
_seed_torch = torch.default_generator.manual_seed


def seed_globals(key: int) -> None:
    """Seed torch's default CPU generator, numpy's global RandomState and ``random``.

    Examples:
        >>> import random
        >>> seed_globals(5); a = random.random(), random.gauss(0, 1)
        >>> seed_globals(5); a == (random.random(), random.gauss(0, 1))
        True
        >>> random.seed(5); a[0] == random.random()
        True
    """
    _seed_torch(key)
    _seed_numpy(key & _MASK32)
    _seed_random(key)
    _RANDOM.gauss_next = None  # type: ignore[attr-defined]


def fetch_seeded(dataset: Any, indices: Sequence[int], record: int | None = None) -> list[Any]:
    """The records ``indices`` of ``dataset``, fetched under RNGs seeded from the batch.

    Args:
        dataset: The user's map-style dataset (its ``__getitems__`` is used if it has one).
        indices: A :class:`PositionedBatch` (any other sequence is fetched unseeded, as
            torch would).
        record: :func:`record_base` of the loader's seed to seed per record where the
            batch has sample positions (``stride > 0``), or None to seed per batch.

    Determinism:
        See NOTE [ per-batch seeding ]: the batch is fetched under the RNGs seeded from
        its key, or each record under the RNGs seeded from its sample position.

    Examples:
        >>> import torch
        >>> class Noisy(torch.utils.data.Dataset):
        ...     def __len__(self): return 4
        ...     def __getitem__(self, i): return i + torch.rand(()).item()
        >>> batch = positioned_batch([0, 1], position=9, key=batch_key(0, 9))
        >>> fetch_seeded(Noisy(), batch) == fetch_seeded(Noisy(), batch)
        True
    """
    key = getattr(indices, "key", None)
    if key is not None:
        stride = getattr(indices, "stride", 0)
        if stride and record is not None:
            return _per_record(dataset, indices, stride, record)
        seed_globals(key)
    epochs = getattr(indices, "epochs", None)
    if epochs is not None:  # NOTE [ epoch-aware datasets ]
        got = dataset.getitems_in_epochs(list(zip(epochs, indices, strict=True)))
        return got if isinstance(got, list) else list(got)  # a list subclass kept as it is
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is not None and callable(getitems):
        return list(getitems(list(indices)))
    return [dataset[i] for i in indices]


def _per_record(dataset: Any, indices: Any, stride: int, record: int) -> list[Any]:
    """Fetch each record under the RNGs seeded from its sample position."""
    first: int = indices.position
    samples = first + np.arange(len(indices), dtype=np.int64) * stride
    keys = stream_keys(record, samples).tolist()
    epochs = getattr(indices, "epochs", None)
    out = []
    for j, (index, key) in enumerate(zip(indices, keys, strict=True)):
        seed_globals(key)
        if epochs is None:
            out.append(dataset[index])
        else:  # NOTE [ epoch-aware datasets ]
            out.extend(dataset.getitems_in_epochs([(epochs[j], index)]))
    return out
