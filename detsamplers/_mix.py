"""Mix: an endless stream that interleaves several chains with weights.

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

NOTE [ adding a component ]
A segment names the first ``K_s`` components, ``K_s`` never below the previous segment's,
and the last segment names all ``K``: a segment that names more adds components from its
start on. A mixture of ``K`` datasets that gains a ``(K+1)``-th at a resume is the mixture
whose new sampler is appended last and whose curriculum has a segment of ``K + 1`` weights
starting at or after the position the run reached. The segments before it are built with
their ``K`` columns exactly as the old mixture built them (same keys, windows, counts, tables
and bases), so the past is bit-identical: not the same as giving the new component weight 0
there, which would change the law, since the number of arrangements ``T`` depends on the
number of columns (``P = 4096``: ``T = 16`` for 2 components, 8 for 3). The added
component's base in its first segment is 0: it starts at its own position 0, and the old
components start at the counts they reached, as at any switch. Appended last, it leaves the
``ConcatDataset`` offsets of the earlier datasets unchanged, so the indices already trained
keep their meaning; inserting, removing or reordering components is refused at a resume
(:func:`adopt_curriculum`). The segments and the samplers are the configuration (the mix
link's ``lengths``, ``seeds``, ``components`` and ``curriculum``), so a later resume builds
the same mixture, as after any curriculum change.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from itertools import pairwise
from numbers import Real
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from . import _native
from ._errors import ReproducibilityError, check_int
from ._grow import GrowingShuffleSampler, truncated_chain
from ._permute import FeistelPermutation
from ._seeds import derive, stream_key, stream_keys
from ._source import ForeignSource, IndexSource, Node, as_node, chain_of
from ._stage import Stage, _Cursor
from ._state import fingerprint

__all__ = ["MixSampler", "adopt_curriculum", "adopt_mixture_growth", "mix_position"]

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
#: Blocks of at least this many positions go to the compiled kernel, which needs every
#: arrangement built (2 to 10 ms once per segment): shorter blocks, as after a seek, build
#: only the arrangements they touch, in numpy (NOTE [ compiled mixture kernel ]).
KERNEL_MIN_POSITIONS = 2048
#: Words per component in the kernel's parameters: n, k, b, divisor, rounds, offset, then
#: up to eight round seeds.
KERNEL_PARAMS = 14
#: The largest window the kernel takes: its codes hold an offset's rank (below 2 P) in 16 bits.
KERNEL_MAX_WINDOW = 2**15
#: The kernel shuffles mixtures of up to this many components (it files each chunk's
#: positions by component); larger ones are located in it and shuffled in numpy.
KERNEL_MAX_COMPONENTS = 64


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


class _Segment:
    """One stretch of the stream with fixed weights: window, counts, tables and bases."""

    def __init__(
        self,
        seed: int,
        index: int,
        start: int,
        shares: list[float],
        window: int,
        counts: list[int],
        bases: I64,
    ) -> None:
        k = len(counts)
        self.start = start
        self.shares = shares
        self.window = window
        self.counts = np.asarray(counts, dtype=np.int64)
        self.key = derive(seed, "mix", index)
        self.bases = bases
        self._bases = [int(b) for b in bases]
        self._counts = list(counts)
        wanted = TABLE_ENTRIES // (window * (k + 2))
        # A power of two, so that a key's low bits pick the arrangement.
        clamped = max(MIN_ARRANGEMENTS, min(MAX_ARRANGEMENTS, wanted))
        self.arrangements = 1 << (clamped.bit_length() - 1)
        # T random arrangements of the window's labels, built when a window first uses one
        # (a seek touches a few): arrangement t sorts the window's labels by the hashes of
        # (key, t P + i), so it does not depend on which arrangements were built before.
        t, size = self.arrangements, window
        self._labels_sorted = np.repeat(np.arange(k, dtype=np.int64), counts)
        self._arrangements_key = derive(seed, "mix-arrangements", index)
        self._built = np.zeros(t, dtype=bool)
        self._all_built = False
        # Windows asked for so far (see _build).
        self._requested = 0
        self.labels = np.zeros((t, size), dtype=np.int64)
        self.prefix = np.zeros((t, size + 1, k), dtype=np.int64)
        self._codes = np.zeros(t * 2 * size, dtype=np.int64)
        small = np.int8 if k <= np.iinfo(np.int8).max else np.int16
        self._labels = np.zeros(t * 2 * size, dtype=small)
        self._before = np.zeros(t * (size + 1) * k, dtype=np.int64)
        self._columns = np.arange(size, dtype=np.int64)[None, :]
        self._kernel_tables: tuple[Any, ...] | None = None

    def _build(self, tables: I64) -> None:
        """Build the arrangements among ``tables`` not built yet."""
        if self._all_built:
            return
        self._requested += len(tables)
        if self._requested >= self.arrangements:
            # Blocks that have asked for as many windows as there are arrangements, in one
            # block or in a stream of short ones (a webdataset mixture's batches): build
            # every arrangement left at once, as a later block would (the same tables, one
            # call instead of one per block for as long as some are missing), and later
            # blocks go to the compiled kernel. A seek's first blocks, over fewer windows,
            # build only the arrangements they touch.
            rows = np.flatnonzero(~self._built)
        else:
            if bool(self._built[tables].all()):
                return
            rows = np.unique(tables)
            rows = rows[~self._built[rows]]
        size, k = self.window, len(self.counts)
        cells = (rows[:, None] * size + self._columns).ravel()
        order = np.argsort(stream_keys(self._arrangements_key, cells).reshape(-1, size), axis=1)
        labels = self._labels_sorted[order]
        one_hot = labels[:, :, None] == np.arange(k, dtype=np.int64)[None, None, :]
        prefix = np.zeros((len(rows), size + 1, k), dtype=np.int64)
        np.cumsum(one_hot, axis=1, out=prefix[:, 1:, :])
        # Each offset x of the arrangement written twice (x in [0, 2P)), as one code of its
        # rank among its component's offsets of the doubled arrangement, its component's
        # count and its component. Rotation b reads [b, b + P); the rank there is the code's
        # rank minus the component's count before b, so no offset wraps around.
        doubled = np.concatenate([labels, labels], axis=1)
        ranks = np.take_along_axis(prefix[:, :-1, :], labels[:, :, None], axis=2)[:, :, 0]
        ranks = np.concatenate([ranks, ranks + self.counts[labels]], axis=1)
        packed = (ranks << RANK_SHIFT) | (self.counts[doubled] << COUNT_SHIFT) | doubled
        self.labels[rows] = labels
        self.prefix[rows] = prefix
        self._codes.reshape(-1, 2 * size)[rows] = packed
        self._labels.reshape(-1, 2 * size)[rows] = doubled
        # Per (arrangement, rotation, component): the component's count before the
        # rotation, less its base, to subtract from a rank.
        self._before.reshape(-1, (size + 1) * k)[rows] = (
            prefix - self.bases[None, None, :]
        ).reshape(len(rows), -1)
        self._built[rows] = True
        self._all_built = bool(self._built.all())

    def kernel_ready(self, count: int) -> bool:
        """Whether a block of ``count`` positions goes to the compiled kernel.

        The kernel reads the whole table, so it first builds every arrangement: for a
        block at least ``KERNEL_MIN_POSITIONS`` long, or once they are all built. Its
        compact table packs an offset's rank in 16 bits, so windows above
        ``KERNEL_MAX_WINDOW`` stay in numpy.
        """
        if _native.kernel is None or self.window > KERNEL_MAX_WINDOW:
            return False
        if count < KERNEL_MIN_POSITIONS and not self._all_built:
            return False
        self._build(np.arange(self.arrangements, dtype=np.int64))
        return True

    def kernel_args(self) -> tuple[tuple[Any, ...], int, int, int, int]:
        """The segment's tables and shape, as the kernel's functions take them.

        The tables are the numpy ones, compact: 32-bit codes (an offset's rank among its
        component's offsets in the doubled arrangement, << 16, | its component) and 16-bit
        prefix counts, with the bases and counts apart; a third of the bytes, so that the
        whole table stays in a core's cache.
        """
        if self._kernel_tables is None:
            codes = ((self._codes >> RANK_SHIFT) << 16) | (self._codes & CODE_MASK)
            self._kernel_tables = (
                codes.astype(np.uint32),
                self.prefix.astype(np.uint16).ravel(),
                self.bases.astype(np.int64),
                self.counts.astype(np.int64),
            )
        return self._kernel_tables, self.key, self.window, self.arrangements, len(self.counts)

    def _arrangement(self, windows: I64) -> tuple[I64, I64]:
        """Each window's arrangement and rotation, from the window's key."""
        keys = stream_keys(self.key, windows)
        table = (keys & np.uint64(self.arrangements - 1)).astype(np.int64)
        # Lemire's reduction of the key's high 32 bits to [0, P).
        rotation = (((keys >> np.uint64(32)) * np.uint64(self.window)) >> np.uint64(32)).astype(
            np.int64
        )
        self._build(table)
        return table, rotation

    def _codes_at(self, local: I64) -> tuple[I64, I64 | None, I64, I64, I64]:
        """Window, slot, table code and per-window arrangement of each local position.

        In stream order (few windows for many positions) each window's arrangement is
        computed once and spread to its positions through ``slot``; otherwise per position
        (``slot`` None).
        """
        size = self.window
        window = local // size
        offset = local - window * size
        first, last = int(window.min()), int(window.max())
        if last - first < len(window):
            windows = np.arange(first, last + 1, dtype=np.int64)
            slot = window - first
            table, rotation = self._arrangement(windows)
            code = self._codes[(table * (2 * size) + rotation)[slot] + offset]
            return window, slot, code, table, rotation
        table, rotation = self._arrangement(window)
        code = self._codes[table * (2 * size) + rotation + offset]
        return window, None, code, table, rotation

    def _rows(self, windows: I64) -> tuple[I64, I64]:
        """Each window's first entry in ``_codes`` and in ``_before`` (NOTE [ mixture law ])."""
        keys = stream_keys(self.key, windows)
        table = keys & np.uint64(self.arrangements - 1)
        self._build(table.view(np.int64))
        keys >>= np.uint64(32)  # the rotation: Lemire's reduction, as in _arrangement
        keys *= np.uint64(self.window)
        keys >>= np.uint64(32)
        rotation: I64 = keys.view(np.int64)
        code: I64 = table.view(np.int64)
        before = code * (self.window + 1)
        before += rotation
        before *= len(self.counts)
        code *= 2 * self.window
        code += rotation
        return code, before

    def locate_stride(self, first: int, stride: int, count: int) -> tuple[I64, I64]:
        """:meth:`locate` of the local positions ``first + i * stride``, ``i < count``.

        A rank's block: each window's arrangement is computed once, then two gathers per
        position, with no temporaries beyond a few arrays of the block's length; or the
        same in the compiled kernel (NOTE [ compiled mixture kernel ]).
        """
        if self.kernel_ready(count):
            component = np.empty(count, dtype=np.int64)
            position = np.empty(count, dtype=np.int64)
            assert _native.kernel is not None
            _native.kernel.locate_stride(
                *self.kernel_args(), first, stride, count, component, position
            )
            return component, position
        size = self.window
        offset = np.arange(count, dtype=np.int64)
        offset *= stride
        offset += first
        window = offset // size
        scratch = window * size
        offset -= scratch
        low, high = int(window[0]), int(window[-1])
        if high - low < count:
            codes, befores = self._rows(np.arange(low, high + 1, dtype=np.int64))
            np.subtract(window, low, out=scratch)
            code = codes.take(scratch)
            before = befores.take(scratch)
        else:
            code, before = self._rows(window)
        code += offset
        code = self._codes.take(code)
        component = code & CODE_MASK
        before += component
        position = self._before.take(before)
        np.right_shift(code, COUNT_SHIFT, out=scratch)
        scratch &= COUNT_MASK
        scratch *= window
        code >>= RANK_SHIFT
        code -= position
        code += scratch
        return component, code

    def run_components(self, first: int, count: int) -> npt.NDArray[np.integer[Any]]:
        """The component of each of the local positions ``[first, first + count)``."""
        size = self.window
        start, offset = divmod(first, size)
        stop = (first + count - 1) // size
        table, rotation = self._arrangement(np.arange(start, stop + 1, dtype=np.int64))
        rows = (table * (2 * size) + rotation)[:, None] + self._columns
        out: npt.NDArray[np.integer[Any]] = self._labels[rows.ravel()[offset : offset + count]]
        return out

    def locate(self, local: I64) -> tuple[I64, I64]:
        """Component and component position of each local position (>= 0) of the segment."""
        size, k = self.window, len(self.counts)
        if len(local) == 0:
            return local.copy(), local.copy()
        window, slot, code, table, rotation = self._codes_at(local)
        component: I64 = code & CODE_MASK
        rows = (table * (size + 1) + rotation) * k
        before = self._before[(rows if slot is None else rows[slot]) + component]
        position: I64 = window * ((code >> COUNT_SHIFT) & COUNT_MASK)
        position += code >> RANK_SHIFT
        position -= before
        return component, position

    def consumed(self, local: int) -> list[int]:
        """Items each component has in the segment's first ``local`` positions.

        Plain integers, no numpy call per component: a loader asks for it at every batch
        (the state's ``mixture`` field).
        """
        size = self.window
        window, offset = divmod(local, size)
        out = [b + window * c for b, c in zip(self._bases, self._counts, strict=True)]
        if offset:
            # The window's arrangement and rotation, as _arrangement computes them.
            key = stream_key(self.key, window)
            table, rotation = key & (self.arrangements - 1), ((key >> 32) * size) >> 32
            self._build(np.array([table], dtype=np.int64))
            prefix = self.prefix[table]
            end = rotation + offset
            if end <= size:
                part = prefix[end] - prefix[rotation]
            else:
                part = (prefix[size] - prefix[rotation]) + prefix[end - size]
            out = [a + b for a, b in zip(out, part.tolist(), strict=True)]
        return out

    def config(self) -> list[Any]:
        return [self.start, [round(w, 12) for w in self.shares], self.window]

    #: The tables :meth:`_build` fills an arrangement at a time (about 3 MB for a window of 1024).
    _TABLES = ("labels", "prefix", "_codes", "_labels", "_before")

    def __getstate__(self) -> dict[str, Any]:
        """The segment without its arrangement tables, which :meth:`__setstate__` leaves unbuilt.

        The tables are a pure function of ``(seed, segment, arrangement)`` (NOTE [ mixture
        law ]), so the copy rebuilds each arrangement the first time it is used, equal to
        the original's; a ``spawn`` DataLoader worker receives the small copy.
        """
        state = self.__dict__.copy()
        shapes = {}
        for name in self._TABLES:
            table = state.pop(name, None)
            if table is not None:
                shapes[name] = (table.shape, table.dtype.str)
        state["_table_shapes"] = shapes
        state["_built"] = np.zeros_like(self._built)
        state["_all_built"] = False
        state["_requested"] = 0
        state["_kernel_tables"] = None  # the compiled kernel's compact copy, rebuilt with them
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        shapes = state.pop("_table_shapes")
        self.__dict__.update(state)
        for name, (shape, dtype) in shapes.items():
            setattr(self, name, np.zeros(shape, dtype=np.dtype(dtype)))


def _feistel_permutations(nodes: list[Node]) -> list[FeistelPermutation] | None:
    """Each component's permutation if every one is a Feistel shuffle of ``range(n)``."""
    from ._shuffle import _Shuffle

    perms: list[FeistelPermutation] = []
    for node in nodes:
        if not isinstance(node, _Shuffle) or type(node).records is not Stage.records:
            return None
        if type(node)._map is not _Shuffle._map:
            return None
        inner = node.inner_node()
        if not isinstance(inner, IndexSource) or not inner._identity or node.pass_length < 1:
            return None
        perm = node._permutation()
        if not isinstance(perm, FeistelPermutation):
            return None
        perms.append(perm)
    return perms


def _kernel_params(perms: list[FeistelPermutation], offsets: I64) -> npt.NDArray[np.uint64]:
    """Each component's permutation as one row of ``KERNEL_PARAMS`` words for the kernel."""
    rows = np.zeros((len(perms), KERNEL_PARAMS), dtype=np.uint64)
    for row, perm, offset in zip(rows, perms, offsets.tolist(), strict=True):
        seeds = perm._round_seeds
        row[:6] = [perm.n, perm._k, perm._b, int(perm._divisor), len(seeds), offset]
        row[6 : 6 + len(seeds)] = seeds
    return rows


def _component_length(node: Node) -> int:
    """Records per pass of a component: its finite segment's length."""
    for link in chain_of(node):
        if not link.infinite:
            return link.pass_length
    return 0


def _check_component(index: int, sampler: Any) -> Node:
    node = as_node(sampler)
    name = f"samplers[{index}]"
    links = chain_of(node)
    verbs = [link.verb for link in links]
    if "mix" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which is already a mixture: nest mixtures by "
            "multiplying out the weights into one MixSampler over all the samplers"
        )
    if "skip" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, whose chain contains a skip: a skip inside a "
            "component would be applied again on every pass. The order is shuffle → mix → "
            "shard → batch → skip; skip last, e.g. SkipBatchSampler(BatchSampler(...), skip)."
        )
    if "shard" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which is sharded: mixing inside a shard makes "
            "each rank's data depend on the world size. The order is shuffle → mix → shard "
            "→ batch → skip; shard the mixture, e.g. DistributedSampler(MixSampler(...), W, r)."
        )
    if node.kind != "record" or "batch" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which yields batches: mix records, then batch the "
            "mixture, e.g. BatchSampler(DistributedSampler(MixSampler(...), W, r), B, False)"
        )
    if not node.indexable:
        kind = type(links[-1]._obj if isinstance(links[-1], ForeignSource) else sampler)
        if issubclass(kind, tud.Dataset) and not issubclass(kind, tud.Sampler):
            raise ValueError(
                f"MixSampler cannot mix {name}, a dataset ({kind.__name__}) rather than a "
                "sampler of its indices: pass range(len(dataset)) or "
                "SequentialSampler(dataset), shuffled with ReproducibleShuffleSampler if "
                "wanted, or build the mixture with MixSampler.from_datasets(datasets, "
                "weights, seed)"
            )
        raise ValueError(
            f"MixSampler cannot mix {name} ({kind.__name__}), which cannot seek: the "
            "mixture computes any component position directly, which a sampler that only "
            "iterates cannot give; use range(len(dataset)) or SequentialSampler(dataset), "
            "shuffled with ReproducibleShuffleSampler(..., seed) (a RepeatSampler around "
            "it is accepted)"
        )
    source = links[-1]
    if not (isinstance(source, IndexSource) and source._identity):
        values = source._values if isinstance(source, IndexSource) else None
        if isinstance(values, range):
            found = repr(values)
        elif values is not None:
            found = f"a sequence of {len(values)} values"
        else:
            found = f"those of a {type(source).__name__}"
        raise ValueError(
            f"MixSampler cannot mix {name}, whose indices are {found}, not range(len(dataset)) "
            "or SequentialSampler(dataset): component k's indices are offset by the lengths "
            "of the components before it, as in ConcatDataset(datasets), so a component "
            "covers its whole dataset; to mix part of a dataset, mix range(len(part)) with "
            "part = torch.utils.data.Subset(dataset, indices)"
        )
    if node.clock is not None:
        node.clock.frozen_by = "MixSampler"
    return node


class MixSampler(Stage[int]):
    """Interleave several samplers with weights, as one endless stream (NOTE [ mixture law ]).

    Component ``k`` yields indices into its own dataset; the mixture yields them offset by
    the lengths of the components before it, so they index
    ``torch.utils.data.ConcatDataset(datasets)`` and an item from component ``k`` comes
    from dataset ``k``. A mixture is endless and takes the place of the repeat:
    [shuffle each component] → mix → shard → batch → skip.

    Args:
        samplers: One sampler per dataset: ``SequentialSampler(dataset)``,
            ``range(len(dataset))`` or a :class:`ReproducibleShuffleSampler` over one, each
            with its own seed. A :class:`RepeatSampler` around one is accepted too.
        weights: One non-negative weight per sampler, with a positive sum; they are
            normalised. With a curriculum it may name only the first samplers: the others
            enter with the segment that first names them (NOTE [ adding a component ]).
        seed: Keys the interleaving (any integer).
        window: Positions per window, in ``[1, 65536]``; by default the weights' common
            denominator if it is at most 4096, else 1024.
        curriculum: Later segments ``(start, weights)``, ``start`` increasing and positive:
            from mixture position ``start`` on, ``weights`` apply. No component loses or
            repeats a record at a switch. A segment names at least as many samplers as the
            one before it, and the last names them all; one that names more adds the
            samplers after those, each from its own position 0.

    Raises:
        TypeError: an argument has the wrong type (a ``bool`` weight, a string of weights).
        ValueError: no samplers; weights of the wrong length, negative, NaN or summing to
            zero; a weight too small for the window; an empty sampler with a positive
            weight; a sampler that is sharded, batched, skipped, already mixed or cannot
            seek; curriculum starts that do not increase; a segment that names fewer
            samplers than the one before it, or a last segment that does not name all.

    Determinism:
        Position ``p`` maps to (component, component position) by a pure function of
        ``(seed, weights, window, curriculum, p)``; each component's records depend only
        on its own chain. Nothing depends on the world size, ``num_workers`` or history.

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import MixSampler
        >>> mix = MixSampler([range(4), range(2)], weights=[0.75, 0.25], seed=0)
        >>> mix.window, mix.counts
        (4, [3, 1])
        >>> first = list(islice(mix, 8))
        >>> sorted(i for i in first if i < 4), sorted(i for i in first if i >= 4)
        ([0, 0, 1, 1, 2, 3], [4, 5])
        >>> mix.progress(8)
        {'position': 8, 'consumed': [6, 2], 'epochs': [1, 1]}
    """

    verb = "mix"
    kind = "record"
    indexable = True
    infinite = True

    def __init__(
        self,
        samplers: Sequence[Any],
        weights: Sequence[float],
        seed: int,
        *,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> None:
        if not isinstance(samplers, (list, tuple)):
            raise TypeError(
                "samplers should be a list of samplers, one per dataset, but got "
                f"{type(samplers).__name__}"
            )
        if not samplers:
            raise ValueError("samplers should hold at least one sampler, but got samplers=[]")
        seed = check_int("seed", seed)
        if window is not None:
            window = check_int("window", window, minimum=1)
            if window > MAX_WINDOW:
                raise ValueError(
                    f"window should be an integer in [1, {MAX_WINDOW}], but got window={window}"
                )
        if isinstance(curriculum, (str, bytes)) or not isinstance(curriculum, Sequence):
            raise TypeError(
                "curriculum should be a list of (start, weights) pairs, but got "
                f"{type(curriculum).__name__}"
            )
        k = len(samplers)
        if k > MAX_COMPONENTS:
            raise ValueError(f"samplers should hold at most {MAX_COMPONENTS} samplers, but got {k}")
        plan = _check_plan(weights, curriculum, k)
        nodes = [_check_component(i, s) for i, s in enumerate(samplers)]
        lengths = [_component_length(node) for node in nodes]
        for i, (_, shares) in enumerate(plan):
            name = "weights" if i == 0 else f"curriculum[{i - 1}] weights"
            for c, (share, length) in enumerate(zip(shares, lengths[: len(shares)], strict=True)):
                if share > 0 and length == 0:
                    raise ValueError(
                        f"samplers[{c}] is empty but {name}[{c}] is positive: the mixture would "
                        "draw records it does not have; remove it or give it weight 0"
                    )
        segments: list[_Segment] = []
        for i, (start, shares) in enumerate(plan):
            name = "weights" if i == 0 else f"curriculum[{i - 1}] weights"
            size = window if window is not None else _auto_window(shares)
            # A component added by this segment starts at its own position 0; the segment
            # before it has no column for it (NOTE [ adding a component ]).
            bases = np.zeros(len(shares), dtype=np.int64)
            if segments:
                reached = segments[-1].consumed(start - segments[-1].start)
                bases[: len(reached)] = reached
            counts = _counts(name, shares, size)
            segments.append(_Segment(seed, i, start, shares, size, counts, bases))

        self._inner_obj = list(samplers)
        self._nodes = nodes
        self._lengths = lengths
        self._offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self._perms = _feistel_permutations(nodes)
        self._kernel_params: npt.NDArray[np.uint64] | None = None
        self._seed = seed
        self._segments = segments
        self._starts = [s.start for s in segments]
        self._resume: int | None = None
        self.clock = None
        self._cursor = _Cursor(0)
        self._config: tuple[list[dict[str, Any]], str] | None = None

    # -- properties --------------------------------------------------------------------

    @property
    def samplers(self) -> list[Any]:
        """The component samplers, in order."""
        return list(self._inner_obj)

    @property
    def seed(self) -> int:
        """The seed of the interleaving."""
        return self._seed

    @property
    def lengths(self) -> list[int]:
        """Records per pass of each component (its dataset's length)."""
        return list(self._lengths)

    @property
    def window(self) -> int:
        """Positions per window of the first segment."""
        return self._segments[0].window

    @property
    def counts(self) -> list[int]:
        """Each component's positions per window, first segment (the samplers it names)."""
        return [int(c) for c in self._segments[0].counts]

    @property
    def shares(self) -> list[float]:
        """The realised share of each component named by the first segment, ``counts / window``."""
        first = self._segments[0]
        return [int(c) / first.window for c in first.counts]

    # -- the node protocol -------------------------------------------------------------

    def inner_node(self) -> None:  # type: ignore[override]
        # A mixture is where its chain's walk stops: its components are not one inner node.
        return None

    @property
    def pass_length(self) -> int:
        return int(sum(self._lengths))

    @property
    def records_per_item(self) -> int:
        return 1

    def locate(self, positions: I64) -> tuple[I64, I64]:
        """Component and component position of each mixture position (NOTE [ mixture law ]).

        Examples:
            >>> import numpy as np
            >>> mix = MixSampler([range(3), range(3)], weights=[1, 1], seed=0)
            >>> component, position = mix.locate(np.arange(4))
            >>> sorted(zip(component.tolist(), position.tolist()))
            [(0, 0), (0, 1), (1, 0), (1, 1)]
        """
        found = self._progression(positions)
        if found is not None:  # a rank's block, or a run
            segment, stride = found
            first = int(positions[0]) - segment.start
            return segment.locate_stride(first, stride, len(positions))
        if len(self._segments) == 1:
            return self._segments[0].locate(positions)
        which = np.searchsorted(np.asarray(self._starts), positions, side="right") - 1
        component = np.empty(len(positions), dtype=np.int64)
        position = np.empty(len(positions), dtype=np.int64)
        for s in np.unique(which).tolist():
            mask = which == s
            segment = self._segments[s]
            component[mask], position[mask] = segment.locate(positions[mask] - segment.start)
        return component, position

    def _progression(self, positions: I64) -> tuple[_Segment, int] | None:
        """The segment and stride of positions ``first + i * stride`` inside one segment."""
        n = len(positions)
        if n < 3:
            return None
        first, last = int(positions[0]), int(positions[-1])
        stride = int(positions[1]) - first
        if first < 0 or stride < 1 or last - first != stride * (n - 1):
            return None
        s = bisect_right(self._starts, first) - 1
        if s + 1 < len(self._starts) and last >= self._starts[s + 1]:
            return None
        if not bool((np.diff(positions) == stride).all()):
            return None
        return self._segments[s], stride

    def records(self, positions: I64) -> I64:
        n = len(positions)
        if n == 0:
            return positions.copy()
        progression = self._progression(positions)
        if progression is not None:
            compiled = self._kernel_records(positions, *progression)
            if compiled is not None:
                return compiled
        first = int(positions[0])
        s = bisect_right(self._starts, first) - 1
        segment = self._segments[s]
        end = self._starts[s + 1] if s + 1 < len(self._starts) else None
        if (
            int(positions[-1]) - first == n - 1
            and (end is None or first + n <= end)
            and (n < 2 or bool((np.diff(positions) == 1).all()))
        ):
            # A run of consecutive positions in one segment (a rank of one, or a seek):
            # each component's positions in it are consecutive too (NOTE [ mixture law ]),
            # from its count at the run's start.
            local = first - segment.start
            component = segment.run_components(local, n)
            return self._gather(component, segment.consumed(local))
        if progression is not None:
            # A rank's block (positions r, r + W, ...): components in ascending order.
            segment, stride = progression
            found = segment.locate_stride(first - segment.start, stride, n)
            return self._gather(*found, ascending=True)
        return self._gather(*self.locate(positions))

    def _kernel_records(self, positions: I64, segment: _Segment, stride: int) -> I64 | None:
        """:meth:`records` of the positions ``first + i * stride`` in ``segment``, compiled.

        None when the kernel does not apply: no kernel, a component that is not a Feistel
        shuffle of ``range(n)``, more than ``KERNEL_MAX_COMPONENTS`` components, or a short
        block (:meth:`_Segment.kernel_ready`).
        """
        kernel = _native.kernel
        if kernel is None or self._perms is None or len(self._perms) > KERNEL_MAX_COMPONENTS:
            return None
        n = len(positions)
        if not segment.kernel_ready(n):
            return None
        if self._kernel_params is None:
            self._kernel_params = _kernel_params(self._perms, self._offsets)
        out = np.empty(n, dtype=np.int64)
        first = int(positions[0]) - segment.start
        # A segment before an added component names only the first components (NOTE [
        # adding a component ]): its rows of the parameters.
        params = self._kernel_params[: len(segment.counts)]
        kernel.records_stride(*segment.kernel_args(), first, stride, n, params, out)
        return out

    def _gather(
        self,
        component: npt.NDArray[np.integer[Any]],
        position: I64 | list[int],
        *,
        ascending: bool = False,
    ) -> I64:
        """Each position's record: component ``k``'s chain at its position, offset.

        ``position`` is each position's component position, or (a run of consecutive
        positions) each component's first position. ``ascending``: each component's
        positions increase (positions given in stream order).
        """
        out = np.empty(len(component), dtype=np.int64)
        for k, node in enumerate(self._nodes):
            where = np.flatnonzero(component == k) if len(self._nodes) > 1 else None
            size = len(component) if where is None else len(where)
            if size == 0:
                continue
            if isinstance(position, list):
                wanted = np.arange(position[k], position[k] + size, dtype=np.int64)
            else:
                wanted = position if where is None else position.take(where)
            found = self._records(k, node, wanted, ascending or isinstance(position, list))
            if where is None:
                out[:] = found
            else:
                out[where] = found
        return out

    def _records(self, k: int, node: Node, wanted: I64, ascending: bool) -> I64:
        """Component ``k``'s records at its positions ``wanted``, offset into the concatenation.

        A Feistel shuffle of ``range(n)`` goes straight to its permutation at each pass
        the positions reach (the same values, fewer array passes); ascending positions
        are cut at the passes' ends.
        """
        if self._perms is not None:
            n = self._lengths[k]
            low, high = (
                (int(wanted[0]), int(wanted[-1]))
                if ascending
                else (int(wanted.min()), int(wanted.max()))
            )
            epoch, last = low // n, high // n
            if last == epoch:
                found = self._perms[k].at_epoch(wanted - epoch * n, epoch)
                found += self._offsets[k]
                return found
            if ascending and last - epoch < 8:
                ends = np.searchsorted(wanted, np.arange(epoch + 1, last + 1) * n)
                out = np.empty_like(wanted)
                for e, (a, b) in enumerate(pairwise([0, *ends.tolist(), len(wanted)]), epoch):
                    out[a:b] = self._perms[k].at_epoch(wanted[a:b] - e * n, e)
                out += self._offsets[k]
                return out
        mapped: I64 = node.records(wanted) + self._offsets[k]
        return mapped

    def batches(self, positions: I64) -> list[list[int]]:
        raise NotImplementedError("a MixSampler yields records; batch it with a BatchSampler")

    def fallback_stream(self) -> Iterator[Any]:
        raise NotImplementedError("a MixSampler is always addressable")

    def progress(self, position: int) -> dict[str, Any]:
        """Records each component has given in mixture positions ``[0, position)``.

        ``epochs[k]`` is ``consumed[k] // lengths[k]``: the passes component ``k`` has
        completed (0 for an empty component). O(K) at any position.

        Examples:
            >>> mix = MixSampler([range(10), range(3)], weights=[1, 1], seed=0)
            >>> mix.progress(20)
            {'position': 20, 'consumed': [10, 10], 'epochs': [1, 3]}
        """
        position = check_int("position", position, minimum=0)
        s = bisect_right(self._starts, position) - 1
        segment = self._segments[s]
        consumed = segment.consumed(position - segment.start)
        consumed += [0] * (len(self._lengths) - len(consumed))  # components yet to enter
        epochs = [c // n if n else 0 for c, n in zip(consumed, self._lengths, strict=True)]
        return {"position": position, "consumed": consumed, "epochs": epochs}

    def adopt_state(self, top: Node, state: Any) -> Any:
        """A later curriculum, appended samplers or grown components (NOTE [ state hooks ])."""
        return adopt_mixture_growth(top, adopt_curriculum(top, state))

    def state_additions(self, top: Node, position: int) -> dict[str, Any]:
        """Where each component is at ``top``'s ``position`` (``"mixture"``, informational)."""
        found = mix_position(top, position)
        return {} if found is None else {"mixture": found[0].progress(found[1])}

    def config(self) -> dict[str, Any]:
        seeds = []
        components = []
        for node in self._nodes:
            chain = [link.config() for link in reversed(chain_of(node))]
            components.append(fingerprint(chain))
            seeds.append(next((link.get("seed") for link in chain if "seed" in link), None))
        first = self._segments[0]
        return {
            "stage": "mix",
            "seed": self._seed,
            "weights": [round(w, 12) for w in first.shares],
            "window": first.window,
            "curriculum": [s.config() for s in self._segments[1:]],
            "lengths": list(self._lengths),
            "seeds": seeds,
            "components": components,
        }

    def __len__(self) -> int:
        return self.pass_length

    @classmethod
    def from_datasets(
        cls,
        datasets: Sequence[Any],
        weights: Sequence[float],
        seed: int,
        *,
        shuffle: bool = True,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> MixSampler:
        """Mix map-style datasets, each shuffled with its own seed hashed from ``seed``.

        Index the result's items into ``torch.utils.data.ConcatDataset(datasets)``.

        Examples:
            >>> from itertools import islice
            >>> mix = MixSampler.from_datasets([range(100), range(10)], [0.9, 0.1], seed=0)
            >>> mix.window, mix.counts, len(mix)
            (10, [9, 1], 110)
            >>> sum(i >= 100 for i in islice(mix, 50))
            5
        """
        from ._shuffle import ReproducibleShuffleSampler

        samplers: list[Any] = []
        for i, dataset in enumerate(datasets):
            if not hasattr(dataset, "__len__"):
                raise TypeError(
                    f"datasets[{i}] should be a map-style dataset with __len__, but got "
                    f"{type(dataset).__name__}"
                )
            records = range(len(dataset))
            samplers.append(
                ReproducibleShuffleSampler(records, derive(seed, "mix-component", i))
                if shuffle
                else records
            )
        return cls(samplers, weights, seed, window=window, curriculum=curriculum)


def mix_position(node: Node, position: int) -> tuple[MixSampler, int] | None:
    """The mixture under ``node`` and the first mixture position at ``node``'s ``position``.

    Walks down shard (taking rank 0's position, so that every rank of a step agrees),
    batch and skip stages; None if the chain has no mixture.
    """
    from ._batch import BatchSource
    from ._shard import _Shard

    for link in chain_of(node):
        if isinstance(link, MixSampler):
            return link, position
        grid = getattr(link, "grid", None)  # a skip at a sample (NOTE [ sample positions ])
        if grid is not None and isinstance(grid.samples, MixSampler):
            return grid.samples, int(link.samples_at(position))  # type: ignore[attr-defined]
        if isinstance(link, BatchSource):
            position *= link.records_per_item
        elif isinstance(link, _Shard):
            position *= link.world_size
        elif isinstance(link, Stage):
            position = int(link._map(np.array([position], dtype=np.int64))[0])
        elif isinstance(link, tud.Sampler):
            return None
    return None


#: The mix link's fields that describe its components, one entry per sampler.
_COMPONENT_FIELDS = ("lengths", "seeds", "components")


def _check_components(old: dict[str, Any], new: dict[str, Any], reached: int) -> int | None:
    """The saved run's component count if ``new`` appends components to ``old``'s.

    A saved component matches when its seed is the same and its fingerprint too, or its
    length grew (a growth, which :func:`adopt_growth` checks). None when the components
    are the same, or differ in a way the state check names (a changed seed).

    Raises:
        ReproducibilityError: components were removed, reordered, or one was inserted or
            changed before the last saved one while others were appended.
    """
    columns: list[list[Any]] = []
    for link in (old, new):
        for key in _COMPONENT_FIELDS:
            column = link.get(key)
            if not isinstance(column, list):
                return None
            columns.append(column)
    old_lengths, old_seeds, old_parts, lengths, seeds, parts = columns
    old_k, new_k = len(old_lengths), len(lengths)
    if new_k < old_k:
        raise ReproducibilityError(
            f"cannot load this state: the saved run mixed {old_k} samplers but this mixture "
            f"has {new_k} (mix lengths is {old_lengths!r} in the state but {lengths!r} here); "
            "a sampler cannot be removed at a resume, since the ConcatDataset indices of the "
            "samplers after it would shift. Keep every saved sampler in the saved order and "
            f"give the one to drop weight 0 in a curriculum segment from position {reached} on"
        )

    def same(k: int) -> bool:
        if old_seeds[k] != seeds[k]:
            return False
        if old_parts[k] == parts[k]:
            return True
        grown = isinstance(old_lengths[k], int) and isinstance(lengths[k], int)
        return grown and old_lengths[k] < lengths[k]

    differs = next((k for k in range(old_k) if not same(k)), None)
    if differs is None:
        return old_k if new_k > old_k else None
    if new_k == old_k:
        if sorted(map(str, old_parts)) == sorted(map(str, parts)) or (
            old_lengths != lengths and sorted(map(str, old_lengths)) == sorted(map(str, lengths))
        ):
            raise ReproducibilityError(
                "cannot load this state: the mixture's samplers are in another order than "
                f"the saved run's (mix lengths is {old_lengths!r} in the state but "
                f"{lengths!r} here); the ConcatDataset indices would address other records. "
                "Keep the saved order of samplers and datasets"
            )
        return None
    raise ReproducibilityError(
        f"cannot load this state: samplers[{differs}] is not the saved run's samplers"
        f"[{differs}] (its length is {old_lengths[differs]!r} in the state but "
        f"{lengths[differs]!r} here, its seed {old_seeds[differs]!r} but {seeds[differs]!r}) "
        f"while this mixture has {new_k - old_k} more; a sampler added at a resume goes "
        f"last, after the saved run's {old_k} (samplers[{old_k}:] and the datasets at the "
        "end of the ConcatDataset), so that the indices already trained keep their records. "
        "Keep the saved samplers in their order and append the new ones"
    )


def adopt_curriculum(node: Node, state: Any) -> Any:
    """``state`` with ``node``'s mixture, if that differs only from the reached position on.

    A curriculum may be extended or changed at a resume, and a curriculum segment may add
    samplers appended last (NOTE [ adding a component ]): segments that start at or after
    the first mixture position not yet consumed (rank 0's, or the saved ``samples`` over a
    sample grid, NOTE [ mixture law ]) do not touch the records already seen. Saved
    components whose configuration differs (a growth) keep their saved configuration in
    the result, for :func:`adopt_growth` to check. Any other difference returns ``state``
    unchanged, so that loading it names the difference.

    Raises:
        ReproducibilityError: the curriculum differs before that position (a sampler
            entering there among others), or samplers were removed, reordered, or one
            inserted before the saved ones.
    """
    if not isinstance(state, Mapping) or not isinstance(node, Stage):
        return state
    saved, position = state.get("chain"), state.get("position")
    if not isinstance(saved, list) or isinstance(position, bool) or not isinstance(position, int):
        return state
    found = mix_position(node, position)
    samples = state.get("samples")  # the saved run's own sample position, if it has one
    grid = getattr(node, "grid", None) is not None
    elastic = grid and isinstance(samples, int) and not isinstance(samples, bool)
    if found is not None and elastic and isinstance(samples, int):
        found = (found[0], samples)
    current = node.chain_config()
    if found is None or position < 0 or len(saved) != len(current) or saved == current:
        return state
    # Over a sample grid the shard and batch links may differ too (an elastic resume):
    # the sample position does not depend on them, and the state check compares the rest.
    if not isinstance(saved[0], Mapping) or (saved[1:] != current[1:] and not elastic):
        return state
    old, new = dict(saved[0]), dict(current[0])
    old_plan, new_plan = old.pop("curriculum", None), new.pop("curriculum", None)
    if (
        old.get("stage") != "mix"
        or not isinstance(old_plan, list)
        or not isinstance(new_plan, list)
    ):
        return state
    reached = found[1]
    old_k = _check_components(old, new, reached)
    rest_old = {key: v for key, v in old.items() if key not in _COMPONENT_FIELDS}
    rest_new = {key: v for key, v in new.items() if key not in _COMPONENT_FIELDS}
    if rest_old != rest_new:
        weights = new.get("weights")
        if old_k is not None and isinstance(weights, list) and len(weights) > old_k:
            raise ReproducibilityError(
                f"cannot load this state: samplers[{old_k}:] enter this mixture at position 0 "
                f"(mix weights is {old.get('weights')!r} in the state but {weights!r} here), "
                f"before position {reached}, which the saved run had reached; keep the saved "
                f"weights and add them with a curriculum segment of {len(weights)} weights "
                f"from position {reached} on: curriculum=[({reached}, [...])]"
            )
        return state
    if old_k is None and any(old.get(key) != new.get(key) for key in _COMPONENT_FIELDS):
        if old.get("seeds") != new.get("seeds") or not isinstance(new.get("lengths"), list):
            return state  # a changed sampler: the state check names it
        old_k = len(new["lengths"])  # the same samplers, some grown: adopt_growth checks them
    if old_k is None and old_plan == new_plan:
        return state

    def past(plan: list[Any]) -> list[Any]:
        return [entry for entry in plan if isinstance(entry, list) and entry and entry[0] < reached]

    if past(old_plan) != past(new_plan):
        if old_k is not None:
            entering = next(
                (
                    entry
                    for entry in past(new_plan)
                    if len(entry) > 1 and isinstance(entry[1], list) and len(entry[1]) > old_k
                ),
                None,
            )
            if entering is not None:
                raise ReproducibilityError(
                    f"cannot load this state: samplers[{old_k}:] enter the mixture at position "
                    f"{entering[0]} (a curriculum segment of {len(entering[1])} weights), before "
                    f"position {reached}, which the saved run had already reached with "
                    f"{old_k} samplers; start that segment at position {reached} or later"
                )
        raise ReproducibilityError(
            "cannot load this state: the mixture's curriculum changed before position "
            f"{reached}, which the saved run had already reached (mix curriculum is "
            f"{old_plan!r} in the state but {new_plan!r} here); segments may only be added "
            f"or changed from position {reached} on, or the records seen would differ"
        )
    adopted = dict(current[0])
    if old_k is not None:  # the saved samplers keep their saved fields, for adopt_growth
        for key in ("lengths", "components"):
            adopted[key] = [*old[key][:old_k], *new[key][old_k:]]
    chain = [adopted, *saved[1:]]
    if chain == saved:
        return state
    return {**state, "chain": chain, "fingerprint": fingerprint(chain)}


def adopt_mixture_growth(node: Node, state: Any) -> Any:
    """``state`` with ``node``'s mixture, if only components' growths from there on differ.

    The mixture's part of a growth (NOTE [ growth law ]); any other difference returns
    ``state`` unchanged, so that loading it names the difference.

    Raises:
        ValueError: a component's growth lies before the records it had given when the
            saved run stopped.
    """
    if not isinstance(state, Mapping):
        return state
    saved, position = state.get("chain"), state.get("position")
    if not isinstance(saved, list) or isinstance(position, bool) or not isinstance(position, int):
        return state
    return _adopt_mixture_growth(node, state, saved, position)


def _adopt_mixture_growth(node: Node, state: Mapping[str, Any], saved: list[Any], at: int) -> Any:
    """``state`` with ``node``'s mixture, if only components' growths from there on differ.

    Component ``k`` is at its own position ``consumed[k]`` when the saved run stopped
    (the mixture law does not depend on the components' lengths); its saved fingerprint
    must be its current chain's with the growths before that position only.
    """
    found = mix_position(node, at)
    mixture = chain_of(node)[-1]
    samples = state.get("samples")
    if found is None or not isinstance(mixture, MixSampler):
        return state
    reached = samples if isinstance(samples, int) and getattr(node, "grid", None) else found[1]
    current = [link.config() for link in reversed(chain_of(node))]
    if len(saved) != len(current) or not isinstance(saved[0], Mapping):
        return state
    old, new = dict(saved[0]), dict(current[0])
    varying = ("lengths", "components")
    if {k: v for k, v in old.items() if k not in varying} != {
        k: v for k, v in new.items() if k not in varying
    } or old == new:
        return state
    if not all(isinstance(old.get(key), list) for key in varying):
        return state
    if len(old["lengths"]) != len(new["lengths"]):
        return state
    consumed = mixture.progress(reached)["consumed"]
    for k, component in enumerate(mixture._nodes):
        if old["components"][k] == new["components"][k]:
            continue
        grow = next((x for x in chain_of(component) if isinstance(x, GrowingShuffleSampler)), None)
        if grow is None:
            return state
        matched = None
        for keep in range(len(grow._history)):
            candidate = truncated_chain(component, keep)
            if candidate is not None and fingerprint(candidate) == old["components"][k]:
                matched = keep
        if matched is None or grow._history[matched][1] != old["lengths"][k]:
            return state
        for position, size in grow._history[matched + 1 :]:
            if position < consumed[k]:
                raise ValueError(
                    f"growth position {position} of samplers[{k}] (to {size} records) should be "
                    f"at least {consumed[k]}, the records that component had given when the "
                    f"saved run stopped; record it as ({consumed[k]}, {size}) or later"
                )
    adopted = [new, *saved[1:]]
    return {**state, "chain": adopted, "fingerprint": fingerprint(adopted)}
