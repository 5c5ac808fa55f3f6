"""Indexes of remote shards: read next to the shard, or built by one scan and cached.

For a remote shard (NOTE [ remote reads ]) the index is, in this order:

1. the index file next to it, ``<url>.index.npz`` (NOTE [ index file format ]), written by
   ``python -m detsamplers index``; the shard's size and ETag must be those it records,
   else the source refuses the shard by name. Over HTTP(S), when the file records a strong
   ETag, that check is made by every read (``If-Match``, and the size in the response's
   ``Content-Range``) instead of a lookup now: building the source costs one request per
   shard (the index file's ``GET``, with ``Range: bytes=0-``: its 206 settles the host,
   NOTE [ range support ]). Otherwise the shard is looked up (``HEAD``) and compared at
   once, and the version it has now is the one every read checks: without a version in
   the index file, only a lookup when the source is built gives every reader (ranks,
   DataLoader workers) one version to hold the shard to;
2. the local cache, ``<index_dir>/<hash>.index.npz``, the hash keyed by the URL, the size
   and the ETag (or modification time) the server reports now, so a rewritten shard
   misses the cache instead of using stale offsets;
3. else one scan of the shard (:func:`._index_shards.scan_shard` over ranged reads of
   ``read_ahead`` bytes: headers and small members are streamed, large members'
   data are skipped), written to the cache.

Shards are looked up with up to 16 threads, so the round trips of a long shard list overlap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import io
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..remote._object_store import checked_on_read, same_version, whole_file_kwargs
from ..remote._range_support import check_range_support, get_whole, host_of
from ..remote._remote_reads import (
    RemoteOptions,
    RemoteShard,
    changed_error,
    is_forbidden,
    read_if_present,
    remote_fs,
    retrying,
    stat_remote,
)
from ..remote._urls import is_remote, local_path
from ..shard._shard_info import PROGRESS_MIN_SHARDS, ShardInfo, default_index_dir
from ._scan_shard import scan_shard
from ._set_index_file import (
    SET_INDEX_NAME,
    SetEntry,
    encode_set,
    forget_absence,
    from_set_indexes,
)
from ._shard_index_file import decode_checked, encode_index

__all__ = ["INDEX_SUFFIX", "RemoteFile", "index_remote_shards", "write_index", "write_indexes"]

#: The index file of shard ``u`` is ``u + INDEX_SUFFIX``.
INDEX_SUFFIX = ".index.npz"
_THREADS = 16
_CONCURRENT = 32


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file over a :class:`RemoteShard` (for the tar scan)."""

    def __init__(self, shard: RemoteShard) -> None:
        super().__init__()
        self.shard = shard
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.shard.size}
        self.position = max(0, base[whence] + offset)
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        end = self.shard.size if size is None or size < 0 else self.position + size
        end = min(end, self.shard.size)
        if end <= self.position:
            return b""
        data = self.shard.read(self.position, end)
        self.position = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _cache_file(url: str, size: int, version: str | None, index_dir: str | None) -> str:
    key = f"{url}\0{size}\0{version}".encode()
    hashed = hashlib.blake2b(key, digest_size=12).hexdigest()
    return os.path.join(index_dir or default_index_dir(), hashed + INDEX_SUFFIX)


def _check(url: str, size: int, version: str | None, indexed: tuple[int, str | None]) -> None:
    if indexed[0] != size:
        raise changed_error(url, f"it has {size} bytes, its index file says {indexed[0]}")
    if not same_version(indexed[1], version):
        raise changed_error(url, f"its version is {version}, its index file says {indexed[1]}")


def _sibling(url: str, options: RemoteOptions) -> bytes | None:
    return read_if_present(url + INDEX_SUFFIX, url, "reading the index file of", options)


def _scan(url: str, size: int, version: str | None, options: RemoteOptions) -> ShardInfo:
    shard = RemoteShard(url, size, version, options)
    keys, members = scan_shard(url, (RemoteFile(shard), size))
    return ShardInfo(url, url, keys, members, size, version)


_NOT_FETCHED = b""


def _from_sibling(url: str, data: bytes) -> tuple[ShardInfo, bool]:
    """The index in an index file, and whether reads will check it is still current."""
    keys, members, size, etag = decode_checked(data, url, url + INDEX_SUFFIX)
    return ShardInfo(url, url, keys, members, size, etag), checked_on_read(url, etag)


async def _cat_all(fs: Any, paths: list[str], whole: dict[str, Any], http: bool) -> list[Any]:
    """Each path's bytes, at most ``_CONCURRENT`` at a time; errors as values.

    Over HTTP(S) ``(status, bytes)`` of a ``GET`` with ``Range: bytes=0-`` (NOTE [ range
    support ]), else ``fs._cat_file``'s bytes.
    """
    limit = asyncio.Semaphore(_CONCURRENT)

    async def cat(path: str) -> Any:
        async with limit:
            return await (get_whole(fs, path) if http else fs._cat_file(path, **whole))

    return await asyncio.gather(*(cat(p) for p in paths), return_exceptions=True)


def _siblings(
    urls: Sequence[str], options: RemoteOptions, settled: set[tuple[str, str]] | None = None
) -> list[bytes | None]:
    """Each shard's index file (``None``: there is none), fetched concurrently in one call.

    Filesystems without an async implementation, and fetches that fail otherwise than
    with "not found", give ``_NOT_FETCHED``: :func:`index_remote` fetches those itself,
    with retries and errors that name the shard. An HTTP(S) host that answers one of
    them with a 206 is added to ``settled`` (NOTE [ range support ]).
    """
    out: list[bytes | None] = [_NOT_FETCHED] * len(urls)
    groups: dict[int, tuple[Any, list[int], list[str]]] = {}
    for i, url in enumerate(urls):
        fs, path = remote_fs(url + INDEX_SUFFIX, options)
        if getattr(fs, "async_impl", False):
            groups.setdefault(id(fs), (fs, [], []))[1].append(i)
            groups[id(fs)][2].append(path)
    for fs, slots, paths in groups.values():
        from fsspec.asyn import sync

        whole = whole_file_kwargs(urls[slots[0]])  # one filesystem: one protocol
        http = host_of(urls[slots[0]])[0] in ("http", "https")
        got_all = sync(fs.loop, _cat_all, fs, paths, whole, http)
        for slot, got in zip(slots, got_all, strict=True):
            if http and isinstance(got, tuple):
                status, got = got
                if status == 206 and settled is not None:
                    settled.add(host_of(urls[slot]))
            if isinstance(got, bytes) and got:
                out[slot] = got
            elif isinstance(got, FileNotFoundError) or is_forbidden(got):
                out[slot] = None  # a 403: a missing file to a caller who may not list
    return out


def index_remote(
    url: str, options: RemoteOptions, index_dir: str | None, sibling: bytes | None = _NOT_FETCHED
) -> ShardInfo:
    """The index of one remote shard: its index file, the cache, or a scan (see above).

    Args:
        url: The shard's URL.
        options: How to read it.
        index_dir: The cache folder (default: :func:`default_index_dir`).
        sibling: Its index file's bytes, ``None`` if it has none, or by default unknown yet.

    Raises:
        FileNotFoundError: the shard does not exist.
        ValueError: it changed since its index file was written, or is not a valid tar.
        OSError: it could not be read.
    """
    data = _sibling(url, options) if sibling is _NOT_FETCHED else sibling
    if data is not None:
        info, checked_on_read = _from_sibling(url, data)
        if checked_on_read:
            return info
        size, version = stat_remote(url, options)
        _check(url, size, version, (info.size, info.version))
        return dataclasses.replace(info, size=size, version=version)
    size, version = stat_remote(url, options)
    cache = _cache_file(url, size, version, index_dir)
    try:
        with open(cache, "rb") as handle:
            keys, members, *_ = decode_checked(handle.read(), url, cache)
        return ShardInfo(url, url, keys, members, size, version)
    except (OSError, ValueError):
        pass  # absent or unreadable: scan again
    info = _scan(url, size, version, options)
    temporary = f"{cache}.{os.getpid()}.{id(info)}.tmp"
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(temporary, "wb") as handle:
            handle.write(encode_index(info.keys, info.members, size, version))
        os.replace(temporary, cache)  # atomic: concurrent ranks write identical files
    except OSError:
        if os.path.exists(temporary):
            os.remove(temporary)
    return info


def index_remote_shards(
    urls: Sequence[str], options: RemoteOptions, index_dir: str | None, progress: bool
) -> list[ShardInfo]:
    """Each URL's index, in the order given: from a set index, else :func:`index_remote`.

    A folder's set index (NOTE [ set index ]) costs one request for all its shards; the
    others are indexed on threads.
    """
    settled: set[tuple[str, str]] = set()  # hosts whose set index came with a 206
    known = from_set_indexes(urls, options, settled)
    rest = [i for i, info in enumerate(known) if info is None]
    siblings = _siblings([urls[i] for i in rest], options, settled) if rest else []
    check_range_support(urls, options, settled)  # NOTE [ range support ]
    if rest:
        built = _index_each([urls[i] for i in rest], options, index_dir, progress, siblings)
        for i, info in zip(rest, built, strict=True):
            known[i] = info
    return [info for info in known if info is not None]


def _index_each(
    urls: Sequence[str],
    options: RemoteOptions,
    index_dir: str | None,
    progress: bool,
    siblings: Sequence[bytes | None],
) -> list[ShardInfo]:
    """:func:`index_remote` for each URL, overlapped on threads, in the order given.

    ``siblings``: each one's index file as :func:`_siblings` fetched it.
    """
    out: list[ShardInfo | None] = [None] * len(urls)
    for i, (url, data) in enumerate(zip(urls, siblings, strict=True)):
        if data:
            info, checked_on_read = _from_sibling(url, data)
            out[i] = info if checked_on_read else None
    todo = [i for i, info in enumerate(out) if info is None]
    tqdm = importlib.import_module("tqdm").tqdm
    quiet = not progress or len(todo) < PROGRESS_MIN_SHARDS
    with ThreadPoolExecutor(max_workers=max(1, min(_THREADS, len(todo)))) as pool:
        jobs = pool.map(lambda i: index_remote(urls[i], options, index_dir, siblings[i]), todo)
        bar = tqdm(jobs, total=len(todo), desc="indexing shards", disable=quiet)
        for i, info in zip(todo, bar, strict=True):
            out[i] = info
    return [info for info in out if info is not None]


def write_index(url: str, options: RemoteOptions, out: str | None = None) -> tuple[str, int]:
    """Scan a shard and write its index file (NOTE [ index file format ]).

    The file goes next to the shard (``url + ".index.npz"``, through fsspec for a remote
    shard), or into the folder ``out`` under the shard's file name plus ``.index.npz``,
    to be uploaded next to the shard.

    Returns:
        Where the file was written, and the shard's number of samples.
    """
    target, info, _ = _write_one(url, options, out)
    return target, len(info)


def _put(target: str, data: bytes, options: RemoteOptions) -> None:
    """Write ``data`` to ``target``; a remote upload with the source's retries.

    The filesystem makes one attempt per call (NOTE [ object storage ]), and an upload
    of the whole file is safe to repeat.
    """
    if is_remote(target):
        fs, path = remote_fs(target, options)
        retrying(target, "writing", options, lambda: fs.pipe_file(path, data))
    else:
        with open(target, "wb") as handle:
            handle.write(data)


def write_indexes(
    urls: Sequence[str], options: RemoteOptions, out: str | None = None
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """:func:`write_index` for each shard, then one set index per folder (NOTE [ set index ]).

    The set index of a folder of remote shards goes into it (or into ``out``) as
    ``detsamplers-set.index.npz``; local shards get none (a local source does not read it).

    Returns:
        Where each shard's file was written and its number of samples; where each set
        index was written and its number of shards.
    """
    written: list[tuple[str, int]] = []
    sets: list[tuple[str, int]] = []
    folders: dict[str, tuple[list[SetEntry], list[bytes]]] = {}
    for url in urls:
        target, info, data = _write_one(url, options, out)
        written.append((target, len(info)))
        folder, _, name = url.rstrip("/").rpartition("/")
        if is_remote(url):  # a local source never reads a set index: it reads no network
            entries, indexes = folders.setdefault(folder, ([], []))
            entries.append((name, info.size, info.version, len(info)))
            indexes.append(data)
    for folder, (entries, indexes) in folders.items():
        target = folder + "/" + SET_INDEX_NAME if out is None else os.path.join(out, SET_INDEX_NAME)
        _put(target, encode_set(entries, indexes), options)
        forget_absence(folder + "/")
        sets.append((target, len(entries)))
    return written, sets


def _write_one(url: str, options: RemoteOptions, out: str | None) -> tuple[str, ShardInfo, bytes]:
    """Scan a shard, write its index file; where, its index and the file's bytes."""
    mtime_ns = None  # recorded for a local shard: its index is then current while it is
    if is_remote(url):
        size, version = stat_remote(url, options)
        info = _scan(url, size, version, options)
    else:
        path = local_path(url)
        stat = os.stat(path)
        size, version, mtime_ns = stat.st_size, None, stat.st_mtime_ns
        keys, members = scan_shard(path)
        info = ShardInfo(url, path, keys, members, size, version)
    data = encode_index(info.keys, info.members, size, version, mtime_ns)
    name = url.rstrip("/").rsplit("/", 1)[-1] + INDEX_SUFFIX
    if out is not None:
        os.makedirs(out, exist_ok=True)
        target = os.path.join(out, name)
    else:
        target = info.path + INDEX_SUFFIX
    _put(target, data, options)
    return target, info, data
