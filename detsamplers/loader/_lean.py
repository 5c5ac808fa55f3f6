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

    class _SingleIter(_Unannotated, _SINGLE):  # type: ignore[misc, valid-type]
        pass

    class _MultiIter(_Unannotated, _MULTI):  # type: ignore[misc, valid-type]
        pass


class LeanDataLoader(tud.DataLoader[Any]):
    """A torch ``DataLoader`` that skips the profiler annotation while no profiler runs.

    Everything else (arguments, workers, pinning, ``len``) is torch's; see
    NOTE [ profiler annotation ].

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

    def _get_iterator(self) -> Any:
        if not _SUPPORTED:
            return super()._get_iterator()
        if self.num_workers == 0:
            return _SingleIter(self)
        self.check_worker_number_rationality()
        return _MultiIter(self)
