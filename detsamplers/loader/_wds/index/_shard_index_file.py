"""The index file of a shard: ``<shard>.index.npz``, compact and quick to decode.

NOTE [ index file format ]
``python -m detsamplers index URLS`` writes, for each shard ``data-000.tar``, a file
``data-000.tar.index.npz`` (next to the shard, or under ``--out``); a shard's index, local
or remote, is read from there when present, else built by one scan and cached in the same
format (NOTE [ shard index ]). It is an uncompressed numpy ``.npz`` (a zip of ``.npy``
arrays, read with ``allow_pickle=False``) holding, for a shard of ``n`` samples with ``m``
members in all:

- ``header``: uint8, UTF-8 JSON ``{"format": "detsamplers-shard-index", "version": 2,
  "size": <bytes>, "etag": <ETag or null>, "samples": <n>}``, plus ``"mtime_ns"`` for a
  local shard: the shard's size, for a remote shard its ETag, for a local one its
  modification time, when it was indexed (``samples`` is absent from files written before
  it was added; ``starts`` then gives the count). It is the first entry, so the count is
  read without opening the zip directory;
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
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from ..shard._file_checks import check_layout, load_arrays
from ..shard._packed_members import PackedMembers

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "IndexLieError",
    "LazyIndex",
    "PackedMembers",
    "decode_checked",
    "decode_index",
    "encode_index",
    "read_header",
    "resolved",
    "stored_arrays",
]

FORMAT = "detsamplers-shard-index"
FORMAT_VERSION = 2

#: What reading a damaged or foreign index file raises (numpy, zipfile, the header checks).
_UNREADABLE = (
    ValueError,
    KeyError,
    OSError,
    EOFError,
    TypeError,
    AttributeError,
    zipfile.BadZipFile,
)


def _joined(strings: list[str]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    data = ("\0".join(strings) + "\0").encode(errors="surrogateescape") if strings else b""
    return np.frombuffer(data, dtype=np.uint8)


def _split(array: np.ndarray[Any, Any]) -> list[str]:
    return array.tobytes().decode(errors="surrogateescape").split("\0")[:-1]


def _split_suffixes(array: np.ndarray[Any, Any], starts: np.ndarray[Any, Any]) -> list[str]:
    """:func:`_split` of the members' suffixes: the first sample's repeated, when the bytes are.

    Most shards give every sample the same suffixes; then the list repeats the first
    sample's strings (the same objects), found by one comparison of the bytes. The list is
    :func:`_split`'s either way.

    Examples:
        >>> _split_suffixes(_joined(["cls", "png", "cls", "png"]), np.array([0, 2, 4]))
        ['cls', 'png', 'cls', 'png']
    """
    data = array.tobytes()
    if len(starts) > 2 and starts[1] > 0:
        cut = 0
        for _ in range(int(starts[1])):  # past the first sample's suffixes
            cut = data.find(b"\0", cut) + 1
            if cut == 0:
                return _split(array)
        samples = len(starts) - 1  # compared only where the lengths agree: no larger bytes
        if cut * samples == len(data) and data == data[:cut] * samples:
            return _split(array[:cut]) * samples
    return _split(array)


def encode_index(
    keys: Sequence[str],
    members: Sequence[list[Any]],
    size: int,
    etag: str | None,
    mtime_ns: int | None = None,
) -> bytes:
    """The bytes of an index file (NOTE [ index file format ]).

    ``mtime_ns``, given for a local shard, is recorded so that a rewritten shard of the
    same size is noticed; the header also records the number of samples.

    Examples:
        >>> data = encode_index(("k0", "k1"), [[["cls", 512, 1]], [["cls", 1536, 1]]], 3072, None)
        >>> decode_index(data, "a.tar")
        (('k0', 'k1'), [[['cls', 512, 1]], [['cls', 1536, 1]]], 3072, None)
    """
    if isinstance(members, PackedMembers):  # a scan's flat lists: no list per member
        suffixes, offsets, sizes = members.suffixes, members.offsets, members.sizes
        starts: Any = members.starts
    else:
        flat = [m for sample in members for m in sample]
        suffixes, offsets, sizes = [m[0] for m in flat], [m[1] for m in flat], [m[2] for m in flat]
        starts = np.cumsum([0] + [len(s) for s in members], dtype=np.int64)
    header: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "size": size}
    header.update(etag=etag, samples=len(keys))
    if mtime_ns is not None:
        header["mtime_ns"] = mtime_ns
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        keys=_joined(list(keys)),
        suffixes=_joined(suffixes),
        starts=np.asarray(starts, dtype=np.int64),
        offsets=np.array(offsets, dtype=np.int64),
        sizes=np.array(sizes, dtype=np.int64),
    )
    return buffer.getvalue()


def decode_index(data: bytes, url: str) -> tuple[tuple[str, ...], PackedMembers, int, str | None]:
    """``(keys, members, size, etag)`` from the bytes of an index file.

    Raises:
        ValueError: the bytes are not an index file of this format (the message names
            the shard ``url``).
    """
    return _decode(data, url, None)


def decode_checked(
    data: bytes, url: str, file: str | None = None, *, keep_arrays: bool = False
) -> tuple[tuple[str, ...], PackedMembers, int, str | None]:
    """:func:`decode_index`, then the layout checked against the recorded shard size.

    The checks are those of NOTE [ index verification ]: counts, increasing starts, and
    each member's data on a block boundary, inside the shard, after the previous one.
    ``keep_arrays`` keeps the file's arrays on the members (``PackedMembers.arrays``, views
    of ``data``) for the header check, for a caller that keeps ``data`` anyway.

    Raises:
        ValueError: the bytes are not an index file of this format (the message names the
            shard, the file and the fix).
        IndexLieError: they are, but describe no tar of the recorded size (likewise).

    Examples:
        >>> data = encode_index(("k0",), [[["cls", 100, 1]]], 2048, None)
        >>> decode_checked(data, "a.tar", "a.tar.index.npz")
        Traceback (most recent call last):
        ...
        detsamplers.loader._wds.index._shard_index_file.IndexLieError: the index file ...
    """
    return _decode(data, url, file or "", keep_arrays)


def _decode(
    data: bytes, url: str, file: str | None, keep_arrays: bool = False
) -> tuple[tuple[str, ...], PackedMembers, int, str | None]:
    """:func:`decode_index` (``file`` is ``None``) or :func:`decode_checked`."""
    try:
        arrays = _arrays(data)
        header = json.loads(arrays["header"].tobytes())
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        if header.get("format") != FORMAT or header.get("version") != FORMAT_VERSION:
            raise ValueError(f"format {header.get('format')!r} {header.get('version')!r}")
        keys = tuple(_split(arrays["keys"]))
        starts_array = arrays["starts"]
        suffixes = _split_suffixes(arrays["suffixes"], starts_array)
        size = header["size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"the recorded shard size is {size!r}")
        if file is not None:
            offsets_array, sizes_array = arrays["offsets"], arrays["sizes"]
            wrong = check_layout(len(keys), starts_array, offsets_array, sizes_array, size)
            if len(suffixes) != len(offsets_array):
                wrong = f"{len(suffixes)} suffixes for {len(offsets_array)} members"
            if header.get("samples", len(keys)) != len(keys):
                wrong = f"{len(keys)} keys, the header says {header['samples']}"
            if wrong is not None:
                raise IndexLieError(wrong)
        starts = starts_array.tolist()
        offsets = arrays["offsets"].tolist()
        sizes = arrays["sizes"].tolist()
        counts = {len(suffixes), len(offsets), len(sizes), starts[-1] if starts else -1}
        if len(starts) != len(keys) + 1 or len(counts) != 1 or starts[0] != 0:
            raise ValueError("the sample starts do not match the keys and members")
        if np.any(np.diff(starts_array) < 0):
            raise ValueError("the sample starts decrease")
        members = PackedMembers(suffixes, offsets, sizes, starts, arrays if keep_arrays else None)
        return keys, members, size, header.get("etag")
    except _UNREADABLE as exn:
        named = (
            f"the index file {file!r} of shard {url!r}"
            if file
            else f"the index file of shard {url!r}"
        )
        kind = IndexLieError if isinstance(exn, IndexLieError) else ValueError
        raise kind(
            f"{named} is not a detsamplers index "
            f"({FORMAT} version {FORMAT_VERSION}) of it: {exn}; delete it and rebuild it with "
            f"`python -m detsamplers index {url}`"
        ) from None


class IndexLieError(ValueError):
    """A well-formed index file that describes no tar of its shard's size (never rescanned)."""


_ZIP_ENTRY = struct.Struct("<4s22xHH")
_ZIP_LOCAL = struct.Struct("<4sHHH4xIIIHH")  # signature, version, flags, method, crc, sizes
_ZIP64_SIZES = struct.Struct("<HHQQ")
_NPY_HEADER = re.compile(
    rb"\{'descr': '(\|u1|<i8)', 'fortran_order': False, 'shape': \((\d+),\), \} *\n"
)
_ARRAYS = ("header", "keys", "suffixes", "starts", "offsets", "sizes")
_KINDS = {"header": "|u1", "keys": "|u1", "suffixes": "|u1"} | dict.fromkeys(_ARRAYS[3:], "<i8")


def _arrays(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an index file, each size checked before it is read (no pickle)."""
    return stored_arrays(data, _ARRAYS) or load_arrays(data, _ARRAYS, _KINDS)


def stored_arrays(data: bytes, names: Sequence[str]) -> dict[str, np.ndarray[Any, Any]] | None:
    """The arrays ``names`` of an ``.npz`` as ``numpy.savez`` writes it, read without ``zipfile``.

    That is: stored (uncompressed) entries with their sizes in the local headers (or their
    zip64 extra field), each a one-dimensional ``.npy`` 1.0 array of ``uint8`` or
    little-endian ``int64``, CRC-32 checked, and no other entries. ``None`` for anything
    else, which :func:`numpy.load` then reads (and reports if damaged). An index file
    (``encode_index``) and a set index (``encode_set``) are read so.
    """
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    position = 0
    while data.startswith(b"PK\x03\x04", position) and len(data) >= position + _ZIP_LOCAL.size:
        _, _, flags, method, crc, stored, _, name_size, extra_size = _ZIP_LOCAL.unpack_from(
            data, position
        )
        if flags & 0x08 or method != 0:
            return None  # sizes after the data, or compressed
        name_start = position + _ZIP_LOCAL.size
        name = data[name_start : name_start + name_size].decode("ascii", "replace")
        start = name_start + name_size + extra_size
        if stored == 0xFFFFFFFF:
            extra = data[name_start + name_size : start]
            if len(extra) < _ZIP64_SIZES.size or extra[:2] != b"\x01\x00":
                return None
            stored = _ZIP64_SIZES.unpack_from(extra)[3]
        body = data[start : start + stored]
        if len(body) != stored or zlib.crc32(body) != crc or not name.endswith(".npy"):
            return None
        if body[:8] != b"\x93NUMPY\x01\x00":
            return None
        length = int.from_bytes(body[8:10], "little")
        match = _NPY_HEADER.fullmatch(body, 10, 10 + length)
        if match is None:
            return None
        dtype = np.uint8 if match.group(1) == b"|u1" else np.dtype("<i8")
        count = int(match.group(2))
        if len(body) != 10 + length + count * np.dtype(dtype).itemsize:
            return None
        arrays[name[:-4]] = np.frombuffer(body, dtype=dtype, count=count, offset=10 + length)
        position = start + stored
    if set(arrays) != set(names):
        return None
    return arrays


_NPY_UINT8 = re.compile(rb"\{'descr': '\|u1', 'fortran_order': False, 'shape': \((\d+),\), \} *\n")


def _first_header(data: bytes) -> bytes | None:
    """The ``header`` array's bytes if stored first, as ``encode_index`` writes it.

    That is: no compression, ``.npy`` format 1.0, and the zip's end record present.
    ``None`` for anything else, which :func:`numpy.load` then reads. This spares opening
    the zip's directory for one small array.
    """
    if len(data) < _ZIP_ENTRY.size:
        return None
    magic, name_size, extra_size = _ZIP_ENTRY.unpack_from(data)
    start = _ZIP_ENTRY.size + name_size + extra_size
    if magic != b"PK\x03\x04" or data[8:10] != b"\0\0":  # a local entry, stored
        return None
    if data.rfind(b"PK\x05\x06", -(1 << 16) - 22) < 0:  # cut short: no end of directory
        return None
    if data[_ZIP_ENTRY.size : _ZIP_ENTRY.size + name_size] != b"header.npy":
        return None
    if data[start : start + 8] != b"\x93NUMPY\x01\x00":
        return None
    length = int.from_bytes(data[start + 8 : start + 10], "little")
    match = _NPY_UINT8.fullmatch(data, start + 10, start + 10 + length)
    if match is None:
        return None
    first = start + 10 + length
    body = data[first : first + int(match.group(1))]
    return body if len(body) == int(match.group(1)) else None


def read_header(data: bytes, url: str) -> tuple[dict[str, Any], int]:
    """The header of an index file and its number of samples, without decoding the rest.

    Raises:
        ValueError: the bytes are not an index file of this format (naming ``url``).

    Examples:
        >>> data = encode_index(("k0",), [[["cls", 512, 1]]], 2048, None, mtime_ns=7)
        >>> header, count = read_header(data, "a.tar")
        >>> header["size"], header["mtime_ns"], count
        (2048, 7, 1)
    """
    try:
        raw = _first_header(data)
        if raw is None:
            raw = load_arrays(data, ["header"], _KINDS)["header"].tobytes()
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        if header.get("format") != FORMAT or header.get("version") != FORMAT_VERSION:
            raise ValueError(f"format {header.get('format')!r} {header.get('version')!r}")
        count = header.get("samples")
        if not isinstance(count, int) or count < 0:  # written before the count was recorded
            count = len(load_arrays(data, ["starts"], _KINDS)["starts"]) - 1
        return header, count
    except _UNREADABLE as exn:
        raise ValueError(
            f"the index file of shard {url!r} is not a detsamplers index "
            f"({FORMAT} version {FORMAT_VERSION}): {exn}"
        ) from None


class LazyIndex:
    """An index file's bytes, decoded the first time a key or member is asked for.

    Building a source over many shards needs only each shard's number of samples (in the
    header); the keys and members of a shard are decoded when it is first read, so a
    resume decodes one shard, not all of them. Pickling (to DataLoader workers) sends the
    bytes, never the decoded lists.

    Examples:
        >>> data = encode_index(("k0", "k1"), [[["cls", 512, 1]], [["cls", 1536, 1]]], 3072, None)
        >>> lazy = LazyIndex(data, "a.tar", 2)
        >>> len(lazy.keys), lazy.decoded
        (2, False)
        >>> lazy.keys[1], lazy.members[0], lazy.decoded
        ('k1', [['cls', 512, 1]], True)
    """

    __slots__ = ("_decoded", "count", "data", "file", "keys", "members", "url")

    def __init__(self, data: bytes, url: str, count: int, file: str = "") -> None:
        self.data, self.url, self.count, self.file = data, url, count, file
        self._decoded: tuple[tuple[str, ...], PackedMembers] | None = None
        self.keys: Sequence[str] = _LazyPart(self, 0)
        self.members: Sequence[list[Any]] = _LazyPart(self, 1)

    @property
    def decoded(self) -> bool:
        """Whether the keys and members have been decoded yet."""
        return self._decoded is not None

    def part(self, which: int) -> Sequence[Any]:
        """The decoded keys (0) or members (1), checked (NOTE [ index verification ]).

        Raises:
            IndexLieError: the file is well formed but describes no tar of the shard's
                size: an error naming the file and the fix, never a rescan that would
                hide it. (A file damaged past its header, failing its own CRC or format
                checks, is replaced by a scan of the shard, as a damaged cache file.)
        """
        if self._decoded is None:
            try:
                # The arrays are views of ``data``, kept anyway: the header check reuses them.
                keys, members, *_ = decode_checked(self.data, self.url, self.file, keep_arrays=True)
            except IndexLieError:
                raise  # well formed but wrong: its writer is at fault, say so
            except ValueError:
                # Damaged past its header (which was read when the source was built): it
                # fails its own checks (a CRC, a dtype, a length), so, as any damaged cache
                # file, it is never trusted and the local shard is scanned instead.
                from ._scan_shard import scan_shard

                keys, members = scan_shard(self.url)
            if len(keys) != self.count:
                raise ValueError(
                    f"the index file {self.file!r} of shard {self.url!r} lists {len(keys)} "
                    f"samples but its header says {self.count}; delete it and rebuild it "
                    f"with `python -m detsamplers index {self.url}`"
                )
            self._decoded = keys, members
        return self._decoded[which]

    def __getstate__(self) -> tuple[bytes, str, int, str]:
        return self.data, self.url, self.count, self.file

    def __setstate__(self, state: tuple[bytes, str, int, str]) -> None:
        self.__init__(*state)  # type: ignore[misc]


class _LazyPart(Sequence[Any]):
    """The keys or members of a :class:`LazyIndex`: its length known, its items decoded late."""

    __slots__ = ("owner", "which")

    def __init__(self, owner: LazyIndex, which: int) -> None:
        self.owner, self.which = owner, which

    def __len__(self) -> int:
        return self.owner.count

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.owner.part(self.which)[index]

    def __iter__(self) -> Any:
        return iter(self.owner.part(self.which))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return getattr, (self.owner, ("keys", "members")[self.which])


def resolved(part: Sequence[Any]) -> Sequence[Any]:
    """The decoded sequence behind a :class:`LazyIndex`'s keys or members (else ``part``)."""
    return part.owner.part(part.which) if isinstance(part, _LazyPart) else part
