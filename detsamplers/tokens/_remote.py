"""Remote token files (``http(s)://``, ``s3://``): byte ranges, or whole through the node cache.

NOTE [ remote token files ]
A token file or sidecar named by a URL (a scheme of two or more letters other than
``file``, as the webdataset source reads them: NOTE [ remote reads ]) is read through the
source's remote layer, never a copy of it: its size and version (ETag) come from one
``HEAD`` (``stat``) at open, an HTTP(S) host is asked once whether it honours Range
requests (NOTE [ range support ]), and every read is one range request with the source's
timeouts, retries, ``If-Match`` pin and ``Content-Range`` check (``RemoteShard.fetch``);
an S3 file goes through obstore when the options allow (NOTE [ S3 reads through obstore ]).
Opening checks what the local open checks, on the remote bytes: a ``.bin`` whose size is
not a multiple of the dtype, a ``.npy`` header (one range of its first bytes) that
disagrees with the size. Each error names the URL.

Two ways to read the tokens, the sequences identical to the same files on disk:

- **Ranges** (the default): ``tokens[a:b]`` is one range request of exactly
  ``(b - a) * itemsize`` bytes; a ``chunk`` sequence of ``L + 1`` tokens is one request,
  two where it crosses a file's end. Nothing is kept: a second epoch reads again.
- **Download** (``download=True``): each file is downloaded whole, once per node, into the
  node cache folder (NOTE [ shard cache ]: one process downloads under a lock, the others
  wait and then read the same copy; keyed by URL, size and ETag; bounded by
  ``cache_limit``, least recently used first, never a file a process has open), then
  memory-mapped as a local file: later epochs download nothing.

Document boundaries: a lengths sidecar is downloaded whole into memory (one request; it is
refused unread if larger than ``8`` bytes a token plus a header, more than any sound
sidecar of the file can be). With ``eod_id``, the index is looked for in the cache folder
(``<key>.eod<id>.npy``, keyed by URL, size and ETag), then beside the remote file
(``<url>.eod<id>.npy``, as a local open writes it; checked like a local one, and kept in
the folder), and otherwise built by one scan of the file, streamed in ranges of
``SCAN_BLOCK`` tokens with a progress bar: the scan downloads the whole file once
(``size`` bytes) and keeps 8 bytes a document in the folder, so later opens on the node
read nothing but the ``HEAD`` requests. ``cache_dir=False`` writes nothing: the index
then stays in memory and is rebuilt at each open.

A forked DataLoader worker builds its own reader (fsspec's loop does not survive a fork)
and a spawned one gets the file's URL, size and version, never a connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from ..loader._wds._source_parts import DEFAULT_CACHE_LIMIT
from ..loader._wds.read._node_cache import ShardCache, check_cache_dir, default_cache_dir
from ..loader._wds.remote._range_support import check_range_support, host_of
from ..loader._wds.remote._remote_reads import (
    RemoteOptions,
    RemoteShard,
    ShardChangedError,
    is_forbidden,
    make_options,
    stat_remote,
)
from ..loader._wds.remote._urls import is_remote, local_path
from ..loader._wds.shard._shard_info import ShardInfo
from ._boundaries import LENGTH_DTYPES, ends_of_lengths, scanned_ends, sound_ends, store_ends
from ._files import MAX_HEADER, NPY_DTYPES, bin_count, npy_layout, open_npy

__all__ = ["RemoteAccess", "RemoteTokens", "is_remote", "local_path", "remote_access"]

I64 = npt.NDArray[np.int64]
#: Bytes of a ``.npy`` header fetched first (numpy pads its headers to 64 or 128 bytes).
_HEAD = 128
_HEADER_MAX = MAX_HEADER + 12


@contextlib.contextmanager
def _naming(url: str, what: str = "token file") -> Iterator[None]:
    """Errors of the remote layer, re-raised with their type, naming ``url`` as ``what``."""
    try:
        yield
    except ShardChangedError as error:  # its advice is the shard index's: say ours
        text = str(error)
        detail = text.partition(" was built (")[2].rpartition("); its sample")[0] or text
        raise ShardChangedError(
            f"{what} {url} cannot be read: it changed on the server since the corpus opened "
            f"it ({detail}); open the corpus again, and delete the file's stale "
            "end-of-document index if one is beside it"
        ) from error
    except (OSError, ValueError) as error:
        message = f"{what} {url} cannot be read: {error}"
        try:
            raised = type(error)(message)
        except TypeError:  # an error type with its own arguments
            raised = (OSError if isinstance(error, OSError) else ValueError)(message)
        raise raised from error


class RemoteAccess:
    """How remote files are read: the remote options and the node cache folder, if any.

    Attributes:
        options: Timeouts, retries and ``storage_options`` (NOTE [ remote reads ]).
        folder: The node cache folder, or ``None`` (``cache_dir=False``: nothing written).
        download: Download token files whole into ``folder`` (NOTE [ remote token files ]).
        limit: Bytes the folder's downloaded files may take (``None``: no limit).
    """

    def __init__(
        self, options: RemoteOptions, folder: str | None, download: bool, limit: int | None
    ) -> None:
        self.options, self.folder, self.download, self.limit = options, folder, download, limit
        self._cache: ShardCache | None = None

    def cache(self) -> ShardCache:
        """The node cache of :attr:`folder` (created at first use)."""
        if self._cache is None:
            assert self.folder is not None
            self._cache = ShardCache(self.folder, self.limit, self.options)
        return self._cache

    def index_path(self, url: str, size: int, version: str | None, eod_id: int) -> str | None:
        """Where the end-of-document index of a remote file is kept, keyed by URL, size, ETag."""
        if self.folder is None:
            return None
        text = f"{url}\0{size}\0{version or ''}"
        key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        return os.path.join(self.folder, f"{key}.eod{eod_id}.npy")


def remote_access(
    storage_options: Any,
    timeout: Any,
    retries: Any,
    cache_dir: Any,
    cache_limit: int | None,
    download: bool,
) -> RemoteAccess:
    """Check the corpus's remote arguments and bundle them (NOTE [ remote token files ]).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: one is out of range, or ``download=True`` with ``cache_dir=False``.
    """
    options = make_options(timeout, retries, 4 << 20, storage_options)
    if cache_dir is False:
        if download:
            raise ValueError(
                "download should be False when cache_dir=False, but got download=True; "
                "downloaded files live in the node cache folder: pass cache_dir=None (the "
                "default folder) or a folder of your own"
            )
        return RemoteAccess(options, None, False, None)
    limit: int | None
    if cache_dir is None:
        folder = default_cache_dir()
        limit = DEFAULT_CACHE_LIMIT if cache_limit is None else cache_limit
    elif isinstance(cache_dir, (str, os.PathLike)):
        folder, limit = os.fspath(cache_dir), cache_limit
    else:
        raise TypeError(
            "cache_dir should be a folder (a str or an os.PathLike), False (nothing written) "
            f"or None (the default folder), but got cache_dir={cache_dir!r}"
        )
    check_cache_dir(str(folder))
    return RemoteAccess(options, str(folder), download, limit)


class _RemoteFile:
    """One remote file: its size and version from a ``HEAD``, and range reads of it."""

    def __init__(self, url: str, access: RemoteAccess, what: str) -> None:
        self.url, self.access, self.what = url, access, what
        with _naming(url, what):
            self.size, self.version = stat_remote(url, access.options)
        self._reader: RemoteShard | None = None
        self._pid = 0

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` in one range request (retried where it stopped)."""
        if start >= stop:
            return b""
        if self._reader is None or self._pid != os.getpid():  # a forked worker: its own
            self._reader = RemoteShard(self.url, self.size, self.version, self.access.options)
            self._pid = os.getpid()
        with _naming(self.url, self.what):
            return self._reader.fetch(start, stop)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None}


class RemoteTokens:
    """The tokens of a remote file, sliced like an array (NOTE [ remote token files ]).

    Args:
        file: The remote file.
        dtype: Its token dtype.
        offset: The byte where its tokens start (a ``.npy`` header's length).
        count: Its tokens.
    """

    def __init__(self, file: _RemoteFile, dtype: np.dtype[Any], offset: int, count: int) -> None:
        self.file, self.dtype, self.offset, self.count = file, dtype, offset, count
        self.url = file.url
        self._mapped: npt.NDArray[Any] | None = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: slice) -> npt.NDArray[Any]:
        start, stop, step = key.indices(self.count)
        if step != 1:
            raise ValueError(f"step should be 1 for a remote token file, but got step={step}")
        if self.file.access.download:
            return self._local()[start:stop]
        item = self.dtype.itemsize
        data = self.file.read(self.offset + start * item, self.offset + max(start, stop) * item)
        return np.frombuffer(data, self.dtype)

    def _local(self) -> npt.NDArray[Any]:
        """The node cache's copy, memory-mapped and pinned while this object lives."""
        if self._mapped is None:
            cache = self.file.access.cache()
            info = ShardInfo(self.url, self.url, (), [], self.file.size, self.file.version)
            with _naming(self.url):
                fd = cache.pin(info)  # NOTE [ shard cache ]: downloaded once per node
            weakref.finalize(self, os.close, fd)  # closing the pin lets it be evicted
            shape = (self.count,)
            path = cache.path(info)
            self._mapped = np.memmap(path, self.dtype, "r", offset=self.offset, shape=shape)
        return self._mapped

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mapped": None}  # a spawned worker pins its own copy


def _suffix(url: str) -> str:
    return PurePosixPath(urlsplit(url).path).suffix


def _npy_header(file: _RemoteFile, allowed: tuple[str, ...], what: str) -> tuple[Any, int, int]:
    """The dtype, data offset and count of a remote ``.npy``, from a range of its first bytes."""
    head = file.read(0, min(file.size, _HEAD))
    if head[:6] == b"\x93NUMPY" and len(head) >= 12:
        long = head[6] >= 2
        length = int.from_bytes(head[8:12] if long else head[8:10], "little")
        need = min(file.size, (12 if long else 10) + length, _HEADER_MAX)
        if need > len(head):
            head = file.read(0, need)
    return npy_layout(io.BytesIO(head), file.size, file.url, allowed, what)


def open_remote(url: str, dtype: str | None, access: RemoteAccess) -> RemoteTokens:
    """Open a remote token file after its checks (NOTE [ remote token files ]).

    Raises:
        ValueError: the suffix is neither ``.npy`` nor ``.bin``, a ``.bin`` comes without
            ``dtype`` or has a size not a multiple of it, or a ``.npy`` header disagrees
            with the file (each names the URL).
        FileNotFoundError: the file does not exist (HTTP 404; names the URL).
        OSError: it could not be read within ``retries`` (names the URL).
    """
    suffix = _suffix(url)
    if suffix not in (".npy", ".bin"):
        raise ValueError(
            f"token file {url} should end in .npy or .bin, but it ends in {suffix!r}; "
            "Megatron's .bin/.idx pairs and other formats are not read yet"
        )
    if suffix == ".bin" and dtype is None:
        raise ValueError(
            f"dtype should be given for the raw token file {url}, but got dtype=None; "
            "pass dtype='uint16' (nanoGPT, OLMo) or dtype='uint32'"
        )
    file = _RemoteFile(url, access, "token file")
    if suffix == ".bin":
        assert dtype is not None
        count, kind, offset = bin_count(file.size, url, dtype), np.dtype(dtype), 0
    else:
        kind, offset, count = _npy_header(file, NPY_DTYPES, "token file")
    if count == 0:
        raise ValueError(f"token file {url} holds no tokens; remove it from the corpus")
    return RemoteTokens(file, kind, offset, count)


def check_hosts(urls: Sequence[str], access: RemoteAccess) -> None:
    """Ask each HTTP(S) host of ``urls`` once whether it honours Range requests."""
    settled: set[tuple[str, str]] = set()
    for url in urls:  # one at a time, so that the error names the file
        if host_of(url) not in settled:
            with _naming(url):
                check_range_support([url], access.options, settled)
            settled.add(host_of(url))


def _small_npy(
    url: str, access: RemoteAccess, bound: int, allowed: tuple[str, ...], what: str
) -> Any:
    """A small remote ``.npy`` (a sidecar, an index), read whole into memory after its checks."""
    file = _RemoteFile(url, access, what)
    if file.size > bound:
        raise ValueError(
            f"{what} {url} should be at most {bound} bytes (8 a token of its file, plus a "
            f"header), but it is {file.size} bytes; it belongs to another file"
        )
    data = file.read(0, file.size)  # one request: header and values
    kind, offset, count = npy_layout(io.BytesIO(data), file.size, url, allowed, what)
    return np.frombuffer(data, kind, count, offset)


def remote_lengths_ends(tokens: Any, path: str | Path, sidecar: str, access: RemoteAccess) -> I64:
    """Document ends from a remote lengths sidecar, downloaded whole (one range request).

    Raises:
        ValueError: the sidecar is too large, not a ``.npy`` of lengths, holds a length
            below 1 or does not sum to the tokens of ``path`` (the message names it).
    """
    what = "document lengths file"
    bound = _HEADER_MAX + 8 * len(tokens)
    lengths = _small_npy(sidecar, access, bound, LENGTH_DTYPES, what)
    if len(lengths) == 0:
        raise ValueError(f"{what} {sidecar} should hold lengths, but it holds none")
    return ends_of_lengths(lengths, len(tokens), path, sidecar)


def remote_eod_ends(
    tokens: RemoteTokens, eod_id: int, progress: Any, cache: bool, access: RemoteAccess
) -> I64:
    """Document ends of a remote file: cached on the node, beside it, or by one scan.

    Raises:
        ValueError: ``eod_id`` never occurs, or the index beside the file does not fit it.
    """
    count, url = len(tokens), tokens.url
    where = access.index_path(url, tokens.file.size, tokens.file.version, eod_id)
    if cache and where is not None:
        with contextlib.suppress(OSError, ValueError):
            kept = open_npy(Path(where), ("int64",), what="document index")
            if sound_ends(kept, count):
                progress.update(count)
                return kept
    beside = _index_beside(tokens, eod_id, access) if cache else None
    if beside is not None:
        progress.update(count)
        ends = beside
    else:
        ends = scanned_ends(tokens, url, eod_id, progress)  # type: ignore[arg-type]
    if cache and where is not None:
        store_ends(Path(where), ends)
    return ends


def _index_beside(tokens: RemoteTokens, eod_id: int, access: RemoteAccess) -> I64 | None:
    """The index ``<url>.eod<id>.npy`` beside a remote file, or ``None`` if there is none."""
    url = f"{tokens.url}.eod{eod_id}.npy"
    bound = _HEADER_MAX + 8 * len(tokens)
    try:
        ends = _small_npy(url, access, bound, ("int64",), "document index")
    except FileNotFoundError:
        return None
    except OSError as error:  # S3 answers 403 for a missing key to who may not list
        if is_forbidden(error.__cause__) or is_forbidden(
            getattr(error.__cause__, "__cause__", None)
        ):
            return None
        raise
    if not sound_ends(ends, len(tokens)):
        raise ValueError(
            f"document index {url} should hold the increasing document ends of the "
            f"{len(tokens)} tokens of {tokens.url}, but it does not; delete it (it is stale) "
            "or pass cache=False to scan the file instead"
        )
    return np.asarray(ends, dtype=np.int64)
