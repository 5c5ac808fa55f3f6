"""Shard indexes: where each sample of an uncompressed tar shard lies, cached on disk.

NOTE [ shard index ]
To open a shard at any sample without reading what precedes it, the source needs each
sample's members and their byte ranges. :func:`scan_shard` lists a tar once and groups its
members exactly as webdataset 1.0.2 does (``tar_file_iterator`` then ``group_by_keys``):
regular files only, top-level ``__*__`` metadata skipped, the key is the path up to the
first dot of the basename and the suffix the rest (lower-cased), and *consecutive* members
with the same key form one sample. A name without a dot is ignored and a repeated suffix
within a sample is an error, as in webdataset.

The scan reads all the 512-byte headers of a tar at once with numpy when it can
(:func:`_walk_headers`: guess the headers by ustar's magic, read their numbers as arrays,
check that the guess is exactly the chain of headers), else walks them one by one
(:func:`_read_headers`), else lets :mod:`tarfile` list the shard; the three agree wherever
the faster one answers, which the tests check. Members are grouped into flat lists (a
:class:`PackedMembers`), never a Python list per member.

A shard must be an uncompressed tar that ends with tar's end-of-archive zero block. The
scan checks every member's data lies inside the file and that only zero bytes follow the
last member, because :mod:`tarfile` silently stops listing at a truncated or corrupt
header past the first one: a shard cut short or damaged is a ``ValueError`` naming it,
never a shard with fewer samples.

The index of ``data-000.tar`` is read from ``data-000.tar.index.npz`` next to it (NOTE [
index file format ]; ``python -m detsamplers index`` writes it, or the first scan caches
it there), or, when that folder is read-only (or ``index_dir`` is given), from
``index_dir`` (default ``$XDG_CACHE_HOME/detsamplers/shard-index``) under a name hashed from
the shard's path. A file is used only while the shard's size and modification time are
those recorded in its header; otherwise, or if it is unreadable, the shard is scanned
again and the file rewritten atomically. Building a source decodes only each file's header
(its number of samples); a shard's keys and members are decoded when it is first read.
Index caches of the older JSON form (``data-000.tar.index.json``) that are still current
are converted once to ``.index.npz``; stale or corrupt ones are ignored and rebuilt.
A remote shard's index is found or built by :mod:`._remote_index` (NOTE [ index file
format ]), with the same scan over ranged reads.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import mmap
import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._fetch import RemoteOptions
from ._index_file import LazyIndex, PackedMembers, encode_index, read_header
from ._urls import is_remote, local_path

__all__ = ["INDEX_SUFFIX", "ShardInfo", "index_shards", "scan_shard"]

#: The index file of local shard ``p`` is ``p + INDEX_SUFFIX`` (NOTE [ index file format ]).
INDEX_SUFFIX = ".index.npz"
#: The version of the JSON index caches written before ``.index.npz``; read and converted.
_JSON_VERSION = 1
#: Show a progress bar when at least this many shards must be scanned.
PROGRESS_MIN_SHARDS = 16

# webdataset.tariterators.base_plus_ext and tar_file_iterator's skip_meta, verbatim.
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")
_BLOCK = 512
_CHUNK = 1 << 20
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")

#: One member of a sample: [suffix, byte offset of its data, size in bytes]. Lists, as JSON
#: loads them: converting 100k samples' members to tuples would triple the load time.
Member = list[Any]
#: A tar's members as flat lists: names, data offsets, sizes, and whether each is a file.
Listing = tuple[list[str], list[int], list[int], list[bool]]


@dataclass(frozen=True)
class ShardInfo:
    """The samples of one shard: their keys and members, in tar order.

    Attributes:
        url: The shard's URL as given (after brace expansion).
        path: Its absolute local path, or its URL if it is remote.
        keys: Each sample's ``__key__``.
        members: Each sample's members as ``[suffix, data offset, size]``.
        size: A remote shard's size in bytes when indexed (-1 for a local shard).
        version: A remote shard's ETag (or modification time) when indexed, or ``None``.

    Examples:
        >>> info = ShardInfo("a.tar", "/d/a.tar", ("k0",), [[["cls", 512, 1]]])
        >>> len(info)
        1
    """

    url: str
    path: str
    keys: Sequence[str]
    members: Sequence[list[Member]]
    size: int = -1
    version: str | None = None

    def __len__(self) -> int:
        return len(self.keys)


def _corrupt(path: str, what: str) -> ValueError:
    return ValueError(
        f"shard {path!r} is truncated or corrupt: {what}; rewrite it (for example with "
        "webdataset.ShardWriter) or remove it from urls"
    )


def _check_tail(path: str, handle: Any, end: int, size: int) -> None:
    """Check that only zero bytes, at least one block of them, follow offset ``end``."""
    if size - end < _BLOCK:
        raise _corrupt(path, f"it ends at byte {size} without tar's end-of-archive block")
    handle.seek(end)
    while chunk := handle.read(_CHUNK):
        if chunk.count(0) != len(chunk):
            raise _corrupt(path, f"bytes after offset {end} are not a valid tar member header")


_ZERO_BLOCK = bytes(_BLOCK)
_REGULAR = frozenset(b"0\x007")  # REGTYPE, AREGTYPE, CONTTYPE: data follows the header
_NO_DATA = frozenset(b"123456")  # links, devices, folders, fifos: tarfile skips no data
_CHECKSUM_SPAN = 4096  # headers whose checksums are summed in one numpy call


_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")


def _pax_records(data: bytes) -> dict[str, Any] | None:
    """The ``path`` and ``size`` of a pax header's records, read as :mod:`tarfile` does.

    ``None`` when tarfile would do more than apply them (a charset, sparse files) or
    refuse the header: the caller then lets tarfile list the shard.
    """
    out: dict[str, Any] = {}
    position = 0
    while match := _PAX_RECORD.match(data, position):
        length = int(match.group(1))
        keyword = match.group(2)
        if length == 0 or keyword == b"hdrcharset" or keyword.startswith(b"GNU.sparse"):
            return None
        value = data[match.end(2) + 1 : match.start(1) + length - 1]
        if keyword == b"path":
            out["path"] = value.decode("utf-8", "surrogateescape").rstrip("/")
        elif keyword == b"size":
            try:
                out["size"] = int(value.decode("utf-8", "surrogateescape"))
            except ValueError:
                out["size"] = 0
        position += length
    return out


#: ustar's magic and version at offset 257, as tarfile writes them for ustar and pax.
_USTAR_00 = np.frombuffer(b"ustar\x0000", dtype="<u8")[0]
#: pax records that change nothing the listing uses (webdataset writes one, ``mtime``).
_PAX_TIMES = [np.frombuffer(word, dtype=np.uint8) for word in (b"mtime=", b"atime=", b"ctime=")]


def _octal(fields: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    r"""Each row's octal number, read as ``int(field.split(b"\0", 1)[0] or b"0", 8)``.

    Only rows of octal digits then spaces (then a NUL and anything) are read here, which
    is what tar writers write; ``None`` if any row is otherwise.
    """
    width = fields.shape[1]
    for common in (width - 1, width - 2):  # as tarfile writes: digits, NUL (and a space)
        digits = fields[:, :common] - np.uint8(48)  # wraps below "0"
        if np.all(fields[:, common] == 0) and np.all(digits <= 7):
            weights = 8 ** np.arange(common - 1, -1, -1, dtype=np.int64)
            value: np.ndarray[Any, Any] = digits.astype(np.int64) @ weights
            return value
    digit = (fields >= 48) & (fields <= 55)
    leading = np.where(digit.all(axis=1), width, (~digit).argmax(axis=1))
    common = int(leading[0])
    if common >= 1 and np.all(leading == common):  # as tarfile writes: one width of digits
        stops = fields[:, common] if common < width else np.zeros(len(fields), np.uint8)
        if np.all((stops == 0) | ((stops == 32) & _spaces_then_nul(fields[:, common:]))):
            weights = 8 ** np.arange(common - 1, -1, -1, dtype=np.int64)
            return (fields[:, :common].astype(np.int64) - 48) @ weights
    columns = np.arange(width)
    nul = fields == 0
    cut = np.where(nul.any(axis=1), nul.argmax(axis=1), width)
    before = columns[None, :] < cut[:, None]
    rest = before & (columns[None, :] >= leading[:, None])
    if not np.all((leading >= 1) & (leading <= cut)) or np.any(rest & (fields != 32)):
        return None
    value = np.zeros(len(fields), dtype=np.int64)
    for column in range(width):
        inside = column < leading
        value = np.where(inside, value * 8 + (fields[:, column].astype(np.int64) - 48), value)
    return value


def _spaces_then_nul(tails: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether each row is spaces up to its first NUL (or its end)."""
    nul = tails == 0
    cut = np.where(nul.any(axis=1), nul.argmax(axis=1), tails.shape[1])
    before = np.arange(tails.shape[1])[None, :] < cut[:, None]
    return np.all(~before | (tails == 32), axis=1)  # type: ignore[no-any-return]


def _cut_names(fields: np.ndarray[Any, Any]) -> list[bytes] | None:
    """Each row up to its first NUL, if only NULs follow it (else ``None``)."""
    width = fields.shape[1]
    names: list[bytes] = np.ascontiguousarray(fields).view(f"S{width}").ravel().tolist()
    # numpy strips trailing NULs only: no NUL inside a name iff the lengths add up.
    if sum(map(len, names)) != np.count_nonzero(fields):
        return None
    return names


def _simple_pax(blocks: np.ndarray[Any, Any], rows: Any, sizes: Any) -> bool:
    """Whether each pax header holds exactly one ``mtime``/``atime``/``ctime`` record.

    Such a header changes neither the name nor the size of the member it precedes.
    ``rows`` are the blocks the headers' data start at, ``sizes`` their data sizes;
    records of two or three length digits are read here (``False``: any other).
    """
    window = blocks[rows, :12]
    for digits in (2, 3):
        width = sizes >= 10 ** (digits - 1)
        width &= sizes < 10**digits
        if not width.any():
            continue
        part, size = window[width], sizes[width]
        ok = part[:, digits] == 32  # "<length> <keyword>=": the length is the data size
        for place in range(digits):
            ok &= part[:, place] == (size // 10 ** (digits - 1 - place)) % 10 + 48
        times = np.zeros(len(part), dtype=bool)
        for word in _PAX_TIMES:
            times |= np.all(part[:, digits + 1 : digits + 7] == word, axis=1)
        if not np.all(ok & times):
            return False
    return bool(np.all((sizes >= 10) & (sizes < 1000)))


def _walk_headers(buffer: Any, size: int) -> tuple[Listing, int] | None:
    """:func:`_read_headers` for the common tar, with numpy over all headers at once.

    Each member's header position depends on the previous sizes, so the walk guesses the
    headers (the blocks with ustar's magic at their offset 257), reads all their numbers
    in a few array operations, and then checks that the guess is the chain of headers
    ``_read_headers`` would walk: the first at 0, each next one right after the previous
    member's data, and an end-of-archive block (or the end of the file) after the last.
    Anything else (a magic-less v7 header, a magic inside member data, GNU long names,
    pax records other than a time, unusual numbers) returns ``None`` and the caller walks
    the headers one by one, so the result is always that of :func:`_read_headers`.
    """
    blocks_count = size // _BLOCK
    if blocks_count == 0:
        return None
    array = np.frombuffer(buffer, dtype=np.uint8, count=blocks_count * _BLOCK)
    blocks = array.reshape(blocks_count, _BLOCK)
    magic = np.ascontiguousarray(blocks[:, 257:265]).view("<u8").ravel()
    found = np.flatnonzero(magic == _USTAR_00)
    if len(found) == 0 or found[0] != 0:
        return None
    headers = blocks[found]
    lengths, sums = _octal(headers[:, 124:136]), _octal(headers[:, 148:156])
    if lengths is None or sums is None:
        return None
    computed = headers.sum(axis=1, dtype=np.uint32).astype(np.int64) + 256
    computed -= headers[:, 148:156].sum(axis=1, dtype=np.int64)
    if not np.array_equal(computed, sums):
        return None
    kinds = headers[:, 156]
    pax = kinds == 120
    regular = (kinds == 48) | (kinds == 0) | (kinds == 55)
    empty = (kinds >= 49) & (kinds <= 54)
    if not np.all(pax | regular | empty):
        return None  # GNU long names, sparse files, global pax headers: walk one by one
    name_fields = headers[:, :100]
    folders = kinds == 53
    for row in np.flatnonzero(kinds == 0).tolist():  # v7 folder: a trailing slash
        name = bytes(name_fields[row]).split(b"\0", 1)[0]
        folders[row] = name.endswith(b"/")
    regular &= ~folders
    empty |= folders
    positions = found.astype(np.int64) * _BLOCK
    steps = np.where(empty, 0, -(-lengths // _BLOCK) * _BLOCK)
    ends = positions + _BLOCK + steps
    if not np.array_equal(ends[:-1], positions[1:]):
        return None  # not the chain of headers: a guess was wrong
    end = int(ends[-1])
    if end + _BLOCK <= size and array[end : end + _BLOCK].any():
        return None  # the walk would read a header here
    if pax[-1] or np.any(pax[1:] & pax[:-1]):
        return None
    members = ~pax
    if not members.any():
        return None
    if pax.any() and not _simple_pax(blocks, found[pax] + 1, lengths[pax]):
        return None  # a path or size record, or anything else: walk one by one
    raw = _cut_names(name_fields[members])
    prefix_fields = headers[members, 345:500]
    prefixes = _cut_names(prefix_fields) if prefix_fields.any() else []
    if raw is None or prefixes is None:
        return None
    names = b"\0".join(raw).decode("utf-8", "surrogateescape").split("\0")
    for i in np.flatnonzero(folders[members]).tolist():
        names[i] = names[i].rstrip("/")
    for i, prefix in enumerate(prefixes):
        if prefix:
            names[i] = prefix.decode("utf-8", "surrogateescape") + "/" + names[i]
    listing = (
        names,
        (positions[members] + _BLOCK).tolist(),
        lengths[members].tolist(),
        regular[members].tolist(),
    )
    return listing, end


def _read_headers(buffer: Any, size: int) -> tuple[Listing, int] | None:
    """The members of a plain ustar/v7 tar in ``buffer``, read from their 512-byte headers.

    Returns the :data:`Listing` (names, data offsets, sizes, regular or not) and the end
    of the last member, as
    :mod:`tarfile` lists them (names decoded and prefixed the same way) but without making
    a ``TarInfo`` per member, so the scan costs about one pass over the headers. Returns
    ``None`` for anything this walk does not handle exactly as tarfile does (pax or GNU
    long-name headers, sparse files, base-256 numbers, a bad checksum, an empty file):
    the caller then lists the shard with tarfile, which also reports damage.
    """
    members: list[tuple[str, int, int, bool]] = []
    starts: list[int] = []
    sums: list[int] = []
    pending: dict[str, Any] | None = None
    position = 0
    while position + _BLOCK <= size:
        typeflag = buffer[position + 156]
        if buffer[position] == 0 and buffer[position : position + _BLOCK] == _ZERO_BLOCK:
            break
        try:
            field = buffer[position + 124 : position + 136]
            length = int(field.split(b"\0", 1)[0] or b"0", 8)
            field = buffer[position + 148 : position + 156]
            sums.append(int(field.split(b"\0", 1)[0] or b"0", 8))
        except ValueError:
            return None  # base-256 or garbage: tarfile decides
        if length < 0:
            return None
        if typeflag == 120:  # "x": a pax header for the next member
            if pending is not None:
                return None
            pending = _pax_records(buffer[position + _BLOCK : position + _BLOCK + length])
            if pending is None:
                return None
            starts.append(position)
            position += _BLOCK + -(-length // _BLOCK) * _BLOCK
            continue
        raw = buffer[position : position + 100]
        name = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        prefix = buffer[position + 345 : position + 500].split(b"\0", 1)[0]
        if typeflag == 0 and name.endswith("/"):
            typeflag = 53  # v7 folder: a regular type with a trailing slash
        if typeflag in _REGULAR:
            regular, step = True, -(-length // _BLOCK) * _BLOCK
        elif typeflag in _NO_DATA:
            regular, step = False, 0
            if typeflag == 53:
                name = name.rstrip("/")
        else:
            return None  # pax, GNU long names, sparse or unknown types
        if prefix:
            name = prefix.decode("utf-8", "surrogateescape") + "/" + name
        if pending is not None:
            name = pending.get("path", name)
            if "size" in pending:
                length = pending["size"]
                step = -(-length // _BLOCK) * _BLOCK if regular else 0
            pending = None
        starts.append(position)
        members.append((name, position + _BLOCK, length, regular))
        position += _BLOCK + step
    if not members or pending is not None:
        return None
    array = np.frombuffer(buffer, dtype=np.uint8)
    offsets = np.arange(_BLOCK, dtype=np.int64)
    offsets = offsets[(offsets < 148) | (offsets >= 156)]
    for first in range(0, len(starts), _CHECKSUM_SPAN):
        chunk = np.asarray(starts[first : first + _CHECKSUM_SPAN], dtype=np.int64)
        blocks = array[chunk[:, None] + offsets[None, :]]
        computed = blocks.sum(axis=1, dtype=np.int64) + 256
        if not np.array_equal(computed, np.asarray(sums[first : first + _CHECKSUM_SPAN])):
            return None  # a bad (or signed-char) checksum: tarfile decides
    return _listing(members), position


def _listing(members: list[tuple[str, int, int, bool]]) -> Listing:
    return (
        [m[0] for m in members],
        [m[1] for m in members],
        [m[2] for m in members],
        [m[3] for m in members],
    )


def scan_shard(
    path: str, remote: tuple[Any, int] | None = None
) -> tuple[tuple[str, ...], PackedMembers]:
    """List a shard and group its members into samples (NOTE [ shard index ]).

    Args:
        path: A local path to an uncompressed tar file, or the URL of ``remote``.
        remote: A remote shard as a seekable file and its size (``None``: open ``path``).

    Returns:
        ``(keys, members)``: each sample's key, and its members as [suffix, offset, size]
        (a :class:`PackedMembers`: flat lists, no list per member).

    Raises:
        FileNotFoundError: the shard does not exist.
        ValueError: it is compressed, truncated or corrupt, or has a
            repeated suffix within one sample.
    """
    size = os.path.getsize(path) if remote is None else remote[1]
    with open(path, "rb") if remote is None else remote[0] as handle:
        listed = None
        if remote is None and size >= _BLOCK:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                try:
                    length = min(size, len(mapped))
                    listed = _walk_headers(mapped, length) or _read_headers(mapped, length)
                except IndexError:  # the file shrank meanwhile: tarfile reports it
                    listed = None
        if listed is None:
            listed = _tarfile_members(path, handle, size)
        listing, end = listed
        keys, samples = _group(path, listing, size)
        _check_tail(path, handle, end, size)
    return keys, samples


def _tarfile_members(path: str, handle: Any, size: int) -> tuple[Listing, int]:
    """The members of the tar in ``handle`` listed by :mod:`tarfile` (as :func:`_read_headers`)."""
    try:
        tar = tarfile.open(path, "r:", fileobj=handle)  # noqa: SIM115 - closed below
    except tarfile.TarError as exn:
        handle.seek(0)
        if handle.read(6).startswith(_COMPRESSED):
            raise ValueError(
                f"shard {path!r} is compressed; the source seeks into shards, so it needs "
                "uncompressed tars: decompress it (e.g. gunzip) and pass the .tar"
            ) from None
        raise _corrupt(path, f"it is not a readable tar archive ({exn})") from None
    with tar:
        try:
            infos = tar.getmembers()
        except tarfile.TarError as exn:
            raise _corrupt(path, str(exn)) from None
        end = tar.offset
    return _listing([(i.name, i.offset_data, i.size, i.isreg()) for i in infos]), end


# _BASE_PLUS_EXT over names joined by newlines (none of them holding one): every line
# matches, the key and suffix groups empty where webdataset's pattern does not match.
_LINE_KEYS = re.compile(r"^(?:((?:.*/|)[^.\n]+)[.][^/\n]*|.*)$", re.MULTILINE)
_LINE_SUFFIXES = re.compile(r"^(?:(?:.*/|)[^.\n]+[.]([^/\n]*)|.*)$", re.MULTILINE)


def _split_names(names: list[str]) -> tuple[list[str], list[str]] | None:
    """Each name's key and lower-cased suffix (``""``, ``""`` if webdataset ignores it).

    Two regular-expression passes over all the names at once (their one group each
    makes ``findall`` return strings, not a tuple per name); ``None`` when a name holds
    a newline or starts with ``__`` (the caller then matches names one by one).
    """
    text = "\n".join(names)
    if not names or "\n__" in "\n" + text or text.count("\n") != len(names) - 1:
        return None
    keys: list[str] = _LINE_KEYS.findall(text)
    suffixes: list[str] = _LINE_SUFFIXES.findall(text)
    if text.isascii():
        split = "\n".join(suffixes).lower().split("\n")
    else:
        split = [suffix.lower() for suffix in suffixes]
    if len(keys) != len(names) or len(split) != len(names):
        return None
    return keys, split


def _group(path: str, listing: Listing, size: int) -> tuple[tuple[str, ...], PackedMembers]:
    """Group members into samples as webdataset does (NOTE [ shard index ])."""
    names, offsets, lengths, regular = listing
    for name, offset, length in zip(names, offsets, lengths, strict=True):
        if offset + length > size:
            raise _corrupt(path, f"member {name!r} runs past the end of the file")
    kept = [i for i, flag in enumerate(regular) if flag]
    kept_names = [names[i] for i in kept]
    split = _split_names(kept_names)
    if split is None:
        match_name, skip_meta = _BASE_PLUS_EXT.match, _SKIP_META.match
        split = [], []
        for name in kept_names:
            match = None
            if not skip_meta(name) and not (
                "/" not in name and name.startswith("__") and name.endswith("__")
            ):
                match = match_name(name)
            split[0].append(match.group(1) if match else "")
            split[1].append(match.group(2).lower() if match else "")
    keys: list[str] = []
    starts: list[int] = []
    suffixes: list[str] = []
    member_offsets: list[int] = []
    sizes: list[int] = []
    last = ""
    for i, key, suffix in zip(kept, split[0], split[1], strict=True):
        if not key:
            continue
        if key != last:
            keys.append(key)
            starts.append(len(suffixes))
            last = key
        elif suffix in suffixes[starts[-1] :]:
            raise ValueError(
                f"shard {path!r} has a duplicate file name {names[i]!r} in sample {key!r}, "
                "which webdataset refuses too; give each member of a sample its own suffix"
            )
        suffixes.append(suffix)
        member_offsets.append(offsets[i])
        sizes.append(lengths[i])
    starts.append(len(suffixes))
    return tuple(keys), PackedMembers(suffixes, member_offsets, sizes, starts)


def default_index_dir() -> str:
    """The fallback folder for index files: ``$XDG_CACHE_HOME/detsamplers/shard-index``.

    Examples:
        >>> default_index_dir().endswith(os.path.join("detsamplers", "shard-index"))
        True
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "detsamplers", "shard-index")


def _candidates(path: str, index_dir: str | None, suffix: str = INDEX_SUFFIX) -> list[str]:
    hashed = hashlib.blake2b(path.encode(), digest_size=10).hexdigest()
    cached = os.path.join(index_dir or default_index_dir(), hashed + suffix)
    if index_dir is not None:
        return [cached]
    return [path + suffix, cached]


def _load(file: str, url: str, path: str, stat: os.stat_result) -> ShardInfo | None:
    """The index in ``file`` if it is a valid index of the shard as it is now, else ``None``.

    Only the header is decoded here (NOTE [ index file format ]): keys and members wait
    until the shard is read.
    """
    try:
        with open(file, "rb") as handle:
            data = handle.read()
        header, count = read_header(data, path)
    except (OSError, ValueError):
        return None
    if header.get("size") != stat.st_size or header.get("mtime_ns") != stat.st_mtime_ns:
        return None  # written for another state of the shard (or without its mtime): rebuild
    lazy = LazyIndex(data, path, count)
    return ShardInfo(url, path, lazy.keys, lazy.members)


def _load_json(file: str, path: str, stat: os.stat_result) -> ShardInfo | None:
    """An index cached as JSON by detsamplers 0.x before ``.index.npz`` (converted once)."""
    try:
        with open(file, encoding="utf-8") as handle:
            entry = json.load(handle)
        if (
            not isinstance(entry, dict)
            or entry.get("version") != _JSON_VERSION
            or entry.get("path") != path
            or entry.get("size") != stat.st_size
            or entry.get("mtime_ns") != stat.st_mtime_ns
        ):
            return None
        keys, members = tuple(entry["keys"]), entry["members"]
        if not isinstance(members, list) or len(members) != len(keys):
            return None
        if not all(isinstance(k, str) for k in keys):
            return None
        for sample in members:
            for suffix, offset, size in sample:
                if not (isinstance(suffix, str) and isinstance(offset, int)):
                    return None
                if not isinstance(size, int):
                    return None
        return ShardInfo("", path, keys, members)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(files: list[str], info: ShardInfo, stat: os.stat_result) -> None:
    data = encode_index(info.keys, info.members, stat.st_size, None, stat.st_mtime_ns)
    for file in files:
        temporary = f"{file}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(file), exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, file)  # atomic: concurrent ranks write identical files
            return
        except OSError:
            if os.path.exists(temporary):
                os.remove(temporary)
    # No writable place: the index is rebuilt next time, which is slower but still correct.


def _find(url: str, path: str, index_dir: str | None, stat: os.stat_result) -> ShardInfo | None:
    """The shard's index from an index file, or from an old JSON cache (then converted)."""
    for file in _candidates(path, index_dir):
        found = _load(file, url, path, stat)
        if found is not None:
            return found
    for file in _candidates(path, index_dir, ".index.json"):
        old = _load_json(file, path, stat)
        if old is not None:
            _save(_candidates(path, index_dir), old, stat)
            return ShardInfo(url, path, old.keys, old.members)
    return None


def index_shards(
    urls: Sequence[str],
    index_dir: str | None = None,
    progress: bool = True,
    options: RemoteOptions | None = None,
) -> list[ShardInfo]:
    """Index each shard of ``urls``, from its cached index file or by a scan.

    Args:
        urls: Shard URLs, already expanded (see :func:`expand_urls`).
        index_dir: Where to cache index files; ``None`` puts them next to the shards and
            falls back to :func:`default_index_dir` if that folder is read-only.
        progress: Show a tqdm bar when many shards must be scanned.
        options: How to read remote shards (default: :class:`RemoteOptions`).

    Returns:
        One :class:`ShardInfo` per URL, in the order given.

    Raises:
        FileNotFoundError: a shard does not exist (the message names it).
        ValueError: a shard is not an uncompressed tar, or is truncated or corrupt, or
            a remote shard changed since its index was built.
        OSError: a remote shard could not be read (the message names it).
    """
    out: list[ShardInfo | None] = []
    todo: list[tuple[int, str, str, os.stat_result]] = []
    remote: list[tuple[int, str]] = []
    for url in urls:
        if is_remote(url):
            out.append(None)
            remote.append((len(out) - 1, url))
            continue
        path = local_path(url)
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"shard {path!r} (from urls entry {url!r}) does not exist; check urls"
            ) from None
        found = _find(url, path, index_dir, stat)
        out.append(found)
        if found is None:
            todo.append((len(out) - 1, url, path, stat))
    # tqdm ships no type stubs (pyproject's mypy config lists none for it): load it untyped.
    tqdm = importlib.import_module("tqdm").tqdm
    quiet = not progress or len(todo) < PROGRESS_MIN_SHARDS
    bar = tqdm(todo, desc="indexing shards", disable=quiet)
    for slot, url, path, stat in bar:
        keys, members = scan_shard(path)
        info = ShardInfo(url, path, keys, members)
        _save(_candidates(path, index_dir), info, stat)
        out[slot] = info
    if remote:
        from ._remote_index import index_remote_shards

        built = index_remote_shards(
            [url for _, url in remote], options or RemoteOptions(), index_dir, progress
        )
        for (slot, _), info in zip(remote, built, strict=True):
            out[slot] = info
    return [info for info in out if info is not None]
