"""One segment of a mixture: its window's random arrangements, tables and bases.

It implements the windows and arrangements of NOTE [ mixture law ] (detsamplers/_mix/_law.py):
window ``j`` of a segment reads one of ``T`` keyed arrangements of the window's labels,
cyclically rotated, so that any position's component and component position cost a
constant number of table lookups.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _native
from .._seeds import derive, stream_key, stream_keys
from ._kernel import KERNEL_MAX_WINDOW, KERNEL_MIN_POSITIONS
from ._law import (
    CODE_MASK,
    COUNT_MASK,
    COUNT_SHIFT,
    MAX_ARRANGEMENTS,
    MIN_ARRANGEMENTS,
    RANK_SHIFT,
    TABLE_ENTRIES,
)

__all__ = ["_Segment"]

I64 = npt.NDArray[np.int64]


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

    def consumed_many(self, local: I64) -> I64:
        """:meth:`consumed` at each of the local positions ``local``: ``(len(local), k)``.

        A few numpy calls whatever ``len(local)`` (a mixture with parts asks at one
        position of each lane, NOTE [ mixture lanes ]), the same integers as
        :meth:`consumed`: each window's arrangement and rotation come from its key, and a
        window read past its end wraps around its arrangement's prefix counts
        (``prefix[:, 0]`` is zero, so an offset that does not wrap adds nothing).
        """
        size = self.window
        local = np.asarray(local, dtype=np.int64)
        window, offset = local // size, local % size
        out: I64 = self.bases[None, :] + window[:, None] * self.counts[None, :]
        busy = np.flatnonzero(offset)
        if len(busy):
            table, rotation = self._arrangement(window[busy])
            end = rotation + offset[busy]
            prefix = self.prefix
            out[busy] += (
                prefix[table, np.minimum(end, size)]
                - prefix[table, rotation]
                + prefix[table, np.maximum(end - size, 0)]
            )
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
