"""One way to read a sample: cut it out of a span of its shard's bytes, and verify the span.

NOTE [ one way to read a sample ]
Every reader reads a sample the same way: one span of the shard's bytes, from ``base`` to
the end of its last member, read by whatever the reader reads with (a local file, a remote
stream, a cached copy), holding the sample's members, or a run of samples' (NOTE [ runs of
samples ]). Two functions then do the rest for every reader:

- :func:`cut_sample` slices each member out of the span at the offsets of the index: the
  bytes are the same whichever reader read them;
- :func:`verify_span`, when the span starts at the tar header before its first member
  (NOTE [ index verification ]), checks the members' headers against the index, a few
  members of their own (:class:`Members`, in pure Python) or a shard's ``HeaderTable`` at
  once (a range or a set of its members), and raises the one error naming the shard and the
  fix (:func:`refuse`) for the first that disagrees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ..shard._shard_info import ShardInfo
from ..shard._tar_check import HeaderTable, header_mismatch

__all__ = ["Members", "cut_sample", "members_of", "refuse", "verify_span"]


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


def verify_span(
    info: ShardInfo,
    data: bytes,
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
    got = header_mismatch(data, base, keys, suffixes, offsets, sizes)
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
