"""The checks behind ``check_reproducible``: what would break a reproducible resume, and the fix.

The checks, in the order they run (each raises :class:`~detsamplers.ReproducibilityError`
with one message naming the object, what breaks and the fix):

1. an ``IterableDataset`` without the resume protocol (``state_dict()`` and
   ``load_state_dict()``): its stream cannot be positioned;
2. a torch sampler that draws from an RNG when iteration starts, anywhere in the chain:
   ``RandomSampler`` (``DataLoader(shuffle=True)`` builds one), ``SubsetRandomSampler``
   and ``WeightedRandomSampler``, alone or under one of our stages (a shuffle over them);
3. a shuffle over a foreign sampler (a user's wrapper) that holds one of our endless
   stages (a ``RepeatSampler``) among its attributes, a few levels deep: iterating the
   shuffle would read its pass forever, and refuses it (NOTE [ chain order ]); said here
   with iteration's message, before anything is read;
4. a chain that shards before it shuffles or repeats (NOTE [ chain order ] allows it, as
   it iterates correctly, but it is neither elastic nor resumable at a global position);
5. a training chain (one with a repeat or a mixture) over a sampler that cannot seek: a
   foreign type that is only iterated, so resuming means replaying it;
6. a torch DataLoader whose ``MixSampler`` does not match its dataset: component ``k``'s
   indices are offsets into ``ConcatDataset(datasets)``, so the lengths must add up.

A chain is recognised as a training chain by its repeat: a bare foreign sampler passes.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud

from .._errors import ReproducibilityError
from .._mix import MixSampler
from .._node import Node
from .._order import ORDER
from .._shuffle import ENDLESS_PASS
from .._source import ForeignSource, as_node, chain_of
from .._stage import Stage

__all__ = ["check_chain", "check_dataset", "check_mixture"]

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


#: torch's samplers that draw from an RNG each time iteration starts, and the fix for each.
_RANDOM_SAMPLERS: tuple[tuple[type[Any], str, str], ...] = (
    (tud.RandomSampler, "order", _FIX_SHUFFLE),
    (
        tud.SubsetRandomSampler,
        "order",
        "shuffle the subset's indices with ReproducibleShuffleSampler(indices, seed) instead "
        "(a list or array of indices is an addressable source)",
    ),
    (
        tud.WeightedRandomSampler,
        "indices",
        "draw the weighted indices once with a seeded generator, e.g. indices = "
        "numpy.random.default_rng(seed).choice(len(weights), num_samples, p=weights / "
        "weights.sum()), and pass ReproducibleShuffleSampler(indices, seed); to weight "
        "whole datasets, mix them with MixSampler",
    ),
)


def _check_random(obj: Any) -> None:
    """Raise if ``obj`` is one of torch's samplers that draw from an RNG when iterated."""
    for kind, what, fix in _RANDOM_SAMPLERS:
        if isinstance(obj, kind):
            origin = "the current state of its generator"
            if getattr(obj, "generator", None) is None:
                origin = "torch's global RNG (" + (
                    "shuffle=True without a generator builds such a sampler)"
                    if kind is tud.RandomSampler
                    else "it has no generator)"
                )
            raise ReproducibilityError(
                f"torch's {kind.__name__} draws each pass's {what} from {origin} when "
                "iteration starts, so a resumed run sees another order and repeats or skips "
                f"records within the resumed epoch; {fix}"
            )


#: How deep, and through how many objects, a wrapper's attributes are searched for a repeat.
_DEPTH, _VISITS, _ITEMS = 4, 2000, 64


def _hidden_endless(obj: Any) -> tuple[str, Node] | None:
    """An endless stage of ours among ``obj``'s attributes: its path and itself, else ``None``.

    Breadth first through attributes, list, tuple and dict items (the first ``_ITEMS``), at
    most ``_DEPTH`` levels and ``_VISITS`` objects: no iteration, no call, so a user's
    sampler is never advanced. Datasets, arrays and tensors are not searched.

    Examples:
        >>> from detsamplers import RepeatSampler
        >>> class Wrapper:
        ...     def __init__(self): self.inner = [RepeatSampler(range(3))]
        >>> path, found = _hidden_endless(Wrapper())
        >>> path, type(found).__name__
        ('.inner[0]', 'RepeatSampler')
    """
    queue: list[tuple[Any, str, int]] = [(obj, "", 0)]
    seen: set[int] = set()
    for value, path, depth in queue:
        if len(seen) >= _VISITS:
            break
        if id(value) in seen:
            continue
        seen.add(id(value))
        if path and isinstance(value, Node) and value.infinite:
            return path, value
        if depth == _DEPTH or isinstance(value, (str, bytes, tud.Dataset, type)):
            continue
        if isinstance(value, dict):
            items = [(f"[{k!r}]", v) for k, v in list(value.items())[:_ITEMS]]
        elif isinstance(value, (list, tuple)):
            items = [(f"[{i}]", v) for i, v in enumerate(value[:_ITEMS])]
        else:
            items = [(f".{k}", v) for k, v in getattr(value, "__dict__", {}).items()]
        queue.extend((v, path + step, depth + 1) for step, v in items)
    return None


def _check_hidden_repeat(links: list[Any]) -> None:
    """Raise if a shuffle wraps a foreign sampler that holds an endless stage of ours."""
    for outer, inner in zip(links[1:], links, strict=False):
        if outer.verb != "shuffle" or not isinstance(inner, ForeignSource):
            continue
        found = _hidden_endless(inner.obj)
        if found is not None:
            path, stage = found
            name = type(inner.obj).__name__
            raise ReproducibilityError(
                f"{type(outer).__name__} would read its pass forever: the sampler it shuffles "
                f"({name}) holds {name}{path}, a {type(stage).__name__}, whose stream is "
                f"endless; {ENDLESS_PASS}"
            )


def check_chain(sampler: Any) -> None:
    """Raise if the sampler or batch sampler chain ``sampler`` cannot be resumed reproducibly."""
    for obj in _objects(sampler):
        _check_random(obj)
    links = list(reversed(chain_of(as_node(sampler))))
    _check_hidden_repeat(links)
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
