"""One way to read a sample: cut it out of a span of its shard's bytes, and verify the span.

NOTE [ one way to read a sample ]
Every reader reads a sample the same way: one span of the shard's bytes, from ``base`` to
the end of its last member, read by whatever the reader reads with (a local file, a remote
stream, a cached copy), holding the sample's members, or a run of samples' (NOTE [ runs of
samples ]). Two functions then do the rest for every reader:

- :func:`cut_sample` slices each member out of the span at the offsets of the index: the
  bytes are the same whichever reader read them; :func:`cut_samples` does it for a run of a
  shard's samples at once, each a new dict as the reader yields it, in one compiled call
  (``_kernel.cut_samples``) when the kernel is there, else in the Python loop it reproduces
  (:func:`gather_members` likewise copies a kept window's members together);
  :func:`read_samples` reads a batch's samples of one cached shard with the ``pread`` it is
  handed, a run of neighbouring ones in one call, and cuts them the same way (one compiled
  call a shard, ``_kernel.read_samples``, else its Python reference);
- :func:`verify_span`, when the span starts at the tar header before its first member
  (NOTE [ index verification ]), checks the members' headers against the index, a few
  members of their own (:class:`Members`, in pure Python) or a shard's ``HeaderTable`` at
  once (a range or a set of its members), and raises the one error naming the shard and the
  fix (:func:`refuse`) for the first that disagrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ...._native import kernel
from ..shard._shard_info import ShardInfo
from ..shard._tar_check import HeaderTable, header_mismatch
from ..shard._tar_walk import BLOCK

__all__ = [
    "Columns",
    "Members",
    "cut_sample",
    "cut_samples",
    "gather_members",
    "gather_window",
    "index_bounds",
    "members_of",
    "read_samples",
    "refuse",
    "verify_span",
]


class Members(NamedTuple):
    """Members of a shard as its index says, one column each: row ``r`` is one member.

    Examples:
        >>> members_of("k0", [["cls", 512, 1], ["png", 1536, 70]])
        Members(keys=('k0', 'k0'), suffixes=('cls', 'png'), offsets=(512, 1536), sizes=(1, 70))
    """

    keys: Sequence[str]
    suffixes: Sequence[str]
    offsets: Sequence[int]
    sizes: Sequence[int]


def members_of(key: str, members: Sequence[Sequence[Any]]) -> Members:
    """The :class:`Members` of sample ``key``, from its ``[suffix, offset, size]`` lists."""
    suffixes, offsets, sizes = zip(*members, strict=True) if members else ((), (), ())
    return Members((key,) * len(members), suffixes, offsets, sizes)


def cut_sample(
    sample: dict[str, Any],
    data: bytes,
    base: int,
    suffixes: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
    rows: range,
) -> dict[str, Any]:
    """Add to ``sample`` the members ``rows`` of the columns, cut out of ``data``; return it.

    ``data`` holds the shard's bytes from offset ``base`` (NOTE [ one way to read a sample ]).

    Examples:
        >>> cut_sample({"__key__": "k0"}, b"..abcdef", 100, ["cls", "txt"], [102, 105], [2, 3],
        ...     range(2))
        {'__key__': 'k0', 'cls': b'ab', 'txt': b'def'}
    """
    for j in rows:
        at = offsets[j] - base
        sample[suffixes[j]] = data[at : at + sizes[j]]
    return sample


class Columns(NamedTuple):
    """A shard's members as :func:`cut_samples` reads them.

    Sample ``i`` holds members ``starts[i]`` to ``starts[i + 1] - 1``; member ``j`` is
    ``sizes[j]`` bytes at ``offsets[j]`` of the span, named ``suffixes[j]``. Lists (the
    index's own), or int64 arrays (the header table's, or a kept window's offsets: NOTE
    [ kept windows ]) for the kernel.
    """

    starts: Sequence[int]
    offsets: Sequence[int]
    sizes: Sequence[int]
    suffixes: Sequence[str]


def _numpy_columns(columns: Sequence[Any], keys: Sequence[str]) -> bool:
    """Whether the kernel can cut these columns (else the Python loop, the reference).

    It can where the columns are numpy arrays and keys and suffixes lists or tuples.
    """
    starts, offsets, sizes, suffixes = columns
    return (
        all(isinstance(x, np.ndarray) for x in (starts, offsets, sizes))
        and isinstance(keys, (list, tuple))
        and isinstance(suffixes, (list, tuple))
    )


def cut_samples(
    data: Any,
    base: int,
    columns: Columns,
    keys: Sequence[str],
    url: str,
    local: str | None,
    indexes: Sequence[int],
    slots: Sequence[int],
    out: list[Any],
) -> None:
    """Set ``out[i]`` to the dict of sample ``indexes[i]`` of a shard, for each of ``slots``.

    The dict is what a reader yields: ``__key__``, ``__url__``, one ``bytes`` per member cut
    out of ``data`` (the shard's bytes from offset ``base``, or a kept window's members) in
    the order of the index, then ``__local_path__`` (``local``; none if ``None``, as for a
    remote shard). With the compiled kernel and columns
    of int64 arrays, the run is one C call (``_kernel.cut_samples``); the loop below is its
    reference, and the path without the kernel (tests/webdataset/test_wds_cut_samples.py
    compares the two).

    Raises:
        IndexError: a sample index is outside the shard.
        ValueError: a member lies outside ``data`` (the compiled path; the loop cuts it
            short, as slicing does).

    Examples:
        >>> columns = Columns([0, 2, 3], [102, 105, 108], [2, 3, 1], ["cls", "txt", "cls"])
        >>> out = [None, None]
        >>> data, keys = b"..abcdefghi", ("k0", "k1")
        >>> cut_samples(data, 100, columns, keys, "u", "p", [1, 0], [0, 1], out)
        >>> out[0]
        {'__key__': 'k1', '__url__': 'u', 'cls': b'g', '__local_path__': 'p'}
        >>> out[1]
        {'__key__': 'k0', '__url__': 'u', 'cls': b'ab', 'txt': b'def', '__local_path__': 'p'}
    """
    starts, offsets, sizes, suffixes = columns
    if kernel is not None and _numpy_columns(columns, keys):
        kernel.cut_samples(
            data, base, starts, offsets, sizes, keys, suffixes, url, local, indexes, slots, out
        )
        return
    count = len(keys)
    for i in slots:
        index = indexes[i]
        if not 0 <= index < count:
            raise IndexError(f"sample {index} of {count}")
        sample: dict[str, Any] = {"__key__": keys[index], "__url__": url}
        for j in range(starts[index], starts[index + 1]):
            at = offsets[j] - base
            sample[suffixes[j]] = data[at : at + sizes[j]]
        if local is not None:  # a remote shard's samples have none (NOTE [ remote windows ])
            sample["__local_path__"] = local
        out[i] = sample


def read_samples(
    pread: Callable[[int, int, int], bytes],
    fd: int,
    base: int,
    columns: Columns,
    keys: Sequence[str],
    url: str,
    indexes: Sequence[int],
    slots: Sequence[int],
    out: list[Any],
    run_bytes: int,
) -> int:
    """Set ``out[i]`` to the dict of sample ``indexes[i]`` for each of ``slots``, read by ``pread``.

    The samples are one shard's, whose members lie in tar order (``columns``, NOTE [ cached
    reads ]): ``__key__``, ``__url__``, one ``bytes`` per member. Each is read with
    ``pread(fd, length, offset - base)`` from its first member to the end of its last; a
    run of slots ``i, i + 1, ...`` whose indexes follow one another is one call, when its
    members span at most ``run_bytes`` (else one call a sample). One compiled call with the
    kernel (``_kernel.read_samples``, int64 columns, lists or tuples of keys and suffixes);
    the loop below is its reference (tests/webdataset/test_wds_cut_samples.py).

    Returns:
        ``-1``, or the slot whose read came back short (the slots before it are filled).

    Raises:
        IndexError: a sample index is outside the shard.

    Examples:
        >>> import os, tempfile
        >>> fd, path = tempfile.mkstemp()
        >>> _ = os.write(fd, b"..abcdefghi")
        >>> columns = Columns([0, 2, 3], [102, 105, 108], [2, 3, 1], ["cls", "txt", "cls"])
        >>> out = [None, None]
        >>> read_samples(os.pread, fd, 100, columns, ("k0", "k1"), "u", [0, 1], [0, 1], out, 64)
        -1
        >>> out[0]
        {'__key__': 'k0', '__url__': 'u', 'cls': b'ab', 'txt': b'def'}
        >>> out[1]
        {'__key__': 'k1', '__url__': 'u', 'cls': b'g'}
        >>> os.close(fd); os.unlink(path)
    """
    starts, offsets, sizes, suffixes = columns
    if kernel is not None and _numpy_columns(columns, keys):
        got: int = kernel.read_samples(
            pread, fd, base, starts, offsets, sizes, keys, suffixes, url, indexes, slots, out,
            run_bytes,
        )  # fmt: skip
        return got
    count, total, k, singles = len(keys), len(slots), 0, 0
    while k < total:
        i = slots[k]
        index = indexes[i]
        if not 0 <= index < count:
            raise IndexError(f"sample {index} of {count} in shard {url!r}")
        stop, last = k + 1, index  # a run: the next slots, whose indexes follow one another
        while k >= singles and stop < total and slots[stop] == slots[stop - 1] + 1:
            if not indexes[slots[stop]] == last + 1 < count:
                break
            stop, last = stop + 1, last + 1
        low, high = starts[index], starts[last + 1]
        span = offsets[high - 1] + sizes[high - 1] - offsets[low] if high > low else 0
        if stop - k > 1 and span > run_bytes:
            singles, stop, high = stop, k + 1, starts[index + 1]  # too long: one read a sample
        data, start = b"", 0
        if high > low:
            start = offsets[low]
            end = offsets[high - 1] + sizes[high - 1]
            data = pread(fd, end - start, start - base)
            if len(data) != end - start:
                return i
        for m in range(k, stop):
            slot = slots[m]
            at = indexes[slot]
            sample: dict[str, Any] = {"__key__": keys[at], "__url__": url}
            out[slot] = cut_sample(
                sample, data, start, suffixes, offsets, sizes, range(starts[at], starts[at + 1])
            )
        k = stop
    return -1


def gather_members(
    data: Any,
    base: int,
    offsets: Any,
    sizes: Any,
    first: int,
    stop: int,
    out: bytearray,
    at: int,
    positions: Any,
) -> int:
    """Copy members ``first, ..., stop - 1`` of ``data`` one after the other into ``out``.

    Member ``j`` is ``sizes[j]`` bytes at ``offsets[j]`` of the shard (``data`` holds its
    bytes from offset ``base``); it goes to ``out`` at ``at`` and on, ``positions[j]`` is set
    to where, and the byte after the last is returned (NOTE [ kept windows ]). One C call
    with the kernel (``_kernel.gather_members``, int64 arrays); this loop is its reference.

    Examples:
        >>> import numpy as np
        >>> out, positions = bytearray(5), np.full(3, -1, dtype=np.int64)
        >>> offsets, sizes = np.array([100, 103, 107]), np.array([2, 1, 2])
        >>> gather_members(b"ab.c...de", 100, offsets, sizes, 0, 3, out, 0, positions)
        5
        >>> bytes(out), positions.tolist()
        (b'abcde', [0, 2, 3])
    """
    if kernel is not None and all(
        isinstance(a, np.ndarray) and a.dtype == np.int64 for a in (offsets, sizes, positions)
    ):
        end: int = kernel.gather_members(
            data, base, offsets, sizes, first, stop, out, at, positions
        )
        return end
    for j in range(first, stop):
        begin, size = int(offsets[j]) - base, int(sizes[j])
        if size < 0 or begin < 0 or begin + size > len(data) or at + size > len(out):
            raise ValueError(f"member {j} lies outside the bytes read or past the end of out")
        out[at : at + size] = data[begin : begin + size]
        positions[j] = at
        at += size
    return at


def verify_span(
    info: ShardInfo,
    data: bytes | memoryview,
    base: int,
    members: Members | HeaderTable,
    rows: range | np.ndarray[Any, Any] | None = None,
) -> None:
    """Check the tar headers in ``data`` of ``members``; raise :func:`refuse`'s error if wrong.

    ``data`` holds shard ``info``'s bytes from ``base``, the header before each member
    included (NOTE [ index verification ]). ``members`` is either a few members of their
    own, each checked (``rows`` unused), or the shard's ``HeaderTable`` with ``rows`` the
    members to check: a range of them (one compiled call) or an array of their numbers.
    """
    if isinstance(members, HeaderTable):
        table = members
        if isinstance(rows, range):
            found = table.range_mismatch(data, base, rows.start, rows.stop)
        else:
            assert rows is not None, "a HeaderTable is checked for the rows given"
            found = table.mismatch(data, base, rows)
        if found is not None:
            j, why = found
            key, suffix = table.key_of(j), table.suffixes[j]
            refuse(info, key, suffix, int(table.offsets[j]), int(table.sizes[j]), why)
        return
    keys, suffixes, offsets, sizes = members
    got = header_mismatch(bytes(data), base, keys, suffixes, offsets, sizes)
    if got is not None:
        row, why = got
        refuse(info, keys[row], suffixes[row], offsets[row], sizes[row], why)


def refuse(info: ShardInfo, key: str, suffix: str, offset: int, size: int, why: str) -> NoReturn:
    """Raise the error for a member whose tar header is not what the shard's index says."""
    where = f"sample {key!r} (member {suffix!r}, {size} bytes at byte {offset})"
    owner = getattr(info.keys, "owner", None)  # an index known from a set index
    embedded = getattr(owner, "file", "") if info.path == info.url else ""
    if info.index_file:
        fix = (
            f"its index file {info.index_file!r} is wrong or the shard changed: delete the "
            f"index file and rebuild it with `python -m detsamplers index {info.url}`"
        )
    elif embedded:
        fix = (
            f"the index the set index {embedded!r} embeds for it is another shard's, or the "
            "shard changed: delete the set index and rebuild it with "
            "`python -m detsamplers index`"
        )
    else:
        fix = "it changed since it was indexed: build the source again"
    raise ValueError(
        f"shard {info.path!r} does not hold {where} where its index says: {why}; {fix}"
    )


def gather_window(
    read_into: Callable[[int, int], Any],
    info: ShardInfo,
    table: HeaderTable,
    low: int,
    high: int,
    piece_bytes: int,
) -> tuple[bytearray, Any]:
    """Members ``low`` to ``high - 1`` of a local shard, read in pieces and checked, together.

    Each piece of at most ``piece_bytes`` (from the header before its first member) is read
    by ``read_into(start, end)`` (a view of the reader's one buffer), its headers checked and
    its members' bytes copied out one after the other (NOTE [ kept windows ]); returns those
    bytes and where each member went (``-1`` for the shard's other members).
    """
    offsets, sizes = table.offsets, table.sizes
    ends = offsets[low:high] + sizes[low:high]
    out = bytearray(int(sizes[low:high].sum()))
    positions = np.full(len(offsets), -1, dtype=np.int64)
    member, at = low, 0
    while member < high:
        base = max(0, int(offsets[member]) - BLOCK)  # with the first header
        stop = low + int(np.searchsorted(ends, base + piece_bytes, side="right"))
        stop = max(stop, member + 1)
        end = int(ends[stop - 1 - low])
        piece = read_into(base, end)
        verify_span(info, piece, base, table, range(member, stop))
        at = gather_members(piece, base, offsets, sizes, member, stop, out, at, positions)
        member = stop
    return out, positions


def index_bounds(wanted: Sequence[int], count: int, url: str) -> tuple[int, int]:
    """The least and greatest of ``wanted`` (not empty), each a sample of a shard of ``count``.

    Raises:
        IndexError: naming the first sample out of range and the shard's ``url``.

    Examples:
        >>> index_bounds([3, 0, 2], 4, "s.tar")
        (0, 3)
        >>> index_bounds([3, 4], 4, "s.tar")
        Traceback (most recent call last):
        ...
        IndexError: sample 4 of 4 in shard 's.tar'
    """
    low, high = min(wanted), max(wanted)
    if low < 0 or high >= count:
        bad = next(i for i in wanted if not 0 <= i < count)
        raise IndexError(f"sample {bad} of {count} in shard {url!r}")
    return low, high
