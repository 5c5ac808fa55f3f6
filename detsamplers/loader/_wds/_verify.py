"""Index and shard files that cannot lie: what is checked before either is trusted.

NOTE [ index verification ]
An index file (NOTE [ index file format ]) says where each sample of a shard lies; a
wrong one would hand out the wrong bytes as a sample, and nothing downstream could tell.
So nothing in an index or a shard is trusted before it is checked, and a check that fails
is an error naming the file and the fix, never a rescan that hides it:

- *The files are regular files.* A shard or index file is opened without blocking
  (``O_NONBLOCK``) and refused unless ``fstat`` says it is a regular file, so a FIFO, a
  device or a symlink to one is a ``ValueError`` naming it, never a hang (opening a FIFO
  for reading blocks until a writer comes) or an endless read (``/dev/zero``).
- *Sizes before allocations.* An index file larger than any index of its shard could be
  (:func:`index_file_limit`) is refused before it is read; its arrays are read without
  pickle, and each ``.npy`` header's shape is checked against the bytes its zip entry
  holds before an array is made (:func:`load_arrays`), so an entry that claims 1e12
  entries allocates nothing.
- *The layout is a tar's* (:func:`check_layout`, once per decoded index): the sample
  starts begin at 0 and increase, the counts agree, every member's data starts on a
  512-byte block after room for its header, lies inside the shard's recorded size, and
  comes after the previous member's data and a header. A local index file that fails
  its own integrity (a zip CRC, a dtype, an array's length) is a damaged cache file: the
  shard is scanned instead, giving the true samples; one that is well formed but fails
  these checks, or the header check below, was written wrong: an error names it.
- *The tar header at each member's offset says so* (:func:`header_mismatch`, on every
  read of a sample): the reader reads the 512 bytes before the first member it reads,
  so each member's header is in the bytes read anyway; its checksum is right (unsigned or
  signed, as :mod:`tarfile` accepts), it is a regular file, its size is the indexed size,
  and its name is the sample's key and the member's suffix (a name too long for the
  header, carried by a pax or GNU record before it, is compared up to the 100 bytes the
  header holds). A batch's members are checked together (:class:`HeaderTable`: a dozen
  numpy calls over the headers, compared as words with what tarfile writes), a single
  sample's in pure Python; a member that differs is then read the way tarfile reads it,
  which decides. The cost is measured by ``benchmarks/webdataset_table.py``.
- *The shard is the one indexed.* A local shard's size, modification time and inode are
  recorded when the source is built and compared with ``fstat`` of the opened file, once
  per shard opened; over HTTP each ranged response's ``ETag`` (or ``Last-Modified``) is
  compared with the one recorded (:func:`version_mismatch`), besides ``If-Match``.
- *Decoded ``.npy`` members* (:func:`npy_loads`): a header that claims more bytes than the
  member holds is refused before numpy allocates the array.
"""

from __future__ import annotations

import io
import math
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from ._tar_headers import BLOCK

__all__ = [
    "HeaderTable",
    "MemberError",
    "check_layout",
    "header_mismatch",
    "index_file_limit",
    "load_arrays",
    "npy_loads",
    "open_regular",
    "stamp",
    "stamp_mismatch",
    "version_mismatch",
]

#: The fix for an index file that fails a check.
REBUILD = "delete it and rebuild it with `python -m detsamplers index {shard}`"

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(path: str, mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    try:
        if os.path.islink(path):
            return f"a symlink to {kind}"
    except OSError:  # pragma: no cover - the path vanished meanwhile
        pass
    return kind


def not_regular(path: str, what: str, mode: int, fix: str) -> ValueError | IsADirectoryError:
    """The error for a shard or index file that is a FIFO, a device, a folder, ...

    A folder is an ``IsADirectoryError`` (an ``OSError``, as :func:`open` raises), so
    that a folder in an index file's place counts as no index file there.
    """
    message = f"{what} {path!r} is {_kind(path, mode)}, not a regular file; {fix}"
    return IsADirectoryError(message) if stat.S_ISDIR(mode) else ValueError(message)


def _fix(what: str, shard: str) -> str:
    if what == "shard":
        return (
            "the source seeks into shards, so it reads regular files only: copy the shard "
            "to a file and list that path in urls"
        )
    return "remove it, then rebuild the index with `python -m detsamplers index " + shard + "`"


def open_regular(path: str, what: str, shard: str, buffering: int = -1) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file, never blocking on a FIFO.

    Args:
        path: The file (a symlink is followed).
        what: ``"shard"`` or ``"index file"``, for the message.
        shard: The shard the file belongs to, for the fix.
        buffering: As for :func:`open`.

    Raises:
        FileNotFoundError: it does not exist.
        IsADirectoryError: it is a folder (the message names it).
        ValueError: it is a FIFO, a device or a socket (the message names it).

    Examples:
        >>> open_regular("/dev/null", "shard", "/dev/null")
        Traceback (most recent call last):
        ...
        ValueError: shard '/dev/null' is a character device, not a regular file; ...
    """
    mode = os.stat(path).st_mode  # cheap, and no device is opened on the common refusals
    if not stat.S_ISREG(mode):
        raise not_regular(path, what, mode, _fix(what, shard))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode  # what was opened, if the path was swapped meanwhile
        if not stat.S_ISREG(mode):
            raise not_regular(path, what, mode, _fix(what, shard))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


#: What a local shard's state is compared by: size, modification time (ns), inode.
Stamp = tuple[int, int, int]


def stamp(result: os.stat_result) -> Stamp:
    """The ``(size, mtime_ns, inode)`` of a ``stat`` result."""
    return result.st_size, result.st_mtime_ns, result.st_ino


def stamp_mismatch(path: str, recorded: Stamp | None, handle: BinaryIO) -> str | None:
    """Why an opened shard is not the file the source was built over (``None``: it is).

    Its size, modification time and inode, compared with ``recorded`` (``None``: none
    was recorded, nothing to compare).
    """
    if recorded is None:
        return None
    now = stamp(os.fstat(handle.fileno()))
    if now == recorded:
        return None
    parts = []
    for name, was, got in zip(("size", "mtime_ns", "inode"), recorded, now, strict=True):
        if was != got:
            parts.append(f"{name} {got}, {was} when the source was built")
    return (
        f"shard {path!r} was replaced or rewritten after the source was built ("
        + "; ".join(parts)
        + "), so its samples are no longer where its index says: build the source again "
        "(its index is then rebuilt from the shard as it is now), or restore the shard"
    )


def version_mismatch(version: str | None, headers: Mapping[str, str]) -> str | None:
    """How a response's ETag (or Last-Modified) differs from the one indexed, or ``None``.

    A strong ETag is also sent as ``If-Match`` (NOTE [ remote reads ]); this catches weak
    ETags and ``Last-Modified`` dates, which ``If-Match`` cannot.

    Examples:
        >>> version_mismatch('W/"1"', {"ETag": 'W/"1"'}) is None
        True
        >>> version_mismatch('W/"1"', {"ETag": 'W/"2"'})
        'the server now sends ETag W/"2", W/"1" when indexed'
    """
    if version is None:
        return None
    field = "ETag" if version.startswith(('"', 'W/"')) else "Last-Modified"
    got = headers.get(field)
    if got is not None and got != version:
        return f"the server now sends {field} {got}, {version} when indexed"
    return None


def index_file_limit(shard_size: int) -> int:
    """The most bytes an index file of a shard of ``shard_size`` bytes can hold.

    Each member costs the shard a 512-byte header and its name; the index, 16 bytes of
    offset and size, its suffix and at most 9 bytes for its sample: about 1.1 times the
    shard at most, plus the zip's few hundred bytes. Twice the shard plus 64 KiB is safe.

    Examples:
        >>> index_file_limit(1 << 20)
        2162688
    """
    return 2 * shard_size + (64 << 10)


_DTYPES = {"|u1": np.dtype(np.uint8), "<i8": np.dtype("<i8")}


def load_arrays(data: bytes, names: Sequence[str], kinds: Mapping[str, str]) -> dict[str, Any]:
    """The named 1-d arrays of an ``.npz`` held in ``data``, each size checked first.

    Each entry must be stored uncompressed, no larger than ``data`` itself, and hold a
    ``.npy`` (format 1.0 or 2.0) of the dtype ``kinds[name]`` whose shape is exactly its
    remaining bytes; only then is the array read (bounded by ``len(data)``). No pickle.

    Raises:
        ValueError: anything else, saying which array and why.
        KeyError: an array is missing.
        zipfile.BadZipFile: not a zip.
    """
    out: dict[str, Any] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in names:
            info = archive.getinfo(name + ".npy")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
                raise ValueError(
                    f"array {name!r} is compressed or claims {info.file_size} bytes in a file "
                    f"of {len(data)}"
                )
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    raise ValueError(f"array {name!r} has .npy format {version}")
                left = info.file_size - member.tell()
                if dtype != _DTYPES[kinds[name]] or len(shape) != 1:
                    raise ValueError(f"array {name!r} is {dtype} of shape {shape}")
                if shape[0] * dtype.itemsize != left:
                    raise ValueError(
                        f"array {name!r} claims {shape[0]} entries of {dtype.itemsize} bytes "
                        f"but holds {left} bytes"
                    )
                out[name] = np.frombuffer(member.read(left), dtype=dtype)
    return out


def check_layout(
    count: int,
    starts: np.ndarray[Any, Any],
    offsets: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    size: int,
) -> str | None:
    """What is wrong with an index's arrays for a tar of ``size`` bytes, or ``None``.

    ``count`` samples, their ``starts`` (``count + 1`` entries) and each member's data
    ``offsets`` and ``sizes`` (NOTE [ index verification ]).

    Examples:
        >>> a = np.asarray
        >>> check_layout(2, a([0, 1, 2]), a([512, 1536]), a([10, 10]), 3072) is None
        True
        >>> check_layout(2, a([0, 1, 2]), a([512, 1024]), a([10, 10]), 3072)
        'member 1 starts at byte 1024, inside the previous member or its header'
    """
    if len(starts) != count + 1 or starts[0] != 0 or starts[-1] != len(offsets):
        return f"{count} samples need {count + 1} starts from 0 to {len(offsets)}"
    if len(sizes) != len(offsets):
        return f"{len(offsets)} member offsets but {len(sizes)} sizes"
    if count and np.any(starts[1:] <= starts[:-1]):
        return "the sample starts do not increase"
    if not len(offsets):
        return None
    # Bounds first, so that the sums below cannot overflow.
    for name, values, low in (("offset", offsets, BLOCK), ("size", sizes, 0)):
        bad = np.flatnonzero((values < low) | (values > size))
        if len(bad):
            return f"member {bad[0]} has {name} {values[bad[0]]}, outside {low}..{size} (the shard)"
    ends = offsets + sizes
    bad = np.flatnonzero((ends > size) | (offsets % BLOCK != 0))
    if len(bad):
        j = int(bad[0])
        return f"member {j} (bytes {offsets[j]}..{ends[j]}) is not a tar member's data"
    after = offsets[:-1] + -(-sizes[:-1] // BLOCK) * BLOCK + BLOCK
    bad = np.flatnonzero(offsets[1:] < after)
    if len(bad):
        j = int(bad[0]) + 1
        return f"member {j} starts at byte {offsets[j]}, inside the previous member or its header"
    return None


_SPAN = np.arange(BLOCK, dtype=np.int64)
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

    Built once per shard opened, in a few numpy calls over the decoded index: each
    member's offset, size and expected name (``key.suffix``, cut to the header's 100
    bytes). :meth:`mismatch` then checks the members of a batch together, so a batch of
    64 samples costs a dozen numpy calls, not a Python loop per member.

    Examples:
        >>> from detsamplers.loader._wds._index_file import PackedMembers
        >>> table = HeaderTable(("k0",), PackedMembers(["cls"], [512], [1], [0, 1]))
        >>> bytes(table.names[0, :6]), int(table.names[0, 6]), bytes(table.size_words[0])
        (b'k0.cls', 0, b'00000000001\x00')
    """

    __slots__ = ("keys", "names", "offsets", "owner", "size_words", "sizes", "starts", "suffixes")

    def __init__(self, keys: Sequence[str], packed: Any) -> None:
        self.keys, self.suffixes = keys, packed.suffixes
        self.starts = np.asarray(packed.starts, dtype=np.int64)
        self.offsets = np.asarray(packed.offsets, dtype=np.int64)
        self.sizes = np.asarray(packed.sizes, dtype=np.int64)
        counts = np.diff(self.starts)
        self.owner = np.repeat(np.arange(len(counts)), counts)  # each member's sample
        key_start, key_length, key_bytes = _joined(keys)
        suffix_start, suffix_length, suffix_bytes = _joined(self.suffixes)
        members = len(self.offsets)
        names = np.zeros((members, 104), dtype=np.uint8)  # 13 words; 100-103 left zero
        owner_length = key_length[self.owner]
        _place(names, np.zeros(members, np.int64), key_bytes, key_start[self.owner], owner_length)
        names[np.arange(members), np.minimum(owner_length, 100)] = 46  # "."
        _place(names, owner_length + 1, suffix_bytes, suffix_start, suffix_length)
        names[:, 100:] = 0
        self.names = names
        # The size field as tarfile writes it, "%011o\0", as three 32-bit words.
        field = np.zeros((members, 12), dtype=np.uint8)
        field[:, :11] = (self.sizes[:, None] >> _SIZE_SHIFTS) % 8 + 48
        self.size_words = field.view("<u4")

    def members_of(self, samples: Sequence[int]) -> np.ndarray[Any, Any]:
        """The member numbers of ``samples``, in order."""
        chosen = np.asarray(samples, dtype=np.int64)
        first, counts = self.starts[chosen], self.starts[chosen + 1] - self.starts[chosen]
        shift = np.repeat(first - np.cumsum(counts) + counts, counts)
        return np.arange(int(counts.sum()), dtype=np.int64) + shift  # type: ignore[no-any-return]

    def mismatch(
        self, data: bytes, base: int, members: np.ndarray[Any, Any]
    ) -> tuple[int, str] | None:
        """The first of ``members`` whose header in ``data`` (from ``base``) is wrong, and how."""
        if not len(members):
            return None
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
            computed = _byte_sums(words) + 256
            computed -= blocks[:, _SUM_FIELD].sum(axis=1, dtype=np.int64)
            ok &= (digits - 48.0) @ _CHECKSUM_WEIGHTS == computed
            suspects = members[~ok]
        for j in suspects.tolist():
            at_j = int(self.offsets[j]) - base - BLOCK
            key, suffix, size = self.keys[self.owner[j]], self.suffixes[j], int(self.sizes[j])
            if at_j < 0 or at_j + BLOCK > len(data):
                return j, "no tar header fits before its data"
            why = _row_mismatch(data[at_j : at_j + BLOCK], key, suffix, size)
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


def _joined(strings: Sequence[str]) -> tuple[Any, Any, Any]:
    """Where each string starts in their NUL-joined UTF-8 bytes, its length, and the bytes."""
    raw = np.frombuffer(
        ("\0".join(strings) + "\0").encode("utf-8", "surrogateescape"), dtype=np.uint8
    )
    ends = np.flatnonzero(raw == 0)[: len(strings)]
    starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else ends
    return starts, ends - starts, raw


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


class MemberError(ValueError):
    """A member of a sample that cannot be what it claims (never retried by a fallback)."""


def npy_loads(data: bytes) -> Any:
    """Decode a ``.npy`` member as webdataset does, unless its header claims too much.

    The array is :func:`numpy.lib.format.read_array` of the bytes, as webdataset decodes
    it, but only once the header's shape times its item size fits in the bytes after it:
    numpy allocates the whole array before it reads, so a 100-byte member claiming
    ``(10**12,)`` float64 would otherwise ask for 8 TB.

    Raises:
        MemberError: the header claims more than the member holds.

    Examples:
        >>> stream = io.BytesIO(); np.save(stream, np.arange(3)); data = stream.getvalue()
        >>> npy_loads(data).tolist()
        [0, 1, 2]
        >>> head = io.BytesIO()
        >>> claim = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
        >>> np.lib.format.write_array_header_1_0(head, claim)
        >>> npy_loads(head.getvalue() + bytes(100))
        Traceback (most recent call last):
        ...
        detsamplers.loader._wds._verify.MemberError: its .npy header claims 1000000000000 ...
    """
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    else:  # 2.0, or 3.0: the same layout, its header UTF-8 (read as Latin-1 for its shape)
        try:
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        except ValueError as exn:
            raise MemberError(f"its .npy header is unreadable ({exn})") from None
    if not dtype.hasobject:  # object arrays: numpy refuses them without pickle
        need = math.prod(shape) * dtype.itemsize
        left = len(data) - stream.tell()
        if need > left:
            raise MemberError(
                f"its .npy header claims {math.prod(shape)} items of {dtype} ({need} bytes) "
                f"but the member holds {left} bytes after the header"
            )
    return np.lib.format.read_array(io.BytesIO(data))
