"""Skip: start the stream at an offset, in O(1).

A skip is a start position, not a stage that discards: its map is the identity and its
state holds the absolute position, so a saved state resumes the same stream whatever skip
the chain was rebuilt with. Over a foreign sampler it iterates and discards, as
Determined's ``SkipSampler`` always does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import torch.utils.data as tud

from ._errors import check_int
from ._stage import Stage

__all__ = ["SkipBatchSampler", "SkipSampler"]

T = TypeVar("T")


class _Skip(Stage[T]):
    verb = "skip"

    def __init__(self, inner: Any, skip: int, inner_param: str) -> None:
        self._skip = check_int("skip", skip, minimum=0)
        super().__init__(inner, inner_param)

    @property
    def skip(self) -> int:
        """How many items the stream skips before its first."""
        return self._skip

    def _initial_position(self) -> int:
        return self._skip

    @property
    def pass_length(self) -> int:
        return max(0, self._inner.pass_length - self._skip)

    def _period(self) -> int:
        return self._inner.pass_length

    def _pass_range(self, epoch: int) -> tuple[int, int]:
        period = self._period()
        return epoch * period + min(self._skip, period), (epoch + 1) * period

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        return self._inner.fallback_pass(epoch)

    def fallback_stream(self) -> Iterator[Any]:
        return self._inner.fallback_stream()

    def config(self) -> dict[str, Any]:
        return {"stage": "skip"}

    def __len__(self) -> int:
        return len(self._inner_obj)


class SkipSampler(_Skip[T]):
    """Skip the first ``skip`` items of a sampler, in O(1) over an addressable chain.

    ``len()`` is the inner sampler's, whatever the skip, as in Determined. Prefer
    :class:`SkipBatchSampler` on batches: trainers count batches, not records.

    Args:
        sampler: The sampler to skip into; skip last, after the repeat.
        skip: How many items to skip, ``>= 0``.

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import RepeatSampler, SkipSampler
        >>> list(islice(SkipSampler(RepeatSampler(range(4)), skip=3), 4))
        [3, 0, 1, 2]
    """

    def __init__(self, sampler: Iterable[T], skip: int) -> None:
        super().__init__(sampler, skip, "sampler")

    @property
    def sampler(self) -> Iterable[T]:
        """The wrapped sampler."""
        return self._inner_obj  # type: ignore[no-any-return]


class SkipBatchSampler(_Skip[list[int]], tud.BatchSampler):
    """Skip the first ``skip`` batches of a batch sampler, in O(1) over an addressable chain.

    Wrapping torch's own ``BatchSampler`` around one of our chains still seeks in O(1):
    the batch size is known, so batch ``b`` is records ``[b B, (b + 1) B)``.

    Args:
        batch_sampler: The batch sampler to skip into; skip last.
        skip: How many batches to skip, ``>= 0``.

    Examples:
        >>> from itertools import islice
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatSampler, SkipBatchSampler
        >>> batches = BatchSampler(RepeatSampler(range(5)), batch_size=2, drop_last=False)
        >>> list(islice(SkipBatchSampler(batches, skip=2), 2))
        [[4, 0], [1, 2]]
    """

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        super().__init__(batch_sampler, skip, "batch_sampler")

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The wrapped batch sampler."""
        return self._inner_obj  # type: ignore[no-any-return]
