"""The mixture law: weights, windows and counts, checked into a plan of segments.

NOTE [ mixture law ]
Position ``p`` of a mixture of ``K`` components maps to (component ``k``, position ``q``
of component ``k``'s own chain) by a pure function of ``(seed, weights, p)``:

- The stream is cut into aligned windows ``[j P, (j + 1) P)``. Each component owns a fixed
  count ``c_k`` of every window's ``P`` positions, ``|c_k - P w_k| < 1`` and
  ``sum c_k = P`` (largest remainders). By default ``P`` is the weights' common
  denominator (``[0.6, 0.25, 0.15]`` gives ``P = 20`` and counts ``12, 5, 3``) when it is
  at most 4096, else 1024; pass ``window=`` to choose.
- Which offsets of window ``j`` belong to which component is one of ``T`` random
  arrangements of the window's labels (arrangement ``t`` sorts them by keyed hashes of
  ``t P + i``, built the first time a window uses it), cyclically rotated: the
  arrangement and the rotation come from the SplitMix64 stream of
  ``derive(seed, "mix", segment)`` at counter ``j`` (NOTE [ seed mixing ]), so
  neighbouring windows, seeds and segments have unrelated interleavings. ``T`` is 8 to
  1024 (tables of about 2**18 entries), so there are ``T * P`` arrangements.
- Component ``k`` advances through its chain in order: its items in window ``j`` are its
  positions ``[B_k + j c_k, B_k + (j + 1) c_k)``, in stream order. The arrangement's
  prefix counts give the rank of an offset among its component's offsets in O(1), so
  any position costs a constant number of table lookups, O(log S) over ``S`` curriculum
  segments, and a rank computes only its own positions. In a run of consecutive
  positions each component's positions are consecutive too, from its count at the run's
  start, so a run needs only the components.

Each component's chain reads positions past its length as later passes
(NOTE [ position algebra ]): component ``k`` is on its pass ``q // N_k``, and a small
component with a large weight repeats more often. Its records come exactly once per pass.

A curriculum is a list of segments ``(start, weights)``. Segment ``s`` has its own
window and counts; its bases ``B_k`` are the counts every component reached at
``start``, partial windows included, so switching weights loses and repeats no record of
any component.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import check_int

__all__ = [
    "CODE_MASK",
    "COUNT_MASK",
    "COUNT_SHIFT",
    "DEFAULT_WINDOW",
    "MAX_ARRANGEMENTS",
    "MAX_AUTO_WINDOW",
    "MAX_COMPONENTS",
    "MAX_WINDOW",
    "MIN_ARRANGEMENTS",
    "RANK_SHIFT",
    "TABLE_ENTRIES",
    "_auto_window",
    "_check_plan",
    "_counts",
]

I64 = npt.NDArray[np.int64]

#: The window used when the weights have no common denominator up to ``MAX_AUTO_WINDOW``.
DEFAULT_WINDOW = 1024
MAX_AUTO_WINDOW = 4096
#: The largest window one may pass: a count must fit the codes' 17-bit field (below).
MAX_WINDOW = 2**16
#: Table entries (arrangements x offsets x components) aimed at per segment.
TABLE_ENTRIES = 2**18
MIN_ARRANGEMENTS, MAX_ARRANGEMENTS = 8, 1024
#: A table code is ``rank << RANK_SHIFT | count << COUNT_SHIFT | component``: the offset's
#: rank among its component's offsets, its component's count per window, its component.
COUNT_SHIFT, RANK_SHIFT = 16, 33
CODE_MASK = (1 << COUNT_SHIFT) - 1
COUNT_MASK = (1 << (RANK_SHIFT - COUNT_SHIFT)) - 1
#: The most components: a component number must fit below COUNT_SHIFT bits.
MAX_COMPONENTS = CODE_MASK


def _check_weights(name: str, weights: Any, count: int) -> list[float]:
    """Validate one weight per component; return them as floats."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
        raise TypeError(
            f"{name} should be a sequence of {count} non-negative numbers, one per sampler, "
            f"but got {name}={weights!r} of type {type(weights).__name__}"
        )
    values = list(weights)
    if len(values) != count:
        raise ValueError(
            f"{name} should have one weight per sampler ({count}), but got {len(values)}: "
            f"{name}={values!r}"
        )
    out = []
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Real, np.number)):
            raise TypeError(
                f"{name}[{i}] should be a non-negative number, but got {value!r} "
                f"of type {type(value).__name__}"
            )
        number = float(value)
        if not math.isfinite(number) or number < 0:
            raise ValueError(
                f"{name}[{i}] should be a finite non-negative number, but got {name}[{i}]={value!r}"
            )
        out.append(number)
    total = math.fsum(out)
    if not total > 0:
        raise ValueError(
            f"{name} should have a positive sum, but got {name}={values!r}; give at least one "
            "sampler a positive weight"
        )
    return [w / total for w in out]


def _auto_window(shares: list[float]) -> int:
    """The shares' common denominator if it is at most ``MAX_AUTO_WINDOW``, else the default.

    Each share is read as the nearest fraction with a denominator up to
    ``MAX_AUTO_WINDOW`` (within 1e-9, so that 0.6 is 3/5).

    Examples:
        >>> _auto_window([0.6, 0.25, 0.15]), _auto_window([1 / 3, 2 / 3]), _auto_window([0.3721, 0.6279])
        (20, 3, 1024)
    """  # noqa: E501
    window = 1
    for share in shares:
        fraction = Fraction(share).limit_denominator(MAX_AUTO_WINDOW)
        if abs(float(fraction) - share) > 1e-9:
            return DEFAULT_WINDOW
        window = math.lcm(window, fraction.denominator)
        if window > MAX_AUTO_WINDOW:
            return DEFAULT_WINDOW
    return window


def _counts(name: str, shares: list[float], window: int) -> list[int]:
    """Largest-remainder counts of ``window`` for ``shares``; every positive share gets one."""
    exact = [share * window for share in shares]
    counts = [math.floor(x + 1e-9) for x in exact]
    order = sorted(range(len(shares)), key=lambda k: (-(exact[k] - counts[k]), k))
    for k in order[: window - sum(counts)]:
        counts[k] += 1
    for k, (share, got) in enumerate(zip(shares, counts, strict=True)):
        if share > 0 and got == 0 and math.ceil(1 / share - 1e-9) > MAX_WINDOW:
            raise ValueError(
                f"{name}[{k}] is a share of {share:.3g}, below what a window of at most "
                f"{MAX_WINDOW} positions can represent; raise it to at least 1/{MAX_WINDOW} "
                "of the total or give it weight 0"
            )
        if share > 0 and got == 0:
            raise ValueError(
                f"{name}[{k}] is a share of {share:.3g}, which rounds to none of the "
                f"window's {window} positions; pass a window of at least "
                f"{math.ceil(1 / share - 1e-9)} positions (window=) or a larger weight"
            )
    return counts


def _named(name: str, weights: Any, low: int, k: int, hint: str) -> int:
    """How many components ``weights`` names: at least ``low``, at most ``k``."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
        return k  # _check_weights names the type
    n = len(weights)
    if not low <= n <= k:
        raise ValueError(
            f"{name} should have one weight per sampler ({k}), but got {n}: "
            f"{name}={list(weights)!r}" + (f"; {hint}" if n < low else "")
        )
    return n


def _check_plan(weights: Any, curriculum: Sequence[Any], k: int) -> list[tuple[int, list[float]]]:
    """The segments ``(start, shares)``: ``weights`` from 0, then ``curriculum``'s.

    Segment ``s`` names the first ``k_s`` components, ``k_s`` at least the previous
    segment's and the last segment all ``k``: a segment that names more components adds
    them from its start on (NOTE [ adding a component ]).

    Examples:
        >>> _check_plan([1, 1], [(10, [1, 1, 2])], 3)
        [(0, [0.5, 0.5]), (10, [0.25, 0.25, 0.5])]
    """
    entries: list[tuple[str, int, Any]] = [("weights", 0, weights)]
    for i, entry in enumerate(curriculum):
        if not (isinstance(entry, Sequence) and len(entry) == 2):
            raise TypeError(f"curriculum[{i}] should be a (start, weights) pair, but got {entry!r}")
        start = check_int(f"curriculum[{i}] start", entry[0], minimum=1)
        if start <= entries[-1][1]:
            raise ValueError(
                f"curriculum[{i}] start should be greater than {entries[-1][1]} (starts "
                f"increase), but got {start}"
            )
        entries.append((f"curriculum[{i}] weights", start, entry[1]))
    plan: list[tuple[int, list[float]]] = []
    low = 1
    for name, start, values in entries:
        hint = (
            "it names the samplers mixed from position 0, at least one"
            if start == 0
            else f"the segment before it names {low}, and a component cannot leave a mixture: "
            "give it weight 0 instead"
        )
        n = _named(name, values, low, k, hint)
        plan.append((start, _check_weights(name, values, n)))
        low = n
    if low < k:
        name, _, values = entries[-1]
        raise ValueError(
            f"{name} should have one weight per sampler ({k}), but got {low}: "
            f"{name}={list(values)!r}; the last segment names every sampler, or samplers"
            f"[{low}:] would never be mixed in. To add a sampler mid-run, append it last and "
            "name its weight from the position it enters at: curriculum=[(position, "
            f"[{k} weights])] (NOTE [ adding a component ])"
        )
    return plan
