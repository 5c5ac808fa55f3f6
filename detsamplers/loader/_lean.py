"""torch's DataLoader, minus the profiler annotation when no profiler is listening.

NOTE [ profiler annotation ]
torch's ``_BaseDataLoaderIter.__next__`` wraps every batch in
``torch.autograd.profiler.record_function``, which enters and leaves a dispatcher op
whether or not a profiler is running (pytorch/pytorch#124275). On a trivial dataset that
is 5.9 us of torch's 16.6 us a batch here (``benchmarks/loader_table.py``): about what
seeding torch, numpy and ``random`` for the batch costs. :class:`LeanDataLoader` is a
plain subclass of torch's ``DataLoader`` whose iterators ask
``torch.autograd._profiler_enabled()`` (a C call of well under a microsecond) on each
``next()`` and take torch's own annotated path whenever a profiler is active, so profiler
traces still show ``enumerate(DataLoader)#...`` spans. Otherwise they run the same steps
as torch's ``__next__`` without the wrapper. The iterable-dataset length warning is not
needed: the loader only builds map-style datasets.

The same iterators count the batches they hand out (NOTE [ handed batches ]), and the
loader's ``state_dict()``/``load_state_dict()`` are its batch sampler's, saved at the
last batch handed out; over a batch sampler of the loader it fetches through the seeded
fetcher (NOTE [ seeded fetch ]).

The iterators reuse torch's private ``_SingleProcessDataLoaderIter`` and
``_MultiProcessingDataLoaderIter`` (as torchdata's StatefulDataLoader does); if a torch
release drops or renames what they rely on, :func:`lean_iterators_supported` turns false
and :class:`LeanDataLoader` hands out torch's iterators unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils.data as tud
from torch.utils.data import dataloader as _torch_loader

from ._batches import LoaderBatchSampler
from ._fetch import seeded_fetch_supported, seeded_kind
from ._handed import HandedMulti, HandedSingle, begin

__all__ = ["LeanDataLoader", "lean_iterators_supported"]

_profiler_enabled: Callable[[], bool] | None = getattr(torch.autograd, "_profiler_enabled", None)
_SINGLE = getattr(_torch_loader, "_SingleProcessDataLoaderIter", None)
_MULTI = getattr(_torch_loader, "_MultiProcessingDataLoaderIter", None)
_SUPPORTED = callable(_profiler_enabled) and all(
    hasattr(owner, name)
    for owner, name in (
        (_SINGLE, "_next_data"),
        (_SINGLE, "_reset"),
        (_MULTI, "_next_data"),
        (tud.DataLoader, "_get_iterator"),
        (tud.DataLoader, "check_worker_number_rationality"),
    )
)


def lean_iterators_supported() -> bool:
    """Whether this torch has the iterator internals :class:`LeanDataLoader` builds on.

    Examples:
        >>> lean_iterators_supported()
        True
    """
    return _SUPPORTED


class _Unannotated:
    """``__next__`` as torch's, without ``record_function`` while no profiler runs."""

    _sampler_iter: Any
    _num_yielded: int

    def __next__(self) -> Any:
        assert _profiler_enabled is not None  # only built when _SUPPORTED
        if _profiler_enabled():
            return super().__next__()  # type: ignore[misc]
        if self._sampler_iter is None:
            self._reset()  # type: ignore[attr-defined]
        data = self._next_data()  # type: ignore[attr-defined]
        self._num_yielded += 1
        return data


if _SUPPORTED:

    class _SingleIter(_Unannotated, HandedSingle, _SINGLE):  # type: ignore[misc, valid-type]
        def __init__(self, loader: Any) -> None:
            super().__init__(loader)
            self._handed = begin(loader)  # torch's iter() above has not started yet

    class _MultiIter(_Unannotated, HandedMulti, _MULTI):  # type: ignore[misc, valid-type]
        pass


class LeanDataLoader(tud.DataLoader[Any]):
    """A torch ``DataLoader`` that skips the profiler annotation while no profiler runs.

    Everything else (arguments, workers, pinning, ``len``) is torch's; see
    NOTE [ profiler annotation ]. Over the batch sampler of a
    :class:`~detsamplers.loader.DataLoader` it also seeds each batch's fetch
    (NOTE [ seeded fetch ]) and has the exact resume state of torchdata's Stateful
    protocol, :meth:`state_dict` and :meth:`load_state_dict` (NOTE [ handed batches ]).

    Examples:
        >>> import torch
        >>> loader = LeanDataLoader(range(5), batch_size=2)
        >>> isinstance(loader, torch.utils.data.DataLoader)
        True
        >>> [b.tolist() for b in loader]
        [[0, 1], [2, 3], [4]]
        >>> with torch.profiler.profile() as prof:
        ...     _ = list(loader)
        >>> any(e.name.startswith("enumerate(DataLoader)") for e in prof.events())
        True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set here, not by get_data_loader, so that a framework that rebuilds the loader
        # from its arguments (type(loader)(**kwargs)) keeps the seeded fetch.
        if isinstance(self.batch_sampler, LoaderBatchSampler) and seeded_fetch_supported():
            self._dataset_kind = seeded_kind(self.batch_sampler.record_seed)

    def _get_iterator(self) -> Any:
        if not _SUPPORTED:
            sampler = self.batch_sampler
            if isinstance(sampler, LoaderBatchSampler):
                handed = sampler.begin_handed()
                handed.position, handed.why = None, "this torch's DataLoader iterators changed"
            return super()._get_iterator()
        if self.num_workers == 0:
            return _SingleIter(self)
        self.check_worker_number_rationality()
        return _MultiIter(self)

    def state_dict(self) -> dict[str, Any]:
        """The state after the last batch handed to the caller (NOTE [ handed batches ]).

        A small JSON-able dict, the batch sampler's (position, fingerprint, chain, loader
        fields, ``samples`` and a divergence digest), whatever ``num_workers``,
        ``prefetch_factor``, ``persistent_workers``, ``pin_memory`` and ``timeout``: the
        batches that workers prefetched and a batch whose fetch raised are not counted.

        Raises:
            TypeError: the loader's batch sampler has no state (it is not a
                :class:`~detsamplers.loader.DataLoader`'s).
            ValueError: the batches handed out are not known (``in_order=False``).

        Examples:
            >>> from detsamplers.loader import DataLoader
            >>> loader = DataLoader(range(20), batch_size=2).get_data_loader(repeat=True)
            >>> batches = iter(loader)
            >>> [next(batches).tolist() for _ in range(3)]
            [[0, 1], [2, 3], [4, 5]]
            >>> loader.state_dict()["position"], loader.state_dict()["samples"]
            (3, 6)
        """
        state: dict[str, Any] = self._stateful().state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next ``iter()`` resume at ``state_dict`` (from :meth:`state_dict`).

        It takes what the batch sampler's ``load_state_dict`` takes, with its checks: a
        state saved with another batch size or world size continues at its sample.

        Examples:
            >>> from detsamplers.loader import DataLoader
            >>> data = DataLoader(range(20), batch_size=2)
            >>> first = data.get_data_loader(repeat=True)
            >>> batches = iter(first); _ = next(batches), next(batches)
            >>> again = data.get_data_loader(repeat=True)
            >>> again.load_state_dict(first.state_dict())
            >>> next(iter(again)).tolist()
            [4, 5]
        """
        self._stateful().load_state_dict(state_dict)

    def _stateful(self) -> Any:
        sampler = self.batch_sampler
        if not isinstance(sampler, LoaderBatchSampler):
            raise TypeError(
                "state_dict needs the batch sampler of a detsamplers.loader.DataLoader, but "
                f"this loader's batch sampler is {type(sampler).__name__}; build the loader "
                "with detsamplers.loader.DataLoader(...).get_data_loader()"
            )
        return sampler
