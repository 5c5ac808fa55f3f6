"""The loader's fetch: the user's dataset, fetched under the batch's seeded RNGs.

NOTE [ seeded fetch ]
The per-batch seeding (NOTE [ per-batch seeding ]) has to run where a batch is fetched,
in whichever process fetches it, before the user's ``__getitem__``. Wrapping the dataset
would do that, but torch hands the dataset it was given to the user twice: as
``loader.dataset`` (which Lightning, Accelerate and HF read) and, inside a worker, as
``torch.utils.data.get_worker_info().dataset`` (where a ``worker_init_fn`` opens a
per-worker file or database handle). Both must be the user's own object.

So the dataset stays the user's, and the seeding moves into the fetcher: torch builds a
worker's (and the main process's) fetcher with ``_DatasetKind.create_fetcher(kind,
dataset, ...)``, where ``kind`` is the loader's ``_dataset_kind``. The loader's kind is
:class:`SeededKind`, an ``int`` equal to ``_DatasetKind.Map`` (so every test torch and
torchdata make on it answers "map-style"), which carries the per-record seeding base.
:func:`install` wraps ``create_fetcher`` once per process so that for a
:class:`SeededKind`, and only for one, it builds a :class:`SeededFetcher`, torch's map
fetcher whose ``fetch`` calls :func:`~detsamplers.loader._seeding.fetch_seeded`; any
other kind gets torch's fetcher unchanged, so other loaders in the process are not
touched. The wrapper is installed before a loader is built (inherited by forked
workers) and again when a spawned worker unpickles the kind.

torch's loader and torchdata's ``StatefulDataLoader`` both build their fetchers this way
(``loader_class=`` keeps the seeding). If a torch release stops building fetchers
through ``create_fetcher``, :func:`seeded_fetch_supported` turns false and the loader
falls back to wrapping the dataset (NOTE [ per-batch seeding ] still holds; only the two
objects above are then the wrapper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.utils.data as tud
from torch.utils.data import _utils as _torch_utils
from torch.utils.data import dataloader as _torch_loader

from ._seeding import fetch_seeded, record_base

__all__ = [
    "SeededFetcher",
    "SeededKind",
    "SeededView",
    "install",
    "seeded_fetch_supported",
    "seeded_kind",
]

_KIND = getattr(_torch_loader, "_DatasetKind", None)
_FETCH = getattr(getattr(_torch_utils, "fetch", None), "_MapDatasetFetcher", None)
_SUPPORTED = (
    _KIND is not None
    and callable(getattr(_KIND, "create_fetcher", None))
    and getattr(_KIND, "Map", None) == 0
    and isinstance(_FETCH, type)
)


def seeded_fetch_supported() -> bool:
    """Whether this torch builds fetchers through ``_DatasetKind.create_fetcher``.

    Examples:
        >>> seeded_fetch_supported()
        True
    """
    return _SUPPORTED


class SeededKind(int):
    """A loader's ``_dataset_kind``: map-style, fetched by :class:`SeededFetcher`.

    Attributes:
        record: The per-record seeding base (:func:`record_base` of the seed), or None to
            seed per batch.

    Examples:
        >>> kind = seeded_kind(None)
        >>> kind == 0, kind.record is None
        (True, True)
    """

    record: int | None

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickling in a spawned worker installs the fetcher there first.
        return (_unpickle_kind, (self.record,))


def seeded_kind(record_seed: int | None) -> SeededKind:
    """The kind of a loader seeded per batch, or per record from ``record_seed``."""
    install()
    kind = SeededKind(0)
    kind.record = None if record_seed is None else record_base(record_seed)
    return kind


def _unpickle_kind(record: int | None) -> SeededKind:
    install()
    kind = SeededKind(0)
    kind.record = record
    return kind


if _SUPPORTED:
    assert _FETCH is not None

    class SeededFetcher(_FETCH):  # type: ignore[misc, valid-type]
        """torch's map-style fetcher, seeding each positioned batch (NOTE [ seeded fetch ])."""

        record: int | None = None

        def fetch(self, possibly_batched_index: Any) -> Any:
            if not self.auto_collation:
                return super().fetch(possibly_batched_index)
            data = fetch_seeded(self.dataset, possibly_batched_index, self.record)
            return self.collate_fn(data)

else:  # pragma: no cover - only on a torch without the fetcher internals

    class SeededFetcher:  # type: ignore[no-redef]
        """Unused: this torch does not build fetchers through ``create_fetcher``."""


_ORIGINAL: Callable[..., Any] | None = None


def _create_fetcher(
    kind: Any, dataset: Any, auto_collation: bool, collate_fn: Any, drop_last: bool
) -> Any:
    if type(kind) is SeededKind:
        fetcher = SeededFetcher(dataset, auto_collation, collate_fn, drop_last)
        fetcher.record = kind.record
        return fetcher
    assert _ORIGINAL is not None
    return _ORIGINAL(kind, dataset, auto_collation, collate_fn, drop_last)


def install() -> bool:
    """Route :class:`SeededKind` to :class:`SeededFetcher` in this process (idempotent).

    Returns:
        Whether the seeded fetch is in place (false on a torch without the internals).
    """
    global _ORIGINAL
    if not _SUPPORTED:
        return False
    assert _KIND is not None
    current = _KIND.create_fetcher
    if current is not _create_fetcher:
        _ORIGINAL = current
        _KIND.create_fetcher = staticmethod(_create_fetcher)
    return True


class SeededView(tud.Dataset[Any]):
    """The fallback of NOTE [ seeded fetch ]: a dataset view whose batches are seeded.

    Examples:
        >>> from detsamplers.loader._seeding import batch_key, positioned_batch
        >>> view = SeededView(range(5), None)
        >>> view.__getitems__(positioned_batch([3, 1], position=0, key=batch_key(0, 0)))
        [3, 1]
    """

    def __init__(self, dataset: Any, record_seed: int | None) -> None:
        self.dataset = dataset
        self._record = None if record_seed is None else record_base(record_seed)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return fetch_seeded(self.dataset, indices, self._record)
