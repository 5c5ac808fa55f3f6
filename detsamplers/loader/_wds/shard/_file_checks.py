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
- *The tar header at each member's offset says so* (:mod:`._tar_check`, on every
  read of a sample): the reader reads the 512 bytes before the first member it reads,
  so each member's header is in the bytes read anyway; its checksum is right (unsigned or
  signed, as :mod:`tarfile` accepts), it is a regular file, its size is the indexed size,
  and its name is the sample's key and the member's suffix (a name too long for the
  header, carried by a pax or GNU record before it, is compared up to the 100 bytes the
  header holds). The compiled kernel checks a run's members in one C call over the bytes
  just read (``check_headers``, against a table packed once per decoded index from the
  index file's own arrays and names, ``HeaderTable``); without it, a batch's members are
  checked in a dozen numpy calls and a single sample's in a Python loop. Each quick test
  only ever refuses more than tarfile would: a member that fails it is then read the way
  tarfile reads it, which decides (tests/webdataset/test_wds_header_check.py holds both
  paths to the same outcome). The cost is measured by ``benchmarks/webdataset_table.py``.
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
import stat
import tokenize
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from ...._files_open import NotRegularFileError, open_regular_fd
from ._tar_walk import BLOCK

__all__ = [
    "MemberError",
    "check_layout",
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
    try:  # NOTE [ regular files only ]
        fd, _ = open_regular_fd(path)
    except NotRegularFileError as error:
        raise not_regular(path, what, error.mode, _fix(what, shard)) from None
    try:
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

#: What numpy's header readers raise on a header they cannot read: ``ValueError``, and where
#: it re-reads the header as a Python 2 one, ``SyntaxError`` or tokenize's ``TokenError``.
UNREADABLE_HEADER = (ValueError, SyntaxError, tokenize.TokenError)


def _read_header(stream: Any, version: tuple[int, int]) -> tuple[Any, Any, Any]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` header at ``stream`` (1.0, else 2.0)."""
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    return np.lib.format.read_array_header_2_0(stream)


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
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f"array {name!r} has .npy format {version}")
                try:
                    shape, _, dtype = _read_header(member, version)
                except UNREADABLE_HEADER as exn:
                    raise ValueError(f"array {name!r} has an unreadable header ({exn})") from None
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
        detsamplers.loader._wds.shard._file_checks.MemberError: its .npy header claims ...
    """
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    try:  # 1.0, 2.0 or 3.0 (3.0 read as 2.0: its UTF-8 header as Latin-1, for its shape)
        shape, _, dtype = _read_header(stream, version)
    except UNREADABLE_HEADER as exn:
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
