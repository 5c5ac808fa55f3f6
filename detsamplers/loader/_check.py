"""``check_reproducible``: say what would break a reproducible resume, and the fix.

The checks, in the order they run (each raises :class:`~detsamplers.ReproducibilityError`
with one message naming the object, what breaks and the fix):

1. an ``IterableDataset`` without the resume protocol (``state_dict()`` and
   ``load_state_dict()``): its stream cannot be positioned;
2. torch's ``RandomSampler`` anywhere in the chain (``DataLoader(shuffle=True)`` builds
   one): it draws each pass's order when iteration starts;
3. a chain that shards before it shuffles or repeats (NOTE [ chain order ] allows it, as
   it iterates correctly, but it is neither elastic nor resumable at a global position);
4. a training chain (one with a repeat or a mixture) over a sampler that cannot seek: a
   foreign type that is only iterated, so resuming means replaying it;
5. a torch DataLoader whose ``MixSampler`` does not match its dataset: component ``k``'s
   indices are offsets into ``ConcatDataset(datasets)``, so the lengths must add up.

A chain is recognised as a training chain by its repeat: a bare foreign sampler passes.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud

from .._errors import ReproducibilityError
from .._mix import MixSampler
from .._order import ORDER
from .._source import ForeignSource, as_node, chain_of
from .._stage import Stage

__all__ = ["check_chain", "check_dataset", "check_mixture", "check_reproducible"]

_FIX_SHUFFLE = (
    "use detsamplers.loader.DataLoader(dataset, shuffle=True, seed=...) or "
    "ReproducibleShuffleSampler(sampler, seed) instead"
)


def _objects(obj: Any) -> list[Any]:
    """The Python objects of a chain, outermost first, as far as they can be unwrapped."""
    out = [obj]
    while True:
        if isinstance(obj, MixSampler):
            return out
        if isinstance(obj, Stage):
            attribute = "batch_sampler" if isinstance(obj, tud.BatchSampler) else "sampler"
            obj = getattr(obj, attribute)
        elif isinstance(obj, tud.BatchSampler) and hasattr(obj, "sampler"):
            obj = obj.sampler
        else:
            return out
        out.append(obj)


def check_dataset(dataset: Any) -> None:
    """Raise if ``dataset`` is an ``IterableDataset`` that cannot be positioned."""
    if not isinstance(dataset, tud.IterableDataset):
        return
    if callable(getattr(dataset, "state_dict", None)) and callable(
        getattr(dataset, "load_state_dict", None)
    ):
        return
    raise ReproducibilityError(
        f"{type(dataset).__name__} is an IterableDataset without the resume protocol "
        "(state_dict() and load_state_dict()): its stream cannot be positioned, so a resumed "
        "run restarts it or replays it from the beginning; use a map-style dataset with "
        "detsamplers.loader.DataLoader, or a stream whose state_dict()/load_state_dict() "
        "save and restore its position"
    )


def check_chain(sampler: Any) -> None:
    """Raise if the sampler or batch sampler chain ``sampler`` cannot be resumed reproducibly."""
    for obj in _objects(sampler):
        if isinstance(obj, tud.RandomSampler):
            origin = (
                "torch's global RNG (shuffle=True without a generator builds such a sampler)"
                if obj.generator is None
                else "the current state of its generator"
            )
            raise ReproducibilityError(
                f"torch's RandomSampler draws each pass's order from {origin} when iteration "
                "starts, so a resumed run sees another order and repeats or skips records "
                f"within the resumed epoch; {_FIX_SHUFFLE}"
            )
    links = list(reversed(chain_of(as_node(sampler))))
    verbs = [link.verb for link in links]
    if "shard" in verbs:
        after = verbs[verbs.index("shard") + 1 :]
        for verb, gerund in (("shuffle", "shuffles"), ("repeat", "repeats")):
            if verb in after:
                raise ReproducibilityError(
                    f"this chain ({' > '.join(verbs)}) shards before it {gerund}: each rank's "
                    "data then depends on the world size, so it cannot be resumed at a global "
                    f"position or with another number of ranks; the order is {ORDER}: build "
                    "the chain with get_data_loader(repeat=True) or make_batch_sampler"
                )
    if "repeat" in verbs or "mix" in verbs:
        for link in links:
            if isinstance(link, ForeignSource):
                name = link.config()["source"]
                raise ReproducibilityError(
                    f"{name} cannot seek: it is not a detsamplers stage or an addressable "
                    "source (SequentialSampler, range, an index array), so resuming this "
                    "training chain replays it from the start in O(position), and is only "
                    "correct if it yields the same order every time; use an addressable "
                    "sampler, e.g. ReproducibleShuffleSampler(SequentialSampler(dataset), seed)"
                )


def check_mixture(dataset: Any, sampler: Any) -> None:
    """Raise if a mixture's indices would not address ``ConcatDataset`` of its datasets."""
    if sampler is None:
        return
    mixture = chain_of(as_node(sampler))[-1]
    if not isinstance(mixture, MixSampler) or not hasattr(dataset, "__len__"):
        return
    if len(dataset) != mixture.pass_length:
        raise ReproducibilityError(
            f"the MixSampler's components have {mixture.lengths} records "
            f"({mixture.pass_length} in all) but the dataset has {len(dataset)}: the indices "
            "of component k would read from another dataset; pass ConcatDataset(datasets) "
            "of the mixed datasets, in the samplers' order"
        )


def check_reproducible(loader_or_sampler: Any) -> None:
    """Raise :class:`~detsamplers.ReproducibilityError` if a resume would not be reproducible.

    Args:
        loader_or_sampler: A :class:`~detsamplers.loader.DataLoader` (its training chain is
            checked), a ``torch.utils.data.DataLoader`` (its dataset and index sampler), a
            sampler or batch sampler, or a dataset.

    Raises:
        ReproducibilityError: an ``IterableDataset`` without ``state_dict()`` and
            ``load_state_dict()``; torch's ``RandomSampler`` (``shuffle=True`` in torch's
            DataLoader); a chain that shards before it shuffles or repeats; a training
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
    from ._dataloader import DataLoader

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
