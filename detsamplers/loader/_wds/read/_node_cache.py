"""``ShardCache``: a node-local folder of whole remote shards, shared by every process of a node.

NOTE [ shard cache ]
With ``cache_dir``, a remote shard is downloaded whole, once per node, into
``<cache_dir>/<key>.tar``, where ``key`` hashes the URL, the size and the ETag (or version)
recorded when the shard was indexed: a shard rewritten since has another key, so a stale
copy is never read (and ages out). Every rank and DataLoader worker of the node reads the
same folder:

- **Download once.** A process that needs a shard the folder lacks takes an exclusive
  ``fcntl.flock`` on ``<key>.lock``; if the shard is still absent once it holds the lock
  it downloads it (range requests of ``read_ahead`` bytes, retried as in NOTE [ remote
  reads ], the ETag sent as ``If-Match`` over HTTP; through obstore each chunk is written
  as it arrives, never a whole body in memory) into a temporary file of the folder,
  checks its size, and renames it into place (atomic), then releases the lock. Every
  other process asking meanwhile waits on the lock and then finds the file: a shard's
  bytes cross the network once per node, and a shard is never read half written.
- **Pins.** A process reading a shard, or holding it for a read to come (the prefetch,
  NOTE [ shard prefetch ]), keeps it open with a shared ``flock``: the shard is *pinned*.
  Each use also sets its modification time, to the nanosecond (the recency order).
- **Size limit.** Before a download would take the folder's shards past ``cache_limit``
  bytes, the least recently used shards are deleted, skipping every pinned one (an
  exclusive ``flock`` that cannot be taken at once): a shard a process of the node is
  reading or will read next is never dropped. If the pinned shards alone exceed the limit,
  the folder grows past it rather than wait (size the limit above the working set,
  docs/webdataset-locality.md gives the figure): each such download counts in
  ``stats.over_limit``, and the first one of a cache object warns, naming the folder.
  :func:`evict_until` is the rule; ``plan_run`` replays it in a dry mode (NOTE [ planned
  pins ]).
- **Nothing left behind.** A temporary file of a process that died is deleted by the next
  eviction that finds it older than an hour; a shard deleted while a process still had it
  open stays readable to that process (POSIX), and one deleted between the existence check
  and the pin is found by its link count and downloaded again.

- **Ranges of a shard.** A shard a node reads only in part (NOTE [ node fetches ]) is
  fetched as its byte range ``[start, stop)`` into ``<key>.<start>-<stop>.part``, the same
  way (the lock of the shard, a temporary file renamed into place once its size is
  ``stop - start``); a whole copy of the shard, when there is one, serves it instead. A
  later need for another range (a resume on another world size) copies what the folder's
  copies of the shard already hold (each checked for its size first) and fetches only the
  rest. A copy whose size is not its range's (truncated) is deleted and fetched again; one
  whose bytes lie fails the tar header check of its first sample read, which names the
  file (NOTE [ set index ]).

A second epoch over a dataset that fits the limit downloads nothing. The locks are POSIX
``flock``s: the folder must be on a local file system (not NFS), one per node.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from stat import S_ISFIFO, S_ISREG
from typing import TypeVar

from ..remote._remote_reads import RemoteOptions, RemoteShard
from ..shard._shard_info import ShardInfo, user_cache_dir

__all__ = [
    "CacheStats",
    "ShardCache",
    "check_cache_dir",
    "default_cache_dir",
    "download_ranges",
    "download_step",
    "evict_until",
]

K = TypeVar("K")

_SUFFIX = ".tar"
_RANGE = ".part"
_STALE_TMP = 3600.0


def _touch(path: str) -> None:
    """Set ``path``'s modification time to now, to the nanosecond (the recency order).

    ``os.utime(path)`` takes the kernel's coarse clock (a tick, 1-4 ms): the pins of a
    few batches would tie, and eviction would break the tie by size and name.
    """
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def download_step(read_ahead: int) -> int:
    """Bytes a download request asks for: ``read_ahead``, at least 1 MiB.

    Examples:
        >>> download_step(4 << 20), download_step(1)
        (4194304, 1048576)
    """
    return max(read_ahead, 1 << 20)


def download_ranges(size: int, read_ahead: int, start: int = 0) -> list[tuple[int, int]]:
    """The byte ranges, one request each, that download bytes ``start`` to ``size`` of a shard.

    A pure function of its arguments, the one place the requests of a download are decided:
    :meth:`ShardCache._write_range` requests these ranges in order for every stretch the
    folder's copies lack (a whole shard: ``start = 0``); ``plan_run`` counts them as
    ``ceil(size / download_step(read_ahead))``.

    Examples:
        >>> download_ranges(5 << 20, 4 << 20)
        [(0, 4194304), (4194304, 5242880)]
        >>> download_ranges(10, 1)
        [(0, 10)]
        >>> download_ranges(5 << 20, 4 << 20, start=3 << 20)
        [(3145728, 5242880)]
    """
    step = download_step(read_ahead)
    return [(at, min(size, at + step)) for at in range(start, size, step)]


def evict_until(
    entries: Iterable[tuple[K, int]],
    total: int,
    incoming: int,
    limit: int,
    delete: Callable[[K], bool],
) -> tuple[int, int]:
    """Delete ``entries`` in turn until ``total + incoming`` bytes fit ``limit``.

    The eviction rule of NOTE [ shard cache ]: ``entries`` are ``(key, bytes)``, least
    recently used first; ``delete(key)`` deletes one unless it is pinned (then ``False``).
    Returns the bytes left and the entries deleted; ``total + incoming`` may stay above
    ``limit`` when the rest is pinned. :class:`ShardCache` and ``plan_run``'s dry
    replay both call it.

    Examples:
        >>> evict_until([("a", 5), ("b", 5), ("c", 5)], 15, 5, 12, lambda k: k != "a")
        (5, 2)
        >>> evict_until([("a", 5)], 5, 5, 8, lambda k: False)
        (5, 0)
    """
    deleted = 0
    for key, size in entries:
        if total + incoming <= limit:
            break
        if delete(key):
            total -= size
            deleted += 1
    return total, deleted


def default_cache_dir() -> str:
    """The default folder of the shard cache: ``$XDG_CACHE_HOME/detsamplers/shards``.

    Examples:
        >>> default_cache_dir().endswith(os.path.join("detsamplers", "shards"))
        True
    """
    return user_cache_dir("shards")


_FIX = "pass the path of a folder this process can write (it is created if absent)"


def _what(path: str) -> str:
    """What ``path`` is, in words, for a message (it exists and is no folder)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken symlink"
    kinds = ((S_ISREG, "a regular file"), (S_ISFIFO, "a FIFO (named pipe)"))
    kind = next((name for test, name in kinds if test(mode)), "a device or a socket")
    return f"a symlink to {kind}" if os.path.islink(path) else kind


def check_cache_dir(folder: str) -> None:
    """Create the cache folder ``folder`` if absent; refuse one that is no writable folder.

    Raises:
        ValueError: ``folder`` (or a parent) is a file, a FIFO, a symlink to one, or a folder
            this process cannot create or write (the message names ``cache_dir``).

    Examples:
        >>> import tempfile
        >>> check_cache_dir(tempfile.mkdtemp())
        >>> check_cache_dir(tempfile.mkstemp()[1])
        Traceback (most recent call last):
        ...
        ValueError: cache_dir should be a folder, but got cache_dir='...', a regular file; ...
    """
    try:
        os.makedirs(folder, exist_ok=True)
    except FileExistsError:
        raise ValueError(
            f"cache_dir should be a folder, but got cache_dir={folder!r}, {_what(folder)}; {_FIX}"
        ) from None
    except OSError as exn:  # a parent is a file, or cannot be written
        raise ValueError(
            f"cache_dir should be a folder this process can create, but got "
            f"cache_dir={folder!r} ({exn.strerror}); {_FIX}"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(
            f"cache_dir should be a folder this process can write, but got cache_dir={folder!r}, "
            f"which it cannot; {_FIX}"
        )


@dataclass
class CacheStats:
    """What one process did with the cache (for tests and figures).

    Attributes:
        downloaded: Shards this process downloaded.
        bytes: Bytes it downloaded (retried bytes not counted twice).
        hits: Pins that found the shard in the folder.
        evicted: Shards it deleted to stay under the limit.
        waits: Times a batch after a reader's first one needed a shard that was not in the
            folder yet, so that reading waited on its download (NOTE [ shard prefetch ]).
        waited: Seconds reading spent in those waits.
        over_limit: Downloads that took the folder past ``cache_limit`` because the rest
            of it was pinned (the working set exceeds the limit: NOTE [ shard cache ]).
    """

    downloaded: int = 0
    bytes: int = 0
    hits: int = 0
    evicted: int = 0
    waits: int = 0
    waited: float = 0.0
    over_limit: int = 0


class ShardCache:
    """Whole remote shards in a folder shared by the processes of a node (NOTE [ shard cache ]).

    Args:
        folder: The cache folder (created if absent), on a local file system.
        limit: Bytes the folder's shards may take (``None``: no limit).
        options: How shards are downloaded (timeouts, retries, range size).

    Examples:
        >>> import tempfile
        >>> cache = ShardCache(tempfile.mkdtemp(), limit=1 << 20)
        >>> info = ShardInfo("https://h/a.tar", "https://h/a.tar", (), [], size=10, version='"e"')
        >>> os.path.basename(cache.path(info))[-4:]
        '.tar'
    """

    def __init__(
        self, folder: str, limit: int | None = None, options: RemoteOptions | None = None
    ) -> None:
        self.folder = folder
        self.limit = limit
        self.options = options or RemoteOptions()
        self.stats = CacheStats()
        #: Whether downloads look for ranges of the shard in the folder to copy (a scan of
        #: the folder per download: set once a reader plans ranges, NOTE [ node fetches ]).
        self.ranges = False
        self.warned = False  # the folder grew past the limit once already (warned)
        check_cache_dir(folder)

    def path(self, info: ShardInfo) -> str:
        """Where ``info``'s shard lies in the folder: keyed by URL, size and version."""
        text = f"{info.url}\0{info.size}\0{info.version or ''}"
        key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        return os.path.join(self.folder, key + _SUFFIX)

    def range_path(self, info: ShardInfo, start: int, stop: int) -> str:
        """Where bytes ``[start, stop)`` of ``info``'s shard lie in the folder."""
        return f"{self.path(info)[: -len(_SUFFIX)]}.{start}-{stop}{_RANGE}"

    def has(self, info: ShardInfo, span: tuple[int, int] | None = None) -> bool:
        """Whether the folder holds the shard whole, or (``span``) that range of it."""
        if os.path.exists(self.path(info)):
            return True
        return span is not None and os.path.exists(self.range_path(info, *span))

    def pin_range(self, info: ShardInfo, start: int, stop: int) -> tuple[int, int, int]:
        """Open bytes ``[start, stop)`` of ``info``'s shard (pinned), fetching what is missing.

        Returns a descriptor and the shard offsets its first byte and its end hold: the
        whole shard when the folder has it (``0, size``), else the range file.
        """
        if os.path.exists(self.path(info)):
            return self.pin(info), 0, info.size
        path = self.range_path(info, start, stop)
        hit = True
        while True:
            fd = self._open(path)
            if fd is None:
                self._download(info, path, (start, stop))
                hit = False
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)
            stat = os.fstat(fd)
            if stat.st_nlink == 0:  # evicted between the open and the lock
                os.close(fd)
                continue
            if stat.st_size != stop - start:  # truncated or grown: fetch it again
                os.close(fd)
                self._delete_unpinned(path)
                continue
            with contextlib.suppress(OSError):
                _touch(path)
            self.stats.hits += hit
            return fd, start, stop

    def pin(self, info: ShardInfo) -> int:
        """Open ``info``'s shard with a shared lock, downloading it first if absent.

        Returns a file descriptor to ``os.pread`` from; :meth:`unpin` releases it.
        """
        path = self.path(info)
        hit = True
        while True:
            fd = self._open(path)
            if fd is None:
                self._download(info, path)
                hit = False
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink == 0:  # evicted between the open and the lock
                os.close(fd)
                continue
            with contextlib.suppress(OSError):
                _touch(path)
            self.stats.hits += hit
            return fd

    @staticmethod
    def unpin(fd: int) -> None:
        """Release a shard :meth:`pin` opened."""
        os.close(fd)  # closing drops the shared lock

    def _open(self, path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        return fd

    def _download(self, info: ShardInfo, path: str, span: tuple[int, int] | None = None) -> None:
        """Download the shard (or ``span`` of it) to ``path`` unless another process does."""
        with open(self.path(info)[: -len(_SUFFIX)] + ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            if os.path.exists(path):
                return
            self._evict(info.size if span is None else span[1] - span[0])
            temporary = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
            try:
                if span is None:
                    self._write(info, temporary)
                else:
                    self._write_range(info, temporary, *span)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise

    def _write(self, info: ShardInfo, temporary: str) -> None:
        """Write the whole shard: what the folder's ranges of it hold copied, the rest fetched."""
        self._write_range(info, temporary, 0, info.size)

    def _copies(self, info: ShardInfo) -> list[tuple[int, int, str]]:
        """The folder's range files of ``info``'s shard whose size is their range's."""
        stem = os.path.basename(self.path(info))[: -len(_SUFFIX)] + "."
        out = []
        for entry in os.scandir(self.folder):
            name = entry.name
            if not (name.startswith(stem) and name.endswith(_RANGE)):
                continue
            low, _, high = name[len(stem) : -len(_RANGE)].partition("-")
            if not (low.isdigit() and high.isdigit()):
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_size == int(high) - int(low):
                    out.append((int(low), int(high), entry.path))
        return sorted(out)

    def _write_range(self, info: ShardInfo, temporary: str, start: int, stop: int) -> None:
        """Write bytes ``[start, stop)``: copied from the folder's ranges, the rest fetched."""
        copies = self._copies(info) if self.ranges else []
        stream = RemoteShard(info.url, info.size, info.version, self.options)
        at = start
        with open(temporary, "wb") as out:
            while at < stop:
                held = [c for c in copies if c[0] <= at < c[1]]
                if held:
                    low, high, path = held[0]
                    end = min(high, stop)
                    try:
                        with open(path, "rb") as copy:
                            data = os.pread(copy.fileno(), end - at, at - low)
                    except OSError:
                        data = b""
                    if len(data) == end - at:
                        out.write(data)
                        at = end
                        continue
                    copies.remove(held[0])  # gone or short: fetch those bytes instead
                    continue
                end = min([stop] + [c[0] for c in copies if c[0] > at])
                for begin, finish in download_ranges(end, self.options.read_ahead, at):
                    stream.fetch_to(begin, finish, out)  # written as it arrives
                    self.stats.bytes += finish - begin
                at = end
        got = os.path.getsize(temporary)
        if got != stop - start:
            what = (
                f"shard {info.url!r}"
                if stop - start == info.size
                else (f"bytes {start}-{stop} of shard {info.url!r}")
            )
            raise ValueError(
                f"{what} downloaded to {got} bytes, {stop - start} when indexed; it changed "
                "since: rebuild the source"
            )
        self.stats.downloaded += 1

    def _evict(self, incoming: int) -> None:
        """Delete unpinned shards, least recently used first, to make room for ``incoming``."""
        if self.limit is None:
            return
        now = time.time()
        entries: list[tuple[float, int, str]] = []
        for entry in os.scandir(self.folder):
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            if entry.name.endswith(".tmp") and now - stat.st_mtime > _STALE_TMP:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            elif entry.name.endswith((_SUFFIX, _RANGE)):
                entries.append((stat.st_mtime, stat.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        ordered = [(path, size) for _, size, path in sorted(entries)]
        total, deleted = evict_until(ordered, total, incoming, self.limit, self._delete_unpinned)
        self.stats.evicted += deleted
        if total + incoming > self.limit:
            self.stats.over_limit += 1
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"cache_limit={self.limit} is below the shards pinned in the cache folder "
                    f"{self.folder!r}: it will hold {total + incoming} bytes, past the limit; "
                    "pass a cache_limit above the working set (docs/webdataset-locality.md "
                    "gives the figure)",
                    UserWarning,
                    stacklevel=2,
                )

    @staticmethod
    def _delete_unpinned(path: str) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # pinned by a reader
            os.close(fd)
            return False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)
        return True
