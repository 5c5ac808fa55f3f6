"""Skip: start the stream at an offset, in O(1).

A skip is a start position, not a stage that discards: its map is the identity and its
state holds the absolute position, so a saved state resumes the same stream whatever skip
the chain was rebuilt with. Over a foreign sampler it iterates and discards, as
Determined's ``SkipSampler`` always does.

A skip over batches can also start at a *sample*: ``skip_samples=S`` moves the batch grid
so that the first batch begins at sample ``S`` of the stream under the shard, whatever
the batch size and world size (NOTE [ sample positions ]). Its state then records the
samples consumed, and a state saved with another batch size or world size continues at
that sample.

A skip over a *finite* chain is Determined's: every pass starts ``skip`` items in, so a skip
at or past the end of the pass yields nothing, pass after pass. That keeps Determined's
output, but it is nearly always a chain without its repeat, so the stage says so once, with
a warning, the first time it iterates such a pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._errors import check_int
from ._order import ORDER
from ._samples import SampleGrid, check_elastic_state, check_saved_samples, sample_grid
from ._stage import Stage, _Cursor

__all__ = ["SkipBatchSampler", "SkipSampler"]

T = TypeVar("T")


class _Skip(Stage[T]):
    verb = "skip"
    _state_extra: tuple[str, ...] = ("samples",)

    def __init__(self, inner: Any, skip: int, inner_param: str, skip_samples: int = 0) -> None:
        self._skip = check_int("skip", skip, minimum=0)
        self._skip_samples = check_int("skip_samples", skip_samples, minimum=0)
        # The grid's origin, below one global batch: whole global batches of skip_samples
        # move the start position instead, so that positions count global batches.
        self._origin = 0
        self._shift = 0
        super().__init__(inner, inner_param)
        self._inner_param = inner_param
        self._warned = False
        try:  # a foreign sampler without len() has passes of unknown length
            len(inner)
            self._sized = True
        except TypeError:
            self._sized = False
        self._grid: SampleGrid | None = sample_grid(self._inner) if self.kind == "batch" else None
        if self._grid is not None:
            self._shift, self._origin = divmod(self._skip_samples, self._grid.global_batch)
            self._cursor = _Cursor(self._initial_position())
        if self._skip_samples and self._grid is None:
            raise ValueError(
                f"skip_samples should be 0 for this batch_sampler, but got "
                f"skip_samples={self._skip_samples}: a skip counted in samples needs torch's "
                "BatchSampler over an addressable repeated stream, [shuffle →] repeat → "
                "shard → BatchSampler; build that chain, or pass skip= in batches"
            )

    @property
    def skip(self) -> int:
        """How many items the stream skips before its first."""
        return self._skip

    @property
    def skip_samples(self) -> int:
        """The samples skipped before the first batch, as built (NOTE [ sample positions ])."""
        return self._skip_samples

    @property
    def origin(self) -> int:
        """Where the batch grid starts: sample ``origin + b G`` begins global batch ``b``."""
        return self._origin

    @property
    def grid(self) -> SampleGrid | None:
        """How this chain's batches tile the sample stream, or None if they do not."""
        return self._grid

    def _initial_position(self) -> int:
        return self._skip + self._shift

    def batches(self, positions: npt.NDArray[np.int64]) -> list[list[int]]:
        if not self._origin:
            return self._inner.batches(positions)
        assert self._grid is not None
        aligned, within = divmod(self._origin, self._grid.global_batch)
        if within == 0:  # the plain grid, ``aligned`` batches on
            return self._inner.batches(positions + aligned)
        return self._grid.batches(positions, self._origin)

    def samples_at(self, position: int) -> int | None:
        """The samples (of every rank) before global batch ``position``, or None."""
        if self._grid is None:
            return None
        return self._origin + position * self._grid.global_batch

    def state_dict(self) -> dict[str, Any]:
        """The chain's state (NOTE [ position algebra ]) plus ``samples`` consumed.

        ``samples`` is None for a chain without a sample grid (NOTE [ sample positions ]).
        """
        state = super().state_dict()
        state["samples"] = self.samples_at(state["position"])
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved state: the same chain, or one with another batch grid.

        A state from an identical chain resumes at its position. A state from a chain
        that differs only in its batch size, world size or rank (its shard and batch
        links) resumes at its ``samples``: the next global batch starts at that sample
        (NOTE [ sample positions ]).

        Raises:
            ReproducibilityError: the state comes from a chain with another source,
                shuffle or repeat, or from a chain without sample positions that differs
                at all; the message names each difference.
        """
        state_dict = self.adopt_saved(state_dict)  # NOTE [ state hooks ]
        if self._elastic_load(state_dict):
            return
        cursor, resume = self._cursor, self._resume
        super().load_state_dict(state_dict)
        samples = state_dict.get("samples")
        if self._grid is None:
            return
        if samples is None:  # a state saved without samples counts from sample 0
            self._origin = 0
            return
        try:
            position = int(state_dict["position"])
            origin = check_saved_samples(samples) - position * self._grid.global_batch
            if origin < 0:
                raise ValueError(
                    f"state['samples'] should be at least position * global batch = "
                    f"{position * self._grid.global_batch}, but got {samples!r}; the "
                    "state was edited or saved by another object"
                )
        except (TypeError, ValueError):
            self._cursor, self._resume = cursor, resume  # a refused state changes nothing
            raise
        self._origin = origin

    def _elastic_load(self, state: Any) -> bool:
        """Load ``state`` at its samples if it came from another grid; False if not."""
        if self._grid is None or not isinstance(state, Mapping):
            return False
        chain, digest = self._configured()
        if state.get("fingerprint") == digest and state.get("chain") == chain:
            return False
        if "chain" not in state or not isinstance(state.get("chain"), list):
            return False  # let the ordinary check name what is wrong
        samples = check_elastic_state(
            state, self.chain_config(), type(self).__name__, self._state_extra
        )
        assert self._grid is not None
        position, self._origin = divmod(samples, self._grid.global_batch)
        self._cursor = _Cursor(position)
        return True

    @property
    def pass_length(self) -> int:
        if self.infinite and (error := self._no_pass()) is not None:
            raise error
        return max(0, self._inner.pass_length - self._skip)

    def _period(self) -> int:
        return self._inner.pass_length

    def _pass_range(self, epoch: int) -> tuple[int, int]:
        period = self._period()
        skip = min(self._skip, period) if self._sized else self._skip
        return epoch * period + skip, (epoch + 1) * period

    def _on_start(self) -> None:
        if self._sized and not self.infinite and self._skip >= self._period():
            self._warn_past_end(str(self._period()))

    def _generate_fallback(self, cursor: _Cursor, start: int, epoch: int) -> Iterator[Any]:
        if self._sized or self.infinite or not self._skip:
            yield from super()._generate_fallback(cursor, start, epoch)
            return
        empty = True  # a pass of unknown length: past its end if it yields nothing
        for item in super()._generate_fallback(cursor, start, epoch):
            empty = False
            yield item
        if empty:
            self._warn_past_end(f"at most {self._skip}")

    def _warn_past_end(self, length: str) -> None:
        """Say once that every pass is skipped whole (Determined's output, kept)."""
        if self._warned or not self._skip:
            return
        self._warned = True
        name, items = self._inner_param, "batches" if self.kind == "batch" else "items"
        warnings.warn(
            f"{type(self).__name__} skips {self._skip} {items}, but a pass of its {name} "
            f"holds {length}: every pass yields nothing, as Determined's {type(self).__name__} "
            f"does. A skip past the end of a finite {name} usually means the repeat is "
            f"missing: the order is {ORDER}, e.g. "
            "SkipBatchSampler(BatchSampler(RepeatSampler(sampler), batch_size, False), skip)",
            stacklevel=4,
        )

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
        skip_samples: How many samples of the stream under the shard to skip first,
            ``>= 0``: the global samples already trained, with any batch size and world
            size (NOTE [ sample positions ]). Needs torch's ``BatchSampler`` over
            [shuffle →] repeat → shard; ``skip`` batches are skipped after it.

    Determinism:
        Global batch ``b`` (every rank's batch ``b``) is the samples
        ``[skip_samples + (skip + b) G, skip_samples + (skip + b + 1) G)`` of the sample
        stream, ``G`` the global batch: a resume that changes the batch size or world
        size at sample ``S`` continues the uninterrupted sample stream at ``S``.

    Examples:
        >>> from itertools import islice
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatSampler, SkipBatchSampler
        >>> batches = BatchSampler(RepeatSampler(range(5)), batch_size=2, drop_last=False)
        >>> list(islice(SkipBatchSampler(batches, skip=2), 2))
        [[4, 0], [1, 2]]
        >>> triples = BatchSampler(RepeatSampler(range(5)), batch_size=3, drop_last=False)
        >>> list(islice(SkipBatchSampler(triples, 0, skip_samples=4), 2))
        [[4, 0, 1], [2, 3, 4]]
    """

    def __init__(
        self, batch_sampler: Iterable[list[int]], skip: int, *, skip_samples: int = 0
    ) -> None:
        super().__init__(batch_sampler, skip, "batch_sampler", skip_samples)

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The wrapped batch sampler."""
        return self._inner_obj  # type: ignore[no-any-return]
