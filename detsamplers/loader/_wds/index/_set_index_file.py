"""The set-level index file: every shard of a folder in one file, read with one request.

NOTE [ set index ]
``python -m detsamplers index URLS`` writes, besides each shard's ``<shard>.index.npz``
(NOTE [ index file format ]), one file per folder of remote shards,
``detsamplers-set.index.npz``,
listing for each shard it indexed: its file name, size, version (ETag, S3 version id, GCS
generation: NOTE [ object storage ]) and number of samples. It is an uncompressed numpy
``.npz`` read with ``allow_pickle=False``:

- ``header``: uint8, UTF-8 JSON ``{"format": "detsamplers-set-index", "version": 1,
  "shards": <n>}``;
- ``names``, ``versions``: uint8, the ``n`` file names and versions (empty: none) in
  UTF-8, each followed by a NUL byte;
- ``sizes``, ``counts``: int64, ``n`` entries;
- since version 2, when the shards' index files take at most ``EMBED_LIMIT`` bytes in
  all: ``indexes``, uint8, the ``n`` shards' own index files (NOTE [ index file format ])
  end to end, and ``index_ends``, int64, where each ends (absent: none embedded).

Building a source over remote shards first asks for this file in each folder of its
URLs (one request per folder, not one per shard; a folder without one is not asked again
by the same process for ``ABSENT_FOR`` = 5 minutes). Each shard it lists, whose version is
checked by every read (a strong ETag over HTTP(S) or S3, a GCS generation), is then
known without any request: its sample count comes from the set file, and its keys and
offsets from the index file embedded in it (decoded when a reader first opens the shard),
so building a source and a resume's first batch need no index request but this one. An
embedded index file gets the checks of a shard's own (NOTE [ index verification ]), and
must agree with its entry (size, version, samples), else the set file is refused by
name. Without embedded files (a version 1 set file, or a set over ``EMBED_LIMIT``), a
shard's own index file is fetched when a reader first opens the shard, and refused by
name if its size or version differs from the set file's. Size, version and count do not
tell two shards of the same size apart when the index records no version (one written
before the upload): so the first sample a reader reads of each shard it opens (by ranges,
or from the node's cache) is read with the 512-byte tar header before it, in the same
request (the stream's first block starts there), and its members' headers must name the
sample's key and suffixes (NOTE [ index verification ]); another shard's index names
other keys, and is refused naming the shard, the sample and the set file. Shards it does
not list, or whose version cannot be checked on read, are indexed one by one as before. With the
counts in one file, the set file is also where the per-shard counts behind a state's
summary are found (NOTE [ counts summary ]).
"""

from __future__ import annotations

import io
import json
import time
import tokenize
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..remote._object_store import checked_on_read, same_version, whole_file_kwargs
from ..remote._range_support import host_of, read_ranged_if_present
from ..remote._remote_reads import (
    RemoteOptions,
    changed_error,
    read_if_present,
    remote_fs,
    retrying,
)
from ..shard._shard_info import ShardInfo
from ._shard_index_file import LazyIndex, decode_checked, decode_index, stored_arrays

__all__ = [
    "EMBED_LIMIT",
    "SET_INDEX_NAME",
    "EmbeddedIndex",
    "SetEntry",
    "decode_set",
    "decode_set_indexes",
    "encode_set",
    "forget_absence",
    "from_set_indexes",
    "set_index_size",
]

SET_INDEX_NAME = "detsamplers-set.index.npz"
_FORMAT = "detsamplers-set-index"
_VERSION = 2
#: Set files of these versions are read (version 1 embeds no index files).
_READABLE = (1, 2)
#: The most bytes of shard index files a set file embeds (NOTE [ set index ]): each rank
#: reads the whole set file when it builds a source, so a larger set embeds none.
EMBED_LIMIT = 64 << 20
_INDEX_SUFFIX = ".index.npz"
#: The arrays of a set file without and with embedded index files.
_ARRAYS = ("header", "names", "versions", "sizes", "counts")
_ARRAYS_EMBEDDED = (*_ARRAYS, "indexes", "index_ends")

#: One shard of a set index: file name, size, version, samples.
SetEntry = tuple[str, int, str | None, int]


def _joined(strings: Sequence[str]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    data = "".join(s + "\0" for s in strings).encode(errors="surrogateescape")
    return np.frombuffer(data, dtype=np.uint8)


def _split(array: np.ndarray[Any, Any]) -> list[str]:
    return array.tobytes().decode(errors="surrogateescape").split("\0")[:-1]


def encode_set(entries: Sequence[SetEntry], indexes: Sequence[bytes] | None = None) -> bytes:
    """The bytes of a set index file (NOTE [ set index ]).

    Args:
        entries: Each shard's file name, size, version and samples.
        indexes: Each shard's own index file, embedded when they take at most
            ``EMBED_LIMIT`` bytes in all (``None``: none embedded).

    Examples:
        >>> data = encode_set([("a.tar", 3072, '"9f"', 2), ("b.tar", 1024, None, 1)])
        >>> decode_set(data, "s3://b/s/")
        [('a.tar', 3072, '"9f"', 2), ('b.tar', 1024, None, 1)]
    """
    header = {"format": _FORMAT, "version": _VERSION, "shards": len(entries)}
    arrays: dict[str, Any] = {
        "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        "names": _joined([e[0] for e in entries]),
        "versions": _joined([e[2] or "" for e in entries]),
        "sizes": np.array([e[1] for e in entries], dtype=np.int64),
        "counts": np.array([e[3] for e in entries], dtype=np.int64),
    }
    if indexes is not None and sum(map(len, indexes)) <= EMBED_LIMIT:
        if len(indexes) != len(entries):
            raise ValueError(f"{len(indexes)} index files for {len(entries)} shards")
        arrays["indexes"] = np.frombuffer(b"".join(indexes), dtype=np.uint8)
        arrays["index_ends"] = np.cumsum([len(i) for i in indexes], dtype=np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def decode_set(data: bytes, folder: str) -> list[SetEntry]:
    """The entries of a set index file.

    Raises:
        ValueError: the bytes are not a set index of this format (naming ``folder``).
    """
    return decode_set_indexes(data, folder)[0]


def decode_set_indexes(data: bytes, folder: str) -> tuple[list[SetEntry], list[bytes] | None]:
    """The entries of a set index file, and its embedded index files (``None``: none).

    Raises:
        ValueError: the bytes are not a set index of a readable version (naming ``folder``).

    Examples:
        >>> data = encode_set([("a.tar", 3072, None, 2)], [b"abc"])
        >>> decode_set_indexes(data, "s3://b/s/")
        ([('a.tar', 3072, None, 2)], [b'abc'])
    """
    try:
        # As encode_set writes it: read in place (no zipfile, no numpy.load per array).
        npz: Any = stored_arrays(data, _ARRAYS_EMBEDDED) or stored_arrays(data, _ARRAYS)
        if npz is None:  # any other .npz: numpy reads it, or says why not
            with zipfile.ZipFile(io.BytesIO(data)) as archive:  # stored entries only: no bomb
                if any(entry.compress_type != zipfile.ZIP_STORED for entry in archive.infolist()):
                    raise ValueError("it holds compressed entries")
            with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
                npz = {name: loaded[name] for name in loaded.files}
        header = json.loads(npz["header"].tobytes())
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise ValueError("not a set index")
        if header.get("version") not in _READABLE:
            raise ValueError(f"version {header.get('version')!r}")
        names, versions = _split(npz["names"]), _split(npz["versions"])
        sizes, counts = npz["sizes"].tolist(), npz["counts"].tolist()
        embedded = "indexes" in npz and header["version"] >= 2
        blob = npz["indexes"].tobytes() if embedded else b""
        ends = npz["index_ends"].tolist() if embedded else None
        if not len(names) == len(versions) == len(sizes) == len(counts) == header["shards"]:
            raise ValueError("its arrays differ in length")
        if any(c < 0 for c in counts) or any(s < 0 for s in sizes):
            raise ValueError("a size or count is negative")
        indexes = None
        if ends is not None:
            if len(ends) != len(names) or (ends and ends[-1] != len(blob)):
                raise ValueError("its embedded index files do not match its shards")
            starts = [0, *ends[:-1]]
            if any(b < a for a, b in zip(starts, ends, strict=True)):
                raise ValueError("its embedded index files' ends decrease")
            indexes = [blob[a:b] for a, b in zip(starts, ends, strict=True)]
        entries = [
            (n, int(s), v or None, int(c))
            for n, s, v, c in zip(names, sizes, versions, counts, strict=True)
        ]
        return entries, indexes
    # numpy re-reads a header it cannot parse as a Python 2 one: SyntaxError, TokenError too
    except (ValueError, KeyError, OSError, EOFError, TypeError, SyntaxError, tokenize.TokenError,
            zipfile.BadZipFile) as exn:  # fmt: skip
        raise ValueError(
            f"the set index {folder + SET_INDEX_NAME!r} is not a detsamplers set index "
            f"({_FORMAT} version 1 or {_VERSION}): {exn}; delete it and rebuild it with "
            "`python -m detsamplers index`"
        ) from None


class RemoteLazyIndex(LazyIndex):
    """A shard's index known from a set index: its own index file is fetched when first read."""

    __slots__ = ("options", "size", "version")

    def __init__(
        self, url: str, count: int, size: int, version: str | None, options: RemoteOptions
    ) -> None:
        super().__init__(b"", url, count)
        self.size, self.version, self.options = size, version, options

    def part(self, which: int) -> Sequence[Any]:
        if self._decoded is None:
            fs, path = remote_fs(self.url + _INDEX_SUFFIX, self.options)
            whole = whole_file_kwargs(self.url)
            data = retrying(
                self.url,
                "reading the index file of",
                self.options,
                lambda: fs.cat_file(path, **whole),
            )
            keys, members, size, version = decode_index(data, self.url)
            if size != self.size or not same_version(self.version, version):
                raise changed_error(
                    self.url,
                    f"its index file records {size} bytes, version {version}; the set "
                    f"index {self.size} bytes, version {self.version}",
                )
            if len(keys) != self.count:
                raise changed_error(
                    self.url,
                    f"its index file lists {len(keys)} samples, the set index {self.count}",
                )
            self._decoded = keys, members
        return self._decoded[which]

    def __getstate__(self) -> Any:
        return self.url, self.count, self.size, self.version, self.options, self._decoded

    def __setstate__(self, state: Any) -> None:
        url, count, size, version, options, decoded = state
        self.__init__(url, count, size, version, options)  # type: ignore[misc]
        self._decoded = decoded


class EmbeddedIndex(LazyIndex):
    """A shard's index file embedded in its folder's set index, decoded when first read.

    The embedded file is checked as a shard's own (NOTE [ index verification ]) and against
    the set file's entry for the shard; either failing refuses the set file by name.
    """

    __slots__ = ("size", "version")

    def __init__(
        self, data: bytes, url: str, count: int, size: int, version: str | None, file: str
    ) -> None:
        super().__init__(data, url, count, file)
        self.size, self.version = size, version

    def part(self, which: int) -> Sequence[Any]:
        if self._decoded is None:
            name = self.url.rsplit("/", 1)[1]
            try:
                keys, members, size, version = decode_checked(self.data, self.url, self.file)
                wrong = None
                if size != self.size or not same_version(self.version, version):
                    wrong = (
                        f"the index file it embeds records {size} bytes, version {version}; "
                        f"its entry {self.size} bytes, version {self.version}"
                    )
                elif len(keys) != self.count:
                    wrong = (
                        f"the index file it embeds lists {len(keys)} samples, "
                        f"its entry {self.count}"
                    )
            except ValueError as exn:
                wrong = f"the index file it embeds is refused: {exn}"
            if wrong is not None:
                raise ValueError(
                    f"the set index {self.file!r} is wrong about shard {name!r}: {wrong}; "
                    "delete it and rebuild it with `python -m detsamplers index`"
                )
            self._decoded = keys, members
        return self._decoded[which]

    def __getstate__(self) -> Any:
        return self.data, self.url, self.count, self.size, self.version, self.file

    def __setstate__(self, state: Any) -> None:
        self.__init__(*state)  # type: ignore[misc]


#: Seconds a folder found without a set index is not asked again by this process.
ABSENT_FOR = 300.0
#: ``(folder, storage options) -> monotonic time`` of the last answer "no set index here".
_absent: dict[tuple[str, str], float] = {}


def _fetch_set(
    folder: str, options: RemoteOptions, settled: set[tuple[str, str]] | None = None
) -> bytes | None:
    """The folder's set index, or ``None``; an absence is remembered for ``ABSENT_FOR`` s.

    A process that builds sources again and again over the same folder (a resume, a
    validation source, a benchmark) then pays the lookup once; a set index written since
    is found after at most ``ABSENT_FOR`` seconds (until then the shards' own index files
    are read, which give the same samples).
    """
    key = (folder, repr(sorted(options.storage_options.items())))
    seen = _absent.get(key)
    if seen is not None and time.monotonic() - seen < ABSENT_FOR:
        return None
    data = _fetch_set_now(folder, options, settled)
    if data is None:
        _absent[key] = time.monotonic()
    else:
        _absent.pop(key, None)
    return data


def forget_absence(folder: str) -> None:
    """Forget that ``folder`` had no set index (this process just wrote one there)."""
    for key in [k for k in _absent if k[0] == folder]:
        del _absent[key]


def _fetch_set_now(
    folder: str, options: RemoteOptions, settled: set[tuple[str, str]] | None = None
) -> bytes | None:
    file = folder + SET_INDEX_NAME
    if host_of(file)[0] not in ("http", "https"):
        return read_if_present(file, file, "reading the set index", options)
    data, ranged = read_ranged_if_present(file, file, "reading the set index", options)
    if ranged and settled is not None:  # NOTE [ range support ]
        settled.add(host_of(file))
    return data


def set_index_size(folder: str, options: RemoteOptions) -> int:
    """Bytes of ``folder``'s set index as a source fetches it (0: none there); one request."""
    return len(_fetch_set_now(folder, options) or b"")


def from_set_indexes(
    urls: Sequence[str], options: RemoteOptions, settled: set[tuple[str, str]] | None = None
) -> list[ShardInfo | None]:
    """Each URL's :class:`ShardInfo` from its folder's set index (``None``: not there).

    One request per folder of ``urls`` (NOTE [ set index ]). Over HTTP(S) it asks with a
    Range header, and adds to ``settled`` each host that answered with a 206 (NOTE
    [ range support ]).
    """
    out: list[ShardInfo | None] = [None] * len(urls)
    folders: dict[str, list[int]] = {}
    for i, url in enumerate(urls):
        folders.setdefault(url.rsplit("/", 1)[0] + "/", []).append(i)
    for folder, slots in folders.items():
        data = _fetch_set(folder, options, settled)
        if data is None:
            continue
        listed, indexes = decode_set_indexes(data, folder)
        entries = {e[0]: (e, None if indexes is None else indexes[j]) for j, e in enumerate(listed)}
        for i in slots:
            entry, embedded = entries.get(urls[i].rsplit("/", 1)[1], (None, None))
            if entry is None or not checked_on_read(urls[i], entry[2]):
                continue
            _, size, version, count = entry
            lazy: LazyIndex
            if embedded is None:
                lazy = RemoteLazyIndex(urls[i], count, size, version, options)
            else:
                file = folder + SET_INDEX_NAME
                lazy = EmbeddedIndex(embedded, urls[i], count, size, version, file)
            out[i] = ShardInfo(urls[i], urls[i], lazy.keys, lazy.members, size, version)
    return out
