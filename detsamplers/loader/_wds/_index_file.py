"""The index file of a shard: ``<shard>.index.npz``, compact and quick to decode.

NOTE [ index file format ]
``python -m detsamplers index URLS`` writes, for each shard ``data-000.tar``, a file
``data-000.tar.index.npz`` (next to the shard, or under ``--out``); a remote shard's index
is read from there when present, else built by one scan and cached locally in the same
format (NOTE [ shard index ]). It is an uncompressed numpy ``.npz`` (a zip of ``.npy``
arrays, read with ``allow_pickle=False``) holding, for a shard of ``n`` samples with ``m``
members in all:

- ``header``: uint8, UTF-8 JSON ``{"format": "detsamplers-shard-index", "version": 2,
  "size": <bytes>, "etag": <ETag or null>}``; the shard's size and, for a remote shard, its
  ETag when it was indexed;
- ``keys``: uint8, the ``n`` sample keys in UTF-8, each followed by a NUL byte;
- ``suffixes``: uint8, the ``m`` member suffixes in UTF-8, each followed by a NUL byte;
- ``starts``: int64, ``n + 1`` entries: sample ``i``'s members are ``starts[i]`` to
  ``starts[i + 1] - 1``;
- ``offsets``, ``sizes``: int64, ``m`` entries: each member's data offset and size in bytes.

Tar names cannot hold NUL bytes, so the separators are unambiguous; names that are not
valid UTF-8 keep their bytes (``surrogateescape``, as :mod:`tarfile` decodes them). Arrays
of numbers and two byte strings decode in a few calls, without a JSON parse of every
member. A file whose size or ETag differs from the shard's is refused with an error naming
the shard.
"""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from collections.abc import Sequence
from typing import Any, overload

import numpy as np

__all__ = ["FORMAT", "FORMAT_VERSION", "PackedMembers", "decode_index", "encode_index"]

FORMAT = "detsamplers-shard-index"
FORMAT_VERSION = 2


class PackedMembers(Sequence[list[Any]]):
    """The members of each sample, built as a sample is asked for: ``[suffix, offset, size]``.

    Decoding an index file makes five flat lists, not one list per member, so a shard of
    thousands of samples loads in microseconds; each lookup builds one sample's lists.

    Examples:
        >>> packed = PackedMembers(["cls", "png", "cls"], [512, 1536, 3072], [1, 70, 1], [0, 2, 3])
        >>> len(packed), packed[1], packed[-2]
        (2, [['cls', 3072, 1]], [['cls', 512, 1], ['png', 1536, 70]])
    """

    __slots__ = ("offsets", "sizes", "starts", "suffixes")

    def __init__(
        self, suffixes: list[str], offsets: list[int], sizes: list[int], starts: list[int]
    ) -> None:
        self.suffixes, self.offsets, self.sizes, self.starts = suffixes, offsets, sizes, starts

    def __len__(self) -> int:
        return len(self.starts) - 1

    @overload
    def __getitem__(self, index: int) -> list[Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[Any]]: ...
    def __getitem__(self, index: int | slice) -> list[Any] | list[list[Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"sample {index} of {count}")
        index %= count
        first, stop = self.starts[index], self.starts[index + 1]
        return [[self.suffixes[j], self.offsets[j], self.sizes[j]] for j in range(first, stop)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


def _joined(strings: list[str]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    data = b"".join(s.encode(errors="surrogateescape") + b"\0" for s in strings)
    return np.frombuffer(data, dtype=np.uint8)


def _split(array: np.ndarray[Any, Any]) -> list[str]:
    return array.tobytes().decode(errors="surrogateescape").split("\0")[:-1]


def encode_index(
    keys: tuple[str, ...], members: Sequence[list[Any]], size: int, etag: str | None
) -> bytes:
    """The bytes of an index file (NOTE [ index file format ]).

    Examples:
        >>> data = encode_index(("k0", "k1"), [[["cls", 512, 1]], [["cls", 1536, 1]]], 3072, None)
        >>> decode_index(data, "a.tar")
        (('k0', 'k1'), [[['cls', 512, 1]], [['cls', 1536, 1]]], 3072, None)
    """
    flat = [m for sample in members for m in sample]
    header = {"format": FORMAT, "version": FORMAT_VERSION, "size": size, "etag": etag}
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        keys=_joined(list(keys)),
        suffixes=_joined([m[0] for m in flat]),
        starts=np.cumsum([0] + [len(s) for s in members], dtype=np.int64),
        offsets=np.array([m[1] for m in flat], dtype=np.int64),
        sizes=np.array([m[2] for m in flat], dtype=np.int64),
    )
    return buffer.getvalue()


def decode_index(data: bytes, url: str) -> tuple[tuple[str, ...], PackedMembers, int, str | None]:
    """``(keys, members, size, etag)`` from the bytes of an index file.

    Raises:
        ValueError: the bytes are not an index file of this format (the message names
            the shard ``url``).
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            header = json.loads(arrays["header"].tobytes())
            if header.get("format") != FORMAT or header.get("version") != FORMAT_VERSION:
                raise ValueError(f"format {header.get('format')!r} {header.get('version')!r}")
            keys = tuple(_split(arrays["keys"]))
            suffixes = _split(arrays["suffixes"])
            starts = arrays["starts"].tolist()
            offsets = arrays["offsets"].tolist()
            sizes = arrays["sizes"].tolist()
        counts = {len(suffixes), len(offsets), len(sizes), starts[-1] if starts else -1}
        if len(starts) != len(keys) + 1 or len(counts) != 1 or starts[0] != 0:
            raise ValueError("the sample starts do not match the keys and members")
        if any(b < a for a, b in itertools.pairwise(starts)):
            raise ValueError("the sample starts decrease")
        members = PackedMembers(suffixes, offsets, sizes, starts)
        return keys, members, int(header["size"]), header.get("etag")
    except (ValueError, KeyError, OSError, TypeError, AttributeError, zipfile.BadZipFile) as exn:
        raise ValueError(
            f"the index file of shard {url!r} is not a detsamplers index "
            f"({FORMAT} version {FORMAT_VERSION}): {exn}; delete it and rebuild it with "
            "`python -m detsamplers index`"
        ) from None
