"""Per-batch RNG seeding: the draws inside ``__getitem__`` are a function of the position.

NOTE [ per-batch seeding ]
The batch sampler tags every batch with its *global batch position* ``g = b * W + r``
(``b`` the stream position of the batch on rank ``r`` of ``W``, so every rank's batches
get distinct numbers) by yielding a :class:`PositionedBatch`, a ``list`` that carries
``g`` through the DataLoader's index queue to whichever process fetches it. There
:class:`SeededDataset.__getitems__` seeds torch's default CPU generator, numpy's global
``RandomState`` and ``random`` from ``derive(seed, "batch", g)`` and then calls the user's
``__getitem__`` for each index in order (or the user's ``__getitems__``). The draws made
while fetching a batch therefore depend only on ``(seed, g, the indices)``: not on
``num_workers``, on which worker fetches the batch, on prefetching, or on how many batches
came before (a resume at any skip sees the same draws).

In a worker process the generators are left in the seeded stream after the fetch (the
worker's RNG belongs to the loader). In the main process (``num_workers=0``) their states
are saved before and restored after each fetch, so user code around the loop draws from
its global RNG exactly as if the loader were not there. Draws made by a ``collate_fn`` are
not covered: in the main process they see the user's restored global RNG; do random
augmentation in ``__getitem__``. CUDA generators are not seeded (data loading runs on the
CPU). A user's ``worker_init_fn`` still runs once per worker, before any batch is seeded.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from .._seeds import derive

__all__ = ["PositionedBatch", "SeededDataset", "batch_key", "seed_globals", "seeded"]

_MASK32 = 0xFFFFFFFF


class PositionedBatch(list[int]):
    """A batch of dataset indices that remembers its global batch position.

    Examples:
        >>> import pickle
        >>> batch = PositionedBatch([4, 1], position=7)
        >>> copy = pickle.loads(pickle.dumps(batch))
        >>> copy, copy.position
        ([4, 1], 7)
    """

    __slots__ = ("position",)

    def __init__(self, indices: Iterable[int], position: int) -> None:
        super().__init__(indices)
        self.position = position

    def __reduce__(self) -> tuple[Any, ...]:
        return (PositionedBatch, (list(self), self.position))


def batch_key(seed: int, position: int) -> int:
    """The 64-bit key that seeds the fetch of the batch at global ``position``.

    Examples:
        >>> batch_key(0, 3) == batch_key(0, 3) != batch_key(1, 3)
        True
    """
    return derive(seed, "batch", position)


def seed_globals(key: int) -> None:
    """Seed torch's default CPU generator, numpy's global RandomState and ``random``.

    Examples:
        >>> import random
        >>> seed_globals(5); a = random.random()
        >>> seed_globals(5); a == random.random()
        True
    """
    torch.default_generator.manual_seed(key)
    np.random.seed(key & _MASK32)
    random.seed(key)


@contextmanager
def seeded(key: int) -> Iterator[None]:
    """Run the body under global RNGs seeded from ``key`` (NOTE [ per-batch seeding ]).

    In a DataLoader worker the RNGs are left in the seeded stream; in the main process
    their states are restored on exit, so code around the loop keeps its own stream.

    Examples:
        >>> import random
        >>> before = random.getstate()
        >>> with seeded(5):
        ...     a = random.random()
        >>> with seeded(5):
        ...     a == random.random()
        True
        >>> random.getstate() == before
        True
    """
    if tud.get_worker_info() is not None:
        seed_globals(key)
        yield
        return
    saved_torch = torch.default_generator.get_state()
    saved_numpy = np.random.get_state()
    saved_random = random.getstate()
    try:
        seed_globals(key)
        yield
    finally:
        torch.default_generator.set_state(saved_torch)
        np.random.set_state(saved_numpy)
        random.setstate(saved_random)


class SeededDataset(tud.Dataset[Any]):
    """Wrap a map-style dataset so that each batch is fetched under seeded global RNGs.

    Args:
        dataset: A map-style dataset (``__getitem__``, and ``__len__``).
        seed: The loader's seed; the key of a batch is ``derive(seed, "batch", g)``.

    Determinism:
        See NOTE [ per-batch seeding ]: a batch's draws depend only on the seed, its
        global batch position and its indices.

    Examples:
        >>> import torch
        >>> class Noisy(torch.utils.data.Dataset):
        ...     def __len__(self): return 4
        ...     def __getitem__(self, i): return i + torch.rand(()).item()
        >>> data = SeededDataset(Noisy(), seed=0)
        >>> batch = PositionedBatch([0, 1], position=9)
        >>> data.__getitems__(batch) == data.__getitems__(batch)
        True
    """

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed
        inner = getattr(dataset, "__getitems__", None)
        self._inner_getitems = inner is not None and callable(inner)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def _fetch(self, indices: Sequence[int]) -> list[Any]:
        if self._inner_getitems:
            return list(self.dataset.__getitems__(list(indices)))
        dataset = self.dataset
        return [dataset[i] for i in indices]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Fetch ``indices``, seeding the global RNGs first if they carry a position."""
        position = getattr(indices, "position", None)
        if position is None:
            return self._fetch(indices)
        with seeded(batch_key(self.seed, position)):
            return self._fetch(indices)
