"""The arguments of a mixture of shard sets that are particular to it, checked.

NOTE [ per-set arguments ]
A :class:`WebDatasetMix` takes the single source's arguments, each for every set alike,
plus what only a mixture has: how many shard sets its weights and curriculum segments name
(at least as many as the segment before, all of them in the last, NOTE [ adding a
component ]), and a ``decode`` and a ``map`` that may be one entry per set. A list is per
set unless it is a list of image specs and handlers, which is webdataset's
``.decode(*args)`` for every set; a list of exactly as many of those as there are sets
could mean either and is refused, naming both spellings. Everything is checked before any
shard is indexed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._decode import make_decoder

__all__ = ["check_named", "per_set_decode", "per_set_map"]


def check_named(weights: Sequence[float], curriculum: Any, count: int) -> None:
    """Check how many shard sets ``weights`` and each curriculum segment name.

    ``weights`` names the sets mixed from position 0; a segment names at least as many as
    the one before it, and the last names all ``count``: a segment that names more adds
    sets from its start on, as for ``MixSampler`` (NOTE [ adding a component ]). Malformed
    entries are left to ``MixSampler``'s checks.

    Examples:
        >>> check_named([1, 1], [(10, [1, 1, 2])], 3)
        >>> try:
        ...     check_named([1, 1], [], 3)
        ... except ValueError as error:
        ...     print(str(error).split("; ")[1][:52])
        to add a shard set at a resume, append its urls last
    """
    entries: list[tuple[str, Any]] = [("weights", weights)]
    if isinstance(curriculum, Sequence) and not isinstance(curriculum, (str, bytes)):
        entries += [
            (f"curriculum[{i}] weights", entry[1])
            for i, entry in enumerate(curriculum)
            if isinstance(entry, Sequence) and len(entry) == 2
        ]
    low = 1
    for i, (name, values) in enumerate(entries):
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            return
        n = len(values)
        last = i == len(entries) - 1
        if n > count or (last and n < count) or (0 < n < low):
            fix = (
                f"; the segment before it names {low}, and a shard set cannot leave a mixture: "
                "give it weight 0 instead"
                if n < low
                else (
                    "; to add a shard set at a resume, append its urls last and name its "
                    "weight from the position it enters at: curriculum=[(position, "
                    f"[{count} weights])]"
                    if n < count
                    else ""
                )
            )
            raise ValueError(
                f"{name} should have one weight per shard set in urls ({count}), but got {n}: "
                f"{name}={list(values)!r}{fix}"
            )
        low = max(low, n)


def per_set_decode(decode: Any, count: int) -> list[Any] | None:
    """Each of the ``count`` shard sets' decoders if ``decode`` is a per-set list, else None.

    A list of image specs and handlers only is one decoder for every set (webdataset's
    ``.decode(*args)``, as ``WebDatasetSource`` reads it); a list of ``count`` of them could
    mean either, so it is refused. Any other list is one entry per set.

    Examples:
        >>> per_set_decode(("rgb8", "l8"), 2) is None  # a tuple: one decoder for both
        True
        >>> [d is None for d in per_set_decode([None, "rgb8"], 2)]
        [True, False]
    """
    if not isinstance(decode, list):
        return None
    from webdataset import autodecode

    def handler(entry: Any) -> bool:
        return isinstance(entry, str) or (
            callable(entry) and not isinstance(entry, autodecode.Decoder)
        )

    if all(handler(entry) for entry in decode):
        if count >= 2 and len(decode) == count:
            wrapped = ", ".join(f"({entry!r},)" for entry in decode)
            raise ValueError(
                f"decode={decode!r} is ambiguous with {count} shard sets: a list of {count} "
                "image specs or handlers may be one decoder for every set or one per set; "
                f"pass a tuple, decode={tuple(decode)!r}, for one decoder with these "
                f"handlers for every set, or wrap each set's entry, decode=[{wrapped}], "
                "for one per set"
            )
        return None
    if len(decode) != count:
        raise ValueError(
            f"decode should be one decode value for every shard set or a list of {count}, "
            f"one per shard set (None: no decoding), but got a list of {len(decode)}: "
            f"decode={decode!r}; give each of the {count} sets an entry"
        )
    out: list[Any] = []
    for k, entry in enumerate(decode):
        try:
            out.append(make_decoder(entry))
        except TypeError:
            raise TypeError(
                f"decode[{k}] should be shard set {k}'s decode: an image spec such as "
                "'rgb8', a decoding handler, a tuple of these, a webdataset.autodecode."
                f"Decoder, or None for no decoding, but got decode[{k}]={entry!r} of type "
                f"{type(entry).__name__}"
            ) from None
    return out


def per_set_map(fn: Any, count: int) -> list[Any] | None:
    """Each of the ``count`` shard sets' maps if ``fn`` is a per-set list, else None.

    Examples:
        >>> per_set_map(len, 2) is None, per_set_map([len, None], 2)
        (True, [<built-in function len>, None])
    """
    if not isinstance(fn, list):
        if fn is not None and not callable(fn):
            raise TypeError(
                "map should be a callable or None for every shard set, or a list of "
                f"{count} of them, one per shard set, but got map={fn!r} of type "
                f"{type(fn).__name__}; pass a function of one sample, or a list of them"
            )
        return None
    if len(fn) != count:
        raise ValueError(
            f"map should be one callable for every shard set or a list of {count}, one per "
            f"shard set (None: no map), but got a list of {len(fn)}: map={fn!r}; give each "
            f"of the {count} sets an entry"
        )
    for k, entry in enumerate(fn):
        if entry is not None and not callable(entry):
            raise TypeError(
                f"map[{k}] should be shard set {k}'s map, a callable or None (no map), but "
                f"got map[{k}]={entry!r} of type {type(entry).__name__}; pass a function of "
                "one sample"
            )
    return list(fn)
