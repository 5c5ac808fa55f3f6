"""Metric reduction: per batch, per rank, then across ranks.

NOTE [ metric reduction ]
``train_batch`` and ``evaluate_batch`` return a dict of scalars (``train_batch`` may
return a bare tensor, read as ``{"loss": tensor}``, as in Determined). Each rank keeps a
:class:`Window` per metric: the sum of ``value * batch_length`` and of the batch lengths
(``trial.get_batch_length(batch)``), and the sum, max and min of the per-batch values.
The ranks' windows are gathered and combined per metric with a :class:`Reducer`:

- ``AVG`` (the default, and always for training): the mean over records, i.e. weighted
  by batch length across every batch of every rank. Determined averages a rank's batches
  unweighted and then weights ranks by their batch counts; the two agree whenever the
  batches have equal lengths (always in training, and in validation unless the last
  batch of a shard is short), and ours is the dataset's mean when they do not.
- ``SUM``, ``MAX`` and ``MIN``: of the per-batch values, over every rank, as Determined.

``trial.evaluation_reducer()`` picks the validation reducer: one ``Reducer`` for every
metric, or a dict naming one per metric (it must name exactly the metrics returned).

A reducer from ``context.wrap_reducer(reducer, name=...)`` is fed by the trial, never
from the returned dicts: a function becomes a reducer with ``.update(value)`` whose
function gets every rank's values interleaved batch by batch (rank 0's first value,
rank 1's first, ...), the order of an unsharded pass when ``update`` is called once per
batch; a :class:`MetricReducer` gets ``reset`` before each training window and
validation, ``per_slot_reduce`` on each rank after it, and ``cross_slot_reduce`` with
every rank's result in rank order. The result is reported under ``name``, or, with
``name=None``, must be a dict of metrics; it replaces a returned metric of the same name.
"""

from __future__ import annotations

import abc
import enum
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ._distributed import DistributedContext

__all__ = [
    "MetricReducer",
    "Reducer",
    "SimpleReducer",
    "Window",
    "WrappedReducer",
    "merge",
    "reduce_wrapped",
    "reducers_for",
]


class Reducer(enum.Enum):
    """How validation metrics are combined over batches and ranks (Determined's values).

    Examples:
        >>> Reducer.AVG.value, Reducer.MIN.value
        (1, 4)
    """

    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


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


class SimpleReducer(MetricReducer):
    """A reducer function behind the :class:`MetricReducer` API: ``wrap_reducer(fn)``.

    Examples:
        >>> rank0, rank1 = SimpleReducer(list), SimpleReducer(list)
        >>> for value in (0, 2): rank0.update(value)
        >>> for value in (1, 3, 5): rank1.update(value)
        >>> rank0.cross_slot_reduce([rank0.per_slot_reduce(), rank1.per_slot_reduce()])
        [0, 1, 2, 3, 5]
    """

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn
        self.values: list[Any] = []

    def reset(self) -> None:
        """Forget the values."""
        self.values = []

    def update(self, value: Any) -> None:
        """Add one value (call it once per batch to keep an unsharded order)."""
        self.values.append(value)

    def per_slot_reduce(self) -> list[Any]:
        """This rank's values."""
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> Any:
        """``fn`` of every rank's values, interleaved batch by batch."""
        missing = object()
        rows = itertools.zip_longest(*per_slot_metrics, fillvalue=missing)
        return self.fn([value for row in rows for value in row if value is not missing])


class WrappedReducer:
    """A reducer registered by ``wrap_reducer``, with its name and phases."""

    def __init__(
        self, reducer: MetricReducer, name: str | None, for_training: bool, for_validation: bool
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.reducer, method)(*args)
        except Exception as error:
            raise ValueError(
                f"the reducer {type(self.reducer).__name__} for name={self.name!r} failed in "
                f"{method}()"
            ) from error

    def reset(self) -> None:
        """``reducer.reset()``, naming the reducer if it fails."""
        self._call("reset")

    def per_slot_reduce(self) -> Any:
        """``reducer.per_slot_reduce()``, naming the reducer if it fails."""
        return self._call("per_slot_reduce")

    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> dict[str, Any]:
        """The metrics this reducer reports: ``{name: value}``, or its dict for ``name=None``."""
        value = self._call("cross_slot_reduce", list(per_slot_metrics))
        if self.name is None:
            if not isinstance(value, dict):
                raise ValueError(
                    f"the reducer {type(self.reducer).__name__} was wrapped with name=None, so "
                    f"it should return a dict of metrics, but it returned a "
                    f"{type(value).__name__}; pass name='...' to report one metric"
                )
            return value
        if isinstance(value, dict):
            raise ValueError(
                f"the reducer {type(self.reducer).__name__} was wrapped with name={self.name!r}, "
                "so it should return one metric, but it returned a dict; wrap it with "
                "name=None to report several metrics"
            )
        return {self.name: value}


def reduce_wrapped(
    wrapped: Sequence[WrappedReducer], distributed: DistributedContext
) -> dict[str, Any]:
    """The wrapped reducers' metrics, in one all-gather (a collective when any exist)."""
    if not wrapped:
        return {}
    gathered = distributed.all_gather([entry.per_slot_reduce() for entry in wrapped])
    out: dict[str, Any] = {}
    for i, entry in enumerate(wrapped):
        out.update(entry.cross_slot_reduce([rank[i] for rank in gathered]))
    return out


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
    if hasattr(value, "item") and getattr(value, "size", None) == 1:  # a numpy scalar
        return float(value.item())
    raise TypeError(
        f"metric {name!r} should be a number or a scalar tensor, but got {type(value).__name__}; "
        "report it with r = context.wrap_reducer(fn, name=...) and r.update(value)"
    )


def as_metrics(returned: Any, method: str) -> dict[str, Any]:
    """``returned`` as a metrics dict: a bare tensor is ``{"loss": tensor}`` (as Determined).

    Examples:
        >>> as_metrics(torch.tensor(2.0), "train_batch")
        {'loss': tensor(2.)}
    """
    if isinstance(returned, torch.Tensor):
        return {"loss": returned}
    if not isinstance(returned, Mapping):
        raise TypeError(
            f"{method} should return a dict of metrics (or a loss tensor), but got "
            f"{type(returned).__name__}"
        )
    return dict(returned)


class Window:
    """One rank's metrics over a reporting window or a validation pass.

    Examples:
        >>> window = Window()
        >>> _ = window.add({"loss": 1.0}, 2), window.add({"loss": 4.0}, 1)
        >>> merge([window.partial()])
        {'loss': 2.0}
    """

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.totals: dict[str, float] = {}
        self.highs: dict[str, float] = {}
        self.lows: dict[str, float] = {}
        self.batches: list[dict[str, float]] = []

    def add(self, metrics: Mapping[str, Any], batch_length: int) -> dict[str, float]:
        """Add one batch's metrics; return them as floats."""
        row = {name: _scalar(name, value) for name, value in metrics.items()}
        for name, value in row.items():
            self.sums[name] = self.sums.get(name, 0.0) + value * batch_length
            self.counts[name] = self.counts.get(name, 0) + batch_length
            self.totals[name] = self.totals.get(name, 0.0) + value
            self.highs[name] = max(self.highs.get(name, value), value)
            self.lows[name] = min(self.lows.get(name, value), value)
        self.batches.append(row)
        return row

    def partial(self) -> dict[str, Any]:
        """This rank's picklable partial result, for :func:`merge`."""
        return {
            "sums": self.sums,
            "counts": self.counts,
            "totals": self.totals,
            "highs": self.highs,
            "lows": self.lows,
            "batches": self.batches,
        }


def merge(
    partials: Sequence[Mapping[str, Any]], reducers: Mapping[str, Reducer] | None = None
) -> dict[str, Any]:
    """Combine the ranks' partial results, in rank order (NOTE [ metric reduction ]).

    Examples:
        >>> rank0, rank1 = Window(), Window()
        >>> _ = rank0.add({"loss": 2.0}, 3), rank1.add({"loss": 1.0}, 1)
        >>> merge([rank0.partial(), rank1.partial()])  # (6 + 1) / (3 + 1), not (2 + 1) / 2
        {'loss': 1.75}
        >>> merge([rank0.partial(), rank1.partial()], {"loss": Reducer.MAX})
        {'loss': 2.0}
    """
    reducers = reducers or {}
    out: dict[str, Any] = {}
    for name in sorted({name for partial in partials for name in partial["sums"]}):
        reducer = reducers.get(name, Reducer.AVG)
        mine = [partial for partial in partials if name in partial["sums"]]
        if reducer == Reducer.AVG:
            out[name] = sum(p["sums"][name] for p in mine) / sum(p["counts"][name] for p in mine)
        elif reducer == Reducer.SUM:
            out[name] = sum(p["totals"][name] for p in mine)
        elif reducer == Reducer.MAX:
            out[name] = max(p["highs"][name] for p in mine)
        else:
            out[name] = min(p["lows"][name] for p in mine)
    return out


def batch_means(partials: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Each batch's metrics averaged over the ranks (Determined's ``batch_metrics``).

    Examples:
        >>> rank0, rank1 = Window(), Window()
        >>> _ = rank0.add({"loss": 2.0}, 4), rank1.add({"loss": 4.0}, 4)
        >>> batch_means([rank0.partial(), rank1.partial()])
        [{'loss': 3.0}]
    """
    rows: list[dict[str, float]] = []
    for ranks in itertools.zip_longest(*(p["batches"] for p in partials)):
        present = [row for row in ranks if row is not None]
        names = sorted({name for row in present for name in row})
        rows.append(
            {
                name: sum(row[name] for row in present if name in row)
                / sum(1 for row in present if name in row)
                for name in names
            }
        )
    return rows


def reducers_for(chosen: Any, names: Sequence[str]) -> dict[str, Reducer]:
    """The validation reducer of each metric from ``trial.evaluation_reducer()``.

    Raises:
        TypeError: ``chosen`` is neither a ``Reducer`` nor a dict of them.
        ValueError: a dict that does not name exactly the metrics returned.
    """
    if isinstance(chosen, Reducer):
        return dict.fromkeys(names, chosen)
    if isinstance(chosen, Mapping):
        if set(chosen) != set(names):
            raise ValueError(
                "evaluation_reducer() should return one Reducer, or a dict with a Reducer for "
                f"every validation metric, but it names {sorted(chosen)} and evaluate_batch "
                f"returned {sorted(names)}"
            )
        bad = {name: r for name, r in chosen.items() if not isinstance(r, Reducer)}
        if not bad:
            return dict(chosen)
        raise TypeError(
            f"evaluation_reducer() should map metrics to detsamplers.trial.Reducer, but got {bad}"
        )
    raise TypeError(
        "evaluation_reducer() should return a detsamplers.trial.Reducer or a dict of them, "
        f"but got {chosen!r}"
    )
