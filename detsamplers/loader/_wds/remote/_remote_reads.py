"""Remote shards: byte ranges through fsspec, with timeouts, retries and a read-ahead.

NOTE [ remote reads ]
A remote shard (``https://``, ``s3://``, ``gs://``, any fsspec URL; see :mod:`._urls`) is
read in *blocks*: byte ranges that start at the first byte a sample needs, so a resumed
rank downloads nothing before the sample it resumes at (with a window shuffle, nothing
before its window: NOTE [ remote windows ]). The first block after opening a
shard or jumping within it is 256 KiB (or the sample, if larger), so the first batch after
a resume waits for little more than its own bytes; each block that continues the previous
one is twice as long, up to ``read_ahead`` bytes. Once a read continues the last block,
the block after it is fetched in the background (one thread per open shard) while the
samples already fetched are used, so reading a shard front to back overlaps the network
with the work on the samples. A :class:`RemoteShard` keeps its last two blocks and the one
being prefetched: memory is bounded by ``3 * read_ahead`` per open shard (one per
DataLoader worker), and a shard read front to back costs one request per ``read_ahead``
bytes once the blocks are full size. A sample that does not lie in a kept block starts a
new block and drops the prefetch; a window shuffle's window is read as one span
instead, and held by the reader besides the blocks (NOTE [ remote windows ]).

Over HTTP(S) each block is one ``GET`` with a ``Range`` header, and with ``If-Match``
when the shard's ETag is a strong one, so a shard rewritten while a run reads it fails
with the server's 412 instead of mixing two versions. The connection waits at most
``timeout`` seconds to connect and ``timeout`` seconds between two reads of the body
(aiohttp's ``sock_connect``/``sock_read``), so a stalled server cannot hang a rank. A
transient failure (connection reset or dropped, a timeout, HTTP 408, 425, 429 or 5xx)
is retried up to ``retries`` times after a backoff of 0.25 s, 0.5 s, 1 s, ... (at most
8 s, with jitter); the retry asks for the bytes from the first one not yet received, so
nothing is lost or read twice. HTTP 404 is a ``FileNotFoundError`` naming the URL; any
other 4xx is a permanent ``OSError`` naming it; a shard that runs out of retries raises
``OSError`` (``TimeoutError`` after a stall) naming the URL, the attempts and the last
error. The longest a rank can wait on one block is about
``(retries + 1) * timeout`` plus the backoffs (at most ``8 * retries`` seconds).

S3 and GCS blocks are read at the version indexed, with the same retries and the
source's timeouts (NOTE [ object storage ]). Other fsspec filesystems are called through
``cat_file`` with the same retries; their own timeouts come from ``storage_options``, and
a failed block is fetched again whole (the samples are still exact: a block is used only
once complete).
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...._errors import check_int
from ..shard._file_checks import version_mismatch
from ._after_fork import guard_fork
from ._object_store import (
    ShardChangedError,
    changed_error,
    filesystem_defaults,
    one_attempt,
    pinned_range,
    pinned_version,
    read_pinned,
    whole_file_kwargs,
    wire_bytes,
)
from ._obstore_s3 import FileSink, cat_file, read_range, store_for

__all__ = [
    "RemoteOptions",
    "RemoteShard",
    "ShardChangedError",
    "changed_error",
    "is_forbidden",
    "make_options",
    "read_if_present",
    "remote_fs",
    "retrying",
    "stat_remote",
]

T = TypeVar("T")

#: HTTP statuses worth retrying, besides every 5xx: timeouts and rate limits.
TRANSIENT_STATUS = frozenset({408, 425, 429})
_BACKOFF_FIRST = 0.25
_BACKOFF_MAX = 8.0
_CHUNK = 1 << 16
_BLOCKS_KEPT = 2
_FIRST_BLOCK = 256 << 10
_JITTER = random.Random()  # never the global RNG: the per-batch seeding owns it


@dataclass(frozen=True)
class RemoteOptions:
    """How remote shards are read (NOTE [ remote reads ]).

    Attributes:
        timeout: Seconds to connect, and seconds between two reads of a response, before
            the attempt counts as failed.
        retries: Attempts after the first for a transient failure.
        read_ahead: Bytes fetched per request.
        storage_options: Keyword arguments for the fsspec filesystem.

    Examples:
        >>> RemoteOptions().read_ahead
        4194304
    """

    timeout: float = 60.0
    retries: int = 5
    read_ahead: int = 4 << 20
    storage_options: Mapping[str, Any] = field(default_factory=dict)


def make_options(
    timeout: Any, retries: Any, read_ahead: Any, storage_options: Any
) -> RemoteOptions:
    """Check the source's remote arguments and bundle them.

    Examples:
        >>> make_options(0, 5, 1 << 20, None)
        Traceback (most recent call last):
        ...
        ValueError: timeout should be a positive number of seconds, but got timeout=0; ...
    """
    valid = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not valid:
        raise TypeError(f"timeout should be a number of seconds, but got timeout={timeout!r}")
    if not 0 < timeout < math.inf:
        raise ValueError(
            f"timeout should be a positive number of seconds, but got timeout={timeout}; "
            "a finite timeout is what keeps a stalled server from hanging a rank"
        )
    retries = check_int("retries", retries, minimum=0)
    read_ahead = check_int("read_ahead", read_ahead, minimum=1)
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(
            "storage_options should be a mapping of fsspec filesystem arguments or None, "
            f"but got storage_options of type {type(storage_options).__name__}"
        )
    return RemoteOptions(float(timeout), retries, read_ahead, dict(storage_options or {}))


def remote_fs(url: str, options: RemoteOptions) -> tuple[Any, str]:
    """The fsspec filesystem and path of ``url``, with the timeouts set for HTTP(S).

    Raises:
        ImportError: fsspec (or aiohttp, for HTTP) is not installed; the message says how.
    """
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"reading {url!r} needs fsspec: pip install fsspec aiohttp (plus s3fs and "
            "obstore for s3://, gcsfs for gs://; in a clone of detsamplers the remote, s3 and "
            "gcs extras install them)"
        ) from None
    guard_fork()  # NOTE [ fsspec loop after fork ]
    kwargs = filesystem_defaults(url, options.timeout, dict(options.storage_options))
    if url.split("://", 1)[0] in ("http", "https"):
        try:
            import aiohttp
        except ImportError:
            raise ImportError(
                f"reading {url!r} needs aiohttp: pip install aiohttp (in a clone of "
                "detsamplers, the remote extra installs it)"
            ) from None
        client = dict(kwargs.get("client_kwargs") or {})
        client.setdefault(
            "timeout",
            aiohttp.ClientTimeout(
                total=None, sock_connect=options.timeout, sock_read=options.timeout
            ),
        )
        kwargs["client_kwargs"] = client
    fs, path = fsspec.core.url_to_fs(url, **kwargs)
    return one_attempt(fs, url), path


#: botocore's connection, timeout and cut-short-body errors (by base class name).
_BOTOCORE_TRANSIENT = frozenset({"ConnectionError", "HTTPClientError", "IncompleteReadError"})
#: Error codes of S3 (and S3-compatible servers) worth retrying whatever the status.
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "InternalError"}
)


def _causes(exn: BaseException) -> list[BaseException]:
    """``exn`` and its causes (s3fs wraps botocore's errors in an ``OSError``), at most 8."""
    out = [exn]
    while out[-1].__cause__ is not None and len(out) < 8:
        out.append(out[-1].__cause__)
    return out


def _status(exn: BaseException) -> int | None:
    """The HTTP status of a failed request: aiohttp's, botocore's or gcsfs's error."""
    for cause in _causes(exn):
        status = getattr(cause, "status", None)
        if isinstance(status, int):
            return status
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        code = getattr(cause, "code", None)
        if type(cause).__name__ == "HttpError" and isinstance(code, int):  # gcsfs's
            return code
    return None


def _error_code(exn: BaseException) -> str:
    for cause in _causes(exn):
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
    return ""


def is_forbidden(exn: BaseException | None) -> bool:
    """HTTP 403: s3fs's ``PermissionError``, or gcsfs's ``OSError("Forbidden: ...")``."""
    gcsfs_403 = type(exn) is OSError and str(exn).startswith("Forbidden: ")
    return isinstance(exn, PermissionError) or gcsfs_403


def _transient(exn: BaseException) -> bool:
    """Whether a failed attempt is worth retrying (NOTE [ remote reads ])."""
    if is_forbidden(exn):
        return False
    if _error_code(exn) in _TRANSIENT_CODES:
        return True
    status = _status(exn)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    if isinstance(exn, FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    for cause in _causes(exn):
        if isinstance(cause, TimeoutError | asyncio.TimeoutError | ConnectionError):
            return True
        bases = type(cause).__mro__
        if any(
            k.__module__.startswith("botocore") and k.__name__ in _BOTOCORE_TRANSIENT for k in bases
        ):
            return True
        name = type(cause).__module__ + "." + type(cause).__name__
        # aiohttp's payload and connection errors, fsspec's FSTimeoutError.
        if name.startswith("aiohttp.") or name.endswith("FSTimeoutError"):
            return True
    return isinstance(exn, OSError)


def retrying(
    url: str,
    what: str,
    options: RemoteOptions,
    attempt: Callable[[], T],
    failed: BaseException | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, retrying transient failures with backoff.

    ``failed`` is the error of a first attempt made elsewhere (a batch's first blocks
    fetched together, NOTE [ first blocks of a batch ]): it counts as the first of the
    ``retries + 1`` attempts, judged as if ``attempt`` had raised it.

    Raises:
        FileNotFoundError: the URL does not exist (HTTP 404).
        ShardChangedError: the server refused the recorded ETag (HTTP 412).
        TimeoutError: every attempt stalled.
        OSError: a permanent failure, or transient ones past ``retries``; names the URL.
    """
    for tried in range(options.retries + 1):
        try:
            if tried == 0 and failed is not None:
                raise failed
            return attempt()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"shard {url!r} does not exist (not found while {what}); check urls"
            ) from None
        except ValueError:
            raise  # a clear error of ours (a server ignoring Range, a changed shard)
        except Exception as exn:
            if _status(exn) == 412:
                raise changed_error(url, "the server no longer matches its ETag") from None
            if _status(exn) == 416:
                raise changed_error(url, "a range inside it is now past its end") from None
            if not _transient(exn):
                raise OSError(
                    f"{what} shard {url!r} failed: {exn!r}; this error is not retried"
                ) from exn
            if tried == options.retries:
                kind = TimeoutError if _is_timeout(exn) else OSError
                raise kind(
                    f"{what} shard {url!r} failed {tried + 1} times (retries="
                    f"{options.retries}, timeout={options.timeout} s); last error: {exn!r}"
                ) from exn
            delay = min(_BACKOFF_FIRST * 2**tried, _BACKOFF_MAX)
            time.sleep(delay * (0.5 + _JITTER.random() / 2))
    raise AssertionError("unreachable")  # pragma: no cover


def read_if_present(file_url: str, url: str, what: str, options: RemoteOptions) -> bytes | None:
    """The bytes of the small remote file ``file_url`` (an index file), or ``None`` if absent.

    ``url`` and ``what`` name it in errors (:func:`retrying`). A missing file is ``None``,
    and so is the 403 that S3 and GCS answer for a missing object to a caller who may not
    list the bucket (a public bucket's anonymous reader).
    """
    fs, path = remote_fs(file_url, options)
    whole = whole_file_kwargs(file_url)
    found = store_for(fs, file_url)  # NOTE [ S3 reads through obstore ]

    def attempt() -> Any:
        return cat_file(found, file_url) if found else fs.cat_file(path, **whole)

    try:
        data: bytes = retrying(url, what, options, attempt)
    except FileNotFoundError:
        return None
    except OSError as exn:
        if is_forbidden(exn.__cause__):
            return None
        raise
    return data


def _is_timeout(exn: BaseException) -> bool:
    return isinstance(exn, TimeoutError | asyncio.TimeoutError) or type(exn).__name__.endswith(
        "TimeoutError"
    )


def stat_remote(url: str, options: RemoteOptions) -> tuple[int, str | None]:
    """The size of a remote shard and its version (ETag, generation or modification time).

    Raises:
        FileNotFoundError: it does not exist (the message names it).
        ValueError: the server does not report its size.
    """
    fs, path = remote_fs(url, options)
    info = retrying(url, "looking up", options, lambda: fs.info(path))
    size = info.get("size")
    if not isinstance(size, int):
        raise ValueError(
            f"shard {url!r} has no known size (the server sent no Content-Length); the "
            "source reads byte ranges, so it needs a server that reports sizes"
        )
    return size, pinned_version(url, info)


class RemoteShard:
    """Byte ranges of one remote shard, fetched in blocks (NOTE [ remote reads ]).

    Args:
        url: The shard's URL.
        size: Its size, as indexed; a range past it is never asked for.
        version: Its ETag as indexed, or ``None``; a strong ETag is sent as ``If-Match``.
        options: Timeouts, retries and the read-ahead.
    """

    def __init__(self, url: str, size: int, version: str | None, options: RemoteOptions) -> None:
        self.url = url
        self.size = size
        self.version = version
        self.options = options
        self.fs, self.path = remote_fs(url, options)
        self.http = url.split("://", 1)[0] in ("http", "https")
        strong = version is not None and version.startswith('"')
        self.headers = {"If-Match": version} if self.http and strong else {}
        self.version = version
        self.blocks: list[tuple[int, bytes]] = []
        self.block = min(_FIRST_BLOCK, options.read_ahead)
        self.pending: tuple[int, int, Future[bytes]] | None = None
        self.executor: ThreadPoolExecutor | None = None
        #: Body bytes of this shard's range answers that came over the wire: those of an
        #: attempt cut short or failed mid-body included, so a block fetched again after a
        #: drop counts both answers. Over HTTP(S), S3 and GCS, every byte that arrived
        #: (aiohttp's count, buffered bytes included; S3 through obstore, the chunks it
        #: handed over); other filesystems (through
        #: ``cat_file``) count the blocks they return, a failed attempt's bytes unknown.
        self.received = 0

    def read(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)``, from a kept or prefetched block, or a new one."""
        found = self._kept(start, end)
        if found is None and self.pending is not None and self._take_pending(start, end):
            found = self._kept(start, end)
        if found is not None:
            return found
        onward = False
        if self.blocks:  # reading on from the last block doubles the next one
            last, data = self.blocks[-1]
            onward = last <= start <= last + len(data) + _FIRST_BLOCK
            smallest = min(_FIRST_BLOCK, self.options.read_ahead)
            self.block = min(2 * self.block, self.options.read_ahead) if onward else smallest
        stop = min(self.size, max(end, start + self.block))
        data = self.fetch(start, stop)
        self._keep(start, data)
        if onward:
            self._prefetch()
        return data[: end - start]

    def fill(self, start: int, stop: int, failed: BaseException | None = None) -> None:
        """Fetch and keep the block ``[start, stop)`` (NOTE [ first blocks of a batch ]).

        ``failed``: the error of an :meth:`attempt` at it already made, the first of the
        ``retries + 1``.
        """
        self.keep(start, self.fetch(start, stop, failed))

    def keep(self, start: int, data: bytes) -> None:
        """Keep ``data``, the shard's bytes from ``start`` (a fetched block)."""
        self._keep(start, data)

    def through_obstore(self) -> bool:
        """Whether this shard is read through obstore (NOTE [ S3 reads through obstore ])."""
        return not self.http and store_for(self.fs, self.url) is not None

    def attempt(
        self, start: int, end: int, received: bytearray
    ) -> Coroutine[Any, Any, None] | None:
        """One attempt at ``[start, end)`` into ``received``, a coroutine for ``fs.loop``.

        HTTP(S), and S3 or GCS pinned as :meth:`fetch` reads them; None for another
        filesystem, and for S3 read through obstore (NOTE [ first blocks of a batch ]).
        """
        if self.http:
            return self._get(start, end, received)
        if self.through_obstore():  # its client is not s3fs's: filled on threads instead
            return None
        args = (self.url, self.path, start, end, self.version, self.size, received)
        return pinned_range(self.fs, *args, self._count)

    def _kept(self, start: int, end: int) -> bytes | None:
        for first, data in self.blocks:
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        return None

    def _keep(self, start: int, data: bytes) -> None:
        self.blocks = [*self.blocks[-(_BLOCKS_KEPT - 1) :], (start, data)]

    def _take_pending(self, start: int, end: int) -> bool:
        """Keep the prefetched block if the read lies in it (or runs into it); else drop it."""
        assert self.pending is not None
        first, stop, future = self.pending
        self.pending = None
        last, tail = self.blocks[-1] if self.blocks else (first, b"")
        inside = first <= start < stop
        straddling = last <= start < last + len(tail) == first < end
        if not (inside or straddling):
            future.cancel()  # a jump: the block is not needed (a running fetch just ends)
            return False
        data = future.result()  # raises what the fetch raised, after its retries
        if start < first:  # the read straddles the two blocks: join them from ``start``
            data, first = tail[start - last :] + data, start
        self._keep(first, data)
        self._prefetch()
        return True

    def _prefetch(self) -> None:
        """Fetch the block after the last one in the background (NOTE [ remote reads ])."""
        last, data = self.blocks[-1]
        start = last + len(data)
        if start >= self.size or self.pending is not None:
            return
        self.block = min(2 * self.block, self.options.read_ahead)
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-read")
        stop = min(self.size, start + self.block)
        self.pending = (start, stop, self.executor.submit(self.fetch, start, stop))

    def close(self) -> None:
        """Drop the blocks and stop prefetching."""
        self.blocks, self.pending = [], None
        if self.executor is not None:
            # At interpreter exit (a reader's generator left open by a script that ends
            # mid-epoch) ``cancel_futures`` would reach the ``queue`` module, already gone.
            self.executor.shutdown(wait=False, cancel_futures=not sys.is_finalizing())
            self.executor = None

    def fetch(self, start: int, end: int, failed: BaseException | None = None) -> bytes:
        """The bytes ``[start, end)`` in one range request, retried where it stopped.

        ``failed``: the error of a first attempt already made (see :func:`retrying`).
        """
        received = bytearray()
        if self.http:
            from fsspec.asyn import sync

            def attempt() -> bytes:
                sync(self.fs.loop, self._get, start, end, received)
                return bytes(received)
        else:

            def attempt() -> bytes:
                found = store_for(self.fs, self.url)  # NOTE [ S3 reads through obstore ]
                if found:
                    read_range(
                        found, self.url, start, end, self.version, self.size, received, self._count
                    )
                    return bytes(received)
                pinned = read_pinned(
                    self.fs,
                    self.url,
                    self.path,
                    start,
                    end,
                    self.version,
                    self.size,
                    received,
                    self._count,
                )
                if not pinned:  # another filesystem: the whole block again
                    data = self.fs.cat_file(self.path, start=start, end=end)
                    self.received += len(data)
                    return bytes(data)
                return bytes(received)

        data = retrying(self.url, "reading", self.options, attempt, failed)
        if len(data) != end - start:
            raise changed_error(
                self.url, f"bytes {start}..{end} gave {len(data)} bytes; it is shorter now"
            )
        return data

    def fetch_to(self, start: int, end: int, file: Any) -> None:
        """:meth:`fetch` of ``[start, end)``, written to the binary ``file`` at its position.

        Through obstore each chunk is written as it arrives (a :class:`FileSink`, no copy of
        the body in memory: a download into the cache, NOTE [ shard cache ]); otherwise the
        block :meth:`fetch` returns is written. The same request, retries and checks.
        """
        found = None if self.http else store_for(self.fs, self.url)
        if not found:
            file.write(self.fetch(start, end))
            return
        sink = FileSink(file)

        def attempt() -> int:
            read_range(found, self.url, start, end, self.version, self.size, sink, self._count)
            return len(sink)

        got = retrying(self.url, "reading", self.options, attempt)
        if got != end - start:
            raise changed_error(
                self.url, f"bytes {start}..{end} gave {got} bytes; it is shorter now"
            )

    def _count(self, wire: int) -> None:
        self.received += wire

    async def _get(self, start: int, end: int, received: bytearray) -> None:
        """One ranged GET of ``[start + len(received), end)``, appended to ``received``."""
        session = await self.fs.set_session()
        kwargs = dict(self.fs.kwargs)
        headers = {**kwargs.pop("headers", {}), **self.headers}
        headers["Range"] = f"bytes={start + len(received)}-{end - 1}"
        async with session.get(self.fs.encode_url(self.path), headers=headers, **kwargs) as r:
            if r.status == 404:
                raise FileNotFoundError(self.url)
            r.raise_for_status()
            changed = version_mismatch(self.version, r.headers)  # NOTE [ index verification ]
            if changed is not None:
                raise changed_error(self.url, changed)
            total = r.headers.get("Content-Range", "").rpartition("/")[2]
            if r.status == 206 and total.isdigit() and int(total) != self.size:
                raise changed_error(self.url, f"it has {total} bytes, {self.size} when indexed")
            if r.status != 206:
                raise ValueError(
                    f"shard {self.url!r}: the server answered a Range request with HTTP "
                    f"{r.status}, not 206 Partial Content; the source reads byte ranges, so "
                    "it needs a server that honours Range requests (nginx, Apache, S3, GCS), "
                    "or a local copy of the shards"
                )
            got = 0
            try:
                async for chunk in r.content.iter_chunked(_CHUNK):
                    got += len(chunk)
                    received += chunk[: end - start - len(received)]
            finally:
                self.received += wire_bytes(r, got)
        if len(received) < end - start:
            raise ConnectionResetError(
                f"the response ended after {len(received)} of {end - start} bytes"
            )
