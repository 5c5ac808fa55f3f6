"""The loader's iterators count the batches handed to the caller, not the ones fetched.

NOTE [ handed batches ]
torch's DataLoader draws ``prefetch_factor * num_workers`` batches from the batch sampler
before the caller gets the first one, and keeps that many in flight, so the batch
sampler's own position runs ahead of the training loop; a fetch that raises has drawn its
batch too. A state saved from the sampler would then skip the batches in flight. The
loader's iterators therefore count what they hand out, in the main process, without any
message from the workers:

- every batch the sampler yields is a :class:`~detsamplers.loader._seeding.PositionedBatch`
  that carries ``at``, its position in the rank's stream;
- with ``num_workers=0`` the iterator fetches ``at`` itself, and once the fetch has
  returned, the position handed out is ``at + 1``;
- with workers, the iterator notes each ``at`` in the order it sends the batches
  (``_next_index``), and torch delivers the results in that order (``in_order=True``):
  each result ``_next_data`` consumes (``_rcvd_idx`` advances by one) is the oldest
  noted position. A result that is the worker's exception is consumed and re-raised:
  its position is dropped, not handed. A timeout consumes nothing.

The count lives in a :class:`~detsamplers.loader._batches.Handed` that the batch sampler
holds for the current iteration (``begin_handed``), so ``loader.state_dict()`` and
``loader.batch_sampler.state_dict()`` agree: both save the position after the last batch
handed out. A fetch that raised and was not followed by a delivered batch is not counted
(a resume fetches it again); once a later batch is handed out, the position is past it,
as the live run is. A new ``iter()`` over an endless stream continues after the last
batch handed out (fetched batches never handed out come again); over a finite chain it
starts the next pass, as torch's DataLoader does; after ``load_state_dict`` it starts at
the state. With ``in_order=False`` torch hands batches out of order and no position
describes what was handed, so saving a state is refused.

The bookkeeping is a deque append and pop and two attribute writes a batch
(``benchmarks/loader_table.py`` measures it against the same loader without it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ._batches import Handed, LoaderBatchSampler

__all__ = ["HandedMulti", "HandedSingle", "begin"]


def begin(loader: Any) -> Handed | None:
    """Start counting for a new iteration of ``loader``, or None if its sampler has no state."""
    sampler = loader.batch_sampler
    if not isinstance(sampler, LoaderBatchSampler):
        return None
    handed = sampler.begin_handed()
    if loader.num_workers > 0 and not getattr(loader, "in_order", True):
        handed.position, handed.why = None, "in_order=False hands batches out of order"
    return handed


class HandedSingle:
    """``_next_data`` of the in-process iterator, counting each batch once fetched."""

    _handed: Handed | None
    _dataset_fetcher: Any
    _pin_memory: bool
    _pin_memory_device: Any

    def _next_data(self) -> Any:
        index = self._next_index()  # type: ignore[attr-defined]  # may raise StopIteration
        data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
        if self._pin_memory:
            from torch.utils.data._utils.pin_memory import pin_memory

            data = pin_memory(data, self._pin_memory_device)  # type: ignore[no-untyped-call]
        handed = self._handed
        if handed is not None:
            handed.position = index.at + 1
        return data


class HandedMulti:
    """``_reset``, ``_next_index`` and ``_next_data`` of the worker iterator, counting."""

    _handed: Handed | None
    _sent: deque[int]
    _rcvd_idx: int

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        handed = begin(loader)
        self._handed = handed if handed is not None and handed.position is not None else None
        self._sent = deque()
        super()._reset(loader, first_iter)  # type: ignore[misc]  # draws the prefetch

    def _next_index(self) -> Any:
        index = next(self._sampler_iter)  # type: ignore[attr-defined]
        if self._handed is not None:
            self._sent.append(index.at)
        return index

    def _next_data(self) -> Any:
        handed = self._handed
        if handed is None:
            return super()._next_data()  # type: ignore[misc]
        before = self._rcvd_idx
        try:
            data = super()._next_data()  # type: ignore[misc]
        except BaseException:
            sent = self._sent
            for _ in range(self._rcvd_idx - before):  # a fetch that raised: not handed
                sent.popleft()
            raise
        sent = self._sent
        consumed = self._rcvd_idx - before
        if consumed != 1:  # torch passed over results it had already dropped
            for _ in range(consumed - 1):
                sent.popleft()
        handed.position = sent.popleft() + 1
        return data
