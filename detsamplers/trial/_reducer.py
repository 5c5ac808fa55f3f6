"""Metric reduction: per batch, per rank, then across ranks.

NOTE [ metric reduction ]
``train_batch`` and ``evaluate_batch`` return dicts of scalars. Each rank keeps, per
metric, the sum of ``value * batch_size`` and the sum of batch sizes; the ranks' sums are
gathered and divided, so the result is the mean over records, weighted by batch size
(validation shards are uneven, training batches are all ``per_slot_batch_size``).
A metric named in ``wrap_reducer`` is reduced by its reducer instead:

- a :class:`MetricReducer` is updated by the trial itself; the trainer calls ``reset``
  before a window, ``per_slot_reduce`` on each rank after it, and ``cross_slot_reduce``
  with every rank's result, in rank order;
- a function receives the metric's values from every batch of every rank, rank by rank.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ._distributed import DistributedContext

__all__ = ["MetricReducer", "ReducerEntry", "Window", "merge"]


class MetricReducer(abc.ABC):
    """A metric reduced in two stages, per rank and across ranks (as in Determined).

    Examples:
        >>> class Max(MetricReducer):
        ...     def reset(self): self.best = float("-inf")
        ...     def update(self, value): self.best = max(self.best, value)
        ...     def per_slot_reduce(self): return self.best
        ...     def cross_slot_reduce(self, per_slot_metrics): return max(per_slot_metrics)
        >>> reducer = Max(); reducer.reset(); reducer.update(3.0)
        >>> reducer.cross_slot_reduce([reducer.per_slot_reduce(), 5.0])
        5.0
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget what was accumulated (called before each training window or validation)."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's partial result; it must be picklable."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> Any:
        """The final value from every rank's ``per_slot_reduce()``, in rank order."""


class ReducerEntry:
    """A reducer registered by ``wrap_reducer``, and the phases it applies to."""

    def __init__(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str,
        for_training: bool,
        for_validation: bool,
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation


def _scalar(name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metric {name!r} should be a scalar, but got a tensor of shape "
                f"{tuple(value.shape)}; reduce it in the trial or with wrap_reducer"
            )
        return float(value.detach().item())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(
        f"metric {name!r} should be a number or a scalar tensor, but got {type(value).__name__}; "
        "reduce it with context.wrap_reducer(fn, name=...)"
    )


class Window:
    """The metrics of one rank over a reporting window or a validation pass.

    Examples:
        >>> window = Window([])
        >>> window.add({"loss": 1.0}, 2); window.add({"loss": 4.0}, 1)
        >>> merge([window.partial()], [])
        {'loss': 2.0}
    """

    def __init__(self, entries: Sequence[ReducerEntry]) -> None:
        self.entries = {entry.name: entry for entry in entries}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.values: dict[str, list[Any]] = {}
        self.batches = 0
        for entry in entries:
            if isinstance(entry.reducer, MetricReducer):
                entry.reducer.reset()

    def add(self, metrics: Mapping[str, Any], batch_size: int) -> None:
        """Add one batch's metrics."""
        self.batches += 1
        for name, value in metrics.items():
            entry = self.entries.get(name)
            if entry is not None:
                if not isinstance(entry.reducer, MetricReducer):
                    self.values.setdefault(name, []).append(value)
                continue
            self.sums[name] = self.sums.get(name, 0.0) + _scalar(name, value) * batch_size
            self.counts[name] = self.counts.get(name, 0) + batch_size

    def partial(self) -> dict[str, Any]:
        """This rank's picklable partial result, for :func:`merge`."""
        reduced = {
            name: entry.reducer.per_slot_reduce()
            for name, entry in self.entries.items()
            if isinstance(entry.reducer, MetricReducer)
        }
        return {
            "sums": self.sums,
            "counts": self.counts,
            "values": self.values,
            "reduced": reduced,
            "batches": self.batches,
        }

    def reduce(self, distributed: DistributedContext) -> dict[str, Any]:
        """The metrics reduced over every rank (a collective: every rank must call it)."""
        return merge(distributed.all_gather(self.partial()), list(self.entries.values()))


def merge(partials: Sequence[Mapping[str, Any]], entries: Sequence[ReducerEntry]) -> dict[str, Any]:
    """Combine the ranks' partial results, in rank order (NOTE [ metric reduction ]).

    Examples:
        >>> rank0 = {"sums": {"loss": 6.0}, "counts": {"loss": 3}, "values": {}, "reduced": {}}
        >>> rank1 = {"sums": {"loss": 1.0}, "counts": {"loss": 1}, "values": {}, "reduced": {}}
        >>> merge([rank0, rank1], [])  # (6 + 1) / (3 + 1), not (2 + 1) / 2
        {'loss': 1.75}
    """
    out: dict[str, Any] = {}
    names = sorted({name for partial in partials for name in partial["sums"]})
    for name in names:
        total = sum(partial["sums"].get(name, 0.0) for partial in partials)
        count = sum(partial["counts"].get(name, 0) for partial in partials)
        out[name] = total / count
    for entry in entries:
        if isinstance(entry.reducer, MetricReducer):
            out[entry.name] = entry.reducer.cross_slot_reduce(
                [partial["reduced"][entry.name] for partial in partials]
            )
        elif any(entry.name in partial["values"] for partial in partials):
            values = [v for partial in partials for v in partial["values"].get(entry.name, [])]
            out[entry.name] = entry.reducer(values)
    return out
