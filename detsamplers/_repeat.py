"""Repeat: an infinite stream whose position ``p`` is position ``p`` of the inner chain.

The inner chain already reads positions past its pass length as later passes
(``divmod(p, N)``, NOTE [ position algebra ]), so the map is the identity; a repeat only
makes the stream endless. Drop-in for Determined's ``RepeatSampler`` and
``RepeatBatchSampler``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import count
from typing import Any, TypeVar

import torch.utils.data as tud

from ._stage import Stage

__all__ = ["RepeatBatchSampler", "RepeatSampler"]

T = TypeVar("T")


class _Repeat(Stage[T]):
    verb = "repeat"

    def __init__(self, inner: Any, inner_param: str) -> None:
        super().__init__(inner, inner_param)
        self._inner_param = inner_param
        if self._inner.clock is not None:
            self._inner.clock.frozen_by = type(self).__name__

    def _empty(self) -> ValueError:
        return ValueError(
            f"{type(self).__name__} cannot repeat an empty {self._inner_param}: it would "
            "spin forever without yielding; check the dataset or sampler length"
        )

    def _on_start(self) -> None:
        if self.indexable and self._inner.pass_length == 0:
            raise self._empty()

    def fallback_stream(self) -> Iterator[Any]:
        for epoch in count():
            empty = True
            for item in self._inner.fallback_pass(epoch):
                empty = False
                yield item
            if empty:
                raise self._empty()

    def config(self) -> dict[str, Any]:
        return {"stage": "repeat"}

    def __len__(self) -> int:
        return len(self._inner_obj)


class RepeatSampler(_Repeat[T]):
    """Repeat a finite sampler forever; ``len()`` is the inner sampler's, as in Determined.

    Position ``p`` is record ``p % N`` of pass ``p // N`` of the inner chain, so under a
    :class:`ReproducibleShuffleSampler` each pass is a new keyed permutation.

    Args:
        sampler: A finite sampler.

    Raises:
        ValueError: ``sampler`` is already infinite or contains a skip; or, when iteration
            starts, it is empty (Determined's spins forever there).

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import RepeatSampler
        >>> list(islice(RepeatSampler(range(3)), 7))
        [0, 1, 2, 0, 1, 2, 0]
    """

    def __init__(self, sampler: Iterable[T]) -> None:
        super().__init__(sampler, "sampler")

    @property
    def sampler(self) -> Iterable[T]:
        """The wrapped sampler."""
        return self._inner_obj  # type: ignore[no-any-return]


class RepeatBatchSampler(_Repeat[list[int]], tud.BatchSampler):
    """Repeat the batches of a finite batch sampler forever.

    Args:
        batch_sampler: A finite batch sampler.

    Examples:
        >>> from itertools import islice
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatBatchSampler
        >>> batches = BatchSampler(range(3), batch_size=2, drop_last=False)
        >>> list(islice(RepeatBatchSampler(batches), 3))
        [[0, 1], [2], [0, 1]]
    """

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        super().__init__(batch_sampler, "batch_sampler")

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The wrapped batch sampler."""
        return self._inner_obj  # type: ignore[no-any-return]
