"""A shard's members, packed: five flat lists, one sample's lists built when it is asked for.

The in-memory form of the members of NOTE [ shard index ] (index/_index_shards.py), as a scan groups
them and as an index file decodes them (NOTE [ index file format ], index/_shard_index_file.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np

__all__ = ["PackedMembers"]


class PackedMembers(Sequence[list[Any]]):
    """The members of each sample, built as a sample is asked for: ``[suffix, offset, size]``.

    Decoding an index file makes five flat lists, not one list per member, so a shard of
    thousands of samples loads in microseconds; each lookup builds one sample's lists.

    Examples:
        >>> packed = PackedMembers(["cls", "png", "cls"], [512, 1536, 3072], [1, 70, 1], [0, 2, 3])
        >>> len(packed), packed[1], packed[-2]
        (2, [['cls', 3072, 1]], [['cls', 512, 1], ['png', 1536, 70]])
    """

    __slots__ = ("_ordered", "arrays", "offsets", "sizes", "starts", "suffixes", "table")

    def __init__(
        self,
        suffixes: list[str],
        offsets: list[int],
        sizes: list[int],
        starts: list[int],
        arrays: dict[str, np.ndarray[Any, Any]] | None = None,
    ) -> None:
        self.suffixes, self.offsets, self.sizes, self.starts = suffixes, offsets, sizes, starts
        #: The index file's arrays these lists were decoded from (NOTE [ index file format ]),
        #: or ``None``; the header check builds its table from them without re-encoding.
        self.arrays = arrays
        #: What the shard reader builds once per decoded index (its header table), or ``None``.
        self.table: Any = None
        self._ordered: bool | None = None

    def __reduce__(self) -> tuple[Any, ...]:  # the lists only: the rest is rebuilt on demand
        return PackedMembers, (self.suffixes, self.offsets, self.sizes, self.starts)

    @property
    def ordered(self) -> bool:
        """Whether the members lie in the file in their order, without overlapping.

        A tar's members do; the reader then reads runs of samples at once (NOTE [ runs
        of samples ]). Checked once, in a few numpy calls.
        """
        if self._ordered is None:
            offsets = self._array("offsets", self.offsets)
            sizes = self._array("sizes", self.sizes)
            self._ordered = bool(
                np.all(sizes >= 0)
                and np.all(offsets[:1] >= 0)
                and np.all(offsets[1:] >= offsets[:-1] + sizes[:-1])
            )
        return self._ordered

    def _array(self, name: str, values: list[int]) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The index file's array ``name`` if kept (no list converted), else ``values``'."""
        kept = (self.arrays or {}).get(name)
        if isinstance(kept, np.ndarray) and kept.dtype == np.int64 and len(kept) == len(values):
            return kept
        return np.asarray(values, dtype=np.int64)

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
