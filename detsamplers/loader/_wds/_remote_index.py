"""Indexes of remote shards: read next to the shard, or built by one scan and cached.

For a remote shard (NOTE [ remote reads ]) the index is, in this order:

1. the index file next to it, ``<url>.index.npz`` (NOTE [ index file format ]), written by
   ``python -m detsamplers index``; the shard's size and ETag must be those it records,
   else the source refuses the shard by name;
2. the local cache, ``<index_dir>/<hash>.index.npz``, the hash keyed by the URL, the size
   and the ETag (or modification time) the server reports now, so a rewritten shard
   misses the cache instead of using stale offsets;
3. else one scan of the shard (:func:`._index.scan_shard` over ranged reads of
   ``read_ahead`` bytes: headers and small members are streamed, large members'
   data are skipped), written to the cache.

Shards are looked up with up to 16 threads, so a large shard list costs a few round trips
per shard, overlapped.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ._fetch import RemoteOptions, RemoteShard, changed_error, remote_fs, retrying, stat_remote
from ._index import PROGRESS_MIN_SHARDS, ShardInfo, default_index_dir, scan_shard
from ._index_file import decode_index, encode_index
from ._urls import is_remote, local_path

__all__ = ["INDEX_SUFFIX", "RemoteFile", "index_remote_shards", "write_index"]

#: The index file of shard ``u`` is ``u + INDEX_SUFFIX``.
INDEX_SUFFIX = ".index.npz"
_THREADS = 16


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
    if indexed[1] is not None and version is not None and indexed[1] != version:
        raise changed_error(url, f"its ETag is {version}, its index file says {indexed[1]}")


def _sibling(url: str, options: RemoteOptions) -> bytes | None:
    fs, path = remote_fs(url + INDEX_SUFFIX, options)
    try:
        data: bytes = retrying(url, "reading the index file of", options, lambda: fs.cat(path))
    except FileNotFoundError:
        return None
    return data


def _scan(url: str, size: int, version: str | None, options: RemoteOptions) -> ShardInfo:
    shard = RemoteShard(url, size, version, options)
    keys, members = scan_shard(url, (RemoteFile(shard), size))
    return ShardInfo(url, url, keys, members, size, version)


def index_remote(url: str, options: RemoteOptions, index_dir: str | None) -> ShardInfo:
    """The index of one remote shard: its index file, the cache, or a scan (see above).

    Raises:
        FileNotFoundError: the shard does not exist.
        ValueError: it changed since its index file was written, or is not a valid tar.
        OSError: it could not be read.
    """
    size, version = stat_remote(url, options)
    data = _sibling(url, options)
    if data is not None:
        keys, members, indexed_size, indexed_etag = decode_index(data, url)
        _check(url, size, version, (indexed_size, indexed_etag))
        return ShardInfo(url, url, keys, members, size, version)
    cache = _cache_file(url, size, version, index_dir)
    try:
        with open(cache, "rb") as handle:
            keys, members, *_ = decode_index(handle.read(), url)
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
    """:func:`index_remote` for each URL, overlapped on threads, in the order given."""
    tqdm = importlib.import_module("tqdm").tqdm
    quiet = not progress or len(urls) < PROGRESS_MIN_SHARDS
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(urls))) as pool:
        jobs = pool.map(lambda url: index_remote(url, options, index_dir), urls)
        return list(tqdm(jobs, total=len(urls), desc="indexing shards", disable=quiet))


def write_index(url: str, options: RemoteOptions, out: str | None = None) -> tuple[str, int]:
    """Scan a shard and write its index file (NOTE [ index file format ]).

    The file goes next to the shard (``url + ".index.npz"``, through fsspec for a remote
    shard), or into the folder ``out`` under the shard's file name plus ``.index.npz``,
    to be uploaded next to the shard.

    Returns:
        Where the file was written, and the shard's number of samples.
    """
    if is_remote(url):
        size, version = stat_remote(url, options)
        info = _scan(url, size, version, options)
    else:
        path = local_path(url)
        size, version = os.path.getsize(path), None
        keys, members = scan_shard(path)
        info = ShardInfo(url, path, keys, members, size, version)
    data = encode_index(info.keys, info.members, size, version)
    name = url.rstrip("/").rsplit("/", 1)[-1] + INDEX_SUFFIX
    if out is not None:
        os.makedirs(out, exist_ok=True)
        target = os.path.join(out, name)
    else:
        target = info.path + INDEX_SUFFIX
    if is_remote(target):
        fs, path = remote_fs(target, options)
        fs.pipe_file(path, data)
    else:
        with open(target, "wb") as handle:
            handle.write(data)
    return target, len(info)
