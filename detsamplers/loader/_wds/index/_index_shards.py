"""Shard indexes: where each sample of an uncompressed tar shard lies, cached on disk.

NOTE [ shard index ]
To open a shard at any sample without reading what precedes it, the source needs each
sample's members and their byte ranges. :func:`scan_shard` lists a tar once and groups its
members exactly as webdataset 1.0.2 does (``tar_file_iterator`` then ``group_by_keys``):
regular files only, top-level ``__*__`` metadata skipped, the key is the path up to the
first dot of the basename and the suffix the rest (lower-cased), and *consecutive* members
with the same key form one sample. A name without a dot is ignored and a repeated suffix
within a sample is an error, as in webdataset.

The scan reads all the 512-byte headers of a tar at once with numpy when it can, else
walks them one by one, else lets :mod:`tarfile` list the shard (NOTE [ tar header walk ],
in :mod:`..shard._tar_walk`). Members are grouped into flat lists (a :class:`PackedMembers`),
never a Python list per member.

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
import os
from collections.abc import Iterable, Iterator, Sequence
from stat import S_ISREG

from ...._files_open import read_bounded
from ..remote._remote_reads import RemoteOptions
from ..remote._urls import is_remote, local_path
from ..shard._file_checks import index_file_limit, open_regular
from ..shard._file_checks import stamp as make_stamp
from ..shard._shard_info import PROGRESS_MIN_SHARDS, ShardInfo, default_index_dir
from ._remote_index import index_remote_shards
from ._scan_shard import scan_shard
from ._shard_index_file import LazyIndex, encode_index, read_header

__all__ = [
    "INDEX_SUFFIX",
    "PROGRESS_MIN_SHARDS",
    "ShardInfo",
    "default_index_dir",
    "index_shards",
    "scan_shard",
]

#: The index file of local shard ``p`` is ``p + INDEX_SUFFIX`` (NOTE [ index file format ]).
INDEX_SUFFIX = ".index.npz"
#: The version of the JSON index caches written before ``.index.npz``; read and converted.
_JSON_VERSION = 1


def _candidates(path: str, index_dir: str | None, suffix: str = INDEX_SUFFIX) -> Iterator[str]:
    """Where the index file of ``path`` may be, in the order it is tried.

    The hashed name in the index folder is worked out only once the file beside the shard
    is passed over, which a source over many shards would otherwise pay for each.
    """
    if index_dir is None:
        yield path + suffix
    hashed = hashlib.blake2b(path.encode(), digest_size=10).hexdigest()
    yield os.path.join(index_dir or default_index_dir(), hashed + suffix)


def _load(file: str, url: str, path: str, stat: os.stat_result) -> ShardInfo | None:
    """The index in ``file`` if it is a valid index of the shard as it is now, else ``None``.

    Only the header is decoded here (NOTE [ index file format ]): keys and members wait
    until the shard is read.
    """
    data = _read_bounded(file, path, index_file_limit(stat.st_size))
    if data is None:
        return None
    try:
        header, count = read_header(data, path)
    except ValueError:
        return None
    if header.get("size") != stat.st_size or header.get("mtime_ns") != stat.st_mtime_ns:
        return None  # written for another state of the shard (or without its mtime): rebuild
    lazy = LazyIndex(data, path, count, file)
    return ShardInfo(url, path, lazy.keys, lazy.members, index_file=file, stamp=make_stamp(stat))


def _read_bounded(file: str, path: str, limit: int) -> bytes | None:
    """The bytes of the index file ``file`` of shard ``path``, if it holds at most ``limit``.

    ``None`` if it is absent, unreadable or larger (the index is then rebuilt); a FIFO or
    a device is a ``ValueError`` naming it (NOTE [ index verification ]).
    """
    try:
        with open_regular(file, "index file", path) as handle:
            data = read_bounded(handle, limit)  # NOTE [ regular files only ]
    except OSError:
        return None
    return data if len(data) <= limit else None


def _load_json(file: str, path: str, stat: os.stat_result) -> ShardInfo | None:
    """An index cached as JSON by detsamplers 0.x before ``.index.npz`` (converted once)."""
    raw = _read_bounded(file, path, 4 * index_file_limit(stat.st_size))
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
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


def _save(files: Iterable[str], info: ShardInfo, stat: os.stat_result) -> None:
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
            return ShardInfo(url, path, old.keys, old.members, stamp=make_stamp(stat))
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
        if not S_ISREG(stat.st_mode):
            open_regular(path, "shard", path).close()  # raises, naming it
        found = _find(url, path, index_dir, stat)
        out.append(found)
        if found is None:
            todo.append((len(out) - 1, url, path, stat))
    # tqdm ships no type stubs (pyproject's mypy config lists none for it): load it untyped.
    tqdm = importlib.import_module("tqdm").tqdm
    quiet = not progress or len(todo) < PROGRESS_MIN_SHARDS
    for slot, url, path, stat in todo if quiet else tqdm(todo, desc="indexing shards"):
        keys, members = scan_shard(path)
        info = ShardInfo(url, path, keys, members, stamp=make_stamp(stat))
        _save(_candidates(path, index_dir), info, stat)
        out[slot] = info
    if remote:
        built = index_remote_shards(
            [url for _, url in remote], options or RemoteOptions(), index_dir, progress
        )
        for (slot, _), info in zip(remote, built, strict=True):
            out[slot] = info
    return [info for info in out if info is not None]
