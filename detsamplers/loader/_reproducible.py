"""check_reproducible: refuse what a resume could not reproduce, naming the fix.

It applies the checks of _check.py (their list opens that file) to what a user hands it:
our DataLoader's training chain, a torch DataLoader's dataset and index sampler, a sampler
or batch sampler, or a dataset.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud

from ._check import check_chain, check_dataset, check_mixture
from ._dataloader import DataLoader

__all__ = ["check_reproducible"]


def check_reproducible(loader_or_sampler: Any) -> None:
    """Raise :class:`~detsamplers.ReproducibilityError` if a resume would not be reproducible.

    Args:
        loader_or_sampler: A :class:`~detsamplers.loader.DataLoader` (its training chain is
            checked), a ``torch.utils.data.DataLoader`` (its dataset and index sampler), a
            sampler or batch sampler, or a dataset.

    Raises:
        ReproducibilityError: an ``IterableDataset`` without ``state_dict()`` and
            ``load_state_dict()``; torch's ``RandomSampler`` (``shuffle=True`` in torch's
            DataLoader), ``SubsetRandomSampler`` or ``WeightedRandomSampler``, alone or
            wrapped in one of our stages; a chain that shards before it shuffles or repeats; a training
            chain over a sampler that cannot seek. The message names the fix.
        TypeError: ``loader_or_sampler`` is none of the above.

    It passes silently on anything ``DataLoader.get_data_loader`` returns.

    Examples:
        >>> import torch
        >>> from detsamplers.loader import DataLoader
        >>> check_reproducible(DataLoader(range(10), batch_size=2, shuffle=True))
        >>> check_reproducible(torch.utils.data.DataLoader(range(10), shuffle=True))
        Traceback (most recent call last):
        ...
        detsamplers.ReproducibilityError: torch's RandomSampler draws each pass's order from torch's global RNG (shuffle=True without a generator builds such a sampler) when iteration starts, so a resumed run sees another order and repeats or skips records within the resumed epoch; use detsamplers.loader.DataLoader(dataset, shuffle=True, seed=...) or ReproducibleShuffleSampler(sampler, seed) instead
    """  # noqa: E501
    obj = loader_or_sampler
    if isinstance(obj, DataLoader):
        check_chain(obj.get_data_loader(repeat=True).batch_sampler)
        return
    if isinstance(obj, tud.DataLoader):
        check_dataset(obj.dataset)
        if isinstance(obj.dataset, tud.IterableDataset):
            return
        sampler = obj.batch_sampler if obj.batch_sampler is not None else obj.sampler
        check_chain(sampler)
        check_mixture(obj.dataset, sampler)
        return
    if isinstance(obj, tud.IterableDataset):
        check_dataset(obj)
        return
    if isinstance(obj, (tud.Sampler, range)):
        check_chain(obj)
        return
    raise TypeError(
        "loader_or_sampler should be a DataLoader, a sampler, a batch sampler or an "
        f"IterableDataset, but got {type(obj).__name__}"
    )
