"""The tar header check on read (NOTE [ index verification ], in :mod:`._file_checks`).

Every local read starts at the 512-byte header before the first member it reads, and the
reader checks each member's header against what the index says: its checksum, that it
is a regular file, its size, and its name ``key.suffix``. :func:`header_mismatch` checks
a sample's few members in pure Python; :class:`HeaderTable` a batch's many with numpy,
compared as words with what tarfile writes. A member that differs is read the way
tarfile reads it (:func:`_row_mismatch`), which decides.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...._native import kernel
from ._tar_walk import BLOCK

__all__ = ["HeaderTable", "header_mismatch"]

_SPAN = np.arange(BLOCK, dtype=np.int64)
#: An index file's little-endian int64 arrays are this machine's own (the kernel reads them).
_NATIVE = np.dtype("<i8") == np.dtype(np.int64)
_SUM_FIELD = slice(148, 156)
_REGULAR = np.array([48, 0, 55], dtype=np.uint8)  # REGTYPE, AREGTYPE, CONTTYPE
_REGULAR_BYTES = frozenset(_REGULAR.tolist())
#: webdataset's key and suffix rule (``base_plus_ext``), as in the scan.
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_USTAR = b"ustar"
_NAME_MAX = 99  # longer names go to a pax or GNU record before the header


def header_mismatch(
    data: bytes,
    base: int,
    keys: Sequence[str],
    suffixes: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
) -> tuple[int, str] | None:
    """The first member whose tar header disagrees with the index, and how; else ``None``.

    ``data`` holds the shard's bytes from offset ``base``, including the 512 bytes before
    each member's data; ``keys[r]``, ``suffixes[r]``, ``offsets[r]`` and ``sizes[r]`` are
    what the index says of member ``r`` (NOTE [ index verification ]). The members are
    compared one by one with what tarfile writes (no numpy call: a sample has few); one
    that differs is then read the way tarfile reads it (:func:`_row_mismatch`), which
    decides. :class:`HeaderTable` checks many members of a shard at once.
    """
    quick = _few_ok(data, base, keys, suffixes, offsets, sizes)
    if quick is None:
        return None
    for row in quick:
        at = offsets[row] - base - BLOCK
        if at < 0 or at + BLOCK > len(data):
            return row, "no tar header fits before its data"
        why = _row_mismatch(data[at : at + BLOCK], keys[row], suffixes[row], sizes[row])
        if why is not None:
            return row, why
    return None


_FEW = 8


def _few_ok(
    data: bytes,
    base: int,
    keys: Sequence[str],
    suffixes: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
) -> Sequence[int] | None:
    """The rows that fail a quick check in pure Python (``None``: all pass)."""
    view = memoryview(data)
    bad: list[int] = []
    for row, (key, suffix, offset, size) in enumerate(
        zip(keys, suffixes, offsets, sizes, strict=True)
    ):
        at = offset - base - BLOCK
        name = (key + "." + suffix).encode("utf-8", "surrogateescape")
        try:
            ok = (
                at >= 0
                and len(data) >= at + BLOCK
                and data.startswith(name, at)
                and (len(name) == 100 or data[at + len(name)] == 0)
                and data.startswith(b"%011o\0" % size, at + 124)
                and data[at + 156] in _REGULAR_BYTES
                and data[at + 154] == 0  # the checksum as tarfile writes it: "%06o\0 "
                and data[at + 345] == 0  # no name prefix (tarfile would read "prefix/name")
            )
            if ok:  # the checksum: the unsigned byte sum, its own field as spaces
                head = zlib.adler32(view[at + 156 : at + 256], zlib.adler32(view[at : at + 148]))
                tail = zlib.adler32(view[at + 256 : at + BLOCK])
                stored = int(data[at + 148 : at + 154], 8)
                ok = stored == (head & 0xFFFF) + (tail & 0xFFFF) - 2 + 256
        except ValueError:
            ok = False
        if not ok:
            bad.append(row)
    return bad or None


class HeaderTable:
    r"""What the tar header before each member of one shard must say, for checks in bulk.

    Built once per decoded index (the shard reader keeps it on the index's
    ``PackedMembers``), from the index file's own arrays and NUL-joined names when there
    are some, so nothing is re-encoded: with the compiled kernel, one C call packs them
    with where each name starts (``_kernel.header_table``), and :meth:`range_mismatch` and
    :meth:`mismatch` check a run's members in one C call (``_kernel.check_headers``).
    Without the kernel the same checks run in a dozen numpy calls a batch, over each
    member's expected name and size field (:attr:`names`, :attr:`size_words`, built on
    first use).

    Examples:
        >>> from detsamplers.loader._wds.shard._packed_members import PackedMembers
        >>> table = HeaderTable(("k0",), PackedMembers(["cls"], [512], [1], [0, 1]))
        >>> bytes(table.names[0, :6]), int(table.names[0, 6]), bytes(table.size_words[0])
        (b'k0.cls', 0, b'00000000001\x00')
    """

    __slots__ = (
        "_names",
        "_owner",
        "_size_words",
        "compiled",
        "joined",
        "keys",
        "offsets",
        "sizes",
        "starts",
        "suffixes",
    )

    def __init__(self, keys: Sequence[str], packed: Any) -> None:
        self.keys, self.suffixes = keys, packed.suffixes
        arrays = getattr(packed, "arrays", None)
        if arrays is not None and _NATIVE:  # an index file's own arrays: nothing copied
            key_bytes, suffix_bytes = arrays["keys"], arrays["suffixes"]
            self.starts, self.offsets = arrays["starts"], arrays["offsets"]
            self.sizes = arrays["sizes"]
        else:  # a scan's lists
            key_bytes, suffix_bytes = _joined(keys), _joined(self.suffixes)
            self.starts = np.asarray(packed.starts, dtype=np.int64)
            self.offsets = np.asarray(packed.offsets, dtype=np.int64)
            self.sizes = np.asarray(packed.sizes, dtype=np.int64)
        #: The keys and the suffixes, each NUL-ended (the index file's own bytes).
        self.joined = key_bytes, suffix_bytes
        #: What the compiled check reads (``_kernel.check_headers``): the columns and the
        #: names packed in one buffer, with where each name starts (``None`` without it).
        self.compiled: bytearray | None = None
        if kernel is not None:
            self.compiled = kernel.header_table(
                self.offsets, self.sizes, self.starts, key_bytes, suffix_bytes
            )
            if self.compiled is None:  # not possible for bytes the decoder split into these
                raise ValueError(
                    f"the joined keys or suffixes hold fewer than {len(keys)} keys and "
                    f"{len(self.suffixes)} suffixes"
                )
        self._owner: np.ndarray[Any, Any] | None = None
        self._names: np.ndarray[Any, Any] | None = None
        self._size_words: np.ndarray[Any, Any] | None = None

    @property
    def owner(self) -> np.ndarray[Any, Any]:
        """Each member's sample (the numpy path; built once)."""
        if self._owner is None:
            counts = np.diff(self.starts)
            self._owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return self._owner

    def key_of(self, member: int) -> str:
        """The key of the sample that holds ``member``."""
        return self.keys[int(np.searchsorted(self.starts, member, side="right")) - 1]

    @property
    def names(self) -> np.ndarray[Any, Any]:
        """Each member's expected name field, 104 bytes a row (the numpy path; built once)."""
        if self._names is None:
            key_bytes, suffix_bytes = self.joined
            key_starts = _string_starts(key_bytes, len(self.keys))
            suffix_starts = _string_starts(suffix_bytes, len(self.suffixes))
            keys = np.frombuffer(key_bytes, dtype=np.uint8)
            suffixes = np.frombuffer(suffix_bytes, dtype=np.uint8)
            key_start, key_length = key_starts[:-1], np.diff(key_starts) - 1
            suffix_start, suffix_length = suffix_starts[:-1], np.diff(suffix_starts) - 1
            owner, members = self.owner, len(self.offsets)
            names = np.zeros((members, 104), dtype=np.uint8)  # 13 words; 100-103 left zero
            owner_length = key_length[owner]
            _place(names, np.zeros(members, np.int64), keys, key_start[owner], owner_length)
            names[np.arange(members), np.minimum(owner_length, 100)] = 46  # "."
            _place(names, owner_length + 1, suffixes, suffix_start, suffix_length)
            names[:, 100:] = 0
            self._names = names
        return self._names

    @property
    def size_words(self) -> np.ndarray[Any, Any]:
        r"""The size field as tarfile writes it, ``"%011o\0"``, as three 32-bit words a row."""
        if self._size_words is None:
            field = np.zeros((len(self.sizes), 12), dtype=np.uint8)
            field[:, :11] = (self.sizes[:, None] >> _SIZE_SHIFTS) % 8 + 48
            self._size_words = field.view("<u4")
        return self._size_words

    def range_mismatch(
        self, data: bytes | memoryview, base: int, first: int, stop: int
    ) -> tuple[int, str] | None:
        """:meth:`mismatch` of the members ``first, ..., stop - 1``, without an index array."""
        if kernel is not None and self.compiled is not None:
            if kernel.check_headers(data, base, self.compiled, None, first, stop) < 0:
                return None  # the common case, in one call
            return self._mismatch_compiled(data, base, None, first, stop)
        return self.mismatch(data, base, np.arange(first, stop, dtype=np.int64))

    def _mismatch_compiled(
        self,
        data: bytes | memoryview,
        base: int,
        members: np.ndarray[Any, Any] | None,
        first: int,
        stop: int,
    ) -> tuple[int, str] | None:
        """:meth:`mismatch` through the compiled check: one C loop over the headers.

        The kernel finds the next member whose header fails the same quick test as the numpy
        path; :func:`_row_mismatch` then decides it the way tarfile reads it (a pax name or a
        signed checksum passes there), and the search goes on after it.
        """
        assert kernel is not None and self.compiled is not None
        chosen = None if members is None else np.ascontiguousarray(members, dtype=np.int64)
        while first < stop:
            found = kernel.check_headers(data, base, self.compiled, chosen, first, stop)
            if found < 0:
                return None
            j = found if chosen is None else int(chosen[found])
            at = int(self.offsets[j]) - base - BLOCK
            if at < 0 or at + BLOCK > len(data):
                return j, "no tar header fits before its data"
            key, suffix, size = self.key_of(j), self.suffixes[j], int(self.sizes[j])
            why = _row_mismatch(bytes(data[at : at + BLOCK]), key, suffix, size)
            if why is not None:
                return j, why
            first = found + 1
        return None

    def members_of(self, samples: Sequence[int]) -> np.ndarray[Any, Any]:
        """The member numbers of ``samples``, in order."""
        chosen = np.asarray(samples, dtype=np.int64)
        first, counts = self.starts[chosen], self.starts[chosen + 1] - self.starts[chosen]
        shift = np.repeat(first - np.cumsum(counts) + counts, counts)
        return np.arange(int(counts.sum()), dtype=np.int64) + shift  # type: ignore[no-any-return]

    def mismatch(
        self, data: bytes | memoryview, base: int, members: np.ndarray[Any, Any]
    ) -> tuple[int, str] | None:
        """The first of ``members`` whose header in ``data`` (from ``base``) is wrong, and how."""
        if not len(members):
            return None
        if kernel is not None and self.compiled is not None:
            return self._mismatch_compiled(data, base, members, 0, len(members))
        at = self.offsets[members] - (base + BLOCK)
        if base % BLOCK or at.min() < 0 or at.max() + BLOCK > len(data):
            suspects = members  # not block-aligned or cut short: read one by one
        else:
            rows = np.frombuffer(data, dtype=np.uint8, count=len(data) // BLOCK * BLOCK)
            blocks = rows.reshape(-1, BLOCK)[at // BLOCK]
            words = blocks.view("<u8")
            expected = self.names.view("<u8")[members]
            ok = np.all((words[:, :13] & _NAME_MASK) == expected, axis=1)
            ok &= np.all(blocks.view("<u4")[:, 31:34] == self.size_words[members], axis=1)
            digits = blocks[:, 148:154]  # the checksum, as tarfile writes it: "%06o\0 "
            kinds = blocks[:, 156]
            ok &= np.all(digits - np.uint8(48) <= 7, axis=1)  # octal digits (wraps below "0")
            ok &= (blocks[:, 154] == 0) & ((kinds == 48) | (kinds == 0))
            ok &= blocks[:, 345] == 0  # no name prefix (tarfile would read "prefix/name")
            computed = _byte_sums(words) + 256
            computed -= blocks[:, _SUM_FIELD].sum(axis=1, dtype=np.int64)
            ok &= (digits - 48.0) @ _CHECKSUM_WEIGHTS == computed
            suspects = members[~ok]
        for j in suspects.tolist():
            at_j = int(self.offsets[j]) - base - BLOCK
            key, suffix, size = self.key_of(j), self.suffixes[j], int(self.sizes[j])
            if at_j < 0 or at_j + BLOCK > len(data):
                return j, "no tar header fits before its data"
            why = _row_mismatch(bytes(data[at_j : at_j + BLOCK]), key, suffix, size)
            if why is not None:
                return j, why
        return None


_SIZE_SHIFTS = np.arange(30, -1, -3, dtype=np.int64)  # 11 octal digits
_CHECKSUM_WEIGHTS = 8.0 ** np.arange(5, -1, -1)
#: The name field's 100 bytes in 13 words: all of 12, the low half of the 13th.
_NAME_MASK = np.array([2**64 - 1] * 12 + [2**32 - 1], dtype=np.uint64)
_LANES = np.uint64(0x00FF00FF00FF00FF)
_FOLD = np.uint64(0x0001000100010001)


def _byte_sums(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each 512-byte row's byte sum, from its 64 words: 8 times fewer elements than bytes.

    The even and the odd bytes of each word are added in 16-bit lanes (at most 64 * 255
    per lane), and each word's four lanes folded by one multiplication (at most 65,280:
    no carry out of the top lane).

    Examples:
        >>> rows = np.random.default_rng(0).integers(0, 256, (3, 512), dtype=np.uint8)
        >>> rows[0] = 255  # the largest sum, 130,560
        >>> bool(np.array_equal(_byte_sums(rows.view("<u8")), rows.sum(axis=1)))
        True
    """
    even = (words & _LANES).sum(axis=1)
    odd = ((words >> np.uint64(8)) & _LANES).sum(axis=1)
    top = np.uint64(48)
    return (((even * _FOLD) >> top) + ((odd * _FOLD) >> top)).astype(np.int64)  # type: ignore[no-any-return]


def _joined(strings: Sequence[str]) -> np.ndarray[Any, Any]:
    """The strings in UTF-8, each followed by a NUL byte (as an index file stores them)."""
    data = ("\0".join(strings) + "\0").encode("utf-8", "surrogateescape") if strings else b""
    return np.frombuffer(data, dtype=np.uint8)


def _string_starts(raw: Any, count: int) -> np.ndarray[Any, Any]:
    """Where each of the first ``count`` NUL-ended strings in ``raw`` starts, then one past.

    String ``i`` is ``raw[starts[i] : starts[i + 1] - 1]``.

    Examples:
        >>> _string_starts(_joined(["k0", "", "key"]), 3).tolist()
        [0, 3, 4, 8]
    """
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 0)[:count]
    if len(ends) != count:  # not possible for bytes a decoder split into ``count`` strings
        raise ValueError(f"{len(ends)} NUL-ended strings where {count} were decoded")
    starts = np.zeros(count + 1, dtype=np.int64)
    starts[1:] = ends + 1
    return starts


def _place(names: Any, column: Any, source: Any, start: Any, length: Any) -> None:
    """Copy ``source[start[r]:][:length[r]]`` into row ``r`` of ``names`` at ``column[r]``.

    Bytes past column 100 are dropped (the header holds 100; a longer name is a pax or
    GNU record's, and :func:`_row_mismatch` decides those rows).
    """
    total = int(length.sum())
    if not total:
        return
    row = np.repeat(np.arange(len(length)), length)
    within = np.arange(total) - np.repeat(np.cumsum(length) - length, length)
    target = column[row] + within
    keep = target < 100
    names[row[keep], target[keep]] = source[(start[row] + within)[keep]]


def _number(field: bytes) -> int | None:
    """A tar number field as :mod:`tarfile` reads it (octal, or GNU base-256)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[:1] == b"\xff" else value
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return None


def _row_mismatch(block: bytes, key: str, suffix: str, size: int) -> str | None:
    """How one member's 512-byte header disagrees with the index (``None``: it agrees)."""
    stored = _number(block[148:156])
    unsigned = sum(block) - sum(block[148:156]) + 256
    signed = unsigned - 2 * sum(b for b in block if b >= 128)
    signed += 2 * sum(b for b in block[148:156] if b >= 128)
    if stored is None or stored not in (unsigned, signed):
        return "the tar header there has a wrong checksum (it is not a header)"
    if block[156] not in _REGULAR:
        return f"the tar header there is of type {chr(block[156])!r}, not a regular file"
    length = _number(block[124:136])
    if length != size and not (size >= 8**11 and length == 0):  # pax: the size is a record
        return f"the tar header there gives {length} bytes, the index {size}"
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == _USTAR else b""
    full = (prefix + b"/" + name if prefix else name).decode("utf-8", "surrogateescape")
    match = _BASE_PLUS_EXT.match(full)
    if match is not None and match.group(1) == key and match.group(2).lower() == suffix:
        return None
    # A name the header cannot hold is in a pax or GNU record before it; the header then
    # holds it cut to 100 bytes, in UTF-8 (GNU) or in ASCII with "?" for the rest (pax).
    for encoding, errors in (("utf-8", "surrogateescape"), ("ascii", "replace")):
        head = (key + ".").encode(encoding, errors)
        whole = head + suffix.encode(encoding, errors)
        if len(whole) <= _NAME_MAX and whole.isascii():
            continue  # it fits: the header holds it whole, as compared above
        cut = whole[:100]
        same_key = len(name) == len(cut) and name[: len(head)] == cut[: len(head)]
        if same_key and name[len(head) :].lower() == cut[len(head) :]:
            return None
    return f"the tar header there names {full!r}, not member {suffix!r} of sample {key!r}"
