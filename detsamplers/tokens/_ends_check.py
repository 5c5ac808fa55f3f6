"""The increase check of cached document ends, done per region on first read.

NOTE [ lazy ends check ]
A cached ``<sidecar>.ends.npy`` (NOTE [ cached document ends ]) is trusted only where its
ends increase from at least 1 to at most the file's token count: then every document read
from it is a non-empty range inside the file. Checking all of it at each open is
O(documents) and touches every page of the map (at 1e6 documents, about half of a resume's
time). ``EndsCheck`` checks it by regions of ``CHECK_REGION`` ends instead, each the
first time a read needs it: region ``r`` holds ends ``[r R, (r + 1) R)`` and its check
covers ``[r R - 1, (r + 1) R)`` (the end before it too), so that a read of the pair
``(i - 1, i)`` (a document's start and end) needs only the region of ``i``. A region
passes if its first value is at least 1, its last at most the token count and its values
increase; the regions checked are kept in a bitmap (one bool per region). Once every
region has passed, the whole array increases: each region's check includes the last end
of the region before it.

A file of at most ``CHECK_WHOLE`` ends is checked whole at open, as before (a failure
there rebuilds the cache from the sidecar). Past that, a region that fails raises a
``ValueError`` naming the cache file: the corpus is not switched to rebuilt ends in the
middle of a run (ranks would disagree on what they read until each reached the region).
Deleting the file rebuilds it at the next open. A cache that only a forger with the
files' stat could write (NOTE [ cached document ends ]) is the only way to get there.

NOTE [ pair check ]
``TokenCorpus.starts`` (a pack's windows, a ``concat`` block of several files) reads
documents scattered over the whole file: a pack's batch of 8 windows of 1,000 documents
met about 250 regions of the 1e6 corpus's ends, so the region check compared every end
(4.0 to 5.0 ms of a 12 ms first batch). It checks instead each document it reads by the
two ends that bound it: ``1 <= ends[l - 1] < ends[l] <= tokens`` (``1 <= ends[0]`` for the
first), which is what makes the read safe (a non-empty range inside the file) and what
the region check gave the documents read. What is given up: a break among the unread
ends of a region read (the region check refused it; here two documents read may then
overlap, each still inside the file). Neither check compares the regions no read meets,
and the open's binding and sampled checks stand against a changed corpus as before. A
failure raises the region check's error, naming the two ends.
A ``chunk`` batch checks its windows' documents the same way (8 windows met 8 regions of
4,096 ends, their pages faulted in, for the few documents each window holds), then that
the search's answer brackets each window, as before.

The block starts of a ``concat`` order (every ``B``-th end, NOTE [ block-hierarchical
concat ]) are read without this check: they are checked among themselves (increasing,
from 0 to the token count), which is what the block totals need.
"""

from __future__ import annotations

import itertools
import mmap
import os
import stat
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHECK_REGION",
    "CHECK_WHOLE",
    "READ_GAP",
    "READ_SPAN",
    "EndsCheck",
    "distinct",
    "mapped_file",
    "mapped_from",
    "open_regular",
    "read_at",
    "read_file_at",
]

I64 = npt.NDArray[np.int64]
#: Ends per region of the lazy increase check (32 kB of int64): a resume's first batch
#: checks one region per sequence, so its cost is one region's (0.27 ms for 8 regions
#: against 0.83 ms at 1 << 16 on a fresh map of the 1e6 corpus's ends, load 11).
CHECK_REGION = 1 << 12
#: A cache of at most this many ends is checked whole at open.
CHECK_WHOLE = 1 << 16
#: Bytes between two values read at, below which one ``pread`` reads both.
READ_GAP = 1 << 12
#: Bytes read by one ``pread`` at most (what a read holds in memory).
READ_SPAN = 1 << 18


def open_regular(name: str) -> int:
    """A read-only descriptor of the mapped file ``name``, checked still a regular file.

    Opened non-blocking, so a FIFO swapped in never blocks the open.

    Raises:
        ValueError: it is now a FIFO, device or directory (the message names it).
    """
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(
            f"file {name} should be the regular file that was opened, but it is now a "
            "FIFO, device or directory; open the corpus again"
        )
    return fd


def distinct(values: I64) -> tuple[I64, I64]:
    """The sorted distinct ``values``, and where each value is among them.

    ``numpy.unique``'s answer by one stable sort, without its first call's import of
    ``numpy.ma`` (15 to 20 ms in a process that has not imported it, on a resume's path).

    Examples:
        >>> import numpy as np
        >>> kept, back = distinct(np.array([7, 3, 7, 5]))
        >>> kept.tolist(), back.tolist()
        ([3, 5, 7], [2, 0, 2, 1])
    """
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    new = np.empty(len(ranked), dtype=np.bool_)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    back = np.empty(len(ranked), dtype=np.int64)
    back[order] = np.cumsum(new) - 1
    return ranked[new], back


def mapped_from(values: Any, path: Any) -> Any:
    """Record on the memory map ``values`` the file it maps, for :func:`read_at`."""
    if isinstance(values, np.memmap):
        values.filename = str(path)
    return values


def mapped_file(values: npt.NDArray[Any]) -> tuple[str, int] | None:
    """The file a 1-D contiguous view of a recorded map reads, and its first byte there."""
    base: Any = values  # the map's own array: the memmap whose base is the mmap
    while base is not None and not (
        isinstance(base, np.memmap) and isinstance(base.base, mmap.mmap)
    ):
        base = getattr(base, "base", None)
    root: Any = base
    name = getattr(root, "filename", None)
    if not isinstance(name, str) or values.ndim != 1 or values.strides[0] != values.itemsize:
        return None
    delta = values.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return name, int(root.offset) + delta


def read_at(values: npt.NDArray[Any], at: I64) -> I64:
    """``values[at]`` as int64, read from the file that ``values`` maps, not through the map.

    NOTE [ ends read by position ]. ``at`` holds valid positions, in any order.

    Raises:
        ValueError: the file ends before a position (it shrank while open).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "e.npy"
        >>> np.save(path, np.arange(10, 20, dtype=np.int64))
        >>> ends = mapped_from(np.load(path, mmap_mode="r"), path)
        >>> read_at(ends[2:], np.array([5, 0, 5])).tolist()
        [17, 12, 17]
    """
    found = mapped_file(values)
    if found is None or len(at) == 0:
        return np.asarray(np.asarray(values)[at], np.int64)
    return read_file_at(found[0], found[1], values.dtype, at)


def read_file_at(name: str, offset: int, dtype: np.dtype[Any], at: I64) -> I64:
    """Values ``at`` of the ``dtype`` array at byte ``offset`` of file ``name``, as int64.

    :func:`read_at` without a map: the caller knows the array's place in the file (a
    ``.npy`` header it checked, :func:`~._files.npy_values`). ``at`` is non-empty and
    holds valid positions, in any order.

    Raises:
        ValueError: the file ends before a position, or is no longer a regular file.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "e.npy"
        >>> np.save(path, np.arange(10, 20, dtype=np.int32))
        >>> read_file_at(str(path), 128, np.dtype(np.int32), np.array([9, 0, 9])).tolist()
        [19, 10, 19]
    """
    item = dtype.itemsize
    wanted, back = distinct(at)
    where = wanted * item
    # A new run where the gap is wide or a READ_SPAN boundary is crossed: one pread a run.
    cut = np.flatnonzero((np.diff(where) > READ_GAP) | (np.diff(where // READ_SPAN) != 0)) + 1
    firsts = np.concatenate(([0], cut))
    lasts = np.concatenate((cut, [len(wanted)]))
    lows = where[firsts]
    sizes = where[lasts - 1] + item - lows
    # Each wanted value's item in the runs' bytes end to end; the runs are read in groups of
    # about READ_SPAN bytes, each group's values picked out by one gather (memory stays
    # O(READ_SPAN + values), the Python work one pread a run).
    starts = np.cumsum(sizes) - sizes
    slot = (where - np.repeat(lows - starts, lasts - firsts)) // item
    groups = np.flatnonzero(np.diff(starts // READ_SPAN)) + 1
    bounds = np.concatenate(([0], groups, [len(sizes)])).tolist()
    parts: list[I64] = []
    fd = open_regular(name)
    try:
        for g0, g1 in itertools.pairwise(bounds):
            spans = zip(sizes[g0:g1].tolist(), (lows[g0:g1] + offset).tolist(), strict=True)
            data = [os.pread(fd, size, at) for size, at in spans]
            if sum(map(len, data)) != int(sizes[g0:g1].sum()):
                short = next(i for i, d in enumerate(data) if len(d) != sizes[g0 + i])
                raise ValueError(
                    f"file {name} should hold {int(sizes[g0 + short])} bytes at byte "
                    f"{offset + int(lows[g0 + short])}, but it ends {len(data[short])} bytes "
                    "in; it changed while open, open the corpus again"
                )
            run = np.frombuffer(b"".join(data), dtype=dtype)
            picked = slot[int(firsts[g0]) : int(lasts[g1 - 1])] - int(starts[g0]) // item
            parts.append(run[picked].astype(np.int64))
    finally:
        os.close(fd)
    got = np.concatenate(parts)
    return got[back.reshape(-1)]


class EndsCheck:
    """Which regions of one file's document ends have passed the increase check.

    Args:
        count: The ends (documents) of the file.
        tokens: The file's token count (the largest end allowed).
        where: The cache file the ends come from, named in the error.
        checked: Whether the whole array has already been checked.
        region: Ends per region (``None``: ``CHECK_REGION``).

    Examples:
        >>> import numpy as np
        >>> ends = np.array([2, 5, 4, 9])
        >>> check = EndsCheck(4, 9, "t.lengths.npy.ends.npy", checked=False, region=2)
        >>> check.cover(ends, 0, 1)  # region 0: ends 0 and 1 increase
        >>> try:
        ...     check.cover(ends, 2, 3)  # region 1 and the end before it: 5, 4, 9
        ... except ValueError as error:
        ...     print(str(error).split(", but")[1].split(";")[0])
         its ends 1 to 3 do not
    """

    def __init__(
        self, count: int, tokens: int, where: Any, checked: bool, region: int | None = None
    ) -> None:
        self._count = count
        self._tokens = tokens
        self._where = where
        self._region = CHECK_REGION if region is None else region
        self._all = checked or count == 0
        self._done = np.full(-(-count // self._region), self._all, dtype=np.bool_)

    @property
    def complete(self) -> bool:
        """Whether every region has passed."""
        return self._all

    def cover(self, ends: npt.NDArray[Any], lo: int, hi: int) -> None:
        """Check the regions holding ends ``[lo, hi)`` (and the end before ``lo``).

        Raises:
            ValueError: a region's ends do not increase inside ``[1, tokens]``.
        """
        if self._all or hi <= lo:
            return
        first, last = max(lo, 0) // self._region, (min(hi, self._count) - 1) // self._region
        if bool(self._done[first : last + 1].all()):
            return
        self._check_runs(ends, first + np.flatnonzero(~self._done[first : last + 1]))

    def cover_at(self, ends: npt.NDArray[Any], at: I64) -> None:
        """Check the regions holding the ends ``at`` (each with the end before it)."""
        if self._all or len(at) == 0:
            return
        regions = np.clip(at, 0, self._count - 1) // self._region
        if bool(self._done[regions].all()):
            return
        wanted = distinct(regions)[0]
        self._check_runs(ends, wanted[~self._done[wanted]])

    def cover_reads(self, ends: npt.NDArray[Any], local: I64, before: I64) -> None:
        """Check the documents ``local`` by the ends read for them (NOTE [ pair check ]).

        ``before`` holds ``ends[local - 1]`` where ``local > 0`` (anything where 0); the
        ends ``ends[local]`` are read here. Valid ``local`` lie in ``[0, count)``.

        Raises:
            ValueError: a document's ends are not ``1 <= ends[l - 1] < ends[l] <= tokens``.
        """
        if self._all or len(local) == 0:
            return
        own = np.asarray(ends[local], np.int64)
        low = np.where(local > 0, before, 0)
        bad = (own <= low) | (own > self._tokens) | ((local > 0) & (low < 1))
        if not bool(bad.any()):
            return
        doc = int(local[int(np.argmax(bad))])
        raise ValueError(
            f"document ends cache {self._where} should hold increasing ends in [1, "
            f"{self._tokens}], but its ends {max(doc - 1, 0)} to {doc} do not; delete it "
            "(the next open rebuilds it from the sidecar)"
        )

    def _check_runs(self, ends: npt.NDArray[Any], regions: I64) -> None:
        """Check ``regions`` (increasing, unchecked), each run of consecutive ones in one pass.

        A pack's window reads documents all over the file, so one batch can need most
        regions: one comparison per run, not one per region (a run that fails is checked
        region by region, to name the first that fails).
        """
        cut = np.flatnonzero(np.diff(regions) != 1) + 1
        for run in np.split(regions, cut) if len(regions) else ():
            low, high = (
                int(run[0]) * self._region,
                min((int(run[-1]) + 1) * self._region, self._count),
            )
            if len(run) > 1 and self._sound(ends[max(low - 1, 0) : high]):
                self._done[int(run[0]) : int(run[-1]) + 1] = True
                continue
            for region in run.tolist():
                self._check(ends, region)
        if bool(self._done.all()):
            self._all = True

    def _sound(self, part: npt.NDArray[Any]) -> bool:
        """Whether ``part`` increases from at least 1 to at most the token count."""
        return (
            int(part[0]) >= 1
            and int(part[-1]) <= self._tokens
            and bool((part[1:] > part[:-1]).all())  # no temporary of differences
        )

    def _check(self, ends: npt.NDArray[Any], region: int) -> None:
        if self._done[region]:
            return
        start = region * self._region
        part = ends[max(start - 1, 0) : min(start + self._region, self._count)]
        if not self._sound(part):
            raise ValueError(
                f"document ends cache {self._where} should hold increasing ends in [1, "
                f"{self._tokens}], but its ends {max(start - 1, 0)} to "
                f"{max(start - 1, 0) + len(part) - 1} do not; delete it (the next open "
                "rebuilds it from the sidecar)"
            )
        self._done[region] = True
        if bool(self._done.all()):
            self._all = True
