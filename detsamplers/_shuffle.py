"""Shuffle: pass ``e`` is a keyed permutation of (seed, e).

Drop-in for ``determined.pytorch.samplers.ReproducibleShuffleSampler`` and
``ReproducibleShuffleBatchSampler``.

Over a sampler it cannot address (NOTE [ position algebra ]) a shuffle reads each pass
whole before its first item. An endless sampler hidden in a user's wrapper would then be
read forever, filling memory (Determined's shuffle hangs so): the wrapped sampler must have
a ``len()``, and a pass is read up to ``len() + 1`` items, so one that does not end there
is an error naming the repeat, never a hang (NOTE [ chain order ]).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._errors import check_int, check_one_of
from ._order import ORDER
from ._permute import MAX_N, Permutation, make_permutation
from ._seeds import derive
from ._stage import Stage

__all__ = ["ENDLESS_PASS", "ReproducibleShuffleBatchSampler", "ReproducibleShuffleSampler"]

I64 = npt.NDArray[np.int64]
T = TypeVar("T")
PermutationKind = Literal["feistel", "exact"]
_KINDS = ("feistel", "exact")
#: Why a shuffle refuses an endless pass, and the fix: said when iterating finds one, and
#: by ``check_reproducible`` when it finds a repeat among a wrapper's attributes.
ENDLESS_PASS = (
    "a shuffle reads a whole pass before its first item, so the pass must end after len() "
    "items, and an endless one (a RepeatSampler inside a wrapper) would be read forever. "
    f"The order is {ORDER}; shuffle first, e.g. "
    "RepeatSampler(ReproducibleShuffleSampler(sampler, seed)), or make __len__ return the "
    "items of one pass"
)


class _Shuffle(Stage[T]):
    verb = "shuffle"

    def __init__(self, inner: Any, seed: int, permutation: str, inner_param: str) -> None:
        self._seed = check_int("seed", seed)
        self._kind = check_one_of("permutation", permutation, _KINDS)
        super().__init__(inner, inner_param)
        self._inner_param = inner_param
        if not self.indexable:
            try:
                len(inner)
            except TypeError:
                raise TypeError(
                    f"{inner_param} should have a len() for {type(self).__name__}, but "
                    f"{type(inner).__name__} has none: a shuffle reads a whole pass before its "
                    "first item, and without len() an endless sampler (a RepeatSampler inside "
                    f"a wrapper) would be read forever; give {type(inner).__name__} a __len__ "
                    "that returns the items of one pass"
                ) from None
        if self.indexable and self.pass_length > MAX_N:
            raise ValueError(
                f"{type(self).__name__} can shuffle at most 2**62 items, but this "
                f"{inner_param} has {self.pass_length}; shard or split the dataset first"
            )
        self._key = derive(self._seed, "shuffle", self._kind)
        self._perm: Permutation | None = None

    @property
    def seed(self) -> int:
        """The shuffle's seed."""
        return self._seed

    @property
    def pass_length(self) -> int:
        return self._inner.pass_length

    def _permutation(self) -> Permutation:
        if self._perm is None:
            self._perm = make_permutation(self._kind, self.pass_length, self._key)
        return self._perm

    def _map(self, positions: I64) -> I64:
        n = self.pass_length
        epoch = positions // n
        start = epoch * n
        out: I64 = start + self._permutation()(positions - start, epoch)
        return out

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        length = len(self._inner_obj)
        items = list(islice(self._inner.fallback_pass(epoch), length + 1))
        if len(items) > length:
            name = self._inner_param
            raise ValueError(
                f"{type(self).__name__} read more than len({name})={length} items from pass "
                f"{epoch} of its {name} ({type(self._inner_obj).__name__}): {ENDLESS_PASS}"
            )
        if not items:
            return iter(())
        perm = make_permutation(self._kind, len(items), self._key)
        order = perm(np.arange(len(items), dtype=np.int64), np.full(len(items), epoch))
        return (items[i] for i in order.tolist())

    def config(self) -> dict[str, Any]:
        return {"stage": "shuffle", "seed": self._seed, "permutation": self._kind}

    def __len__(self) -> int:
        return len(self._inner_obj)


class ReproducibleShuffleSampler(_Shuffle[T]):
    """Shuffle a finite sampler; pass ``e`` is a keyed permutation of ``(seed, e)``.

    Each ``iter()`` starts the next pass, so a bare shuffle reshuffles every epoch, as
    Determined's does. Under a :class:`RepeatSampler`, pass ``e`` covers positions
    ``[e N, (e + 1) N)`` and is a pure function of the position.

    Args:
        sampler: A finite sampler (``SequentialSampler``, ``range``, an index array, one
            of our stages, or any torch sampler with ``__len__``).
        seed: Any integer. Seeds and epochs are mixed by hashing (NOTE [ seed mixing ]).
        permutation: ``"feistel"`` (default): a keyed bijection evaluated pointwise,
            O(1) memory and O(1) seek for any N below 2**63. ``"exact"``: a uniformly
            random permutation from numpy's Generator, built and cached per epoch, O(N)
            memory; for small N.

    Raises:
        TypeError: ``seed`` is not an integer, or ``sampler`` cannot be addressed and has
            no ``len()``.
        ValueError: ``permutation`` is unknown, or ``sampler`` is infinite or contains a
            skip (NOTE [ chain order ]); when iterated, a pass of a sampler that cannot be
            addressed yields more than ``len(sampler)`` items (an endless one hidden in a
            wrapper).

    Determinism:
        The order depends only on ``(seed, permutation, N, epoch)``: not on torch's or
        numpy's global RNG, the process, or the number of ranks.

    Examples:
        >>> from torch.utils.data import SequentialSampler
        >>> from detsamplers import ReproducibleShuffleSampler
        >>> shuffle = ReproducibleShuffleSampler(SequentialSampler(range(8)), seed=0)
        >>> first, second = list(shuffle), list(shuffle)
        >>> sorted(first) == sorted(second) == list(range(8))
        True
        >>> first != second
        True
    """

    def __init__(
        self, sampler: Iterable[T], seed: int, *, permutation: PermutationKind = "feistel"
    ) -> None:
        super().__init__(sampler, seed, permutation, "sampler")

    @property
    def sampler(self) -> Iterable[T]:
        """The wrapped sampler."""
        return self._inner_obj  # type: ignore[no-any-return]


class ReproducibleShuffleBatchSampler(_Shuffle[list[int]], tud.BatchSampler):
    """Shuffle the batches of a finite batch sampler; pass ``e`` is keyed by ``(seed, e)``.

    The batch variant of :class:`ReproducibleShuffleSampler`: the contents of each batch
    stay fixed and only their order changes, so prefer shuffling records when you can.

    Args:
        batch_sampler: A finite batch sampler, e.g. ``torch.utils.data.BatchSampler``.
        seed: Any integer.
        permutation: ``"feistel"`` (default) or ``"exact"``, as for the record variant.

    Examples:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> from detsamplers import ReproducibleShuffleBatchSampler
        >>> batches = BatchSampler(SequentialSampler(range(6)), batch_size=2, drop_last=False)
        >>> shuffled = list(ReproducibleShuffleBatchSampler(batches, seed=3))
        >>> sorted(shuffled)
        [[0, 1], [2, 3], [4, 5]]
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        seed: int,
        *,
        permutation: PermutationKind = "feistel",
    ) -> None:
        super().__init__(batch_sampler, seed, permutation, "batch_sampler")

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The wrapped batch sampler."""
        return self._inner_obj  # type: ignore[no-any-return]
