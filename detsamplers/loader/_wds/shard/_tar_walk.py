"""The tar header walks of the shard scan: every member's name, data offset and size.

NOTE [ tar header walk ]
:func:`..index._index_shards.scan_shard` lists a tar (NOTE [ shard index ]) with the fastest of
three walks that answers: :func:`walk_headers` reads all the 512-byte headers at once with numpy
(guess them by ustar's magic, read their numbers as arrays, check that the guess is exactly
the chain of headers); :func:`read_headers` walks them one by one; else :mod:`tarfile`
lists the shard. The first two return ``None`` for anything they do not read exactly as
tarfile does, so the three agree wherever the faster one answers (the tests check it).
:func:`octal` is also what checks a member's header on read (NOTE [ index verification ]).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["BLOCK", "Listing", "listing", "octal", "read_headers", "walk_headers"]

BLOCK = 512
_BLOCK = BLOCK  # the walks' own name for it
#: A tar's members as flat lists: names, data offsets, sizes, and whether each is a file.
Listing = tuple[list[str], list[int], list[int], list[bool]]

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


def octal(fields: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
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


def walk_headers(buffer: Any, size: int) -> tuple[Listing, int] | None:
    """:func:`read_headers` for the common tar, with numpy over all headers at once.

    Each member's header position depends on the previous sizes, so the walk guesses the
    headers (the blocks with ustar's magic at their offset 257), reads all their numbers
    in a few array operations, and then checks that the guess is the chain of headers
    ``read_headers`` would walk: the first at 0, each next one right after the previous
    member's data, and an end-of-archive block (or the end of the file) after the last.
    Anything else (a magic-less v7 header, a magic inside member data, GNU long names,
    pax records other than a time, unusual numbers) returns ``None`` and the caller walks
    the headers one by one, so the result is always that of :func:`read_headers`.
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
    lengths, sums = octal(headers[:, 124:136]), octal(headers[:, 148:156])
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


def read_headers(buffer: Any, size: int) -> tuple[Listing, int] | None:
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
    return listing(members), position


def listing(members: list[tuple[str, int, int, bool]]) -> Listing:
    return (
        [m[0] for m in members],
        [m[1] for m in members],
        [m[2] for m in members],
        [m[3] for m in members],
    )
